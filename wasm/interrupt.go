package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A running module is stopped (Limits.Timeout, a canceled ctx, Engine.Close)
// without wazero's WithCloseOnContextDone, which makes every loop
// back-edge leave the machine code for Go (wazero issue #2466: 5-7x on
// loop-heavy code). Instead, Compile rewrites the module so that every
// loop header and every function entry counts down a counter of its own
// (a mutable global the module cannot name), and calls the host function
// braid.tick once every tickEvery counts:
//
//	global.get $budget
//	i32.eqz
//	if
//	  call $tick            ;; Go: is the run over? then stop it (panic)
//	  i32.const tickEvery
//	  global.set $budget
//	end
//	global.get $budget
//	i32.const 1
//	i32.sub
//	global.set $budget
//
// That costs a load, a store and a branch per back-edge instead of a trip
// to Go. The trip to Go in tick is also where the Go scheduler can preempt
// the goroutine (machine code cannot be preempted), so a stop-the-world
// for the garbage collector waits at most tickEvery loop iterations or
// calls, never for the whole run. Counting function entries too stops a
// module that runs long without looping (exponential recursion), which
// wazero's own check misses.
//
// Bulk instructions (memory.fill, memory.copy, memory.init, table.fill,
// table.copy, table.init, table.grow, memory.grow) do work in proportion
// to their length operand in one instruction, with no loop header for the
// countdown (wazero lowers memory.fill to one native memset that nothing
// can preempt). Before each, the rewrite charges its length to the
// countdown, saturating, in 64-bit arithmetic:
//
//	global.set $n                 ;; the length, the last operand
//	cost := (n * mul) >> shift    ;; in loop iterations, see chargeRate
//	if cost >= $budget { call $tick; $budget = tickEvery } else { $budget -= cost }
//	global.get $n                 ;; the operand, unchanged
//
// so the run goes to Go before any bulk instruction that costs as much as
// what is left of the countdown (256 KiB of memory), passing it the
// charge: Go stops the run if its time is up, and also if the instruction
// could not end before the deadline at 1 GB/s (bulkStepTime), slower than
// fills and copies run (2-10 GB/s). So a run does not overshoot its time
// by a bulk instruction's length: it stops before one that would pass the
// deadline, up to the instruction's estimated length early. The two
// scratch globals ($n, i32; $c, i64) follow the countdown global. A
// memory.fill or memory.copy longer than 1 MiB then runs a slice at a
// time, in two functions the rewrite adds, with a call of braid.tick
// between two slices, so that Go can preempt it (bulk.go).
//
// braid.tick takes one i64: 0 from the countdown, the pending charge
// before a bulk instruction, and depthExceeded from the call depth check
// of depth.go, whose global $depth follows the scratch globals.
//
// The rewrite adds function types (braid.tick's, those depth.go needs
// for the block that wraps a function body, and bulk.go's), two functions
// after the module's own (bulk.go's), one import (tickModule.tickName,
// appended after the module's own imports, so every defined function's
// index grows by one: calls, ref.func, exports, the start function and
// element segments are renumbered) and four globals (appended, so no
// index moves). Custom sections go: the name section's indices and DWARF's
// code offsets would be wrong, and nothing braid reports uses them. A module
// that uses instructions beyond WebAssembly 2.0 (which wazero refuses by
// default anyway) is refused with ErrBadModule.

// tickEvery is how many loop iterations and calls run between two calls
// of braid.tick: at some 0.3 ns or more per iteration, tick comes at most
// every 20 µs of a tight loop, and its cost (~0.1-0.2 µs) is under 1%.
const tickEvery = 1 << 16

// The import that Compile adds.
const (
	tickModule = "braid"
	tickName   = "tick"
)

// Section ids of the binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// sectionRank orders the known sections as the binary format requires.
var sectionRank = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5,
	secTag: 6, secGlobal: 7, secExport: 8, secStart: 9, secElement: 10,
	secDataCount: 11, secCode: 12, secData: 13,
}

// section is one section of a module being rewritten.
type section struct {
	id      byte
	payload []byte
}

// instrument returns code with the countdown and braid.tick described
// above, and the bytes its tables may take at most (tableEntryBytes per
// entry of their bounded maxima). code must have passed parseImports.
func instrument(code []byte) (out []byte, tableBytes uint64, err error) {
	out, tableBytes, _, err = instrumentPhis(code)
	return out, tableBytes, err
}

// instrumentPhis is instrument that also returns the phis of all the
// module's functions together (see MaxModulePhis), which much of its
// machine code grows with (compiledSize).
func instrumentPhis(code []byte) (out []byte, tableBytes, phis uint64, err error) {
	out, tableBytes, phis, err = rewrite(code)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: %v", ErrBadModule, err)
	}
	return out, tableBytes, phis, nil
}

func rewrite(code []byte) ([]byte, uint64, uint64, error) {
	r := reader{b: code[len(wasmHeader):]}
	var secs []section
	have := map[byte]bool{}
	for len(r.b) > 0 {
		id := r.byte()
		size := r.u32()
		payload := r.bytes(int(size))
		if r.err != nil {
			return nil, 0, 0, fmt.Errorf("section %d: %v", id, r.err)
		}
		if id == secCustom {
			continue
		}
		if _, ok := sectionRank[id]; !ok {
			return nil, 0, 0, fmt.Errorf("unknown section %d", id)
		}
		if have[id] {
			return nil, 0, 0, fmt.Errorf("section %d twice", id)
		}
		have[id] = true
		secs = append(secs, section{id, payload})
	}
	// The sections we add to must exist.
	for _, id := range []byte{secType, secImport, secGlobal} {
		if !have[id] {
			secs = append(secs, section{id, []byte{0}}) // a vector of 0 entries
		}
	}
	slices.SortStableFunc(secs, func(a, b section) int { return sectionRank[a.id] - sectionRank[b.id] })

	// First pass: what the new indices are.
	var nTypes, nFuncImports, nGlobals, nFuncs uint32
	rw := &rewriter{}
	for _, s := range secs {
		var err error
		switch s.id {
		case secType:
			nTypes, err = vecLen(s.payload)
			if err == nil {
				rw.sigs, err = parseTypes(s.payload)
				for _, sg := range rw.sigs {
					rw.vectors = rw.vectors || sg.vector
				}
			}
		case secImport:
			nFuncImports, nGlobals, rw.importTypes, err = countImports(s.payload, nTypes)
		case secGlobal:
			var n uint32
			n, err = vecLen(s.payload)
			nGlobals += n
		case secFunction:
			nFuncs, err = vecLen(s.payload)
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("section %d: %v", s.id, err)
		}
	}
	rw.tick, rw.budget, rw.types = nFuncImports, nGlobals, nTypes
	var addTypes [][]byte
	rw.blockTypes, addTypes = blockTypes(rw.sigs, nTypes+1)
	if rw.bulk = have[secMemory] && have[secFunction] && have[secCode]; rw.bulk {
		rw.bulkType = nTypes + 1 + uint32(len(addTypes))
		addTypes = append(addTypes, bulkType)
		rw.fillFn = nFuncImports + 1 + nFuncs
	}

	out := slices.Clone(wasmHeader)
	for _, s := range secs {
		var p []byte
		var err error
		switch s.id {
		case secType:
			// func(i64) -> (), then the block types of depth.go
			p, err = appendToVec(s.payload, append([][]byte{{0x60, 1, 0x7e, 0}}, addTypes...)...)
		case secImport:
			entry := appendName(nil, tickModule)
			entry = appendName(entry, tickName)
			entry = append(entry, byte(kindFunc))
			entry = binary.AppendUvarint(entry, uint64(nTypes))
			p, err = appendToVec(s.payload, entry)
		case secGlobal:
			p, err = rw.globals(s.payload)
		case secExport:
			p, err = rw.exports(s.payload)
		case secStart:
			p, err = rw.start(s.payload)
		case secElement:
			p, err = rw.elements(s.payload)
		case secTable:
			p, err = rw.tables(s.payload)
		case secCode:
			p, err = rw.code(s.payload)
			if err == nil && rw.bulk {
				fill, cp := bulkFillBody(rw.tick), bulkCopyBody(rw.tick)
				p, err = appendToVec(p, append(binary.AppendUvarint(nil, uint64(len(fill))), fill...),
					append(binary.AppendUvarint(nil, uint64(len(cp))), cp...))
			}
		case secFunction:
			p, err = rw.functions(s.payload)
			if err == nil && rw.bulk {
				t := binary.AppendUvarint(nil, uint64(rw.bulkType))
				p, err = appendToVec(p, t, t)
			}
		default:
			p = s.payload
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("section %d: %v", s.id, err)
		}
		out = append(out, s.id)
		out = binary.AppendUvarint(out, uint64(len(p)))
		out = append(out, p...)
	}
	return out, rw.tableEntries * tableEntryBytes, rw.phis, nil
}

// vecLen reads the length of the vector that starts b.
func vecLen(b []byte) (uint32, error) {
	r := reader{b: b}
	n := r.u32()
	return n, r.err
}

// appendToVec returns the vector b with more entries.
func appendToVec(b []byte, entries ...[]byte) ([]byte, error) {
	r := reader{b: b}
	n := r.u32()
	if r.err != nil {
		return nil, r.err
	}
	out := binary.AppendUvarint(nil, uint64(n)+uint64(len(entries)))
	out = append(out, r.b...)
	for _, e := range entries {
		out = append(out, e...)
	}
	return out, nil
}

func appendName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// countImports counts the imported functions and globals, and returns
// the functions' types.
func countImports(b []byte, nTypes uint32) (funcs, globals uint32, types []uint32, err error) {
	imps, err := parseImportSection(b)
	if err != nil {
		return 0, 0, nil, err
	}
	for _, imp := range imps {
		switch imp.kind {
		case kindFunc:
			if imp.typeIdx >= nTypes {
				return 0, 0, nil, fmt.Errorf("import %s.%s: type %d; the module has %d", imp.module, imp.name, imp.typeIdx, nTypes)
			}
			funcs++
			types = append(types, imp.typeIdx)
		case kindGlobal:
			globals++
		}
	}
	return funcs, globals, types, nil
}

// rewriter renumbers the module's functions past the tick import and
// inserts the countdown.
type rewriter struct {
	tick   uint32 // index of braid.tick: functions from it on move up by one
	budget uint32 // index of the countdown global
	types  uint32 // the module's own types; the rewrite adds one after them

	tableEntries uint64 // the sum of the tables' maxima, once rewritten

	sigs        []sig    // the module's types (depth.go)
	blockTypes  [][]byte // by type: the block type wrapping a body of it
	funcTypes   []uint32 // by defined function: its type
	importTypes []uint32 // by imported function: its type
	costAt      []int    // where the body being rewritten needs its frame's cost (costConst)
	fr          frame    // of the body being rewritten (depth.go)
	vectors     bool     // the module has v128 globals or function types

	shape  fnShape // of the function being rewritten
	weight uint64  // the sum of the squares of the functions' branch weights
	phis   uint64  // the phis of the functions rewritten so far (frame.phis)

	// bulk: the module has a memory, and the rewrite adds bulkFill and
	// bulkCopy (bulk.go), functions fillFn and fillFn+1 of type bulkType.
	bulk     bool
	bulkType uint32
	fillFn   uint32
}

// typeRef refuses a reference to the type the rewrite adds (valid only
// once rewritten).
func (rw *rewriter) typeRef(idx uint32) error {
	if idx >= rw.types {
		return fmt.Errorf("refers to type %d; the module has %d", idx, rw.types)
	}
	return nil
}

// functions checks the function section's type indices.
func (rw *rewriter) functions(b []byte) ([]byte, error) {
	r := reader{b: b}
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		ti := r.u32()
		if err := rw.typeRef(ti); r.err == nil && err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		rw.funcTypes = append(rw.funcTypes, ti)
	}
	return b, r.end()
}

// fn returns the new index of function i.
func (rw *rewriter) fn(i uint32) uint32 {
	if i >= rw.tick {
		return i + 1
	}
	return i
}

// countdown is the code inserted at each function entry and loop header.
func (rw *rewriter) countdown(b []byte) []byte {
	rw.fr.def(7)        // the values it defines
	b = append(b, 0x23) // global.get
	b = binary.AppendUvarint(b, uint64(rw.budget))
	b = append(b, 0x45, 0x04, 0x40, 0x42, 0x00) // i32.eqz; if (no result); i64.const 0
	b = append(b, 0x10)                         // call
	b = binary.AppendUvarint(b, uint64(rw.tick))
	b = append(b, 0x41) // i32.const
	b = appendSLEB(b, tickEvery)
	b = append(b, 0x24) // global.set
	b = binary.AppendUvarint(b, uint64(rw.budget))
	b = append(b, 0x0b, 0x23) // end; global.get
	b = binary.AppendUvarint(b, uint64(rw.budget))
	b = append(b, 0x41, 0x01, 0x6b, 0x24) // i32.const 1; i32.sub; global.set
	return binary.AppendUvarint(b, uint64(rw.budget))
}

// chargeRate is what a bulk instruction costs in countdown steps (loop
// iterations): (n * mul) >> shift for its length n. A loop iteration is
// some 0.3 ns or more; memset and memmove move 4 bytes in about that time,
// a table entry is 8 bytes, and a memory page 64 KiB.
type chargeRate struct{ mul, shift uint64 }

var (
	chargeBytes   = chargeRate{1, 2}
	chargeEntries = chargeRate{2, 0}
	chargePages   = chargeRate{16384, 0}
)

// bulkCharge returns the rate of the 0xFC instruction sub, if it is a bulk
// one.
func bulkCharge(sub uint32) (chargeRate, bool) {
	switch sub {
	case 8, 10, 11: // memory.init, memory.copy, memory.fill
		return chargeBytes, true
	case 12, 14, 15, 17: // table.init, table.copy, table.grow, table.fill
		return chargeEntries, true
	}
	return chargeRate{}, false
}

// charge is the code inserted before a bulk instruction, whose length
// operand is on top of the stack: it charges the countdown (see the top
// of this file) and leaves the operand as it was.
func (rw *rewriter) charge(b []byte, rate chargeRate) []byte {
	n, c := uint64(rw.budget+1), uint64(rw.budget+2)
	rw.fr.def(14)       // the values it defines
	b = append(b, 0x24) // global.set $n
	b = binary.AppendUvarint(b, n)
	b = append(b, 0x23) // global.get $n
	b = binary.AppendUvarint(b, n)
	b = append(b, 0xad) // i64.extend_i32_u
	if rate.mul != 1 {
		b = append(b, 0x42) // i64.const
		b = appendSLEB(b, int64(rate.mul))
		b = append(b, 0x7e) // i64.mul
	}
	if rate.shift != 0 {
		b = append(b, 0x42)
		b = appendSLEB(b, int64(rate.shift))
		b = append(b, 0x88) // i64.shr_u
	}
	b = append(b, 0x24) // global.set $c
	b = binary.AppendUvarint(b, c)
	b = append(b, 0x23) // global.get $c
	b = binary.AppendUvarint(b, c)
	b = append(b, 0x23) // global.get $budget
	b = binary.AppendUvarint(b, uint64(rw.budget))
	b = append(b, 0xad, 0x5a, 0x04, 0x40) // i64.extend_i32_u; i64.ge_u; if
	b = append(b, 0x23)                   // global.get $c: the pending charge
	b = binary.AppendUvarint(b, c)
	b = append(b, 0x10) // call $tick
	b = binary.AppendUvarint(b, uint64(rw.tick))
	b = append(b, 0x41) // i32.const tickEvery
	b = appendSLEB(b, tickEvery)
	b = append(b, 0x24) // global.set $budget
	b = binary.AppendUvarint(b, uint64(rw.budget))
	b = append(b, 0x05, 0x23) // else; global.get $budget
	b = binary.AppendUvarint(b, uint64(rw.budget))
	b = append(b, 0x23) // global.get $c
	b = binary.AppendUvarint(b, c)
	b = append(b, 0xa7, 0x6b, 0x24) // i32.wrap_i64; i32.sub; global.set $budget
	b = binary.AppendUvarint(b, uint64(rw.budget))
	b = append(b, 0x0b, 0x23) // end; global.get $n
	return binary.AppendUvarint(b, n)
}

// slices is the code, after charge, that sends a memory.copy (sub 10) or
// memory.fill (11) longer than bulkSlice to bulkCopy or bulkFill
// (bulk.go), and runs a shorter one, instr, as it is.
func (rw *rewriter) slices(b []byte, sub uint32, instr []byte) []byte {
	rw.fr.def(6)        // the values it defines, the if's parameters included
	b = append(b, 0x23) // global.get $n: the length
	b = binary.AppendUvarint(b, uint64(rw.budget+1))
	b = appendI32(b, bulkSlice)
	b = append(b, 0x4b, 0x04) // i32.gt_u; if (type bulkType)
	b = appendSLEB(b, int64(rw.bulkType))
	fn := rw.fillFn
	if sub == 10 {
		fn++
	}
	b = append(b, 0x10) // call
	b = binary.AppendUvarint(b, uint64(fn))
	b = append(b, 0x05) // else
	b = append(b, instr...)
	return append(b, 0x0b)
}

// globals renumbers ref.func in the initializers and appends the
// countdown global, a mutable i32 starting at tickEvery, and the scratch
// globals of charge, a mutable i32 and a mutable i64.
func (rw *rewriter) globals(b []byte) ([]byte, error) {
	r := reader{b: b}
	n := r.u32()
	if r.err == nil && n > MaxGlobals {
		return nil, fmt.Errorf("%d globals; at most %d are allowed", n, MaxGlobals)
	}
	out := binary.AppendUvarint(nil, uint64(n)+4)
	for i := uint32(0); i < n && r.err == nil; i++ {
		start := r.b
		rw.vectors = rw.vectors || valSlots(r.b) == 2
		r.valType()
		r.byte() // mutability
		out = append(out, start[:len(start)-len(r.b)]...)
		var err error
		if out, err = rw.constExpr(&r, out); err != nil {
			return nil, err
		}
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	out = append(out, 0x7f, 0x01, 0x41) // i32, mutable, i32.const
	out = appendSLEB(out, tickEvery)
	out = append(out, 0x0b)
	out = append(out, 0x7f, 0x01, 0x41, 0x00, 0x0b)       // $n: i32, mutable, 0
	out = append(out, 0x7e, 0x01, 0x42, 0x00, 0x0b)       // $c: i64, mutable, 0
	return append(out, 0x7f, 0x01, 0x41, 0x00, 0x0b), nil // $depth (depth.go): i32, mutable, 0
}

func (rw *rewriter) exports(b []byte) ([]byte, error) {
	r := reader{b: b}
	n := r.u32()
	out := binary.AppendUvarint(nil, uint64(n))
	for i := uint32(0); i < n && r.err == nil; i++ {
		out = appendName(out, r.name())
		kind := r.byte()
		idx := r.u32()
		if importKind(kind) == kindFunc {
			idx = rw.fn(idx)
		}
		out = append(out, kind)
		out = binary.AppendUvarint(out, uint64(idx))
	}
	return out, r.end()
}

func (rw *rewriter) start(b []byte) ([]byte, error) {
	r := reader{b: b}
	idx := r.u32()
	return binary.AppendUvarint(nil, uint64(rw.fn(idx))), r.end()
}

// MaxTableEntries bounds every table: the rewrite gives a table without
// a maximum, or with a larger one, this maximum (table.grow past it
// returns -1), and refuses a table that starts larger. Its entries count
// toward the run's memory limit at tableEntryBytes each (see Module.Run).
const MaxTableEntries = 1 << 20

// tableEntryBytes is what a table entry costs the host: 8 bytes, and as
// much again while wazero's table.grow copies the table into a larger one.
const tableEntryBytes = 16

// tables renumbers the initializers of the function-references proposal's
// table form (0x40 0x00 tabletype expr) and bounds every table's maximum
// (MaxTableEntries), adding it to rw.tableEntries.
func (rw *rewriter) tables(b []byte) ([]byte, error) {
	r := reader{b: b}
	n := r.u32()
	if r.err == nil && n > MaxTables {
		return nil, fmt.Errorf("%d tables; at most %d are allowed", n, MaxTables)
	}
	out := binary.AppendUvarint(nil, uint64(n))
	for i := uint32(0); i < n && r.err == nil; i++ {
		init := len(r.b) > 0 && r.b[0] == 0x40
		if init {
			out = append(out, r.byte(), r.byte())
		}
		start := r.b
		r.valType()
		out = append(out, start[:len(start)-len(r.b)]...)
		var err error
		if out, err = rw.tableLimits(&r, out, i); err != nil {
			return nil, err
		}
		if init {
			if out, err = rw.constExpr(&r, out); err != nil {
				return nil, err
			}
		}
	}
	return out, r.end()
}

// tableLimits copies the limits of table i with its maximum bounded by
// MaxTableEntries.
func (rw *rewriter) tableLimits(r *reader, out []byte, i uint32) ([]byte, error) {
	flags := r.byte()
	if r.err != nil {
		return nil, r.err
	}
	if flags&^0x01 != 0 {
		return nil, fmt.Errorf("table %d: %w (limits flags 0x%02x)", i, errBeyond2, flags)
	}
	lo := r.uleb(32)
	hi := uint64(MaxTableEntries)
	if flags&0x01 != 0 {
		hi = min(r.uleb(32), hi)
	}
	if r.err != nil {
		return nil, r.err
	}
	if lo > MaxTableEntries {
		return nil, fmt.Errorf("table %d starts with %d entries; at most %d are allowed", i, lo, MaxTableEntries)
	}
	rw.tableEntries += hi
	out = append(out, 0x01)
	out = binary.AppendUvarint(out, lo)
	return binary.AppendUvarint(out, hi), nil
}

// elements renumbers the functions of every element segment.
func (rw *rewriter) elements(b []byte) ([]byte, error) {
	r := reader{b: b}
	n := r.u32()
	out := binary.AppendUvarint(nil, uint64(n))
	for i := uint32(0); i < n && r.err == nil; i++ {
		flags := r.u32()
		if flags > 7 {
			return nil, fmt.Errorf("element segment %d: unknown form %d", i, flags)
		}
		out = binary.AppendUvarint(out, uint64(flags))
		var err error
		if flags&0x02 != 0 && flags&0x01 == 0 { // explicit table index
			out = binary.AppendUvarint(out, uint64(r.u32()))
		}
		if flags&0x01 == 0 { // active: an offset
			if out, err = rw.constExpr(&r, out); err != nil {
				return nil, err
			}
		}
		exprs := flags&0x04 != 0
		if flags&0x03 != 0 { // elemkind or reftype
			start := r.b
			if exprs {
				r.valType()
			} else {
				r.byte()
			}
			out = append(out, start[:len(start)-len(r.b)]...)
		}
		m := r.u32()
		out = binary.AppendUvarint(out, uint64(m))
		for j := uint32(0); j < m && r.err == nil; j++ {
			if exprs {
				if out, err = rw.constExpr(&r, out); err != nil {
					return nil, err
				}
			} else {
				out = binary.AppendUvarint(out, uint64(rw.fn(r.u32())))
			}
		}
	}
	return out, r.end()
}

// constExpr copies a constant expression up to its end, renumbering
// ref.func.
func (rw *rewriter) constExpr(r *reader, out []byte) ([]byte, error) {
	return rw.instructions(r, out, false, true)
}

// code rewrites every function body.
func (rw *rewriter) code(b []byte) ([]byte, error) {
	if len(b) > MaxCodeBytes {
		return nil, fmt.Errorf("%d bytes of code; at most %d are allowed", len(b), MaxCodeBytes)
	}
	r := reader{b: b}
	n := r.u32()
	if r.err == nil && n > MaxFunctions {
		return nil, fmt.Errorf("%d functions; at most %d are allowed", n, MaxFunctions)
	}
	out := binary.AppendUvarint(nil, uint64(n))
	var body []byte
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		fr := reader{b: r.bytes(int(size))}
		if r.err != nil {
			break
		}
		if size > MaxFunctionBytes {
			return nil, fmt.Errorf("function %d: %d bytes; at most %d are allowed", i, size, MaxFunctionBytes)
		}
		if i >= uint32(len(rw.funcTypes)) {
			return nil, fmt.Errorf("function %d has code but no type (the function section has %d)", i, len(rw.funcTypes))
		}
		s := rw.sigs[rw.funcTypes[i]]
		// Locals: a vector of (count, type).
		start := fr.b
		nl := fr.u32()
		var locals uint64
		slots := s.slots
		for j := uint32(0); j < nl && fr.err == nil; j++ {
			c := uint64(fr.u32())
			locals += c
			slots += c * valSlots(fr.b)
			fr.valType()
		}
		if locals > MaxLocals {
			return nil, fmt.Errorf("function %d: %d locals; at most %d are allowed", i, locals, MaxLocals)
		}
		body = append(body[:0], start[:len(start)-len(fr.b)]...)
		rw.fr.reset(slots, rw.vectors || slots > uint64(s.params)+locals)
		body = rw.countdown(body)
		body = rw.enter(body, rw.blockTypes[rw.funcTypes[i]])
		rw.shape = fnShape{}
		var err error
		if body, err = rw.instructions(&fr, body, true, false); err != nil {
			return nil, fmt.Errorf("function %d: %v", i, err)
		}
		if fr.err == nil && len(fr.b) != 0 {
			return nil, fmt.Errorf("function %d: %d bytes after its end", i, len(fr.b))
		}
		cost := rw.fr.cost()
		if cost > MaxFrame {
			return nil, fmt.Errorf("function %d: its frame may take %d KiB of call stack (it defines %d values and up to %d phis, and wazero may keep each in a slot of its own); at most %d KiB are allowed: split it into smaller functions", i, cost>>10, rw.fr.values, rw.fr.phis, MaxFrame>>10)
		}
		rw.setCost(body, cost)
		if rw.phis += rw.fr.phis; rw.phis > MaxModulePhis {
			return nil, fmt.Errorf("the functions up to %d have up to %d phis (where locals set in blocks and loops meet); at most %d are allowed in a module, which would take wazero too long to compile: set fewer locals inside nested loops and blocks, or split the operation into smaller modules", i, rw.phis, MaxModulePhis)
		}
		if err := rw.shape.check(&rw.weight); err != nil {
			return nil, fmt.Errorf("function %d: %v", i, err)
		}
		if rw.weight > MaxModuleWeight {
			return nil, fmt.Errorf("the functions up to %d have a total squared branch weight over %d (see MaxBranchWeight); the module would take too long to compile", i, MaxModuleWeight)
		}
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out, r.end()
}

var errBeyond2 = errors.New("uses an instruction beyond WebAssembly 2.0")

// instructions copies instructions from r to out up to the end of the
// function body (the end that closes depth 0) or, with expr, of a
// constant expression. It renumbers function indices and, with loops,
// inserts the countdown after each loop's block type and the charge
// before each bulk instruction.
func (rw *rewriter) instructions(r *reader, out []byte, loops, expr bool) ([]byte, error) {
	depth := 0
	for r.err == nil {
		start := r.b
		op := r.byte()
		rw.fr.clock++
		copied := false // the instruction is appended already
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			oneResult := len(r.b) > 0 && r.b[0] != 0x40
			if len(r.b) > 0 && r.b[0] == 0x7b {
				rw.fr.vector = true
			}
			idx := r.blockType()
			if idx >= 0 {
				if err := rw.typeRef(uint32(idx)); err != nil {
					return nil, err
				}
			}
			depth++
			if loops {
				rw.fr.open(rw.blockArity(idx, oneResult))
				w := uint64(weightBlock)
				if op == 0x03 {
					w = weightLoop
				}
				if err := rw.shape.open(w); err != nil {
					return nil, err
				}
			}
			if op == 0x03 && loops {
				out = append(out, start[:len(start)-len(r.b)]...)
				out = rw.countdown(out)
				copied = true
			}
		case op == 0x0b: // end
			if depth == 0 {
				if loops { // close the block of enter, then leave
					out = rw.leave(append(out, 0x0b))
				}
				return append(out, op), r.err
			}
			depth--
			if loops {
				rw.fr.end()
				rw.shape.depth--
			}
		case op == 0x10 || op == 0x12 || op == 0xd2: // call, return_call, ref.func
			idx := r.u32()
			if op != 0xd2 && loops {
				rw.fr.call(rw.callArity(idx))
				if op == 0x12 {
					out = rw.leave(out)
				}
			} else if loops {
				rw.fr.def(1)
			}
			out = append(out, op)
			out = binary.AppendUvarint(out, uint64(rw.fn(idx)))
			copied = true
		case op == 0x0f && loops: // return: br to the block of enter
			out = append(out, 0x0c)
			out = binary.AppendUvarint(out, uint64(depth))
			copied = true
		case op <= 0x01 || op == 0x0f || op == 0x1a || op == 0x1b || op == 0xd1:
			// no immediate
			if op == 0x1b || op == 0xd1 { // select, ref.is_null
				rw.fr.def(1)
			}
		case op == 0x0c || op == 0x0d: // br, br_if
			r.u32()
			if op == 0x0d {
				rw.shape.add(weightBlock)
			}
		case op == 0x05: // else
			rw.shape.add(weightBlock)
		case op == 0x0e: // br_table
			n := r.u32()
			if r.err == nil && n > MaxBrTable {
				return nil, fmt.Errorf("a br_table with %d targets; at most %d are allowed", n, MaxBrTable)
			}
			rw.shape.add(weightBlock + uint64(n)*weightBrEntry)
			for i := uint32(0); i <= n && r.err == nil; i++ {
				r.u32()
			}
		case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
			ti := r.u32()
			r.u32()
			if r.err == nil {
				if err := rw.typeRef(ti); err != nil {
					return nil, err
				}
			}
			if loops && r.err == nil {
				p, res := 0, 0
				if int(ti) < len(rw.sigs) {
					p, res = rw.sigs[ti].params, rw.sigs[ti].nres
				}
				rw.fr.call(p, res)
				if op == 0x13 {
					out = rw.leave(out)
				}
			}
		case op == 0x1c: // select t*
			n := r.u32()
			for i := uint32(0); i < n && r.err == nil; i++ {
				rw.fr.vector = rw.fr.vector || valSlots(r.b) == 2
				r.valType()
			}
			rw.fr.def(1)
		case op == 0x23 || op == 0x24: // global.get, global.set
			// The countdown global is not the module's: code that names
			// it (an index past the module's own globals, which the
			// rewrite would make valid) could stop the countdown.
			if idx := r.u32(); r.err == nil && idx >= rw.budget {
				return nil, fmt.Errorf("refers to global %d; the module has %d", idx, rw.budget)
			}
			if op == 0x23 {
				rw.fr.def(1)
			}
		case op >= 0x20 && op <= 0x26: // locals, table.get/set
			idx := r.u32()
			switch op {
			case 0x21, 0x22: // local.set, local.tee
				rw.fr.set(idx)
			case 0x25: // table.get
				rw.fr.def(1)
			}
		case op >= 0x28 && op <= 0x3e: // loads and stores
			r.memarg()
			if op < 0x36 { // a load
				rw.fr.def(1)
			}
		case op == 0x3f: // memory.size
			r.u32()
			rw.fr.def(1)
		case op == 0x40: // memory.grow
			r.u32()
			rw.fr.def(1)
			if loops && r.err == nil {
				out = rw.charge(out, chargePages)
				rw.shape.add(weightBlock)
			}
		case op == 0x41:
			r.uleb(35) // s32; the sign does not matter for skipping
			rw.fr.def(1)
		case op == 0x42:
			r.uleb(70) // s64
			rw.fr.def(1)
		case op == 0x43:
			r.bytes(4)
			rw.fr.def(1)
		case op == 0x44:
			r.bytes(8)
			rw.fr.def(1)
		case op >= 0x45 && op <= 0xc4: // numeric, sign extension
			rw.fr.def(1)
		case op == 0xd0: // ref.null
			r.valType()
			rw.fr.def(1)
		case op == 0xfc:
			sub, err := r.prefixFC()
			if err != nil {
				return nil, err
			}
			if sub <= 7 || sub == 15 || sub == 16 { // truncations, table.grow, table.size
				rw.fr.def(1)
			}
			if rate, ok := bulkCharge(sub); ok && loops && r.err == nil {
				out = rw.charge(out, rate)
				rw.shape.add(weightBulk)
				if (sub == 10 || sub == 11) && rw.bulk {
					out = rw.slices(out, sub, start[:len(start)-len(r.b)])
					copied = true
				}
			}
		case op == 0xfd:
			if err := r.prefixFD(); err != nil {
				return nil, err
			}
			rw.fr.vectorOp()
		default:
			return nil, fmt.Errorf("%w (opcode 0x%02x)", errBeyond2, op)
		}
		if !copied && r.err == nil {
			out = append(out, start[:len(start)-len(r.b)]...)
		}
	}
	return nil, r.err
}

// end reports r's error, or bytes left over after a section's entries
// (which wazero refuses: the rewrite must not drop them and accept).
func (r *reader) end() error {
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%d bytes after the section's entries", len(r.b))
	}
	return nil
}

// blockType skips a block type: 0x40, a value type, or an s33 type index,
// which it returns (-1 for the others).
func (r *reader) blockType() int64 {
	if len(r.b) > 0 {
		switch r.b[0] {
		case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
			r.byte()
			return -1
		}
	}
	before := len(r.b)
	v := r.uleb(35)
	if r.err != nil {
		return -1
	}
	// s33: the sign is the top bit of the last byte's 7; negative values
	// are value types, not indices.
	if bits := uint(7 * (before - len(r.b))); bits <= 35 && v&(1<<(bits-1)) != 0 {
		return -1
	}
	return int64(v)
}

// memarg skips a memory argument: alignment (bit 6 says a memory index
// follows) and offset.
func (r *reader) memarg() {
	align := r.u32()
	if align&0x40 != 0 {
		r.u32()
	}
	r.uleb(64)
}

// prefixFC skips the immediates of a 0xFC instruction: saturating
// truncation, bulk memory and tables.
func (r *reader) prefixFC() (uint32, error) {
	switch sub := r.u32(); {
	case sub <= 7:
		return sub, nil
	case sub == 8, sub == 10, sub == 12, sub == 14: // memory.init, memory.copy, table.init, table.copy
		r.u32()
		r.u32()
		return sub, nil
	case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17:
		r.u32()
		return sub, nil
	default:
		return 0, fmt.Errorf("%w (opcode 0xfc %d)", errBeyond2, sub)
	}
}

// prefixFD skips the immediates of a 0xFD (SIMD) instruction.
func (r *reader) prefixFD() error {
	switch sub := r.u32(); {
	case sub <= 11 || sub == 92 || sub == 93: // loads, stores
		r.memarg()
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		r.bytes(16)
	case sub >= 21 && sub <= 34: // extract and replace lane
		r.byte()
	case sub >= 84 && sub <= 91: // load and store lane
		r.memarg()
		r.byte()
	case sub <= 255:
	default:
		return fmt.Errorf("%w (opcode 0xfd %d)", errBeyond2, sub)
	}
	return nil
}

// appendSLEB appends v as a signed LEB128 number, the encoding of the
// immediates of i32.const and i64.const. (binary.AppendVarint is not it:
// it zigzags, so 65536 read back as 131072.)
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// bulkStepTime is what a countdown step of a bulk instruction is assumed
// to take at least: a step is 4 bytes of memory.fill or memory.copy, half
// a table entry, or 1/16384 of a page of memory.grow, and 4 ns a step is
// 1 GB/s, slower than any of them runs (measured: 2-10 GB/s for fills
// and copies). A run stops before a bulk instruction that would not end
// before its deadline at that speed.
const bulkStepTime = 4 * time.Nanosecond

// errBulkLate is why a run was stopped before a bulk instruction that
// would have run past its deadline; the run ends with ReasonTimeout.
var errBulkLate = errors.New("wasm: a bulk instruction would run past the time limit")

// pastDeadline reports whether a bulk instruction of this many countdown
// steps, started with left until the deadline, would end after it at the
// speed of bulkStepTime.
func pastDeadline(left time.Duration, steps uint64) bool {
	if left <= 0 {
		return true
	}
	return steps >= uint64(left/bulkStepTime)
}
