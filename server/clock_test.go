package server

import (
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
)

// TestWorkerClock places a worker session's origin from the bounds of
// each result, narrowing with each, and keeps untimed and contradictory
// timings off the timeline: those tries keep thread -1 and no times.
func TestWorkerClock(t *testing.T) {
	c := newWorkerClock()
	at := func(ms int) time.Time { return c.base.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) int64 { return int64(n) * int64(time.Millisecond) }
	// The worker's origin is truly at base+100ms; both units take 2 ms
	// each way.
	// Unit 1: sent at 200, received at 202 (worker 102), ran 102-110,
	// answered at 111 (server 213), read at 215.
	t1 := api.Timing{Received: ms(102), Started: ms(102), Ended: ms(110), Sent: ms(111), Thread: 1}
	if !c.observe(at(200), at(215), t1) {
		t.Fatal("a consistent timing was refused")
	}
	// Bounds: [200-102, 215-111] = [98, 104].
	if o, e := c.origin(); !o.Equal(at(101)) || e != ms(3) {
		t.Errorf("origin %v ±%v, want base+101ms ±3ms", o.Sub(c.base), time.Duration(e))
	}
	// Unit 2 arrived faster: sent at 300, received 300.5 (worker
	// 200.5), answered 201 (server 301), read 301.5: bounds [99.5, 100.5].
	t2 := api.Timing{Received: ms(200) + ms(1)/2, Started: ms(200) + ms(1)/2, Ended: ms(201), Sent: ms(201)}
	if !c.observe(at(300), at(301).Add(500*time.Microsecond), t2) {
		t.Fatal("a consistent timing was refused")
	}
	if o, e := c.origin(); !o.Equal(at(100)) || e != ms(1)/2 {
		t.Errorf("origin %v ±%v, want base+100ms ±0.5ms", o.Sub(c.base), time.Duration(e))
	}
	for _, bad := range []api.Timing{
		{}, // untimed (an older worker)
		{Received: 5, Started: 4, Ended: 6, Sent: 7},           // started before received
		{Received: 5, Started: 6, Ended: 5, Sent: 7},           // ended before started
		{Received: 5, Started: 6, Ended: 8, Sent: 7},           // sent before ended
		{Received: 1, Started: 1, Ended: ms(50), Sent: ms(50)}, // longer than the round trip
	} {
		if c.observe(at(400), at(410), bad) {
			t.Errorf("timing %+v was used", bad)
		}
	}
	if o, _ := c.origin(); !o.Equal(at(100)) {
		t.Errorf("a refused timing moved the origin to %v", o.Sub(c.base))
	}

	var tl timeline
	tl.add(7, span{UnitSpan: api.UnitSpan{Unit: 1}, clk: c, timing: t1})
	tl.add(7, span{UnitSpan: api.UnitSpan{Unit: 2}})
	got, ok := tl.get(7)
	if !ok || len(got) != 2 {
		t.Fatalf("timeline of job 7: %v, %+v", ok, got)
	}
	if got[0].Thread != 1 || !got[0].Started.Equal(at(202)) || !got[0].Ended.Equal(at(210)) || got[0].PlaceErrNanos != ms(1)/2 {
		t.Errorf("timed try: thread %d, %v to %v ±%v; want thread 1, base+202ms to 210ms ±0.5ms",
			got[0].Thread, got[0].Started.Sub(c.base), got[0].Ended.Sub(c.base), time.Duration(got[0].PlaceErrNanos))
	}
	if got[1].Thread != -1 || !got[1].Started.IsZero() || !got[1].Ended.IsZero() {
		t.Errorf("untimed try: %+v, want thread -1 and no times", got[1])
	}
	if _, ok := tl.get(8); ok {
		t.Error("a timeline for a job without tries")
	}
}
