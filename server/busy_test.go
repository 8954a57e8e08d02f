package server

import (
	"testing"
	"time"
)

// TestBusyCountsLentTimeOnlyWithUnitsOut walks a worker with 2 threads
// through a session on a fake clock: idle, one unit, two units, idle,
// a lost unit.
func TestBusyCountsLentTimeOnlyWithUnitsOut(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBusy()
	b.now = func() time.Time { return now }
	step := func(d time.Duration) { now = now.Add(d) }

	b.setThreads(2)
	step(time.Second) // nothing out: no lent time
	b.sent()
	step(10 * time.Millisecond)
	b.sent()
	step(30 * time.Millisecond)
	b.back(25 * time.Millisecond)
	step(10 * time.Millisecond)
	b.back(35 * time.Millisecond)
	step(time.Hour) // idle again
	b.sent()
	step(5 * time.Millisecond)
	b.lost() // lost with its stream

	use := b.totals()
	compute, lent := use.compute, use.lent
	if want := 60 * time.Millisecond; compute != want {
		t.Errorf("compute %v, want %v", compute, want)
	}
	// 2 threads x (50 ms with units out + 5 ms for the lost one).
	if want := 110 * time.Millisecond; lent != want {
		t.Errorf("lent %v, want %v", lent, want)
	}
	if use.tries != 2 {
		t.Errorf("%d tries, want the 2 results (the lost unit was no try)", use.tries)
	}
	b.back(time.Second) // a stray result: the count stays sane
	if lent2 := b.totals().lent; lent2 != lent {
		t.Errorf("lent grew to %v with nothing out", lent2)
	}
}
