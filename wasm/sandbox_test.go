package wasm

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/braid-hpc/braid/internal/wasmtest"
)

// Hostile modules, assembled here (internal/wasmtest.Module): clang would
// never emit them.

// fills returns a module without loops whose _start calls, n/10 times, a
// function that runs memory.fill (or memory.copy) over size bytes 10
// times: wazero lowers each to one native memset that nothing preempts,
// and a few hundred calls never reach the countdown's trip to Go.
func fills(pages uint32, n int, copy bool) []byte {
	size := int32(pages) * pageSize
	var one []byte
	if copy {
		one = wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), size/2), size/2)
		one = append(one, wasmtest.MemoryCopy...)
	} else {
		one = wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), 1), size)
		one = append(one, wasmtest.MemoryFill...)
	}
	return wasmtest.Module{
		MemPages: pages,
		Funcs:    [][]byte{wasmtest.Repeat(one, 10)},
		Start:    wasmtest.Repeat([]byte{0x10, 1}, n/10), // call 1
	}.Bytes()
}

// TestRunBulkTimeout: a module that only runs bulk memory instructions,
// 2,000 fills or copies of 64 MiB (seconds of work, with no loop header or
// call for the countdown), still stops at its time limit.
func TestRunBulkTimeout(t *testing.T) {
	e := newEngine(t, Config{})
	for _, copy := range []bool{false, true} {
		name := map[bool]string{false: "memory.fill", true: "memory.copy"}[copy]
		t.Run(name, func(t *testing.T) {
			m, err := e.Compile(t.Context(), fills(1024, 2000, copy))
			if err != nil {
				t.Fatal(err)
			}
			within(t, 5*time.Second, func(ctx context.Context) {
				_, err := m.Run(ctx, "fills", nil, nil, Limits{Timeout: 100 * time.Millisecond, Memory: 64 << 20})
				if re := runError(t, err); re.Reason != ReasonTimeout {
					t.Fatalf("got %v, want a timeout", err)
				}
			})
		})
	}
}

// TestRunBulkDoesNotStall runs bulk-only modules on every P while the
// garbage collector runs: each stop-the-world must wait for at most one
// fill, not for a whole run.
func TestRunBulkDoesNotStall(t *testing.T) {
	e := newEngine(t, Config{})
	m, err := e.Compile(t.Context(), fills(256, 2000, false))
	if err != nil {
		t.Fatal(err)
	}
	var ticks atomic.Int64
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				ticks.Add(1)
				runtime.GC()
			}
		}
	})
	within(t, 10*time.Second, func(ctx context.Context) {
		var wg sync.WaitGroup
		for range runtime.GOMAXPROCS(0) + 1 {
			wg.Go(func() {
				_, err := m.Run(ctx, "fills", nil, nil, Limits{Timeout: 300 * time.Millisecond, Memory: 16 << 20})
				if re := runError(t, err); re.Reason != ReasonTimeout {
					t.Errorf("got %v, want a timeout", err)
				}
			})
		}
		wg.Wait()
	})
	close(stop)
	bg.Wait()
	if ticks.Load() == 0 {
		t.Error("the garbage collector never ran while the fills ran")
	}
}

// tableGrow returns a module whose _start grows table 0 (which starts
// with min entries and has no maximum) by n entries and traps unless the
// grow is refused.
func tableGrow(min uint32, n int32) []byte {
	start := append([]byte(nil), wasmtest.RefNullFunc...)
	start = wasmtest.I32(start, n)
	start = append(start, wasmtest.TableGrow(0)...)
	start = wasmtest.I32(start, -1)
	start = append(start, 0x47, 0x04, 0x40, 0x00, 0x0b) // i32.ne; if; unreachable; end
	return wasmtest.Module{MemPages: 1, Tables: []uint32{min}, Start: start}.Bytes()
}

// TestRunTablesCountTowardMemory: tables are memory of the host too. A
// table.grow by 2^25 entries (256 MiB on the Go heap, twice that while
// wazero copies it) is refused, a module whose tables could take more than
// the limit does not start, and one that starts with a table beyond
// MaxTableEntries is not a module we run.
func TestRunTablesCountTowardMemory(t *testing.T) {
	e := newEngine(t, Config{})
	m, err := e.Compile(t.Context(), tableGrow(0, 1<<25))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Run(t.Context(), "grow", nil, nil, Limits{Memory: 64 << 20}); err != nil {
		t.Fatalf("table.grow by 2^25 entries was not refused: %v", err)
	}

	// 64 KiB of memory, and a table that may grow to MaxTableEntries.
	_, err = m.Run(t.Context(), "grow", nil, nil, Limits{Memory: 64 << 10})
	re := runError(t, err)
	if re.Reason != ReasonMemory || !strings.Contains(re.Error(), "tables of up to 16 MiB") {
		t.Fatalf("got %v, want a memory error naming the tables' 16 MiB", err)
	}

	_, err = e.Compile(t.Context(), wasmtest.Module{MemPages: 1, Tables: []uint32{1 << 27, 1 << 27}}.Bytes())
	if !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), "table 0 starts with 134217728 entries") {
		t.Fatalf("Compile of a 2^27-entry table: %v, want ErrBadModule naming it", err)
	}
}

// TestLinearMemoryGrowsInPlace: growing the memory never copies it, so the
// host never holds an old and a new buffer at once (wazero's default, and
// a doubling allocator, do).
func TestLinearMemoryGrowsInPlace(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linear memory is a reserved region only on Linux; elsewhere a grow copies")
	}
	var m linearMemory
	m.reset(1 << 30)
	lm := m.Allocate(pageSize, MaxMemory)
	first := lm.Reallocate(pageSize)
	first[0] = 7
	for _, size := range []uint64{2 * pageSize, 100 * pageSize, 256 << 20, 1 << 30} {
		b := lm.Reallocate(size)
		if uint64(len(b)) != size {
			t.Fatalf("grow to %d: len %d", size, len(b))
		}
		if unsafe.SliceData(b) != unsafe.SliceData(first) || b[0] != 7 {
			t.Fatalf("grow to %d bytes moved the memory", size)
		}
	}
	if lm.Reallocate(1<<30+pageSize) != nil || !m.refused {
		t.Fatal("grew past the limit")
	}
	m.recycle()
	m.reset(1 << 20)
	b := m.Allocate(pageSize, MaxMemory).Reallocate(pageSize)
	if b[0] != 0 {
		t.Fatal("recycled memory is not zero")
	}
}
