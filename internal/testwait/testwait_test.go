package testwait

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	go func() {
		time.Sleep(20 * time.Millisecond) // something that happens on its own, later
		n.Store(1)
	}()
	if !Until(5*time.Second, func() bool { return n.Load() == 1 }) {
		t.Fatal("Until gave up on a condition that came true")
	}
	start := time.Now()
	if Until(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until reported a condition that never held")
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("Until gave up after %v, before its 30ms", el)
	}
	// A long wait checks a costly condition about 1/Most times a second,
	// not 1/First.
	var polls int
	Until(500*time.Millisecond, func() bool { polls++; return false })
	if polls > 25 {
		t.Fatalf("%d polls in 500ms; the pause should grow to %v", polls, Most)
	}
}

// fakeTB records Fatalf instead of ending the test.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestForNamesWhat(t *testing.T) {
	f := &fakeTB{TB: t}
	For(f, "the thing", 10*time.Millisecond, func() bool { return false })
	if !strings.Contains(f.msg, "waiting for the thing") {
		t.Fatalf("For on a condition that never held failed with %q, want it to name what it waited for", f.msg)
	}
	f.msg = ""
	For(f, "the thing", time.Second, func() bool { return true })
	if f.msg != "" {
		t.Fatalf("For failed on a condition that held: %q", f.msg)
	}
}

func TestBlocked(t *testing.T) {
	const fn = "testwait.ParkedRead"
	if Blocked(fn) {
		t.Fatal("Blocked found a goroutine parked in ParkedRead before any was started")
	}
	r1, w1 := io.Pipe()
	r2, w2 := io.Pipe()
	done := make(chan error, 2)
	go func() { done <- ParkedRead(r1, make([]byte, 1)) }()
	go func() { done <- ParkedRead(r2, make([]byte, 1)) }()
	For(t, "two reads to park", 5*time.Second, func() bool { return Parked(fn) == 2 })
	w1.Close()
	w2.Close()
	for range 2 {
		if err := <-done; err != io.EOF {
			t.Fatalf("read from a closed pipe: %v", err)
		}
	}
	if n := Parked(fn); n != 0 {
		t.Fatalf("%d goroutines still parked in ParkedRead after they returned", n)
	}
}
