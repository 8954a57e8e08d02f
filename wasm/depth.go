package wasm

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
)

// wazero keeps a run's call stack on the Go heap and grows it by doubling
// and copying, up to some 50 MB (100 MB at the last doubling, 150 MB while
// it copies) before it traps with a stack overflow; that memory is outside
// Limits.Memory. So Compile also rewrites every function to count the
// bytes of its call stack in a global of its own ($depth, after the
// countdown's three), each call adding a bound of its frame (see frame):
//
//	(function entry, after the countdown)
//	$depth += cost                ;; the frame's bound in bytes
//	if $depth > MaxStack { call $tick(depthExceeded) }   ;; Go stops the run
//	block (result the function's results)
//	  body                        ;; return becomes br to this block
//	end
//	$depth -= cost
//	(function end)
//
// Wrapping the body in one block makes every way out of the function go
// through the decrement: a br, br_if or br_table to the function's own
// label now targets the block (its label index is unchanged), return
// becomes a br to it, and a tail call (return_call) decrements first. A
// trap ends the whole instance, whose counter goes with it.
//
// The bound is from the wasm and holds whatever the module does: wazero
// gives every value its register allocator spills a slot of its own, so a
// frame can hold every value the function defines, including the phis
// where paths meet (frame counts them). So the stack wazero uses stays
// under MaxStack, and what it allocates for it (doubling and copying)
// under StackReserve. The bound is loose for large functions (the most
// values a function defines, where wazero spills only those live across a
// call or under register pressure), which lowers how deep they may
// recurse: docs/security.md has the measured depths.

// MaxStack bounds a run's call stack, in bytes of the frames' bounds (see
// frame). A run whose calls would take more fails with ReasonTrap and
// "call stack limit of 32 MiB exceeded".
const MaxStack = 32 << 20

// MaxFrame bounds one function's frame, as frame bounds it: Validate and
// Compile refuse a function whose frame may be larger (ErrBadModule). It
// bounds by how much a call can pass MaxStack before the check at its
// entry stops it, and what compiling it costs: wazero takes about 2.5 s
// and 190 MB to compile a function of 1 MiB of frame made of phis
// (a loop nest that sets many locals). The largest frame of a Go program
// (GOOS=wasip1) is some 120 KiB, of C's libc some 25 KiB.
const MaxFrame = 1 << 20

// StackReserve is the most memory a run's call stack can take whatever
// the module does. Each frame is at most its bound, so the stack in use
// stays under MaxStack, plus one frame (at most MaxFrame) that wazero
// grows the stack for before the check at its entry stops the run.
// wazero grows a full stack to twice its length plus the new frame, so
// the last stack is under 2 MaxStack + 3 MaxFrame, and the earlier,
// shorter copies (not yet collected) add up to less again: 136 MiB in
// all. Measured: 9-10 MB allocated by recursions holding many spilled
// values, 46-62 MB by recursions of phis in loop nests and 11 MB by the
// smallest frames, each stopped at the limit; before the frame bound
// some of these took 136-177 MB, to wazero's own stack overflow. A host
// should leave it free for each run at once (worker.Config.MaxUnitMem's
// default does).
const StackReserve = 4*MaxStack + 8*MaxFrame

// depthExceeded is what the rewritten code passes braid.tick when the
// call stack passes MaxStack: no bulk charge is that large (a charge is
// under 2^47).
const depthExceeded = ^uint64(0)

// ErrCallDepth is why a run whose call stack passed MaxStack failed: the
// Detail of its RunError (ReasonTrap) says so.
var ErrCallDepth = fmt.Errorf("wasm: call stack limit of %d MiB exceeded (calls too deep, or frames too large: a function's frame counts every value it defines): recurse less deep, or keep the state of a deep search in memory", MaxStack>>20)

// sig is what the rewrite needs of a function type.
type sig struct {
	slots   uint64 // its parameters, v128 counting 2
	results []byte // its result types, encoded
	params  int
	nres    int
	vector  bool // a parameter or result is a v128
}

// parseTypes reads the type section.
func parseTypes(b []byte) ([]sig, error) {
	r := reader{b: b}
	n := r.u32()
	if r.err != nil {
		return nil, r.err
	}
	sigs := make([]sig, 0, min(n, 1<<16))
	for i := uint32(0); i < n && r.err == nil; i++ {
		if form := r.byte(); r.err == nil && form != 0x60 {
			return nil, fmt.Errorf("type %d: %w (form 0x%02x)", i, errBeyond2, form)
		}
		var s sig
		np := r.u32()
		for j := uint32(0); j < np && r.err == nil; j++ {
			s.slots += valSlots(r.b)
			s.vector = s.vector || valSlots(r.b) == 2
			r.valType()
		}
		s.params = int(np)
		start := r.b
		nr := r.u32()
		for j := uint32(0); j < nr && r.err == nil; j++ {
			s.vector = s.vector || valSlots(r.b) == 2
			r.valType()
		}
		s.results = start[:len(start)-len(r.b)]
		s.nres = int(nr)
		sigs = append(sigs, s)
	}
	return sigs, r.end()
}

// valSlots is what the value type that starts b costs a frame, in 8-byte
// slots.
func valSlots(b []byte) uint64 {
	if len(b) > 0 && b[0] == 0x7b { // v128
		return 2
	}
	return 1
}

// blockTypes returns, for each type, the block type of the block that
// wraps the body of a function of that type ([] -> its results), and the
// types to add for them (results of two or more values, with parameters:
// a block type of [] -> results needs a type of its own). The first added
// type will have index first.
func blockTypes(sigs []sig, first uint32) (bts [][]byte, added [][]byte) {
	byResults := map[string]uint32{}
	for i, s := range sigs {
		r := reader{b: s.results}
		nr := r.u32()
		switch {
		case nr == 0:
			bts = append(bts, []byte{0x40})
		case nr == 1:
			bts = append(bts, r.b)
		case s.params == 0:
			bts = append(bts, appendSLEB(nil, int64(i)))
		default:
			idx, ok := byResults[string(s.results)]
			if !ok {
				idx = first + uint32(len(added))
				byResults[string(s.results)] = idx
				added = append(added, append([]byte{0x60, 0}, s.results...))
			}
			bts = append(bts, appendSLEB(nil, int64(idx)))
		}
	}
	return bts, added
}

// enter is the code inserted at a function's entry, after the countdown:
// it adds the frame's cost to $depth, stops the run past MaxStack, and
// opens the block of type bt that wraps the body.
func (rw *rewriter) enter(b []byte, bt []byte) []byte {
	d := uint64(rw.budget + 3)
	rw.fr.def(7)        // the values it defines
	b = append(b, 0x23) // global.get $depth
	b = binary.AppendUvarint(b, d)
	b = rw.costConst(b)
	b = append(b, 0x6a, 0x24) // i32.add; global.set $depth
	b = binary.AppendUvarint(b, d)
	b = append(b, 0x23)
	b = binary.AppendUvarint(b, d)
	b = append(b, 0x41) // i32.const MaxStack
	b = appendSLEB(b, MaxStack)
	b = append(b, 0x4b, 0x04, 0x40) // i32.gt_u; if
	b = append(b, 0x42)             // i64.const depthExceeded (-1)
	b = appendSLEB(b, -1)
	b = append(b, 0x10) // call $tick
	b = binary.AppendUvarint(b, uint64(rw.tick))
	b = append(b, 0x0b, 0x02) // end; block bt
	return append(b, bt...)
}

// leave is the code inserted where the function's frame ends: it takes
// the frame's cost back from $depth.
func (rw *rewriter) leave(b []byte) []byte {
	d := uint64(rw.budget + 3)
	rw.fr.def(3)        // the values it defines
	b = append(b, 0x23) // global.get $depth
	b = binary.AppendUvarint(b, d)
	b = rw.costConst(b)
	b = append(b, 0x6b, 0x24) // i32.sub; global.set $depth
	return binary.AppendUvarint(b, d)
}

// frame bounds, from a function's code, the bytes of stack wazero's
// optimizing compiler gives a frame of it. The register allocator gives
// every value it spills a slot of its own for the whole function (8 bytes,
// 16 for a v128), so the frame can hold every SSA value of the function:
// its parameters and locals, each instruction's results, and the block
// parameters (phis) where paths meet, at the end of a block or if and at
// a loop's head. A phi for a local is not trivial only where the local
// was set inside that block, loop or if (every path into the merge starts
// at its entry), so there are at most as many as, over the local.set and
// local.tee, the blocks around them that had not seen that local set yet.
// To these it adds the callee-saved registers the function may save, the
// stack space of its calls' arguments and results, and the frame's
// header. wazero's actual frames are smaller (it spills only values live
// across a call or under register pressure) but can come near it: a
// function that holds 40 values across each of 50 calls has a 7 KB frame.
// Checked against wazero 1.12 on amd64 (the frame size its compiler
// computes, printed by a patched copy): over every function of a C
// program with its libc and of the hostile shapes in the tests, the
// frame was at most 0.91 of the bound (phis: 0.47; libc's largest: 0.06).
// On arm64 (under qemu-user, session 15), at most 0.475 (phis; C
// programs 0.05-0.18), and at most 0.48 on amd64 again in the same run.
// A wazero upgrade should be checked again (docs/benchmarks.md says how).
type frame struct {
	slots   uint64 // parameters and locals, v128 counting 2
	values  uint64 // results of instructions and blocks
	phis    uint64 // block parameters for locals, at most
	callMax uint64 // arguments and results of its largest call
	vector  bool   // it has v128 values: a spill slot takes 16 bytes
	clock   uint64 // counts instructions, never reset (lastSet and opens hold its times)
	opens   []uint64
	lastSet []uint64 // by local: the clock when it was last set
}

// reset starts a function with these parameter and local slots.
func (f *frame) reset(slots uint64, vector bool) {
	*f = frame{slots: slots, vector: vector, clock: f.clock, opens: f.opens[:0], lastSet: f.lastSet}
}

// def counts n values an instruction defines.
func (f *frame) def(n int) { f.values += uint64(max(n, 0)) }

// vectorOp counts a SIMD instruction: one value, and 16-byte slots.
func (f *frame) vectorOp() {
	f.vector = true
	f.def(1)
}

// open enters a block, loop or if whose type takes params and gives
// results: its parameters and results are values of their own.
func (f *frame) open(params, results int) {
	f.def(params + results)
	f.opens = append(f.opens, f.clock)
}

// end leaves the innermost block, loop or if.
func (f *frame) end() {
	if n := len(f.opens); n > 0 {
		f.opens = f.opens[:n-1]
	}
}

// call counts a call to a function with params parameters and results
// results.
func (f *frame) call(params, results int) {
	f.def(results)
	f.callMax = max(f.callMax, uint64(params+results))
}

// set counts local.set or local.tee of local i: one phi more in each open
// block that has not seen i set since it opened. Those are the innermost
// ones, opened after i was last set.
func (f *frame) set(i uint32) {
	if i >= MaxLocals+1<<16 { // beyond any valid index: wazero refuses the module
		return
	}
	if int(i) >= len(f.lastSet) {
		f.lastSet = append(f.lastSet, make([]uint64, int(i)+1-len(f.lastSet))...)
	}
	last := f.lastSet[i]
	seen, _ := slices.BinarySearch(f.opens, last+1) // opened at or before last: saw it
	f.phis += uint64(len(f.opens) - seen)
	f.lastSet[i] = f.clock
}

// calleeSaved is how many callee-saved registers a frame may save, 16
// bytes each: 13 on amd64, 23 on arm64 (wazero's ABIs).
var calleeSaved = map[string]uint64{"amd64": 13}[runtime.GOARCH]

// cost returns the frame's bound in bytes, what a call of the function
// counts toward MaxStack.
func (f *frame) cost() uint64 {
	slot := uint64(8)
	if f.vector {
		slot = 16
	}
	values := min(f.values+f.phis, 1<<30)
	saved := calleeSaved
	if saved == 0 {
		saved = 23
	}
	b := frameHeader + 16*min(saved, f.slots+values) + 8*min(f.slots, 1<<30) + slot*values + 16*min(f.callMax, 1<<20)
	return b
}

// frameHeader is what every frame takes besides its values and saved
// registers: the return address and frame pointer, the stack check's 16
// bytes, and the 16 of its calls' area.
const frameHeader = 64

// blockArity returns the parameters and results of a block type read by
// reader.blockType: idx >= 0 is a type index, else oneResult says whether
// a value type (one result) or 0x40 (none) was read.
func (rw *rewriter) blockArity(idx int64, oneResult bool) (params, results int) {
	if idx >= 0 && idx < int64(len(rw.sigs)) {
		s := rw.sigs[idx]
		return s.params, s.nres
	}
	if oneResult {
		return 0, 1
	}
	return 0, 0
}

// callArity returns the parameters and results of function fn (in the
// module's own numbering).
func (rw *rewriter) callArity(fn uint32) (params, results int) {
	var ti uint32
	switch {
	case fn < uint32(len(rw.importTypes)):
		ti = rw.importTypes[fn]
	case int(fn)-len(rw.importTypes) < len(rw.funcTypes):
		ti = rw.funcTypes[int(fn)-len(rw.importTypes)]
	default:
		return 0, 0
	}
	if int(ti) >= len(rw.sigs) {
		return 0, 0
	}
	return rw.sigs[ti].params, rw.sigs[ti].nres
}

// costConst appends i32.const with room for the frame's cost, which is
// known only once the whole body is read: setCost fills it in.
func (rw *rewriter) costConst(b []byte) []byte {
	b = append(b, 0x41)
	rw.costAt = append(rw.costAt, len(b))
	return append(b, 0x80, 0x80, 0x80, 0x80, 0x00)
}

// setCost writes cost into every costConst of body.
func (rw *rewriter) setCost(body []byte, cost uint64) {
	for _, at := range rw.costAt {
		v := cost
		for i := range 4 {
			body[at+i] = byte(v&0x7f) | 0x80
			v >>= 7
		}
		body[at+4] = byte(v & 0x3f) // < 2^34, positive
	}
	rw.costAt = rw.costAt[:0]
}
