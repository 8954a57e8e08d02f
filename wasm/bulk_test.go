package wasm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/braid-hpc/braid/internal/wasmtest"
)

// bulkOp is a memory.fill (s is the value) or memory.copy (s is the
// source) for bulkModule.
type bulkOp struct {
	copy    bool
	d, s, n int32
}

// bulkModule returns a module of pages pages that runs ops, then writes
// its memory but the last 16 bytes (the iovec) to stdout.
func bulkModule(pages uint32, ops []bulkOp) []byte {
	size := int32(pages) << 16
	var start []byte
	for _, o := range ops {
		start = wasmtest.I32(wasmtest.I32(wasmtest.I32(start, o.d), o.s), o.n)
		if o.copy {
			start = append(start, wasmtest.MemoryCopy...)
		} else {
			start = append(start, wasmtest.MemoryFill...)
		}
	}
	start = wasmtest.I32(wasmtest.I32(start, size-16), 0)
	start = append(start, 0x36, 2, 0) // i32.store: iov.buf = 0
	start = wasmtest.I32(wasmtest.I32(start, size-12), size-16)
	start = append(start, 0x36, 2, 0) // iov.len
	start = wasmtest.I32(wasmtest.I32(wasmtest.I32(wasmtest.I32(start, 1), size-16), 1), size-8)
	start = append(start, 0x10, 0, 0x1a) // call fd_write; drop
	return wasmtest.Module{Imports: []wasmtest.Import{{Name: "fd_write", Params: 4}}, MemPages: pages, Start: start}.Bytes()
}

// TestBulkSlices: memory.fill and memory.copy longer than bulkSlice, which
// the rewrite sends to bulkFill and bulkCopy to do a slice at a time
// (bulk.go), leave the memory as the native instructions would: fills,
// and copies overlapping both ways, of odd lengths at odd offsets over a
// pattern of a value a page, checked
// byte for byte against Go's copy (memmove); and one out of bounds traps
// as a short one does.
func TestBulkSlices(t *testing.T) {
	const pages = 160 // 10 MiB
	ops := []bulkOp{
		{false, 16, 0x5a, 3<<20 + 5},
		{false, 3<<20 + 21, 0x33, 1<<20 + 1},
		{true, 1<<20 + 7, 100, 2<<20 + 3},           // overlapping, destination above: backwards
		{true, 50, 60 + 1<<20, 3 << 19},             // overlapping, destination below: forwards
		{false, 5, 0x11, 3},                         // short: native
		{true, 0, 5, 8},                             // short
		{false, 8 << 20, 0x77, bulkSlice},           // one slice exactly: native
		{true, 9<<20 - 5, 8<<20 - 1, bulkSlice + 1}, // overlapping by a little
	}
	// A pattern for the copies to move: short fills, a value a 64 KiB
	// page.
	var pattern []bulkOp
	for i := range int32(pages) {
		pattern = append(pattern, bulkOp{false, i<<16 + i, i*7 + 1, 1<<16 - 2*i})
	}
	ops = slices.Concat(ops[:2], pattern, ops[2:]) // after the long fills
	want := make([]byte, pages<<16)
	for _, o := range ops {
		if o.copy {
			copy(want[o.d:o.d+o.n], want[o.s:o.s+o.n])
		} else {
			for i := range o.n {
				want[o.d+i] = byte(o.s)
			}
		}
	}
	want = want[:len(want)-16]
	e := newEngine(t, Config{})
	m, err := e.Compile(t.Context(), bulkModule(pages, ops))
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Run(t.Context(), "bulk", nil, nil, Limits{Memory: 32 << 20, Output: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("memory after the bulk instructions: %d bytes, want %d; first difference at %d", len(got), len(want), i)
	}

	// Out of bounds by a little, long and short: the same trap.
	var details []string
	for _, o := range []bulkOp{
		{false, pages<<16 - 100, 1, 2 << 20}, {false, pages<<16 - 100, 1, 200},
		{true, 0, pages<<16 - 100, 2 << 20}, {true, 0, pages<<16 - 100, 200},
	} {
		m, err := e.Compile(t.Context(), bulkModule(pages, []bulkOp{o}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Run(t.Context(), "oob", nil, nil, Limits{Memory: 16 << 20})
		var re *RunError
		if !errors.As(err, &re) || re.Reason != ReasonTrap {
			t.Fatalf("%+v out of bounds: %v, want a trap", o, err)
		}
		details = append(details, re.Detail)
	}
	if details[0] != details[1] || details[2] != details[3] {
		t.Errorf("out of bounds, long and short: %q, want the same trap", details)
	}
}

// TestBulkSlicesTick: a memory.fill of 8 MiB and a byte, and a copy as
// long, go to Go (braid.tick, where the goroutine can be preempted) once a
// slice, 9 times each besides their charge, where the native instruction
// would not go at all; a fill of one slice goes once, for its charge.
func TestBulkSlicesTick(t *testing.T) {
	for _, tc := range []struct {
		op   bulkOp
		want int
	}{
		{bulkOp{false, 0, 1, 8<<20 + 1}, 1 + 9},
		{bulkOp{true, 1, 0, 8<<20 + 1}, 1 + 9},
		{bulkOp{false, 0, 1, bulkSlice}, 1},
	} {
		code, _, err := instrument(bulkModule(160, []bulkOp{tc.op}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		rt := wazero.NewRuntime(ctx)
		defer rt.Close(ctx)
		wasi_snapshot_preview1.MustInstantiate(ctx, rt)
		ticks := 0
		if _, err := rt.NewHostModuleBuilder(tickModule).NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) { ticks++ }), []api.ValueType{api.ValueTypeI64}, nil).
			Export(tickName).Instantiate(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := rt.InstantiateWithConfig(ctx, code, wazero.NewModuleConfig().WithStdout(io.Discard)); err != nil {
			t.Fatal(err)
		}
		if ticks != tc.want {
			t.Errorf("%+v called braid.tick %d times, want %d", tc.op, ticks, tc.want)
		}
	}
}
