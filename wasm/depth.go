package wasm

import (
	"encoding/binary"
	"fmt"
)

// wazero keeps a run's call stack on the Go heap and grows it by doubling
// and copying, up to some 50 MB (100 MB at the last doubling, 150 MB while
// it copies) before it traps with a stack overflow; that memory is outside
// Limits.Memory. So Compile also rewrites every function to count the
// call stack's depth in a global of its own ($depth, after the countdown's
// three), in frames weighted by their size:
//
//	(function entry, after the countdown)
//	$depth += cost                ;; 1 + (params + locals) / 8, v128 counting 2
//	if $depth > MaxCallDepth { call $tick(depthExceeded) }   ;; Go stops the run
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
// A frame costs wazero about 40 bytes plus 8 per local or parameter live
// across a call (measured: 85 bytes allocated per frame of 1,000,000
// without locals, 1,100 per frame with 100 live locals, doublings
// included), so a cost unit is some 64 bytes, and MaxCallDepth units some
// 4 MiB of stack: 12 MiB at most while wazero doubles and copies it.
// The weight is an estimate from the wasm: a function whose compiled frame
// holds many more temporaries than locals (wazero gives every spilled
// value a slot of its own) can take more, up to wazero's own ceiling.

// MaxCallDepth bounds the call stack of a run, in frames of a function
// with up to 7 locals and parameters; a function with more counts one more
// per 8 (see depth.go). A run that goes deeper fails with ReasonTrap and
// "call depth limit of 65536 exceeded".
const MaxCallDepth = 1 << 16

// StackReserve is the most memory a run's call stack can take whatever
// the module does: wazero's own ceiling, its stack's last doubling past
// 50 MB with the earlier, smaller copies not yet collected (measured:
// 171-177 MB allocated by recursions that ended in wazero's stack
// overflow). MaxCallDepth keeps recursion with the frames a module's code
// shows to some 11 MB; wazero gives every value it spills a slot of its
// own, so a function whose compiled frame spills far more values than
// its code holds at once can still come near this (measured: 128 MB for
// a recursion of 50 regions of 40 values each). A host should leave it
// free for each run at once (worker.Config.MaxUnitMem's default does).
const StackReserve = 192 << 20

// depthExceeded is what the rewritten code passes braid.tick when the
// call depth passes MaxCallDepth: no bulk charge is that large (a charge
// is under 2^47).
const depthExceeded = ^uint64(0)

// ErrCallDepth is why a run that recursed past MaxCallDepth failed: the
// Detail of its RunError (ReasonTrap) says so.
var ErrCallDepth = fmt.Errorf("wasm: call depth limit of %d exceeded (a frame with many locals or values counts as several): recurse less deep, or keep the state of a deep search in memory", MaxCallDepth)

// sig is what the rewrite needs of a function type.
type sig struct {
	slots   uint64 // its parameters, v128 counting 2
	results []byte // its result types, encoded
	params  int
	nres    int
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
			r.valType()
		}
		s.params = int(np)
		start := r.b
		nr := r.u32()
		for j := uint32(0); j < nr && r.err == nil; j++ {
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

// frameCost is what a frame of a function with these parameter and local
// slots, and at most this many values on its operand stack, counts toward
// MaxCallDepth.
func frameCost(slots uint64, values int) uint64 {
	return 1 + (min(slots, 1<<20)+uint64(min(values, 1<<20)))/8
}

// enter is the code inserted at a function's entry, after the countdown:
// it adds the frame's cost to $depth, stops the run past MaxCallDepth, and opens the
// block of type bt that wraps the body.
func (rw *rewriter) enter(b []byte, bt []byte) []byte {
	d := uint64(rw.budget + 3)
	b = append(b, 0x23) // global.get $depth
	b = binary.AppendUvarint(b, d)
	b = rw.costConst(b)
	b = append(b, 0x6a, 0x24) // i32.add; global.set $depth
	b = binary.AppendUvarint(b, d)
	b = append(b, 0x23)
	b = binary.AppendUvarint(b, d)
	b = append(b, 0x41) // i32.const MaxCallDepth
	b = appendSLEB(b, MaxCallDepth)
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
	b = append(b, 0x23) // global.get $depth
	b = binary.AppendUvarint(b, d)
	b = rw.costConst(b)
	b = append(b, 0x6b, 0x24) // i32.sub; global.set $depth
	return binary.AppendUvarint(b, d)
}

// height follows the height of a function's operand stack as the rewrite
// reads its instructions, to bound the values a frame may hold across a
// call: wazero spills them into the frame, so they count toward its cost
// like locals (measured: 1,000 values held across a recursive call took
// 118 MB at 65,536 frames before they counted). It overestimates where it
// is unsure (an instruction it does not know pops nothing), never under.
type height struct {
	h, max int
	ctl    []ctlFrame
}

// ctlFrame is an open block, loop or if.
type ctlFrame struct{ entry, results int }

func (s *height) reset() { *s = height{ctl: s.ctl[:0]} }

// add changes the height by d.
func (s *height) add(d int) {
	s.h += d
	floor := 0
	if n := len(s.ctl); n > 0 {
		floor = s.ctl[n-1].entry
	}
	s.h = max(s.h, floor) // in unreachable code it may pop below
	s.max = max(s.max, s.h)
}

// open enters a block whose type takes params and gives results.
func (s *height) open(params, results int) {
	s.ctl = append(s.ctl, ctlFrame{entry: max(s.h-params, 0), results: results})
}

// unreachable marks the rest of the block unreachable (after br, return,
// unreachable): its height is that of its entry.
func (s *height) unreachable() {
	if n := len(s.ctl); n > 0 {
		s.h = s.ctl[n-1].entry
	} else {
		s.h = 0
	}
}

// elseOf starts the else branch of the innermost if.
func (s *height) elseOf() { s.unreachable() }

// end leaves the innermost block: its results are on the stack.
func (s *height) end() {
	if n := len(s.ctl); n > 0 {
		f := s.ctl[n-1]
		s.ctl = s.ctl[:n-1]
		s.h = f.entry
		s.add(f.results)
	}
}

// blockArity returns the parameters and results of a block type read by
// reader.blockType: idx >= 0 is a type index, else vt says whether a value
// type (one result) or 0x40 (none) was read.
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

// numericDelta is what a numeric instruction (0x45-0xc4) does to the
// height: comparisons and binary operators pop two values and push one,
// tests, unary operators and conversions pop one and push one.
func numericDelta(op byte) int {
	switch {
	case op >= 0x46 && op <= 0x4f, op >= 0x51 && op <= 0x66,
		op >= 0x6a && op <= 0x78, op >= 0x7c && op <= 0x8a,
		op >= 0x92 && op <= 0x98, op >= 0xa0 && op <= 0xa6:
		return -1
	}
	return 0
}

// fcDelta is what the 0xFC instruction sub does to the height.
func fcDelta(sub uint32) int {
	switch sub {
	case 8, 10, 11, 12, 14, 17: // memory.init, memory.copy, memory.fill, table.init, table.copy, table.fill
		return -3
	case 15: // table.grow
		return -1
	case 16: // table.size
		return 1
	}
	return 0 // truncations, data.drop, elem.drop
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
