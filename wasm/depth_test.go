package wasm

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/wasmtest"
)

// recursion returns a module whose _start sets global 0 to depth and
// calls function 1, which counts global 0 down and calls itself until it
// reaches 0. Across each call it holds locals locals, and values more
// values on the operand stack, which wazero keeps in the frame.
func recursion(depth int32, locals uint32, values int) []byte {
	start := append(wasmtest.I32(nil, depth), 0x24, 0, 0x10, 1) // global.set 0; call 1
	f := []byte{0x23, 0}                                        // global.get 0
	f = wasmtest.I32(f, 1)
	f = append(f, 0x6b, 0x24, 0, 0x23, 0, 0x04, 0x40) // i32.sub; global.set 0; global.get 0; if
	for i := range locals {
		f = append(f, 0x23, 0) // global.get 0
		f = wasmtest.I32(f, int32(i))
		f = append(f, 0x6a, 0x21) // i32.add; local.set i
		f = binary.AppendUvarint(f, uint64(i))
	}
	for i := range values {
		f = append(f, 0x23, 0)
		f = wasmtest.I32(f, int32(i))
		f = append(f, 0x6a) // i32.add: a value of its own
	}
	f = append(f, 0x10, 1) // call 1
	for range max(values-1, 0) {
		f = append(f, 0x6a)
	}
	if values > 0 {
		f = append(f, 0x24, 1) // global.set 1
	}
	for i := range locals {
		f = append(f, 0x20) // local.get i; global.set 1
		f = binary.AppendUvarint(f, uint64(i))
		f = append(f, 0x24, 1)
	}
	f = append(f, 0x0b) // end (of the if)
	return wasmtest.Module{MemPages: 1, Globals: 2, Locals: locals, Start: start, Funcs: [][]byte{f}}.Bytes()
}

// TestRunCallDepth: recursion a million calls deep, with small frames,
// with many locals and with many values held across the call, fails with
// the call depth limit, and the run's call stack stays a few MB (without
// the limit wazero grew it to 85-177 MB before its own stack overflow);
// the engine runs on. A recursion within the limit succeeds.
func TestRunCallDepth(t *testing.T) {
	e := newEngine(t, Config{})
	for _, tc := range []struct {
		name           string
		locals, values int
	}{
		{"small frames", 0, 0},
		{"1000 locals", 1000, 0},
		{"1000 values", 0, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := e.Compile(t.Context(), recursion(1_000_000, uint32(tc.locals), tc.values))
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = m.Run(t.Context(), "deep", nil, nil, Limits{Memory: 64 << 10})
			runtime.ReadMemStats(&after)
			re := runError(t, err)
			if re.Reason != ReasonTrap || !strings.HasPrefix(re.Error(), "deep: trap: call depth limit of 65536 exceeded") {
				t.Fatalf("got %v, want the call depth limit", err)
			}
			// Allocated by the whole process during the run: the stack's
			// doublings, and whatever else runs meanwhile.
			if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
				t.Errorf("the run allocated %d MB; want the call stack bounded to a few MB", got>>20)
			}
			checkCat(t, e)
		})
	}
	t.Run("within the limit", func(t *testing.T) {
		m, err := e.Compile(t.Context(), recursion(60_000, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Run(t.Context(), "deep", nil, nil, Limits{}); err != nil {
			t.Fatalf("60,000 calls deep: %v", err)
		}
	})
}

// TestCallDepthEveryExit: a function that leaves by each way out (its
// end, return, br, br_if and br_table to its own label) gives its frame
// back: called 200,000 times in a row, one deep each, it never reaches
// the limit (a way out that missed the decrement would, after 65,536).
func TestCallDepthEveryExit(t *testing.T) {
	e := newEngine(t, Config{})
	// local 0 += 1; call 1; loop while local 0 < 200,000
	start := []byte{0x03, 0x40, 0x10, 1, 0x20, 0}
	start = wasmtest.I32(start, 1)
	start = append(start, 0x6a, 0x22, 0)
	start = wasmtest.I32(start, 200_000)
	start = append(start, 0x49, 0x0d, 0, 0x0b) // i32.lt_u; br_if 0; end
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"end", []byte{0x01}},
		{"return", []byte{0x0f}},
		{"br", []byte{0x02, 0x40, 0x0c, 1, 0x0b}},
		{"br_if", append(wasmtest.I32([]byte{0x02, 0x40}, 1), 0x0d, 1, 0x0b)},
		{"br_table", append(wasmtest.I32([]byte{0x02, 0x40}, 0), 0x0e, 1, 1, 1, 0x0b)},
		{"return in a loop", []byte{0x03, 0x40, 0x0f, 0x0b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := wasmtest.Module{MemPages: 1, Locals: 1, Start: start, Funcs: [][]byte{tc.body}}.Bytes()
			m, err := e.Compile(t.Context(), code)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Run(t.Context(), "exits", nil, nil, Limits{}); err != nil {
				t.Fatalf("200,000 calls by %s: %v", tc.name, err)
			}
		})
	}
}

// TestRunBulkPastDeadline: a single bulk instruction that could not end
// before the run's deadline does not start: the run times out at once
// instead of overshooting by the instruction's length.
func TestRunBulkPastDeadline(t *testing.T) {
	e := newEngine(t, Config{})
	fill := func(pages uint32, n int32) []byte {
		start := wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), 1), n)
		return wasmtest.Module{MemPages: pages, Start: append(start, wasmtest.MemoryFill...)}.Bytes()
	}
	t.Run("4 GiB", func(t *testing.T) {
		// Out of bounds of its one page, so it would trap at once if it
		// started; at 1 GB/s it would take 4.3 s, past the 2 s limit.
		m, err := e.Compile(t.Context(), fill(1, -1))
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Run(t.Context(), "fill", nil, nil, Limits{Timeout: 2 * time.Second})
		want := "fill: timed out after 2s (stopped before a bulk instruction that would run past it)"
		if re := runError(t, err); re.Reason != ReasonTimeout || re.Error() != want {
			t.Fatalf("got %v, want %q", err, want)
		}
		checkCat(t, e)
	})
	t.Run("64 MiB", func(t *testing.T) {
		// 67 ms at 1 GB/s against a 10 ms limit: it would succeed if it
		// started.
		m, err := e.Compile(t.Context(), fill(1024, 64<<20))
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Run(t.Context(), "fill", nil, nil, Limits{Timeout: 10 * time.Millisecond, Memory: 64 << 20})
		if re := runError(t, err); re.Reason != ReasonTimeout {
			t.Fatalf("got %v, want a timeout", err)
		}
	})
}

// TestPastDeadline checks the estimate of a bulk instruction's end.
func TestPastDeadline(t *testing.T) {
	for _, tc := range []struct {
		left  time.Duration
		steps uint64
		want  bool
	}{
		{time.Second, 1 << 20, false},      // 4 MiB: 4 ms
		{time.Second, 1 << 28, true},       // 1 GiB: 1.07 s
		{2 * time.Second, 1 << 28, false},  // 1 GiB: 1.07 s
		{0, 1, true},                       // no time left
		{-time.Second, 1, true},            // past the deadline
		{time.Minute, 1 << 46, true},       // the largest charge
		{time.Millisecond, 249_999, false}, // just under 1 ms
		{time.Millisecond, 250_000, true},  // 1 ms
	} {
		if got := pastDeadline(tc.left, tc.steps); got != tc.want {
			t.Errorf("pastDeadline(%v, %d) = %v, want %v", tc.left, tc.steps, got, tc.want)
		}
	}
}

// TestCallDepthMultiValue: functions with several results, with and
// without parameters, leaving by return, br and br_if with their values,
// run as before once rewritten (the block that wraps each body takes the
// function's results; with parameters it needs a type of its own).
func TestCallDepthMultiValue(t *testing.T) {
	types := wasmtest.Vec(4, []byte{
		0x60, 0, 0, // 0: () -> ()
		0x60, 1, 0x7f, 2, 0x7f, 0x7f, // 1: (i32) -> (i32, i32)
		0x60, 0, 2, 0x7f, 0x7f, // 2: () -> (i32, i32)
		0x60, 1, 0x7f, 1, 0x7f, // 3: (i32) -> i32
	})
	bodies := [][]byte{
		// _start: 5 -> f1, f2, 7 -> f3; trap unless f1 gave (5, 5), f2
		// (1, 2) and f3 7.
		{0x41, 5, 0x10, 1, 0x6a, 0x41, 10, 0x47, 0x04, 0x40, 0x00, 0x0b, // i32.add; i32.const 10; i32.ne; if unreachable end
			0x10, 2, 0x6b, 0x41, 0x7f, 0x47, 0x04, 0x40, 0x00, 0x0b, // i32.sub (1-2); i32.const -1; i32.ne; if unreachable end
			0x41, 7, 0x10, 3, 0x41, 7, 0x47, 0x04, 0x40, 0x00, 0x0b},
		{0x20, 0, 0x20, 0, 0x0f},                   // f1: return (x, x)
		{0x41, 1, 0x41, 2, 0x0c, 0},                // f2: br 0 with (1, 2)
		{0x20, 0, 0x20, 0, 0x0d, 0, 0x1a, 0x41, 0}, // f3: br_if 0 with x (x != 0), else 0
	}
	var code []byte
	for _, b := range bodies {
		f := append([]byte{0}, b...)
		f = append(f, 0x0b)
		code = binary.AppendUvarint(code, uint64(len(f)))
		code = append(code, f...)
	}
	mod := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	mod = wasmtest.Section(mod, 1, types)
	mod = wasmtest.Section(mod, 3, wasmtest.Vec(4, []byte{0, 1, 2, 3}))
	mod = wasmtest.Section(mod, 5, wasmtest.Vec(1, []byte{0, 1}))
	exports := append(wasmtest.Name(nil, "_start"), 0, 0)
	exports = append(wasmtest.Name(exports, "memory"), 2, 0)
	mod = wasmtest.Section(mod, 7, wasmtest.Vec(2, exports))
	mod = wasmtest.Section(mod, 10, wasmtest.Vec(4, code))
	e := newEngine(t, Config{})
	m, err := e.Compile(t.Context(), mod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Run(t.Context(), "multi", nil, nil, Limits{}); err != nil {
		t.Fatal(err)
	}
}
