package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// tenantJob is a dynamic job of n independent units of op for tenant.
func tenantJob(id uint64, tenant string, n int) Job {
	return Job{ID: id, Policy: Dynamic, Tenant: tenant, Units: units(n, "op")}
}

// heads returns the tenant whose unit each stream of worker w runs.
func heads(s *Scheduler, w string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, st := range s.workers[w].streams {
		if len(st.inFlight) == 0 {
			out = append(out, "")
			continue
		}
		out = append(out, st.inFlight[0].Tenant)
	}
	return out
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// A tenant that holds every stream gives half of them to a tenant whose
// job arrives later, and the units it gives up run again without a loss
// or a failed try counted.
func TestPreemptSharesStreams(t *testing.T) {
	s := New(Config{MaxLosses: 1})
	s.SetWorker(Worker{ID: "w1", Streams: 4, Ops: []string{"op"}})
	mustAdd(t, s, tenantJob(1, "mallory", 20))
	for i := range 4 {
		drain(s, "w1", i) // two units a stream: one running, one queued
	}
	if got := s.Preempt(); got != nil {
		t.Fatalf("one tenant: Preempt took %v", got)
	}
	mustAdd(t, s, tenantJob(2, "alice", 4))
	// Nothing is free: alice's units wait, none is queued behind mallory's.
	for i := range 4 {
		none(t, s, "w1", i)
	}
	back := s.Preempt()
	// Two streams give way, and every unit of mallory's queued on the
	// worker: two running and four queued.
	if len(back) != 6 {
		t.Fatalf("Preempt took %d copies, want 6 (2 running, 4 queued): %+v", len(back), back)
	}
	for _, a := range back {
		if a.Tenant != "mallory" || a.Job != 1 {
			t.Fatalf("took %+v, want only mallory's", a)
		}
	}
	for i := range 4 {
		drain(s, "w1", i)
	}
	if h := heads(s, "w1"); count(h, "alice") != 2 || count(h, "mallory") != 2 {
		t.Fatalf("streams run %v, want 2 alice, 2 mallory", h)
	}
	// Balanced: a further call takes nothing.
	if got := s.Preempt(); len(got) != 0 {
		t.Fatalf("balanced, Preempt took %+v", got)
	}
	// The units taken back were neither lost nor failed: with MaxLosses
	// 1 a loss would have failed the job.
	s.mu.Lock()
	j := s.byID[1]
	for _, a := range back {
		u := j.byID[a.Unit]
		if u.losses != 0 || u.fails != 0 || u.preempted != 1 || !u.queued && len(u.copies) == 0 {
			s.mu.Unlock()
			t.Fatalf("unit %d after preemption: losses %d fails %d preempted %d queued %v", u.id, u.losses, u.fails, u.preempted, u.queued)
		}
	}
	s.mu.Unlock()
	if err := s.Blocked(1); err != nil {
		t.Fatal(err)
	}
}

// A result that arrives from a copy taken back still counts: the worker
// finished it before the stop reached it.
func TestPreemptedResultCounts(t *testing.T) {
	s := New(Config{})
	s.SetWorker(Worker{ID: "w1", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(2, "op")})
	next(t, s, "w1", 0)
	next(t, s, "w1", 1)
	mustAdd(t, s, tenantJob(2, "alice", 1))
	back := s.Preempt()
	if len(back) != 1 {
		t.Fatalf("Preempt took %+v, want one copy", back)
	}
	if counted, _ := s.Done(back[0]); !counted {
		t.Fatal("the result of a copy taken back was not counted")
	}
	// The unit is done: it is not handed out again.
	for _, a := range drain(s, "w1", 0) {
		if a.Job == 1 && a.Unit == back[0].Unit {
			t.Fatalf("unit %d ran again after its result counted", a.Unit)
		}
	}
}

// A backup copy gives way before a unit's only copy.
func TestPreemptBackupFirst(t *testing.T) {
	s := New(Config{})
	s.SetWorker(Worker{ID: "w1", Streams: 1, Ops: []string{"op"}})
	s.SetWorker(Worker{ID: "w2", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(2, "op")})
	next(t, s, "w2", 0)
	next(t, s, "w2", 1)
	b := next(t, s, "w1", 0) // nothing ready: a backup copy
	if !b.Backup {
		t.Fatalf("w1 got %+v, want a backup copy", b)
	}
	mustAdd(t, s, tenantJob(2, "alice", 1))
	back := s.Preempt()
	if len(back) != 1 || !back[0].Backup || back[0].Worker != "w1" {
		t.Fatalf("Preempt took %+v, want w1's backup copy", back)
	}
	if a := next(t, s, "w1", 0); a.Tenant != "alice" {
		t.Fatalf("w1 then got %+v, want alice's unit", a)
	}
}

// Among other tenants' running units, the one started last gives way.
func TestPreemptNewestFirst(t *testing.T) {
	s := New(Config{NoBackups: true})
	s.SetWorker(Worker{ID: "w1", Streams: 3, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(6, "op")})
	first := next(t, s, "w1", 0)
	next(t, s, "w1", 1)
	s.Done(first) // an event: stream 0's next unit starts after stream 1's
	next(t, s, "w1", 0)
	next(t, s, "w1", 2)
	mustAdd(t, s, tenantJob(2, "alice", 1))
	back := s.Preempt()
	if len(back) != 1 {
		t.Fatalf("Preempt took %+v, want one copy", back)
	}
	// Streams 0 and 2 started their units at the last event; stream 1
	// before it.
	if back[0].Stream == 1 {
		t.Fatalf("Preempt took stream 1's unit, the one running longest: %+v", back[0])
	}
}

// A tenant's jobs never take streams from each other, and tenants one
// unit apart are left as they are.
func TestPreemptLeavesFairShares(t *testing.T) {
	s := New(Config{NoBackups: true})
	s.SetWorker(Worker{ID: "w1", Streams: 3, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(3, "op")})
	for i := range 3 {
		next(t, s, "w1", i)
	}
	mustAdd(t, s, Job{ID: 2, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(3, "op")})
	if got := s.Preempt(); len(got) != 0 {
		t.Fatalf("the same tenant's job took %+v", got)
	}
	mustAdd(t, s, Job{ID: 3, Policy: Dynamic, Tenant: "alice", InFlight: 1, Units: units(5, "op")})
	if got := s.Preempt(); len(got) != 1 {
		t.Fatalf("3 streams, mallory running 3, alice 0: took %+v, want one", got)
	}
	drain(s, "w1", 0)
	drain(s, "w1", 1)
	drain(s, "w1", 2)
	// mallory 2, alice 1: one apart, nothing moves although alice has
	// more ready.
	if got := s.Preempt(); len(got) != 0 {
		t.Fatalf("mallory 2, alice 1: took %+v", got)
	}
	if h := heads(s, "w1"); count(h, "alice") != 1 || count(h, "mallory") != 2 {
		t.Fatalf("streams run %v", h)
	}
}

// With several tenants, the one holding fewer copies goes first, and a
// stream takes a unit only when it holds none.
func TestTenantOrder(t *testing.T) {
	s := New(Config{NoBackups: true})
	s.SetWorker(Worker{ID: "w1", Streams: 3, Ops: []string{"op"}})
	mustAdd(t, s, tenantJob(1, "mallory", 10))
	next(t, s, "w1", 0)
	next(t, s, "w1", 1)
	mustAdd(t, s, tenantJob(2, "alice", 1))
	// Streams 0 and 1 run mallory's units: they queue nothing more.
	none(t, s, "w1", 0)
	none(t, s, "w1", 1)
	// Stream 2 is idle: alice holds nothing, so she goes first although
	// mallory's job is older.
	if b := next(t, s, "w1", 2); b.Tenant != "alice" {
		t.Fatalf("idle stream got %+v, want alice's unit", b)
	}
	none(t, s, "w1", 0)
	none(t, s, "w1", 2)
	// One tenant again: streams queue as before.
	s.CancelJob(2)
	if a := next(t, s, "w1", 0); a.Tenant != "mallory" {
		t.Fatal(a)
	}
}

// Copies queued while one tenant had jobs come back when a second
// tenant's job arrives, even with no unit of it waiting for a stream.
func TestPreemptTakesQueued(t *testing.T) {
	s := New(Config{NoBackups: true})
	s.SetWorker(Worker{ID: "w1", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, tenantJob(1, "mallory", 10))
	drain(s, "w1", 0) // 2: one running, one queued
	mustAdd(t, s, tenantJob(2, "alice", 1))
	if a := next(t, s, "w1", 1); a.Tenant != "alice" {
		t.Fatal(a)
	}
	back := s.Preempt()
	if len(back) != 1 || back[0].Tenant != "mallory" || back[0].Stream != 0 {
		t.Fatalf("Preempt took %+v, want mallory's queued copy on stream 0", back)
	}
	if h := heads(s, "w1"); h[0] != "mallory" || h[1] != "alice" {
		t.Fatalf("streams run %v", h)
	}
}

// Static jobs' units wait for their own worker's streams: a stream is
// taken back there only.
func TestPreemptStatic(t *testing.T) {
	s := New(Config{NoBackups: true})
	s.SetWorker(Worker{ID: "w1", Streams: 1, Ops: []string{"op"}})
	s.SetWorker(Worker{ID: "w2", Streams: 1, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(4, "op")})
	next(t, s, "w1", 0)
	next(t, s, "w2", 0)
	// One unit, planned on one of the two workers.
	mustAdd(t, s, Job{ID: 2, Policy: Equal, Tenant: "alice", Units: units(1, "op")})
	back := s.Preempt()
	if len(back) != 1 {
		t.Fatalf("Preempt took %+v, want one copy", back)
	}
	a := next(t, s, back[0].Worker, 0)
	if a.Tenant != "alice" {
		t.Fatalf("%s then got %+v, want alice's unit", back[0].Worker, a)
	}
	if !slices.Contains([]string{"w1", "w2"}, a.Worker) {
		t.Fatal(a)
	}
}

// A static job's units wait on their owners: its tenant gets a stream
// of any owner that can give one, not only of the owner of the first
// unit found (the owners' map order decided that, and an owner that
// cannot stop a copy left the tenant waiting half of the time).
func TestPreemptStaticAnyOwner(t *testing.T) {
	for range 20 {
		s := New(Config{NoBackups: true})
		s.SetWorker(Worker{ID: "w1", Streams: 2, Ops: []string{"op"}, NoPreempt: true})
		s.SetWorker(Worker{ID: "w2", Streams: 2, Ops: []string{"op"}})
		mustAdd(t, s, Job{ID: 1, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(8, "op")})
		for _, w := range []string{"w1", "w2"} {
			next(t, s, w, 0)
			next(t, s, w, 1)
		}
		// Four units, two planned on each worker.
		mustAdd(t, s, Job{ID: 2, Policy: Equal, Tenant: "alice", Units: units(4, "op")})
		back := s.Preempt()
		if len(back) == 0 || back[0].Worker != "w2" {
			t.Fatalf("Preempt took %+v, want mallory's copies on w2", back)
		}
	}
}

// A unit taken back once is not the first to give way again, although
// it restarted last: the unit that has not been preempted goes.
func TestPreemptSparesPreempted(t *testing.T) {
	s := New(Config{NoBackups: true})
	s.SetWorker(Worker{ID: "w1", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(4, "op")})
	first := next(t, s, "w1", 0)
	m := next(t, s, "w1", 1)
	s.Done(first) // an event: stream 0's next unit starts after stream 1's
	last := next(t, s, "w1", 0)
	// Make the unit started last one taken back before.
	s.mu.Lock()
	s.byID[1].byID[last.Unit].preempted = 1
	s.mu.Unlock()
	mustAdd(t, s, Job{ID: 2, Policy: Dynamic, Tenant: "alice", InFlight: 1, Units: units(1, "op")})
	back := s.Preempt()
	if len(back) != 1 || back[0].Unit != m.Unit {
		t.Fatalf("Preempt took %+v, want mallory's unit %d, never preempted, not %d", back, m.Unit, last.Unit)
	}
}

// A worker that cannot stop a copy (older than api.OpPreempt) is never
// preempted: its copies run to their end, and a waiting tenant gets a
// thread of a worker that can.
func TestPreemptSparesOldWorkers(t *testing.T) {
	s := New(Config{})
	s.SetWorker(Worker{ID: "old", Streams: 2, Ops: []string{"op"}, NoPreempt: true})
	s.SetWorker(Worker{ID: "new", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, tenantJob(1, "mallory", 20))
	for _, w := range []string{"old", "new"} {
		for i := range 2 {
			drain(s, w, i)
		}
	}
	mustAdd(t, s, tenantJob(2, "alice", 4))
	back := s.Preempt()
	for _, a := range back {
		if a.Worker == "old" {
			t.Fatalf("Preempt took %+v from the worker that cannot stop it", a)
		}
	}
	for i := range 2 {
		drain(s, "new", i)
	}
	if h := heads(s, "new"); count(h, "alice") != 2 {
		t.Fatalf("the preemptible worker's streams run %v, want alice's two", h)
	}
	if h := heads(s, "old"); count(h, "mallory") != 2 {
		t.Fatalf("the old worker's streams run %v, want mallory's copies still", h)
	}
}

// Several backup copies give way in one call: a backup stream taken for
// one waiting unit is passed over for the next (it crashed the server
// once: a taken stream runs nothing).
func TestPreemptSeveralBackups(t *testing.T) {
	s := New(Config{})
	s.SetWorker(Worker{ID: "w1", Streams: 2, Ops: []string{"op"}})
	s.SetWorker(Worker{ID: "w2", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Policy: Dynamic, Tenant: "mallory", InFlight: 1, Units: units(2, "op")})
	next(t, s, "w1", 0)
	next(t, s, "w1", 1)
	for i := range 2 {
		if b := next(t, s, "w2", i); !b.Backup {
			t.Fatalf("w2 stream %d got %+v, want a backup copy", i, b)
		}
	}
	mustAdd(t, s, tenantJob(2, "alice", 2))
	back := s.Preempt()
	if len(back) != 2 || !back[0].Backup || !back[1].Backup {
		t.Fatalf("Preempt took %+v, want both backup copies", back)
	}
	for i := range 2 {
		if a := next(t, s, "w2", i); a.Tenant != "alice" {
			t.Fatalf("w2 stream %d then got %+v, want alice's unit", i, a)
		}
	}
}

// TestPreemptRandom drives Preempt through random clusters (workers of
// 1-3 streams, some unable to stop a copy, 2-4 tenants with dynamic and
// static jobs, backup copies, results and losses between calls) and
// checks that it never takes a copy twice, never takes from a worker
// that cannot stop it or from a tenant within one unit of a waiting
// one, and that every copy it takes is on its stream until then.
func TestPreemptRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 25))
	for round := range 300 {
		s := New(Config{NoBackups: rng.IntN(2) == 0})
		var ws []string
		for i := range 1 + rng.IntN(4) {
			id := fmt.Sprint("w", i)
			ws = append(ws, id)
			s.SetWorker(Worker{ID: id, Streams: 1 + rng.IntN(3), Ops: []string{"op"}, NoPreempt: rng.IntN(4) == 0})
		}
		tenants := 2 + rng.IntN(3)
		var out []Assignment
		held := map[Assignment]bool{}
		for step := range 20 {
			switch rng.IntN(4) {
			case 0:
				policy := Dynamic
				if rng.IntN(3) == 0 {
					policy = Equal
				}
				id := uint64(round*100 + step + 1)
				if err := s.AddJob(Job{ID: id, Policy: policy, Tenant: fmt.Sprint("t", rng.IntN(tenants)), InFlight: 1 + rng.IntN(2), Units: units(1+rng.IntN(5), "op")}); err != nil {
					t.Fatal(err)
				}
			case 1:
				for _, w := range ws {
					for st := range 3 {
						if a, ok := s.Next(w, st); ok {
							held[a] = true
							out = append(out, a)
						}
					}
				}
			case 2:
				if len(out) > 0 {
					k := rng.IntN(len(out))
					if held[out[k]] {
						if rng.IntN(4) == 0 {
							s.Lost(out[k])
						} else {
							s.Done(out[k])
						}
						delete(held, out[k])
					}
				}
			case 3:
				s.mu.Lock()
				noPreempt := map[string]bool{}
				for _, w := range ws {
					noPreempt[w] = s.workers[w].NoPreempt
				}
				s.mu.Unlock()
				seen := map[Assignment]bool{}
				for _, a := range s.Preempt() {
					if seen[a] {
						t.Fatalf("round %d: Preempt took %+v twice", round, a)
					}
					seen[a] = true
					if noPreempt[a.Worker] {
						t.Fatalf("round %d: Preempt took %+v from a worker that cannot stop it", round, a)
					}
					if !held[a] {
						t.Fatalf("round %d: Preempt took %+v, which was not out", round, a)
					}
					delete(held, a)
				}
			}
		}
	}
}
