package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
)

// fakeHooks assemble an output named after the job and record what the
// Lifecycle asked.
type fakeHooks struct {
	mu        sync.Mutex
	assembled map[uint64]int
	ended     map[uint64]store.JobState
	released  map[uint64]uint64 // waiting job: its input job
	// release, if set, is what Release does.
	release func(ctx context.Context, id uint64, parent store.Job) error
}

func newFakeHooks() *fakeHooks {
	return &fakeHooks{assembled: map[uint64]int{}, ended: map[uint64]store.JobState{}, released: map[uint64]uint64{}}
}

func (h *fakeHooks) Assemble(ctx context.Context, j *Job) (string, int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.assembled[j.ID]++
	for i, id := range j.ResultIDs() {
		if id == "" {
			return "", 0, fmt.Errorf("unit %d has no result", i)
		}
	}
	return fmt.Sprintf("output-%d", j.ID), 1, nil
}

func (h *fakeHooks) Ended(j *Job, state store.JobState, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended[j.ID] = state
}

func (h *fakeHooks) Release(ctx context.Context, id uint64, parent store.Job) error {
	h.mu.Lock()
	h.released[id] = parent.ID
	fn := h.release
	h.mu.Unlock()
	if fn != nil {
		return fn(ctx, id, parent)
	}
	return nil
}

func (h *fakeHooks) endedAs(id uint64) (store.JobState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.ended[id]
	return st, ok
}

func (h *fakeHooks) assemblies(id uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.assembled[id]
}

// rig is a Lifecycle over a real SQLite store in a temporary directory
// and a scheduler with one worker "w1" of two streams.
type rig struct {
	t     *testing.T
	db    store.Meta
	sched *sched.Scheduler
	hooks *fakeHooks
	lc    *Lifecycle
}

func newRig(t *testing.T, counted func(job, unit uint64)) *rig {
	t.Helper()
	db, err := store.OpenMeta(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, db: db, sched: sched.New(sched.Config{}), hooks: newFakeHooks()}
	r.lc = New(Config{Store: db, Sched: r.sched, Hooks: r.hooks, Counted: counted,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r.sched.SetWorker(sched.Worker{ID: "w1", Streams: 2, Ops: []string{"op"}})
	t.Cleanup(func() {
		r.lc.Close()
		db.Close()
	})
	return r
}

// create stores a job of n units and returns it with its units.
func (r *rig) create(n int) (store.Job, []store.Unit) {
	r.t.Helper()
	units := make([]store.Unit, n)
	for i := range units {
		units[i] = store.Unit{ID: uint64(i)}
	}
	j, err := r.db.CreateJob(r.t.Context(), store.Job{Op: "op", Input: "in", Policy: "dynamic"}, units)
	if err != nil {
		r.t.Fatal(err)
	}
	stored, err := r.db.Units(r.t.Context(), j.ID)
	if err != nil {
		r.t.Fatal(err)
	}
	return j, stored
}

func place(store.Unit) (string, bool) { return "op", false }

// add creates a job of n units and adds it.
func (r *rig) add(n int) *Job {
	r.t.Helper()
	rec, units := r.create(n)
	j, err := r.lc.Add(rec, units, place, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

// next hands out the next copy for stream of w1 and books it.
func (r *rig) next(stream int) sched.Assignment {
	r.t.Helper()
	a, ok := r.sched.Next("w1", stream)
	if !ok {
		r.t.Fatalf("stream %d of w1 got no unit", stream)
	}
	if j, _ := r.lc.Dispatched(a); j == nil {
		r.t.Fatalf("copy %+v of no active job", a)
	}
	return a
}

// stored returns a job's record in the store.
func (r *rig) stored(id uint64) store.Job {
	r.t.Helper()
	j, err := r.db.Job(r.t.Context(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

// waitEnded waits until job id ended and returns its stored record.
func (r *rig) waitEnded(id uint64, want store.JobState) store.Job {
	r.t.Helper()
	testwait.For(r.t, fmt.Sprintf("job %d to end %s", id, want), 10*time.Second, func() bool {
		_, ok := r.hooks.endedAs(id)
		return ok
	})
	if st, _ := r.hooks.endedAs(id); st != want {
		r.t.Fatalf("job %d ended %s, want %s", id, st, want)
	}
	j := r.stored(id)
	if j.State != want {
		r.t.Fatalf("stored job %d is %s (%s), want %s", id, j.State, j.Error, want)
	}
	return j
}

// TestResultCountedOnce: a unit whose two copies (the second a backup on
// another stream) both bring a result counts once, in memory and in the
// store, and the job is assembled once.
func TestResultCountedOnce(t *testing.T) {
	r := newRig(t, nil)
	r.lc.Start()
	r.sched.SetWorker(sched.Worker{ID: "w2", Streams: 1, Ops: []string{"op"}})
	j := r.add(1)
	a1 := r.next(0)
	// An idle stream of another worker takes a backup copy.
	a2, ok := r.sched.Next("w2", 0)
	if !ok {
		t.Fatal("w2 got no backup copy")
	}
	r.lc.Dispatched(a2)
	if !a2.Backup || a2.Unit != a1.Unit {
		t.Fatalf("second copy %+v, want a backup of unit %d", a2, a1.Unit)
	}
	if done, running, _, _ := j.Counts(); done != 0 || running != 1 {
		t.Errorf("with two copies out: %d done, %d running; want 0 and 1", done, running)
	}
	if counted, ended := r.lc.Result(j, a1, "w1", "result-a", 5); !counted || ended {
		t.Fatalf("first result: counted %v, ended %v", counted, ended)
	}
	if counted, _ := r.lc.Result(j, a2, "w2", "result-b", 7); counted {
		t.Error("the second copy's result counted too")
	}
	sj := r.waitEnded(j.ID, store.JobDone)
	if sj.Done != 1 || sj.Output != fmt.Sprintf("output-%d", j.ID) || sj.ComputeNanos != 5 {
		t.Errorf("stored job: %d done, output %q, compute %d; want 1, the output, 5", sj.Done, sj.Output, sj.ComputeNanos)
	}
	if n := r.hooks.assemblies(j.ID); n != 1 {
		t.Errorf("assembled %d times, want once", n)
	}
	results, spare, _ := j.Blobs()
	if results[0] != "result-a" || len(spare) != 1 || spare[0] != "result-b" {
		t.Errorf("results %v, spare %v; want result-a kept and result-b spare", results, spare)
	}
	ws, err := r.db.Workers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Done > 1 {
			t.Errorf("worker %s credited with %d results for one unit", w.ID, w.Done)
		}
	}
}

// TestLostCopyRetried: a copy lost with its stream shows as a lost try
// of its unit, the unit goes out again as a further attempt, and its
// result then finishes the job.
func TestLostCopyRetried(t *testing.T) {
	r := newRig(t, nil)
	r.lc.Start()
	r.sched.SetWorker(sched.Worker{ID: "w1", Streams: 1, Ops: []string{"op"}})
	j := r.add(1)
	a := r.next(0)
	r.lc.Lost(a, "lost: its stream to worker w1 broke")
	tries, n := j.Tries(10)
	if n != 1 || tries[0].Lost != 1 || tries[0].Fails != 0 || !strings.Contains(tries[0].Error, "lost") {
		t.Fatalf("tries %+v (%d units); want unit 0 with one lost copy", tries, n)
	}
	if _, running, _, _ := j.Counts(); running != 0 {
		t.Errorf("%d units running after the loss, want 0", running)
	}
	again := r.next(0)
	if again.Unit != a.Unit || again.Attempt != 2 {
		t.Fatalf("after the loss: %+v, want unit %d, attempt 2", again, a.Unit)
	}
	r.lc.Result(j, again, "w1", "result", 1)
	r.waitEnded(j.ID, store.JobDone)
	// The tries reach the store for the status of the finished job.
	stored, total, err := r.db.Tries(t.Context(), j.ID, 10)
	if err != nil || total != 1 || stored[0].Lost != 1 {
		t.Errorf("stored tries %+v (%d), %v; want unit 0 with one lost copy", stored, total, err)
	}
}

// TestFailedTryRetried: a copy whose operation failed runs again and
// counts as a retry; after the last try the job fails naming the unit.
func TestFailedTryRetried(t *testing.T) {
	r := newRig(t, nil)
	r.lc.Start()
	j := r.add(1)
	r.lc.Failed(r.next(0), "w1", "boom")
	if retries, last := j.Failures(); retries != 1 || !strings.Contains(last, "unit 0 failed on worker w1 (try 1; it runs again): boom") {
		t.Errorf("after one failure: %d retries, %q", retries, last)
	}
	if sj := r.stored(j.ID); sj.Retries != 1 {
		t.Errorf("stored retries %d, want 1", sj.Retries)
	}
	r.lc.Failed(r.next(0), "w1", "boom")
	r.lc.Failed(r.next(0), "w1", "boom")
	sj := r.waitEnded(j.ID, store.JobFailed)
	if !strings.Contains(sj.Error, "unit 0 failed on worker w1 (try 3 of 3): boom") {
		t.Errorf("job error %q", sj.Error)
	}
}

// TestWorkerDiesAfterLastResult: the last two results of a job arrive
// together, the one counted first is slow to reach the store's queue,
// and the worker dies right after. The job ends done with every unit
// recorded; it failed "1 of 2 units are not done" when its end was
// decided by the scheduler's count (issue 25, finding 5).
func TestWorkerDiesAfterLastResult(t *testing.T) {
	var slow atomic.Bool
	gate := make(chan struct{})
	r := newRig(t, func(job, unit uint64) {
		if slow.CompareAndSwap(false, true) {
			<-gate
		}
	})
	r.lc.Start()
	j := r.add(2)
	a0, a1 := r.next(0), r.next(1)
	first := make(chan bool)
	go func() {
		counted, _ := r.lc.Result(j, a0, "w1", "r0", 1) // held in Counted
		first <- counted
	}()
	testwait.For(t, "the first result to be counted", 5*time.Second, slow.Load)
	if counted, _ := r.lc.Result(j, a1, "w1", "r1", 1); !counted {
		t.Fatal("the second result did not count")
	}
	lost, errs := r.sched.RemoveWorker("w1")
	r.lc.LostAll(lost, errs)
	// The job must not end while a counted result is not queued.
	time.Sleep(50 * time.Millisecond)
	if st, ok := r.hooks.endedAs(j.ID); ok {
		t.Fatalf("job ended %s before its first result was queued for the store", st)
	}
	close(gate)
	if !<-first {
		t.Error("the first result did not count")
	}
	sj := r.waitEnded(j.ID, store.JobDone)
	if sj.Done != 2 {
		t.Errorf("stored: %d of 2 units done", sj.Done)
	}
}

// TestCancelDuringDispatch: a job canceled while its copies are out
// ends canceled at once; the copies' results then count for nothing and
// free their stream slots, and the job is never assembled.
func TestCancelDuringDispatch(t *testing.T) {
	r := newRig(t, nil)
	r.lc.Start()
	j := r.add(4)
	a0, a1 := r.next(0), r.next(1)
	if !r.lc.End(j, store.JobCanceled, "canceled by a client") {
		t.Fatal("End: the job had ended already")
	}
	if r.lc.End(j, store.JobCanceled, "again") {
		t.Error("a second End reported true")
	}
	r.waitEnded(j.ID, store.JobCanceled)
	if counted, ended := r.lc.Result(j, a0, "w1", "late", 1); counted || !ended {
		t.Errorf("result after the cancel: counted %v, ended %v", counted, ended)
	}
	// The late result was stored: it is the job's to remove.
	if _, spare, _ := j.Blobs(); len(spare) != 1 || spare[0] != "late" {
		t.Errorf("spare results %v, want the late one", spare)
	}
	r.lc.Lost(a1, "lost")
	if r.lc.Job(j.ID) != nil {
		t.Error("the canceled job is still active")
	}
	if n := r.hooks.assemblies(j.ID); n != 0 {
		t.Errorf("canceled job assembled %d times", n)
	}
	// The slots are free for the next job.
	next := r.add(1)
	if a := r.next(0); a.Job != next.ID {
		t.Errorf("stream 0 got %+v, want job %d", a, next.ID)
	}
	units, err := r.db.Units(t.Context(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		if u.State != store.UnitCanceled {
			t.Errorf("unit %d is %s, want canceled", u.ID, u.State)
		}
	}
}

// TestPipeline: a job waiting for another's output is released when
// that job is done, and fails when it fails; a waiting job can be
// canceled.
func TestPipeline(t *testing.T) {
	r := newRig(t, nil)
	r.lc.Start()
	child := func(parent uint64) uint64 {
		c, err := r.db.CreateJob(t.Context(), store.Job{Op: "op", Policy: "dynamic", Spec: store.JobSpec{InputJob: parent}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.lc.WaitFor(c.ID, parent)
		return c.ID
	}

	t.Run("parent done", func(t *testing.T) {
		p := r.add(1)
		c := child(p.ID)
		released := make(chan store.Job, 1)
		r.hooks.mu.Lock()
		r.hooks.release = func(ctx context.Context, id uint64, parent store.Job) error {
			if id == c {
				released <- parent
			}
			return nil
		}
		r.hooks.mu.Unlock()
		r.lc.Result(p, r.next(0), "w1", "r", 1)
		select {
		case parent := <-released:
			if parent.ID != p.ID || parent.State != store.JobDone || parent.Output == "" {
				t.Errorf("released with input job %+v, want %d done with its output", parent, p.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting job was not released within 10s of its input job's end")
		}
	})

	t.Run("parent failed", func(t *testing.T) {
		p := r.add(1)
		c := child(p.ID)
		grandchild := child(c)
		r.lc.End(p, store.JobFailed, "it broke")
		for _, id := range []uint64{c, grandchild} {
			testwait.For(t, fmt.Sprintf("job %d to fail", id), 10*time.Second, func() bool {
				return r.stored(id).State == store.JobFailed
			})
		}
		if e := r.stored(c).Error; !strings.Contains(e, fmt.Sprintf("input job %d is failed: it broke", p.ID)) {
			t.Errorf("waiting job's error %q", e)
		}
	})

	t.Run("cancel waiting", func(t *testing.T) {
		p := r.add(1)
		c := child(p.ID)
		if ok, err := r.lc.CancelWaiting(t.Context(), c); !ok || err != nil {
			t.Fatalf("CancelWaiting: %v, %v", ok, err)
		}
		if st := r.stored(c).State; st != store.JobCanceled {
			t.Errorf("canceled waiting job is %s", st)
		}
		if ok, _ := r.lc.CancelWaiting(t.Context(), p.ID); ok {
			t.Error("CancelWaiting canceled a job that waits for nothing")
		}
	})
}

// TestRecover: after a restart, a job's done units keep their results
// and the others run; a job whose units were all done is assembled once
// Start is called, not before.
func TestRecover(t *testing.T) {
	r := newRig(t, nil)
	ctx := t.Context()
	half, halfUnits := r.create(2)
	whole, wholeUnits := r.create(1)
	for _, k := range []store.UnitKey{{Job: half.ID, ID: 0}, {Job: whole.ID, ID: 0}} {
		if _, err := r.db.FinishUnit(ctx, k.Job, k.ID, "w1", "stored-result", 3); err != nil {
			t.Fatal(err)
		}
	}
	// What a restarted server does: units from the store, as they are.
	if _, err := r.db.ResetRunning(ctx); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []struct {
		j     store.Job
		units []store.Unit
	}{{half, halfUnits}, {whole, wholeUnits}} {
		units, err := r.db.Units(ctx, rec.j.ID)
		if err != nil {
			t.Fatal(err)
		}
		j, err := r.db.Job(ctx, rec.j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.lc.Add(j, units, place, nil); err != nil {
			t.Fatal(err)
		}
	}
	hj := r.lc.Job(half.ID)
	if done, _, compute, _ := hj.Counts(); done != 1 || compute != 3 {
		t.Errorf("recovered job: %d done, compute %d; want 1 and 3", done, compute)
	}
	if id, ok := hj.Result(0); !ok || id != "stored-result" {
		t.Errorf("recovered unit 0: result %q, %v", id, ok)
	}
	time.Sleep(50 * time.Millisecond)
	if n := r.hooks.assemblies(whole.ID); n != 0 {
		t.Fatalf("a recovered job was assembled before Start")
	}
	r.lc.Start()
	r.waitEnded(whole.ID, store.JobDone)
	a := r.next(0)
	if a.Job != half.ID || a.Unit != 1 {
		t.Fatalf("after the restart: %+v, want unit 1 of job %d (unit 0 is done)", a, half.ID)
	}
	r.lc.Result(hj, a, "w1", "new-result", 1)
	r.waitEnded(half.ID, store.JobDone)
	if ids := hj.ResultIDs(); ids[0] != "stored-result" || ids[1] != "new-result" {
		t.Errorf("results %v", ids)
	}
}
