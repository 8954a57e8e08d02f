package sched

import (
	"container/heap"
	"fmt"
	"testing"
)

// simWorker is a simulated worker: each of its streams runs one unit at a
// time, taking cost ticks per unit.
type simWorker struct {
	id      string
	streams int
	cost    int
}

type simEvent struct {
	at, order int
	w         *simWorker
	stream    int
}

type events []simEvent

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].order < e[j].order
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(simEvent)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// simulate runs a job of n units under policy p and returns its makespan
// in ticks. Streams fetch units as Next allows and run them in order. If
// kill is non-empty, that worker dies at tick killAt.
func simulate(t testing.TB, p Policy, workers []simWorker, n int, cfg Config, kill string, killAt int) int {
	t.Helper()
	return simulateRun(t, p, workers, n, cfg, kill, killAt).makespan
}

// simRun is what a simulated job did.
type simRun struct {
	makespan int
	copies   int // assignments made, backups included
	backups  int // backup copies among them
}

func simulateRun(t testing.TB, p Policy, workers []simWorker, n int, cfg Config, kill string, killAt int) simRun {
	t.Helper()
	var run simRun
	s := New(cfg)
	for _, w := range workers {
		s.SetWorker(Worker{ID: w.id, Streams: w.streams, Ops: []string{"blur"}})
	}
	if err := s.AddJob(Job{ID: 1, Policy: p, Units: units(n, "blur")}); err != nil {
		t.Fatal(err)
	}
	type stream struct {
		queue   []Assignment
		running bool
	}
	streams := map[string][]*stream{}
	for _, w := range workers {
		for range w.streams {
			streams[w.id] = append(streams[w.id], &stream{})
		}
	}
	var q events
	order, now := 0, 0
	dead := map[string]bool{}
	start := func(w *simWorker, i int) {
		st := streams[w.id][i]
		if !st.running && len(st.queue) > 0 {
			st.running = true
			order++
			heap.Push(&q, simEvent{at: now + w.cost, order: order, w: w, stream: i})
		}
	}
	fill := func() {
		for wi := range workers {
			w := &workers[wi]
			if dead[w.id] {
				continue
			}
			for i, st := range streams[w.id] {
				for {
					a, ok := s.Next(w.id, i)
					if !ok {
						break
					}
					run.copies++
					if a.Backup {
						run.backups++
					}
					st.queue = append(st.queue, a)
				}
				start(w, i)
			}
		}
	}
	counted := 0
	killed := kill == ""
	fill()
	for q.Len() > 0 {
		at := q[0].at
		if !killed && at > killAt {
			killed, now, dead[kill] = true, killAt, true
			s.RemoveWorker(kill)
			fill()
			continue
		}
		now = at
		// Every result of this instant arrives before streams ask for
		// more, as when results reach a server together.
		var freed []simEvent
		for q.Len() > 0 && q[0].at == at {
			ev := heap.Pop(&q).(simEvent)
			if dead[ev.w.id] {
				continue
			}
			st := streams[ev.w.id][ev.stream]
			a := st.queue[0]
			st.queue, st.running = st.queue[1:], false
			c, done := s.Done(a)
			if c {
				counted++
			}
			if done {
				if counted != n {
					t.Fatalf("job done with %d of %d units counted", counted, n)
				}
				run.makespan = now
				return run
			}
			freed = append(freed, ev)
		}
		for _, ev := range freed {
			start(ev.w, ev.stream)
		}
		fill()
	}
	t.Fatalf("%v with %d units: stalled after %d counted", p, n, counted)
	return run
}

// The paper's setting: two equal workers and a third, slower one.
var (
	fast1 = simWorker{id: "c1", streams: 2, cost: 10}
	fast2 = simWorker{id: "c2", streams: 2, cost: 10}
	slow  = simWorker{id: "c3", streams: 2, cost: 40}
)

// TestSimSlowWorker checks the claim behind the dynamic policy: adding a
// slow worker to two fast ones never makes a dynamic job slower, whatever
// the job size, streams, slowness and units in flight (up to 16, the
// server's default), while an equal split does make it slower. (Without
// backup copies, a third of these cases get slower; without the share cap
// of small jobs, 22 cases at 8 in flight, where the first stream took a
// whole small job and then ran copies already done elsewhere.)
func TestSimSlowWorker(t *testing.T) {
	worse := 0
	for _, fastStreams := range []int{1, 2} {
		for _, slowStreams := range []int{1, 2, 3} {
			for _, slowCost := range []int{15, 40, 100} {
				for _, inflight := range []int{1, 2, 4, 8, 16} {
					f1, f2 := simWorker{"c1", fastStreams, 10}, simWorker{"c2", fastStreams, 10}
					sl := simWorker{"c3", slowStreams, slowCost}
					for n := 1; n <= 80; n++ {
						cfg := Config{InFlight: inflight}
						two := simulate(t, Dynamic, []simWorker{f1, f2}, n, cfg, "", 0)
						three := simulate(t, Dynamic, []simWorker{f1, f2, sl}, n, cfg, "", 0)
						if three > two {
							worse++
							t.Errorf("dynamic: %d units on 2x%d fast streams, %d slow streams of cost %d, %d in flight: makespan %d with the slow worker, %d without",
								n, fastStreams, slowStreams, slowCost, inflight, three, two)
						}
					}
				}
			}
		}
	}
	if worse > 0 {
		t.Fatalf("the slow worker made %d dynamic jobs slower", worse)
	}

	const n = 48
	cfg := Config{InFlight: 2}
	dyn2 := simulate(t, Dynamic, []simWorker{fast1, fast2}, n, cfg, "", 0)
	dyn3 := simulate(t, Dynamic, []simWorker{fast1, fast2, slow}, n, cfg, "", 0)
	if dyn3 >= dyn2 {
		t.Errorf("dynamic, %d units: the slow worker did not help (%d vs %d)", n, dyn3, dyn2)
	}
	eq2 := simulate(t, Equal, []simWorker{fast1, fast2}, n, cfg, "", 0)
	eq3 := simulate(t, Equal, []simWorker{fast1, fast2, slow}, n, cfg, "", 0)
	if eq3 <= eq2 {
		t.Errorf("equal, %d units: the slow worker should hurt (%d vs %d)", n, eq3, eq2)
	}
	// Proportional by threads, as in the paper: 3+3 threads for the fast
	// workers, 1 for the slow one.
	prop := simulate(t, Proportional, []simWorker{{"c1", 3, 10}, {"c2", 3, 10}, {"c3", 1, 40}}, n, cfg, "", 0)
	t.Logf("%d units: dynamic %d -> %d ticks with the slow worker; equal %d -> %d; proportional (3,3,1 threads) %d",
		n, dyn2, dyn3, eq2, eq3, prop)
}

// TestSimWorkerDeath kills a worker mid-job under every policy: the job
// still finishes with each unit counted once.
func TestSimWorkerDeath(t *testing.T) {
	for _, p := range []Policy{Dynamic, Equal, Proportional} {
		for _, kill := range []string{"c1", "c3"} {
			t.Run(fmt.Sprintf("%v/kill=%s", p, kill), func(t *testing.T) {
				full := simulate(t, p, []simWorker{fast1, fast2, slow}, 40, Config{}, "", 0)
				got := simulate(t, p, []simWorker{fast1, fast2, slow}, 40, Config{}, kill, 25)
				if got < full && kill == "c1" {
					t.Errorf("losing a fast worker made the job faster: %d < %d", got, full)
				}
			})
		}
	}
}
