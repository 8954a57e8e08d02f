package wasm

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/wasmtest"
)

// Hostile modules that spend their time in host functions, where the
// countdown never looks (hostcall.go): assembled here, with WASI imports.

// hostGrace is how long after its deadline a run stopped in a host call
// may take to return in these tests: the stop itself comes within
// hostChunk bytes of work (microseconds); the rest is the timer, the
// race detector and a busy machine.
const hostGrace = 2 * time.Second

// calls returns n copies of body followed by a drop of the errno.
func calls(body []byte, n int) []byte {
	return wasmtest.Repeat(append(body, wasmtest.Drop...), n)
}

// randModule returns a module whose _start calls random_get n times on
// pages pages of memory, without a loop.
func randModule(pages uint32, n int) []byte {
	call := wasmtest.I32(wasmtest.I32(nil, 0), int32(pages)*pageSize)
	call = append(call, 0x10, 0) // call random_get
	return wasmtest.Module{
		Imports:  []wasmtest.Import{{Name: "random_get", Params: 2}},
		MemPages: pages,
		Start:    calls(call, n),
	}.Bytes()
}

// iovModule returns a module whose _start calls fd_write(fd) n times, each
// with iovs iovecs of size bytes at address 0 (they overlap each other
// and the iovec array itself).
func iovModule(fd int32, pages uint32, size int32, iovs, n int) []byte {
	vec := make([]byte, 8*iovs)
	for i := range iovs {
		binary.LittleEndian.PutUint32(vec[8*i+4:], uint32(size))
	}
	// memory.init 0 (dst 0, src 0, len)
	start := wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), 0), int32(len(vec)))
	start = append(start, 0xfc, 8, 0, 0)
	call := wasmtest.I32(nil, fd)
	call = wasmtest.I32(call, 0)
	call = wasmtest.I32(call, int32(iovs))
	call = wasmtest.I32(call, int32(len(vec))) // nwritten
	call = append(call, 0x10, 0)               // call fd_write
	return wasmtest.Module{
		Imports:  []wasmtest.Import{{Name: "fd_write", Params: 4}},
		MemPages: pages,
		Data:     vec,
		Start:    append(start, calls(call, n)...),
	}.Bytes()
}

// pollModule returns a module whose _start calls poll_oneoff n times with
// one relative clock subscription of d.
func pollModule(d time.Duration, n int) []byte {
	sub := make([]byte, 48)
	binary.LittleEndian.PutUint64(sub[24:], uint64(d)) // timeout; tag 0 = clock, flags 0 = relative
	start := wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), 0), int32(len(sub)))
	start = append(start, 0xfc, 8, 0, 0) // memory.init
	call := wasmtest.I32(nil, 0)         // in
	call = wasmtest.I32(call, 64)        // out
	call = wasmtest.I32(call, 1)         // nsubscriptions
	call = wasmtest.I32(call, 128)       // nevents
	call = append(call, 0x10, 0)         // call poll_oneoff
	return wasmtest.Module{
		Imports:  []wasmtest.Import{{Name: "poll_oneoff", Params: 4}},
		MemPages: 1,
		Data:     sub,
		Start:    append(start, calls(call, n)...),
	}.Bytes()
}

// TestRunHostCallTimeout: modules whose time goes to host functions stop
// at their time limit, with an error naming the host call. Before, 500
// random_get of 32 MiB ran for their whole length (some 15 s) and
// returned success, and so did fd_write of 5,000 iovecs of 32 MiB to
// stderr, each scanned for a Go crash. (Stdout stops at Limits.Output and
// Limits.Memory: TestRunOutputCountsTowardMemory.)
func TestRunHostCallTimeout(t *testing.T) {
	e := newEngine(t, Config{})
	const timeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name, fn string
		code     []byte
	}{
		{"random_get", "random_get", randModule(512, 500)},
		{"stderr", "fd_write to stderr", iovModule(2, 512, 32<<20, 5000, 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := e.Compile(t.Context(), tc.code)
			if err != nil {
				t.Fatal(err)
			}
			within(t, timeout+hostGrace, func(ctx context.Context) {
				_, err := m.Run(ctx, tc.name, nil, nil, Limits{Timeout: timeout, Memory: 64 << 20})
				re := runError(t, err)
				if re.Reason != ReasonTimeout || !strings.Contains(err.Error(), "in a host call: "+tc.fn) {
					t.Fatalf("got %v, want a timeout in a host call: %s", err, tc.fn)
				}
			})
		})
	}
}

// TestRunHostCallCanceled: canceling the caller's ctx stops a run inside
// random_get, long before its time limit.
func TestRunHostCallCanceled(t *testing.T) {
	e := newEngine(t, Config{})
	m, err := e.Compile(t.Context(), randModule(512, 500))
	if err != nil {
		t.Fatal(err)
	}
	within(t, 100*time.Millisecond+hostGrace, func(ctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := m.Run(ctx, "rand", nil, nil, Limits{Timeout: time.Hour, Memory: 64 << 20})
		re := runError(t, err)
		if re.Reason != ReasonCanceled || !strings.Contains(re.Detail, "in a host call: random_get") {
			t.Fatalf("got %v, want canceled in a host call: random_get", err)
		}
	})
}

// TestRunPollDoesNotSleep: poll_oneoff with a clock subscription of an
// hour returns at once (the engine gives wazero no sleep), so a module
// cannot wait past its deadline in it: 100 such calls end well within a
// time limit of a minute.
func TestRunPollDoesNotSleep(t *testing.T) {
	e := newEngine(t, Config{})
	m, err := e.Compile(t.Context(), pollModule(time.Hour, 100))
	if err != nil {
		t.Fatal(err)
	}
	within(t, hostGrace, func(ctx context.Context) {
		if _, err := m.Run(ctx, "poll", nil, nil, Limits{Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRunOutputCountsTowardMemory: what a module writes to stdout is held
// by the host, so it counts toward Limits.Memory (beyond its first
// outputFree bytes): 32 MiB written by a module of one page fails under a
// 16 MiB limit, naming stdout, and fits under 64 MiB. Before, the output was limited only by Limits.Output.
func TestRunOutputCountsTowardMemory(t *testing.T) {
	e := newEngine(t, Config{})
	m, err := e.Compile(t.Context(), iovModule(1, 1, 64<<10, 512, 1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Run(t.Context(), "out", nil, nil, Limits{Memory: 16 << 20})
	if re := runError(t, err); re.Reason != ReasonMemory || !strings.Contains(err.Error(), "stdout") {
		t.Fatalf("got %v, want the memory limit, naming stdout", err)
	}
	out, err := m.Run(t.Context(), "out", nil, nil, Limits{Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 32<<20 {
		t.Fatalf("got %d bytes of output, want %d", len(out), 32<<20)
	}
	// The first outputFree bytes are free: a module whose memory fills
	// its limit still prints a small result.
	small, err := e.Compile(t.Context(), iovModule(1, 1, 1000, 4, 1))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := small.Run(t.Context(), "small", nil, nil, Limits{Memory: 64 << 10}); err != nil || len(out) != 4000 {
		t.Fatalf("a 4000-byte output of a 64 KiB module under a 64 KiB limit: got %d bytes, %v", len(out), err)
	}
}

// TestMemFileChunks: a file of FilesDir reads whole across hostChunk
// steps, and stops the run (a *hostCallError naming the call) once the
// run's context is done, however large the read: 5,000 preads of a large
// file would otherwise copy it 5,000 times past the deadline.
func TestMemFileChunks(t *testing.T) {
	data := make([]byte, 3*hostChunk+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	ctx, cancel := context.WithCancel(t.Context())
	guard := &hostGuard{ctx: ctx}
	fsys, err := newMemFS([]File{{Name: "f", Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	fsys.guard = guard
	f, err := fsys.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	mf := f.(*memFile)
	got := make([]byte, len(data)+100)
	n, err := mf.ReadAt(got, 5)
	if n != len(data)-5 || string(got[:n]) != string(data[5:]) {
		t.Fatalf("ReadAt(off 5) = %d, %v; want %d bytes equal to the file's", n, err, len(data)-5)
	}
	n, err = mf.Read(got)
	if err != nil || n != len(data) || string(got[:n]) != string(data) {
		t.Fatalf("Read = %d, %v; want the whole file", n, err)
	}
	cancel()
	for _, tc := range []struct {
		fn   string
		read func()
	}{
		{"fd_read", func() { mf.Read(got) }},
		{"fd_pread", func() { mf.ReadAt(got, 0) }},
	} {
		func() {
			defer func() {
				he, ok := recover().(*hostCallError)
				if !ok || he.Fn != tc.fn {
					t.Errorf("%s after the run's end: recovered %v, want a *hostCallError naming %s", tc.fn, he, tc.fn)
				}
			}()
			tc.read()
		}()
	}
}

// growModule returns a module of one page whose _start grows its memory
// by pages pages and traps (unreachable) if the grow is refused.
func growModule(pages int32) []byte {
	start := wasmtest.I32(nil, pages)
	start = append(start, 0x40, 0)    // memory.grow 0
	start = wasmtest.I32(start, -1)   // i32.const -1
	start = append(start, 0x46)       // i32.eq
	start = append(start, 0x04, 0x40) // if
	start = append(start, 0x00, 0x0b) // unreachable end
	return wasmtest.Module{MemPages: 1, Start: start}.Bytes()
}

// TestRunInputCountsTowardMemory: the unit's input (stdin, which its
// files slice) is held by the host for the whole run, so beyond its first
// outputFree bytes it counts toward Limits.Memory: a module that grows to
// 16 MiB fits a 24 MiB limit with 1 MiB of input but not with 16 MiB, and
// a module that needs 16 MiB at start is refused before it runs. The
// error says that the input counts. Before, the input was not counted.
func TestRunInputCountsTowardMemory(t *testing.T) {
	e := newEngine(t, Config{})
	grow, err := e.Compile(t.Context(), growModule(255))
	if err != nil {
		t.Fatal(err)
	}
	atStart, err := e.Compile(t.Context(), randModule(256, 1))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{Memory: 24 << 20}
	small, large := make([]byte, 1<<20), make([]byte, 16<<20)
	for _, m := range []*Module{grow, atStart} {
		if _, err := m.Run(t.Context(), "small input", small, nil, lim); err != nil {
			t.Fatalf("16 MiB of memory and 1 MiB of input under a 24 MiB limit: %v", err)
		}
		_, err := m.Run(t.Context(), "large input", large, nil, lim)
		if re := runError(t, err); re.Reason != ReasonMemory || !strings.Contains(err.Error(), "reached (") || !strings.Contains(err.Error(), "the unit's input counts toward it: 16 MiB of input") {
			t.Fatalf("16 MiB of memory and 16 MiB of input under a 24 MiB limit: got %v, want the memory limit, naming the input", err)
		}
	}
	// The first outputFree bytes of input are free, as stdout's are.
	if _, err := grow.Run(t.Context(), "free input", make([]byte, outputFree), nil, Limits{Memory: 16 << 20}); err != nil {
		t.Fatalf("16 MiB of memory and %d bytes of input under a 16 MiB limit: %v", outputFree, err)
	}
}
