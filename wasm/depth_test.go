package wasm

import (
	"encoding/binary"
	"errors"
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
// the call stack limit, and the run's call stack stays well under
// StackReserve (without the limit wazero grew it to 85-177 MB before its
// own stack overflow); the engine runs on. A recursion within the limit
// succeeds.
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
			if re.Reason != ReasonTrap || !strings.HasPrefix(re.Error(), "deep: trap: call stack limit of 32 MiB exceeded") {
				t.Fatalf("got %v, want the call stack limit", err)
			}
			// Allocated by the whole process during the run: the stack's
			// doublings, and whatever else runs meanwhile.
			if got := after.TotalAlloc - before.TotalAlloc; got > StackReserve/2 {
				t.Errorf("the run allocated %d MB; want the call stack bounded under %d MB", got>>20, StackReserve>>21)
			}
			checkCat(t, e)
		})
	}
	t.Run("within the limit", func(t *testing.T) {
		// The smallest frames run 76,000 deep on amd64, 59,000 on arm64
		// (23 saved registers a frame's bound, against 13).
		m, err := e.Compile(t.Context(), recursion(50_000, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Run(t.Context(), "deep", nil, nil, Limits{}); err != nil {
			t.Fatalf("50,000 calls deep: %v", err)
		}
	})
}

// phis returns a module whose function 1 recurses depth deep and, in each
// frame, nests loops loops and sets each of locals locals in the
// innermost: wazero makes a phi for every local at every loop's head,
// each spilled to a slot of its own (80 KB a frame for 200 locals in 100
// loops, from 4 KB of code).
func phis(depth int32, locals uint32, loops int) []byte {
	start := append(wasmtest.I32(nil, depth), 0x24, 0, 0x10, 1)
	f := []byte{0x23, 0}
	f = wasmtest.I32(f, 1)
	f = append(f, 0x6b, 0x24, 0, 0x23, 0, 0x04, 0x40)
	f = append(f, wasmtest.PhiNest(locals, loops)...)
	f = append(f, 0x10, 1, 0x0b)
	return wasmtest.Module{MemPages: 1, Globals: 2, Locals: locals, Start: start, Funcs: [][]byte{f}}.Bytes()
}

// TestRunSpilledFrames: recursion whose frames are large though the code
// holds few values at once (many values spilled, one region at a time;
// phis in a loop nest) stops at the call stack limit, with the stack
// under StackReserve (before the frame bound, the spilled recursion took
// 136 MB and the phis 176 MB, to wazero's own stack overflow, with the
// weighted depth limit unmoved); the engine runs on.
func TestRunSpilledFrames(t *testing.T) {
	e := newEngine(t, Config{})
	for _, tc := range []struct {
		name string
		code []byte
	}{
		{"50 regions of 40 values", wasmtest.Spilled(1_000_000, 50, 40)},
		{"200 regions of 40 values", wasmtest.Spilled(1_000_000, 200, 40)},
		{"200 locals in 100 loops", phis(1_000_000, 200, 100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := e.Compile(t.Context(), tc.code)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = m.Run(t.Context(), "spilled", nil, nil, Limits{Memory: 64 << 10})
			runtime.ReadMemStats(&after)
			re := runError(t, err)
			if re.Reason != ReasonTrap || !strings.HasPrefix(re.Error(), "spilled: trap: call stack limit of 32 MiB exceeded") {
				t.Fatalf("got %v, want the call stack limit", err)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > StackReserve {
				t.Errorf("the run allocated %d MB; want at most StackReserve, %d MB", got>>20, StackReserve>>20)
			}
			checkCat(t, e)
		})
	}
}

// TestFrameLimit: a function whose frame may pass MaxFrame (phis of 1,000
// locals in 500 loops: 2 MB a frame, and wazero took 21 s and 745 MB to
// compile it) is refused before wazero compiles it, by Validate too.
func TestFrameLimit(t *testing.T) {
	code := phis(10, 1000, 500)
	want := "function 1: its frame may take"
	if err := Validate(t.Context(), code); !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate: got %v, want ErrBadModule with %q", err, want)
	}
	e := newEngine(t, Config{})
	if _, err := e.Compile(t.Context(), code); !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Compile: got %v, want ErrBadModule with %q", err, want)
	}
	// Half as many locals is within the limit.
	if _, err := e.Compile(t.Context(), phis(10, 500, 250)); err != nil {
		t.Fatalf("500 locals in 250 loops: %v", err)
	}
}

// recursiveC are C programs that recurse deep, as real ones do: the
// depth they reach with the environment's N is the last number printed.
const (
	quicksortC = `#include <stdio.h>
#include <stdlib.h>
static int depth, maxDepth;
static void qs(int *a, int lo, int hi) {
	if (lo >= hi) return;
	if (++depth > maxDepth) maxDepth = depth;
	int p = a[hi], i = lo;
	for (int j = lo; j < hi; j++) if (a[j] < p) { int t = a[i]; a[i] = a[j]; a[j] = t; i++; }
	int t = a[i]; a[i] = a[hi]; a[hi] = t;
	qs(a, lo, i - 1); qs(a, i + 1, hi);
	depth--;
}
int main(void) {
	int n = atoi(getenv("N"));
	int *a = malloc(n * sizeof(int));
	for (int i = 0; i < n; i++) a[i] = i; /* sorted: the worst case, n deep */
	qs(a, 0, n - 1);
	for (int i = 1; i < n; i++) if (a[i] < a[i-1]) return 1;
	printf("%d\n", maxDepth);
	return 0;
}
`
	ackermannC = `#include <stdio.h>
#include <stdlib.h>
static int depth, maxDepth;
static int ack(int m, int n) {
	int r;
	if (++depth > maxDepth) maxDepth = depth;
	if (m == 0) r = n + 1;
	else if (n == 0) r = ack(m - 1, 1);
	else r = ack(m - 1, ack(m, n - 1));
	depth--;
	return r;
}
int main(void) {
	int n = atoi(getenv("N"));
	printf("%d %d\n", ack(2, n), maxDepth);
	return 0;
}
`
)

// TestRunDeepRecursion: real programs recursing thousands of frames deep
// run within the call stack limit (the deepest they went, found by
// bisection: 23,168 for quicksort, 47,100 for ackermann; before the frame
// bound, 21,760 and 32,500), and fail with it when far deeper.
func TestRunDeepRecursion(t *testing.T) {
	e := newEngine(t, Config{})
	for _, tc := range []struct {
		name, src string
		n, deep   string
		wantOut   string
	}{
		{"quicksort", quicksortC, "10000", "", "9999\n"}, // deeper takes n² time
		{"ackermann", ackermannC, "8000", "1000000", "16003 16004\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := e.Compile(t.Context(), wasmtest.C(t, tc.src))
			if err != nil {
				t.Fatal(err)
			}
			out, err := m.Run(t.Context(), tc.name, nil, map[string]string{"N": tc.n}, Limits{})
			if err != nil || string(out) != tc.wantOut {
				t.Fatalf("N=%s: got %q, %v; want %q", tc.n, out, err, tc.wantOut)
			}
			if tc.deep == "" {
				return
			}
			_, err = m.Run(t.Context(), tc.name, nil, map[string]string{"N": tc.deep}, Limits{})
			if re := runError(t, err); re.Reason != ReasonTrap || !strings.Contains(re.Error(), "call stack limit") {
				t.Fatalf("N=%s: got %v, want the call stack limit", tc.deep, err)
			}
		})
	}
}

// TestCallDepthEveryExit: a function that leaves by each way out (its
// end, return, br, br_if and br_table to its own label) gives its frame
// back: called 200,000 times in a row, one deep each, it never reaches
// the limit (a way out that missed the decrement would, after some
// 80,000: MaxStack over the frame bound of some 400 bytes).
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
