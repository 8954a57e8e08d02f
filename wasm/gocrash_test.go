package wasm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/wasmtest"
)

// goOOM is a Go operation that allocates until the memory limit stops it.
const goOOM = `package main

import "os"

var keep [][]byte

func main() {
	os.Stderr.WriteString("allocating\n")
	for {
		keep = append(keep, make([]byte, 1<<20))
	}
}
`

// TestGoOutOfMemory: a Go operation out of memory fails with the memory
// limit and the Go runtime's message, in a few lines, not the goroutine
// dump that follows it (which, kept as stderr's last 2 KiB, hid the
// message and flooded every listing of the job's error).
func TestGoOutOfMemory(t *testing.T) {
	e := newEngine(t, Config{})
	code := wasmtest.Go(t, goOOM)
	m, err := e.Compile(t.Context(), code)
	if err != nil {
		t.Fatal(err)
	}
	within(t, time.Minute, func(ctx context.Context) {
		_, err = m.Run(ctx, "oom", nil, nil, Limits{Timeout: 30 * time.Second, Memory: 64 << 20})
	})
	re := runError(t, err)
	msg := err.Error()
	if re.Reason != ReasonMemory || !strings.Contains(msg, "memory limit of 64 MiB reached") ||
		!strings.Contains(msg, "fatal error: out of memory") || !strings.Contains(msg, "bytes of goroutine stacks left out") {
		t.Errorf("got %q (reason %s), want the memory limit, Go's message and the dump left out", msg, re.Reason)
	}
	if strings.Contains(msg, "goroutine 1") || strings.Contains(msg, "runtime.") || len(msg) > 300 {
		t.Errorf("the error holds the stack dump (%d bytes): %q", len(msg), msg)
	}
}

// goCrash finds the message of a Go crash in stderr however it is cut
// into writes, and leaves other stderr alone.
func TestGoCrash(t *testing.T) {
	const oom = "runtime: out of memory: cannot allocate 1048576-byte block (66584576 in use)\nfatal error: out of memory\n\n" +
		"goroutine 1 gp=0x1 m=0 mp=0x2 [running]:\nruntime.throw({0x1, 0xd})\n\t/go/src/runtime/panic.go:1 +0x1\n"
	const panicked = "some output of the op\npanic: bad input: line 7\n\tsecond line\n\ngoroutine 1 [running]:\nmain.main()\n\t/x/main.go:9 +0x2\n"
	for _, tc := range []struct {
		name, stderr, want string
	}{
		{"out of memory", oom, "runtime: out of memory: cannot allocate 1048576-byte block (66584576 in use)\nfatal error: out of memory\n" +
			"[Go runtime: 100 bytes of goroutine stacks left out]"},
		{"panic", panicked, "panic: bad input: line 7\n\tsecond line\n[Go runtime: 54 bytes of goroutine stacks left out]"},
		{"no dump", "panic: not really\nall is well\n", "panic: not really\nall is well\n"},
		{"plain", "bad line 7\n", "bad line 7\n"},
	} {
		for _, step := range []int{1, 7, len(tc.stderr)} {
			var tl tail
			for s := tc.stderr; s != ""; {
				n := min(step, len(s))
				tl.Write([]byte(s[:n]))
				s = s[n:]
			}
			if got := tl.String(); got != tc.want {
				t.Errorf("%s, writes of %d bytes: got %q, want %q", tc.name, step, got, tc.want)
			}
			tl.reset()
			if tl.Write([]byte("again\n")); tl.String() != "again\n" {
				t.Errorf("%s: after reset got %q", tc.name, tl.String())
			}
		}
	}
}
