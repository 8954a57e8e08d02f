package wasmtest

import "encoding/binary"

// Module describes a small WASI-shaped command module assembled in Go,
// for tests that need a module clang would never emit (hostile ones): one
// function type func() -> (), a "_start" built from Start, more functions
// of the same type, funcref tables, i32 globals and one memory, exported as
// "memory". Bytes assembles it; it imports only its Imports.
type Module struct {
	// Start is the body of _start (function 0 without Imports): its instructions, without
	// the final end.
	Start []byte
	// Locals is how many i32 locals every function has.
	Locals uint32
	// Funcs are the bodies of functions 1, 2, ..., like Start.
	Funcs [][]byte
	// MemPages is the memory's minimum size in 64 KiB pages; MemMax, if
	// not 0, its maximum.
	MemPages, MemMax uint32
	// Tables are funcref tables, by their minimum number of entries.
	Tables []uint32
	// Globals is how many mutable i32 globals (starting at 0) it has.
	Globals uint32
	// Data, if not nil, is a passive data segment (for memory.init).
	Data []byte
	// Imports are functions of wasi_snapshot_preview1, each by its name
	// and its number of i32 parameters, returning an i32 (an errno), as
	// random_get, fd_write and poll_oneoff do. They come first in the
	// function index space: with k imports, import i is function i,
	// _start is function k and Funcs[j] is function k+1+j.
	Imports []Import
}

// Import is a function a Module imports from wasi_snapshot_preview1.
type Import struct {
	Name   string
	Params int // i32 parameters; the function returns an i32
}

// Bytes returns the module's binary.
func (m Module) Bytes() []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	types := []byte{0x60, 0, 0}
	for _, im := range m.Imports {
		types = append(types, 0x60)
		types = binary.AppendUvarint(types, uint64(im.Params))
		for range im.Params {
			types = append(types, 0x7f)
		}
		types = append(types, 1, 0x7f)
	}
	out = Section(out, 1, Vec(uint32(1+len(m.Imports)), types))
	if len(m.Imports) > 0 {
		var imp []byte
		for i, im := range m.Imports {
			imp = Name(imp, "wasi_snapshot_preview1")
			imp = Name(imp, im.Name)
			imp = append(imp, 0)
			imp = binary.AppendUvarint(imp, uint64(1+i))
		}
		out = Section(out, 2, Vec(uint32(len(m.Imports)), imp))
	}
	nf := uint32(1 + len(m.Funcs))
	var funcs []byte
	for range nf {
		funcs = append(funcs, 0)
	}
	out = Section(out, 3, Vec(nf, funcs))
	if len(m.Tables) > 0 {
		var t []byte
		for _, min := range m.Tables {
			t = append(t, 0x70, 0)
			t = binary.AppendUvarint(t, uint64(min))
		}
		out = Section(out, 4, Vec(uint32(len(m.Tables)), t))
	}
	mem := []byte{0}
	if m.MemMax != 0 {
		mem[0] = 1
	}
	mem = binary.AppendUvarint(mem, uint64(m.MemPages))
	if m.MemMax != 0 {
		mem = binary.AppendUvarint(mem, uint64(m.MemMax))
	}
	out = Section(out, 5, Vec(1, mem))
	if m.Globals > 0 {
		var g []byte
		for range m.Globals {
			g = append(g, 0x7f, 1, 0x41, 0, 0x0b)
		}
		out = Section(out, 6, Vec(m.Globals, g))
	}
	exp := Name(nil, "_start")
	exp = append(exp, 0)
	exp = binary.AppendUvarint(exp, uint64(len(m.Imports)))
	exp = append(Name(exp, "memory"), 2, 0)
	out = Section(out, 7, Vec(2, exp))
	if m.Data != nil {
		out = Section(out, 12, binary.AppendUvarint(nil, 1))
	}
	var code []byte
	for _, body := range append([][]byte{m.Start}, m.Funcs...) {
		var f []byte
		if m.Locals > 0 {
			f = append(f, 1)
			f = binary.AppendUvarint(f, uint64(m.Locals))
			f = append(f, 0x7f)
		} else {
			f = append(f, 0)
		}
		f = append(f, body...)
		f = append(f, 0x0b)
		code = binary.AppendUvarint(code, uint64(len(f)))
		code = append(code, f...)
	}
	out = Section(out, 10, Vec(nf, code))
	if m.Data != nil {
		d := []byte{1} // passive
		d = binary.AppendUvarint(d, uint64(len(m.Data)))
		out = Section(out, 11, Vec(1, append(d, m.Data...)))
	}
	return out
}

// Section appends a section with this id and payload to b.
func Section(b []byte, id byte, payload []byte) []byte {
	b = append(b, id)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// Vec returns a vector of n entries already encoded in entries.
func Vec(n uint32, entries []byte) []byte {
	return append(binary.AppendUvarint(nil, uint64(n)), entries...)
}

// Name appends a name (length and bytes) to b.
func Name(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// I32 appends i32.const v to b.
func I32(b []byte, v int32) []byte {
	return SLEB(append(b, 0x41), int64(v))
}

// Instructions used by hostile modules; append immediates where they have
// them.
var (
	MemoryFill = []byte{0xfc, 11, 0}    // memory.fill (dst, value, n)
	MemoryCopy = []byte{0xfc, 10, 0, 0} // memory.copy (dst, src, n)
	MemoryGrow = []byte{0x40, 0}        // memory.grow (pages) -> old pages or -1
	Drop       = []byte{0x1a}
)

// TableGrow returns table.grow of table t: (ref.null func, n) -> old size
// or -1; the caller pushes n.
func TableGrow(t uint32) []byte {
	return binary.AppendUvarint([]byte{0xfc, 15}, uint64(t))
}

// RefNullFunc is ref.null func.
var RefNullFunc = []byte{0xd0, 0x70}

// Spilled returns a module whose function 1 recurses depth deep (global 0
// counts down) and, in each frame, runs regions regions that each hold
// values values across a call of function 2 and then add them up. wazero
// spills each held value to a slot of its own, so a frame takes some
// 3.6 bytes per held value (7 KB for 50 regions of 40), though the
// function never holds more than values at once.
func Spilled(depth int32, regions, values int) []byte {
	start := append(I32(nil, depth), 0x24, 0, 0x10, 1) // global.set 0; call 1
	f := []byte{0x23, 0}
	f = I32(f, 1)
	f = append(f, 0x6b, 0x24, 0, 0x23, 0, 0x04, 0x40) // i32.sub; global.set 0; global.get 0; if
	for r := range regions {
		for i := range values {
			f = append(f, 0x23, 0) // global.get 0
			f = I32(f, int32(i+r))
			f = append(f, 0x6a) // i32.add
		}
		f = append(f, 0x10, 2) // call 2
		for range values - 1 {
			f = append(f, 0x6a)
		}
		f = append(f, 0x24, 1) // global.set 1
	}
	f = append(f, 0x10, 1, 0x0b)                    // call 1; end (of the if)
	leaf := []byte{0x23, 1, 0x41, 1, 0x6a, 0x24, 1} // global 1 += 1
	return Module{MemPages: 1, Globals: 2, Start: start, Funcs: [][]byte{f, leaf}}.Bytes()
}

// Repeat returns n copies of b.
func Repeat(b []byte, n int) []byte {
	out := make([]byte, 0, len(b)*n)
	for range n {
		out = append(out, b...)
	}
	return out
}

// SLEB appends v as a signed LEB128 number, the encoding of the
// immediates of i32.const and i64.const.
func SLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// PhiNest returns the body of a function that nests loops loops and sets
// each of its first locals locals (i32) in the innermost: wazero makes a
// phi for every local at every loop's head, and its compile time grows
// faster than their number (a function of 500 locals in 250 loops, some
// 125,000 phis from 4 KB of code, takes it 2 s and 190 MB). Each loop
// runs while global 1, which it increments, is under 3; the function
// leaves each local in global 1 at the end. It needs 2 globals.
func PhiNest(locals uint32, loops int) []byte {
	var f []byte
	for range loops {
		f = append(f, 0x03, 0x40) // loop
	}
	for i := range locals {
		f = append(f, 0x20) // local.get i; global.get 1; i32.add; local.set i
		f = binary.AppendUvarint(f, uint64(i))
		f = append(f, 0x23, 1, 0x6a, 0x21)
		f = binary.AppendUvarint(f, uint64(i))
	}
	for range loops {
		// global 1 += 1; br_if 0 while global 1 < 3; end
		f = append(f, 0x23, 1, 0x41, 1, 0x6a, 0x24, 1, 0x23, 1)
		f = I32(f, 3)
		f = append(f, 0x48, 0x0d, 0, 0x0b)
	}
	for i := range locals {
		f = append(f, 0x20) // local.get i; global.set 1
		f = binary.AppendUvarint(f, uint64(i))
		f = append(f, 0x24, 1)
	}
	return f
}

// PhiNests returns a module of n functions each a PhiNest of 500 locals
// in 250 loops: 125,000 phis, a frame just under wasm.MaxFrame. 8 took
// wazero 11 s of CPU and 380 MB to compile, 33 (4,125,000 phis, just
// under wasm.MaxModulePhis) 40 s and 580 MB; package wasm refuses 34.
func PhiNests(n int) []byte {
	m := Module{MemPages: 1, Globals: 2, Locals: 500}
	for range n {
		m.Funcs = append(m.Funcs, PhiNest(500, 250))
	}
	return m.Bytes()
}

// MemoryHog returns a module whose _start grows its memory by chunk pages
// (64 KiB each) at a time and writes every new page (memory.fill), so
// that the host really commits it, until a memory.grow is refused; then
// it traps (unreachable). Under a memory limit it ends at the limit, with
// all of it touched: a unit pushing at --unit-mem.
func MemoryHog(chunk int32) []byte {
	f := []byte{0x03, 0x40} // loop
	f = I32(f, chunk)
	f = append(f, MemoryGrow...)
	f = append(f, 0x22, 0) // local.tee 0
	f = I32(f, -1)
	f = append(f, 0x46, 0x04, 0x40, 0x00, 0x0b) // i32.eq; if; unreachable; end
	f = append(f, 0x20, 0)                      // local.get 0 (the old size, in pages)
	f = I32(f, 16)
	f = append(f, 0x74) // i32.shl: its first byte
	f = I32(f, 0x5a)
	f = I32(f, chunk<<16)
	f = append(f, MemoryFill...)
	f = append(f, 0x0c, 0, 0x0b) // br 0; end (of the loop)
	return Module{MemPages: 1, Locals: 1, Start: f}.Bytes()
}
