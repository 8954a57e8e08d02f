package sched

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWaitWakesOnlyWhoCanTake: an event closes the Wait channels of the
// streams it may give work to and no others. With one channel for all
// (Changed) every result woke every stream; at 1,000 workers that cost
// 1.58 ms of scheduler CPU a result.
func TestWaitWakesOnlyWhoCanTake(t *testing.T) {
	s := New(Config{InFlight: 2, NoBackups: true})
	s.SetWorker(Worker{ID: "a", Streams: 2, Ops: []string{"op"}})
	s.SetWorker(Worker{ID: "b", Streams: 1, Ops: []string{"op"}})
	s.SetWorker(Worker{ID: "n", Streams: 1, Ops: []string{"other"}})
	mustAdd(t, s, Job{ID: 1, Units: units(20, "op")})
	a0, a1 := drain(s, "a", 0), drain(s, "a", 1)
	drain(s, "b", 0)
	none(t, s, "n", 0)
	wa0, wa1, wb0, wn := s.Wait("a", 0), s.Wait("a", 1), s.Wait("b", 0), s.Wait("n", 0)

	// A result frees a slot on a/0: only a/0 wakes.
	s.Done(a0[0])
	if !closed(wa0) {
		t.Error("a/0's slot freed, but its Wait channel is open")
	}
	for name, ch := range map[string]<-chan struct{}{"a/1": wa1, "b/0": wb0, "n/0": wn} {
		if closed(ch) {
			t.Errorf("a result on a/0 woke %s, which can take nothing more", name)
		}
	}
	// Negative control: Changed wakes everyone at every event.
	ch := s.Changed()
	drain(s, "a", 0)
	wa0 = s.Wait("a", 0)
	// A lost copy frees a/1's slot: a/1 wakes. Its unit is ready again,
	// but the other waiters are full (a/0, b/0) or do not run op (n/0):
	// they sleep on.
	s.Lost(a1[1])
	if !closed(ch) {
		t.Error("Changed stayed open at a lost copy")
	}
	if !closed(wa1) {
		t.Error("a lost copy on a/1 freed its slot, but a/1 did not wake")
	}
	for name, ch := range map[string]<-chan struct{}{"a/0": wa0, "b/0": wb0, "n/0": wn} {
		if closed(ch) {
			t.Errorf("a lost copy on a/1 woke %s, which can take nothing", name)
		}
	}
	// A job of another operation wakes the idle stream that runs it.
	mustAdd(t, s, Job{ID: 2, Units: units(1, "other")})
	if !closed(wn) || closed(wb0) || closed(wa0) {
		t.Errorf("a job of op other: n/0 woke %v, b/0 %v, a/0 %v; want true, false, false", closed(wn), closed(wb0), closed(wa0))
	}
	// A change of workers wakes every waiter.
	s.SetWorker(Worker{ID: "d", Streams: 1, Ops: []string{"op"}})
	if !closed(wb0) || !closed(wa0) {
		t.Error("SetWorker did not wake every waiting stream")
	}
}

// TestWaitWakesReadyUnits: units made ready by a result (a DAG's next
// level) wake as many idle streams as there are units, and no more.
func TestWaitWakesReadyUnits(t *testing.T) {
	s := New(Config{InFlight: 1, NoBackups: true})
	const idle = 6
	for i := range idle + 1 {
		s.SetWorker(Worker{ID: fmt.Sprint("w", i), Streams: 1, Ops: []string{"op"}})
	}
	us := []Unit{{ID: 0, Op: "op"}}
	for i := 1; i <= 3; i++ {
		us = append(us, Unit{ID: uint64(i), Op: "op", Deps: []uint64{0}})
	}
	mustAdd(t, s, Job{ID: 1, Units: us})
	root := next(t, s, "w0", 0)
	waits := make([]<-chan struct{}, idle+1)
	for i := range waits {
		id := fmt.Sprint("w", i)
		none(t, s, id, 0)
		waits[i] = s.Wait(id, 0)
	}
	s.Done(root)
	woke := 0
	for _, ch := range waits[1:] {
		if closed(ch) {
			woke++
		}
	}
	if woke != 3 {
		t.Errorf("3 units became ready; %d idle streams woke, want 3", woke)
	}
}

// TestStreamsWait runs stream loops on Wait the way a server does, with
// backups on and a worker dying midway: no wake is missed (the job ends)
// and every unit counts once.
func TestStreamsWait(t *testing.T) {
	for _, backups := range []bool{true, false} {
		t.Run(fmt.Sprint("backups=", backups), func(t *testing.T) {
			countedOnce(t)(runStreams(t, New(Config{NoBackups: !backups}), 40, 2, 400, true))
		})
	}
}

// countedOnce fails t unless each of the n units counted exactly once.
func countedOnce(t *testing.T) func(counted map[uint64]int, n int) {
	return func(counted map[uint64]int, n int) {
		t.Helper()
		if len(counted) != n {
			t.Fatalf("%d units counted, want %d", len(counted), n)
		}
		for id, c := range counted {
			if c != 1 {
				t.Errorf("unit %d counted %d times", id, c)
			}
		}
	}
}

// runStreams runs workers x streams stream loops over one dynamic job of
// n units, a DAG with a level every 10 units, each unit's result given at
// once; with wait they sleep on Wait, else on Changed. Worker w0 dies
// after 5 units. It returns the units counted.
func runStreams(t testing.TB, s *Scheduler, workers, streams, n int, wait bool) (map[uint64]int, int) {
	for i := range workers {
		s.SetWorker(Worker{ID: fmt.Sprint("w", i), Streams: streams, Ops: []string{"op"}})
	}
	us := make([]Unit, n)
	for i := range us {
		us[i] = Unit{ID: uint64(i), Op: "op"}
		if i >= 10 {
			us[i].Deps = []uint64{uint64(i - 10)}
		}
	}
	mustAdd(t, s, Job{ID: 1, Units: us})
	var mu sync.Mutex
	counted := map[uint64]int{}
	finished := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var dead atomic.Bool
	for i := range workers {
		id := fmt.Sprint("w", i)
		for st := range streams {
			wg.Go(func() {
				done := 0
				for {
					var ch <-chan struct{}
					if wait {
						ch = s.Wait(id, st)
					} else {
						ch = s.Changed()
					}
					a, ok := s.Next(id, st)
					if !ok {
						select {
						case <-ch:
							continue
						case <-finished:
							return
						}
					}
					if id == "w0" && done == 5 && dead.CompareAndSwap(false, true) {
						s.RemoveWorker(id)
						return
					}
					done++
					runtime.Gosched()
					c, jobDone := s.Done(a)
					if c {
						mu.Lock()
						counted[a.Unit]++
						mu.Unlock()
					}
					if jobDone {
						once.Do(func() { close(finished) })
					}
				}
			})
		}
	}
	wg.Wait()
	return counted, n
}
