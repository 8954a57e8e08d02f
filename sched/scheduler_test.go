package sched

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// units returns n independent units of op with IDs 0..n-1.
func units(n int, op string) []Unit {
	out := make([]Unit, n)
	for i := range out {
		out[i] = Unit{ID: uint64(i), Op: op}
	}
	return out
}

func mustAdd(t testing.TB, s *Scheduler, j Job) {
	t.Helper()
	if err := s.AddJob(j); err != nil {
		t.Fatal(err)
	}
}

func next(t testing.TB, s *Scheduler, w string, stream int) Assignment {
	t.Helper()
	a, ok := s.Next(w, stream)
	if !ok {
		t.Fatalf("Next(%s, %d): nothing", w, stream)
	}
	return a
}

func none(t testing.TB, s *Scheduler, w string, stream int) {
	t.Helper()
	if a, ok := s.Next(w, stream); ok {
		t.Fatalf("Next(%s, %d) = %+v, want nothing", w, stream, a)
	}
}

// drain takes everything the stream will take.
func drain(s *Scheduler, w string, stream int) []Assignment {
	var out []Assignment
	for {
		a, ok := s.Next(w, stream)
		if !ok {
			return out
		}
		out = append(out, a)
	}
}

func ids(as []Assignment) []uint64 {
	var out []uint64
	for _, a := range as {
		out = append(out, a.Unit)
	}
	return out
}

func TestNextRespectsOps(t *testing.T) {
	s := New(Config{InFlight: 10, NoBackups: true})
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"blur"}})
	s.SetWorker(Worker{ID: "b", Streams: 1, Ops: []string{"noop"}})
	s.SetWorker(Worker{ID: "c", Streams: 1})
	mustAdd(t, s, Job{ID: 1, Units: []Unit{{ID: 0, Op: "blur"}, {ID: 1, Op: "noop"}, {ID: 2, Op: "blur"}}})
	if got := ids(drain(s, "b", 0)); fmt.Sprint(got) != "[1]" {
		t.Errorf("noop worker got %v", got)
	}
	if got := ids(drain(s, "c", 0)); len(got) != 0 {
		t.Errorf("worker without ops got %v", got)
	}
	if got := ids(drain(s, "a", 0)); fmt.Sprint(got) != "[0 2]" {
		t.Errorf("blur worker got %v", got)
	}
	none(t, s, "nobody", 0)
	none(t, s, "a", 5)
}

func TestDAGReadiness(t *testing.T) {
	s := New(Config{InFlight: 10})
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"checksum"}})
	mustAdd(t, s, Job{ID: 1, Units: []Unit{
		{ID: 10, Op: "checksum"}, {ID: 11, Op: "checksum"},
		{ID: 12, Op: "checksum", Deps: []uint64{10, 11}},
		{ID: 13, Op: "checksum", Deps: []uint64{12}},
	}})
	first := drain(s, "a", 0)
	if fmt.Sprint(ids(first)) != "[10 11]" {
		t.Fatalf("ready at start: %v", ids(first))
	}
	if c, _ := s.Done(first[0]); !c {
		t.Fatal("not counted")
	}
	none(t, s, "a", 0) // 12 still waits for 11
	s.Done(first[1])
	a := next(t, s, "a", 0)
	if a.Unit != 12 {
		t.Fatalf("got unit %d, want 12", a.Unit)
	}
	none(t, s, "a", 0)
	if _, done := s.Done(a); done {
		t.Fatal("job done too early")
	}
	a = next(t, s, "a", 0)
	if c, done := s.Done(a); a.Unit != 13 || !c || !done {
		t.Errorf("last unit %d: counted %v, job done %v", a.Unit, c, done)
	}
}

func TestInFlightLimit(t *testing.T) {
	s := New(Config{NoBackups: true}) // default InFlight is 2
	s.SetWorker(Worker{ID: "a", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Units: units(10, "op")})
	got := drain(s, "a", 0)
	if len(got) != 2 {
		t.Fatalf("stream took %d, want 2", len(got))
	}
	if got := drain(s, "a", 1); len(got) != 2 {
		t.Fatalf("second stream took %d, want 2", len(got))
	}
	s.Done(got[0])
	if len(drain(s, "a", 0)) != 1 {
		t.Error("a freed slot was not refilled")
	}
	// A job may ask for its own limit.
	mustAdd(t, s, Job{ID: 2, InFlight: 4, Units: units(10, "op")})
	if got := drain(s, "a", 1); len(got) != 2 || got[0].Job != 2 {
		t.Errorf("with job 2 (in flight 4): took %v", got)
	}
}

func TestEqualPlanIsFixed(t *testing.T) {
	s := New(Config{InFlight: 100})
	for _, w := range []string{"a", "b", "c"} {
		s.SetWorker(Worker{ID: w, Streams: 1, Ops: []string{"blur"}})
	}
	mustAdd(t, s, Job{ID: 1, Policy: Equal, Units: units(10, "blur")})
	got := map[string][]uint64{}
	for _, w := range []string{"c", "a", "b"} {
		got[w] = ids(drain(s, w, 0))
	}
	if fmt.Sprint(got) != "map[a:[0 1 2 3] b:[4 5 6] c:[7 8 9]]" {
		t.Errorf("equal plan: %v", got)
	}
	// A worker that joins later gets nothing of a planned job.
	s.SetWorker(Worker{ID: "d", Streams: 1, Ops: []string{"blur"}})
	none(t, s, "d", 0)
}

func TestProportionalPlan(t *testing.T) {
	s := New(Config{InFlight: 100})
	s.SetWorker(Worker{ID: "c1", Streams: 3, Ops: []string{"blur"}})
	s.SetWorker(Worker{ID: "c2", Streams: 3, Ops: []string{"blur"}})
	s.SetWorker(Worker{ID: "c3", Streams: 1, Ops: []string{"blur"}})
	mustAdd(t, s, Job{ID: 1, Policy: Proportional, Units: units(14, "blur")})
	for w, want := range map[string]int{"c1": 6, "c2": 6, "c3": 2} {
		n := 0
		for st := range 3 {
			n += len(drain(s, w, st))
		}
		if n != want {
			t.Errorf("%s got %d units, want %d", w, n, want)
		}
	}
}

func TestStaticWaitsForWorkers(t *testing.T) {
	s := New(Config{})
	mustAdd(t, s, Job{ID: 1, Policy: Equal, Units: units(4, "blur")})
	if err := s.Blocked(1); err == nil || !strings.Contains(err.Error(), `"blur"`) {
		t.Errorf("Blocked = %v", err)
	}
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"blur"}})
	if err := s.Blocked(1); err != nil {
		t.Errorf("Blocked with a worker = %v", err)
	}
	if len(drain(s, "a", 0)) != 2 {
		t.Error("planned units did not reach the new worker")
	}
}

func TestWorkerDeathDynamic(t *testing.T) {
	s := New(Config{NoBackups: true})
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"op"}})
	s.SetWorker(Worker{ID: "b", Streams: 1, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Units: units(3, "op")})
	onA := drain(s, "a", 0)
	onB := drain(s, "b", 0)
	lost, errs := s.RemoveWorker("a")
	if len(lost) != 2 || len(errs) != 0 || fmt.Sprint(ids(lost)) != fmt.Sprint(ids(onA)) {
		t.Fatalf("lost %v (errs %v), want %v", ids(lost), errs, ids(onA))
	}
	counted := 0
	for _, a := range onB {
		if c, _ := s.Done(a); c {
			counted++
		}
	}
	for {
		got := drain(s, "b", 0)
		if len(got) == 0 {
			break
		}
		for _, a := range got {
			if a.Worker != "b" {
				t.Errorf("assignment on %s", a.Worker)
			}
			if c, _ := s.Done(a); c {
				counted++
			}
		}
	}
	if counted != 3 {
		t.Errorf("%d units counted, want 3", counted)
	}
	// A late result from the dead worker counts for nothing now.
	if c, _ := s.Done(onA[0]); c {
		t.Error("late result counted twice")
	}
}

func TestWorkerDeathStatic(t *testing.T) {
	s := New(Config{InFlight: 1})
	for _, w := range []string{"a", "b", "c"} {
		s.SetWorker(Worker{ID: w, Streams: 1, Ops: []string{"op"}})
	}
	mustAdd(t, s, Job{ID: 1, Policy: Equal, Units: units(9, "op")})
	running := next(t, s, "c", 0) // unit 6; 7 and 8 wait for c
	lost, _ := s.RemoveWorker("c")
	if len(lost) != 1 || lost[0] != running {
		t.Fatalf("lost %v", lost)
	}
	// c's three units are shared between a and b, after their own.
	var got []uint64
	for _, w := range []string{"a", "b"} {
		for {
			a, ok := s.Next(w, 0)
			if !ok {
				break
			}
			got = append(got, a.Unit)
			s.Done(a)
		}
	}
	if fmt.Sprint(got) != "[0 1 2 6 7 3 4 5 8]" {
		t.Errorf("order after c died: %v", got)
	}
}

func TestBackups(t *testing.T) {
	s := New(Config{InFlight: 1})
	s.SetWorker(Worker{ID: "slow", Streams: 1, Ops: []string{"op"}})
	s.SetWorker(Worker{ID: "fast", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Units: units(1, "op")})
	orig := next(t, s, "slow", 0)
	backup := next(t, s, "fast", 0)
	if !backup.Backup || backup.Unit != orig.Unit || backup.Attempt != 2 {
		t.Fatalf("backup = %+v", backup)
	}
	none(t, s, "fast", 1) // two copies are enough
	if c, done := s.Done(backup); !c || !done {
		t.Errorf("backup result: counted %v, done %v", c, done)
	}
	if c, done := s.Done(orig); c || done {
		t.Errorf("original's late result: counted %v, done %v", c, done)
	}

	// No backups on the same worker, nor when they are off, nor for
	// static jobs.
	s2 := New(Config{InFlight: 1})
	s2.SetWorker(Worker{ID: "a", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s2, Job{ID: 1, Units: units(1, "op")})
	next(t, s2, "a", 0)
	none(t, s2, "a", 1)
	s3 := New(Config{InFlight: 1, NoBackups: true})
	s3.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"op"}})
	s3.SetWorker(Worker{ID: "b", Streams: 1, Ops: []string{"op"}})
	mustAdd(t, s3, Job{ID: 1, Units: units(1, "op")})
	mustAdd(t, s3, Job{ID: 2, Policy: Equal, Units: units(1, "op")})
	next(t, s3, "a", 0)
	none(t, s3, "b", 0) // job 2's only unit is a's, by the equal plan
}

func TestLostAndMaxLosses(t *testing.T) {
	s := New(Config{MaxLosses: 2})
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 7, Units: units(1, "op")})
	a := next(t, s, "a", 0)
	if err := s.Lost(a); err != nil {
		t.Fatal(err)
	}
	if err := s.Lost(a); err != nil {
		t.Errorf("losing the same assignment twice: %v", err)
	}
	a = next(t, s, "a", 0)
	if a.Attempt != 2 {
		t.Errorf("attempt %d", a.Attempt)
	}
	err := s.Lost(a)
	if err == nil || err.Job != 7 || err.Unit != 0 || !errors.Is(err, ErrTooManyAttempts) || !strings.Contains(err.Error(), "job 7 unit 0: lost 2 times") {
		t.Fatalf("second loss: %v", err)
	}
	none(t, s, "a", 0)
}

func TestFailEndsJob(t *testing.T) {
	s := New(Config{InFlight: 3, MaxTries: 1})
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 3, Units: units(5, "op")})
	got := drain(s, "a", 0)
	_, retried, err := s.Fail(got[1], errors.New("blur: corrupt tile"))
	if retried || err == nil || err.Error() != "job 3 unit 1: blur: corrupt tile" || err.Tries != 1 {
		t.Fatalf("Fail = %v, %v", retried, err)
	}
	if c, _ := s.Done(got[0]); c {
		t.Error("result of a failed job counted")
	}
	none(t, s, "a", 0)
	if _, retried, err := s.Fail(got[2], nil); err != nil || retried {
		t.Errorf("second failure: %v, %v", retried, err)
	}
}

// A failed unit runs again on another worker while there is one it did
// not fail on, then on the same; after MaxTries failures the job fails.
func TestFailRetriesElsewhere(t *testing.T) {
	for _, policy := range []Policy{Dynamic, Equal} {
		t.Run(policy.String(), func(t *testing.T) {
			s := New(Config{InFlight: 1})
			s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"op"}})
			s.SetWorker(Worker{ID: "b", Streams: 1, Ops: []string{"op"}})
			mustAdd(t, s, Job{ID: 1, Policy: policy, MaxTries: 3, Units: units(1, "op")})
			var a Assignment
			if got, ok := s.Next("a", 0); ok {
				a = got
			} else {
				a = next(t, s, "b", 0)
			}
			first, other := a.Worker, map[string]string{"a": "b", "b": "a"}[a.Worker]
			if _, retried, err := s.Fail(a, errors.New("trap")); !retried || err != nil {
				t.Fatalf("first failure: %v, %v", retried, err)
			}
			none(t, s, first, 0) // it failed there; the other worker takes it
			b := next(t, s, other, 0)
			if b.Attempt != 2 {
				t.Errorf("attempt %d, want 2", b.Attempt)
			}
			if _, retried, err := s.Fail(b, errors.New("trap")); !retried || err != nil {
				t.Fatalf("second failure: %v, %v", retried, err)
			}
			// Failed on both: either may take it.
			c, ok := s.Next(first, 0)
			if !ok {
				c = next(t, s, other, 0)
			}
			_, retried, err := s.Fail(c, errors.New("trap: unreachable"))
			if retried || err == nil || err.Tries != 3 || !strings.Contains(err.Error(), "unreachable") {
				t.Fatalf("third failure: %v, %v", retried, err)
			}
			none(t, s, "a", 0)
			none(t, s, "b", 0)
		})
	}
}

// Module units go to workers that offer ModuleOps or name the operation.
func TestModuleUnits(t *testing.T) {
	s := New(Config{InFlight: 4})
	s.SetWorker(Worker{ID: "builtin", Streams: 1, Ops: []string{"blur"}})
	s.SetWorker(Worker{ID: "named", Streams: 1, Ops: []string{"wordcount"}})
	s.SetWorker(Worker{ID: "any", Streams: 1, Ops: []string{ModuleOps}})
	mustAdd(t, s, Job{ID: 1, Units: []Unit{{ID: 0, Op: "wordcount", Module: true}, {ID: 1, Op: "sum", Module: true}}})
	none(t, s, "builtin", 0)
	if a := next(t, s, "named", 0); a.Unit != 0 {
		t.Errorf("named worker took unit %d, want 0", a.Unit)
	}
	if a := next(t, s, "any", 0); a.Unit != 1 {
		t.Errorf("module worker took unit %d, want 1", a.Unit)
	}
	if err := s.Blocked(1); err != nil {
		t.Errorf("Blocked: %v", err)
	}
}

func TestCancel(t *testing.T) {
	s := New(Config{InFlight: 1})
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Units: units(3, "op")})
	mustAdd(t, s, Job{ID: 2, Units: units(1, "op")})
	a := next(t, s, "a", 0)
	s.CancelJob(1)
	none(t, s, "a", 0) // the canceled job's copy still holds the slot
	if c, _ := s.Done(a); c {
		t.Error("canceled job's result counted")
	}
	if b := next(t, s, "a", 0); b.Job != 2 {
		t.Errorf("next = %+v, want job 2", b)
	}
}

func TestAddJobValidates(t *testing.T) {
	s := New(Config{})
	mustAdd(t, s, Job{ID: 1, Units: units(1, "op")})
	tests := []struct {
		name string
		job  Job
		msg  string
	}{
		{"duplicate job", Job{ID: 1, Units: units(1, "op")}, "added twice"},
		{"no units", Job{ID: 2}, "no units"},
		{"duplicate unit", Job{ID: 2, Units: []Unit{{ID: 1}, {ID: 1}}}, "appears twice"},
		{"unknown dep", Job{ID: 2, Units: []Unit{{ID: 1, Deps: []uint64{5}}}}, "depends on 5"},
		{"self dep", Job{ID: 2, Units: []Unit{{ID: 1, Deps: []uint64{1}}}}, "depends on 1"},
		{"cycle", Job{ID: 2, Units: []Unit{{ID: 1, Deps: []uint64{3}}, {ID: 2, Deps: []uint64{1}}, {ID: 3, Deps: []uint64{2}}}}, "cycle"},
		{"all done", Job{ID: 2, Units: []Unit{{ID: 1, Done: true}}}, "every unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.AddJob(tt.job)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("AddJob = %v, want an error saying %q", err, tt.msg)
			}
		})
	}
	if err := s.AddJob(Job{ID: 9, Units: []Unit{{ID: 1, Done: true}}}); !errors.Is(err, ErrJobComplete) {
		t.Errorf("all-done job: %v", err)
	}
}

func TestResumedJob(t *testing.T) {
	s := New(Config{InFlight: 10})
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"checksum"}})
	mustAdd(t, s, Job{ID: 1, Units: []Unit{
		{ID: 0, Op: "checksum", Done: true}, {ID: 1, Op: "checksum"},
		{ID: 2, Op: "checksum", Deps: []uint64{0, 1}},
	}})
	got := drain(s, "a", 0)
	if fmt.Sprint(ids(got)) != "[1]" {
		t.Fatalf("resumed job offered %v", ids(got))
	}
	s.Done(got[0])
	a := next(t, s, "a", 0)
	if c, done := s.Done(a); a.Unit != 2 || !c || !done {
		t.Errorf("unit %d counted %v done %v", a.Unit, c, done)
	}
}

func TestSetWorkerShrinks(t *testing.T) {
	s := New(Config{InFlight: 1, NoBackups: true})
	s.SetWorker(Worker{ID: "a", Streams: 2, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Units: units(2, "op")})
	next(t, s, "a", 0)
	b := next(t, s, "a", 1)
	lost, errs := s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"op"}})
	if len(lost) != 1 || lost[0] != b || errs != nil {
		t.Fatalf("shrinking lost %v, %v", lost, errs)
	}
	none(t, s, "a", 1)
	s.SetWorker(Worker{ID: "b", Streams: 1, Ops: []string{"op"}})
	if got := next(t, s, "b", 0); got.Unit != b.Unit {
		t.Errorf("the lost unit went nowhere: %+v", got)
	}
}

func TestChanged(t *testing.T) {
	s := New(Config{})
	ch := s.Changed()
	select {
	case <-ch:
		t.Fatal("closed before any change")
	default:
	}
	s.SetWorker(Worker{ID: "a", Streams: 1, Ops: []string{"op"}})
	select {
	case <-ch:
	default:
		t.Fatal("not closed after SetWorker")
	}
	ch = s.Changed()
	mustAdd(t, s, Job{ID: 1, Units: units(1, "op")})
	<-ch
	ch = s.Changed()
	a := next(t, s, "a", 0)
	s.Done(a)
	<-ch
}

// TestStreamsConcurrently runs stream loops in goroutines the way a
// server did, all sleeping on Changed, with a worker dying midway, and
// checks that every unit counts exactly once (TestStreamsWait does the
// same on Wait).
func TestStreamsConcurrently(t *testing.T) {
	countedOnce(t)(runStreams(t, New(Config{}), 3, 2, 500, false))
}

// TestDynamicShare: a stream of a dynamic job holds at most its share of
// the unfinished units (over the streams that run their operation), so
// the first stream to ask does not take a whole small job. Static jobs
// and large jobs keep InFlight.
func TestDynamicShare(t *testing.T) {
	s := New(Config{InFlight: 8, NoBackups: true})
	s.SetWorker(Worker{ID: "a", Streams: 2, Ops: []string{"blur"}})
	s.SetWorker(Worker{ID: "b", Streams: 2, Ops: []string{"blur"}})
	s.SetWorker(Worker{ID: "n", Streams: 4, Ops: []string{"noop"}}) // does not count for blur
	mustAdd(t, s, Job{ID: 1, Units: units(6, "blur")})
	first := drain(s, "a", 0)
	if len(first) != 2 { // ceil(6 / 4 streams)
		t.Fatalf("first stream took %d of 6 units, want 2", len(first))
	}
	for _, w := range []string{"a", "b"} {
		for st := range 2 {
			if w == "a" && st == 0 {
				continue
			}
			if got := drain(s, w, st); len(got) > 2 {
				t.Errorf("%s/%d took %d units, want at most 2", w, st, len(got))
			}
		}
	}
	// 4 left after two results: the share drops to 1, and a's first
	// stream, holding 0, takes nothing more as nothing is ready.
	s.Done(first[0])
	s.Done(first[1])
	none(t, s, "a", 0)

	// A large job keeps InFlight.
	mustAdd(t, s, Job{ID: 2, Units: units(100, "blur")})
	s.CancelJob(1)
	s.SetWorker(Worker{ID: "c", Streams: 1, Ops: []string{"blur"}})
	if got := drain(s, "c", 0); len(got) != 8 {
		t.Errorf("large job: a fresh stream took %d units, want 8", len(got))
	}
	// Equal jobs are planned: a stream takes up to InFlight of its own.
	s2 := New(Config{InFlight: 8, NoBackups: true})
	s2.SetWorker(Worker{ID: "a", Streams: 2, Ops: []string{"blur"}})
	s2.SetWorker(Worker{ID: "b", Streams: 2, Ops: []string{"blur"}})
	mustAdd(t, s2, Job{ID: 1, Policy: Equal, Units: units(6, "blur")})
	if got := drain(s2, "a", 0); len(got) != 3 {
		t.Errorf("equal: a's first stream took %d, want its 3", len(got))
	}
}

// TestBackupsBeyondOneSearch: with more units out than one search for a
// backup weighs (maxBackupScan), idle streams still back up every unit
// out on the busy worker, each once: the searches go on from where the
// last one stopped.
func TestBackupsBeyondOneSearch(t *testing.T) {
	const n = 3*maxBackupScan + 7
	s := New(Config{InFlight: 1})
	s.SetWorker(Worker{ID: "busy", Streams: n, Ops: []string{"op"}})
	s.SetWorker(Worker{ID: "idle", Streams: n, Ops: []string{"op"}})
	mustAdd(t, s, Job{ID: 1, Units: units(n, "op")})
	for st := range n {
		next(t, s, "busy", st)
	}
	backed := map[uint64]bool{}
	for st := range n {
		a := next(t, s, "idle", st)
		if !a.Backup || backed[a.Unit] {
			t.Fatalf("idle stream %d got %+v; want a backup of a unit not backed up yet", st, a)
		}
		backed[a.Unit] = true
	}
	if len(backed) != n {
		t.Errorf("%d of %d units backed up", len(backed), n)
	}
}
