package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
)

// Store is what a Lifecycle reads and writes of jobs and units: the
// server's metadata store (store.Meta, over SQLite or PostgreSQL, satisfies it).
type Store interface {
	// Job returns one job (for pipelines: the state of an input job).
	Job(ctx context.Context, id uint64) (store.Job, error)
	StartUnit(ctx context.Context, job, id uint64, worker string) (attempt int, err error)
	FinishUnits(ctx context.Context, rs []store.UnitResult) (counted []bool, err error)
	RetryUnit(ctx context.Context, job, id uint64, worker, msg string) error
	FailUnit(ctx context.Context, job, id uint64, worker, msg string) error
	SaveTries(ctx context.Context, job uint64, tries []store.UnitTries) error
	FinishJob(ctx context.Context, id uint64, output string) error
	FailJob(ctx context.Context, id uint64, msg string) error
	CancelJob(ctx context.Context, id uint64, msg string) error
	// Owners tells, for Sweep, where jobs are and who owns them.
	Owners(ctx context.Context, ids []uint64) (map[uint64]store.JobOwner, error)
}

// Hooks are what the caller does for a Lifecycle: the work on bytes.
// They are called without any of the Lifecycle's locks held.
type Hooks interface {
	// Assemble makes the output of j, whose units are all done and
	// recorded, and returns its blob's ID and size.
	Assemble(ctx context.Context, j *Job) (output string, size int64, err error)
	// Ended tells that j reached state (done, failed or canceled; msg
	// says why for the last two) and left the Lifecycle: the caller
	// drops what it kept for it. An empty state means the job was let
	// go unfinished (LetGo): another server owns it now, and its units'
	// results must stay.
	Ended(j *Job, state store.JobState, msg string)
	// Release starts job id, which waited for parent, now done: it
	// splits parent's output and Adds the job. An error fails the job
	// with the error's text; nil with nothing added means the job was
	// finished meanwhile (or the caller is shutting down).
	Release(ctx context.Context, id uint64, parent store.Job) error
}

// Config configures a Lifecycle.
type Config struct {
	// Store and Sched are required.
	Store Store
	Sched *sched.Scheduler
	// Hooks is required.
	Hooks Hooks
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Counted, if set, is called when the scheduler counted a unit's
	// result, before the result is queued for the store: a test's seam
	// to widen the window between the two.
	Counted func(job, unit uint64)
}

// Lifecycle owns the active jobs. It is safe for concurrent use.
type Lifecycle struct {
	store Store
	sched *sched.Scheduler
	hooks Hooks
	log   *slog.Logger
	rec   *recorder
	cfg   Config
	// done is closed when the recorder's loop returned.
	recDone chan struct{}

	mu   sync.Mutex
	jobs map[uint64]*Job // active jobs by ID
	// complete are jobs with every unit done before Start (recovered),
	// release jobs that ended before Start whose waiting jobs Start
	// releases.
	complete []*Job
	release  []uint64
	// waiting maps a job to the jobs that wait for its output; pending
	// maps each of those to the job it waits for.
	waiting map[uint64][]uint64
	pending map[uint64]uint64
	// unsaved are the ends of jobs the store has not taken yet; saving
	// is set while saveLoop writes them.
	unsaved map[uint64]unsaved
	saving  bool
	started bool
	closing bool
	stop    chan struct{} // closed by Shutdown
	bg      sync.WaitGroup
	// epoch is the lease epoch the writes of waiting jobs are fenced
	// by (SetEpoch); active jobs' writes use their own record's.
	epoch atomic.Uint64
}

// New returns a Lifecycle with no jobs. Jobs may be added (recovered)
// before Start; nothing completes before it.
func New(cfg Config) *Lifecycle {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Lifecycle{
		store:   cfg.Store,
		sched:   cfg.Sched,
		hooks:   cfg.Hooks,
		log:     cfg.Logger,
		cfg:     cfg,
		recDone: make(chan struct{}),
		jobs:    map[uint64]*Job{},
		waiting: map[uint64][]uint64{},
		pending: map[uint64]uint64{},
		unsaved: map[uint64]unsaved{},
		stop:    make(chan struct{}),
	}
	l.rec = newRecorder(cfg.Store, cfg.Logger)
	l.rec.lost = l.resultsLost
	l.rec.stop = l.stop
	return l
}

// Start begins the background work: the recorder, the writes of
// unsaved ends, the assembly of jobs recovered complete and the release
// of jobs waiting for jobs that ended before Start.
func (l *Lifecycle) Start() {
	go func() {
		defer close(l.recDone)
		l.rec.run()
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = true
	complete, release := l.complete, l.release
	l.complete, l.release = nil, nil
	for _, j := range complete {
		l.bg.Go(func() { l.assemble(j) })
	}
	for _, id := range release {
		l.bg.Go(func() { l.releaseWaiting(id) })
	}
	if len(l.unsaved) > 0 && !l.saving {
		l.saving = true
		l.bg.Go(l.saveLoop)
	}
}

// Shutdown stops new background work: nothing is assembled or released
// any more (those jobs resume at the next start). Stream losses from now
// on fail no job.
func (l *Lifecycle) Shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closing {
		l.closing = true
		close(l.stop)
	}
}

// Close waits for the background work, records the results queued and
// stops the recorder. Call it after Shutdown, once no more events come;
// a Lifecycle that was never started just returns.
func (l *Lifecycle) Close() {
	l.Shutdown()
	l.bg.Wait()
	l.mu.Lock()
	started := l.started
	l.mu.Unlock()
	if started {
		l.rec.close()
		<-l.recDone
	}
}

// Closing reports whether Shutdown was called.
func (l *Lifecycle) Closing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closing
}

// lifetime returns a context that ends at Shutdown.
func (l *Lifecycle) lifetime() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// goBG runs fn in the background unless the Lifecycle is shutting down;
// before Start, not at all. It reports whether fn runs. l.mu is held.
func (l *Lifecycle) goBG(fn func()) bool {
	if l.closing || !l.started {
		return false
	}
	l.bg.Go(fn)
	return true
}

// Job returns the active job id, or nil.
func (l *Lifecycle) Job(id uint64) *Job {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.jobs[id]
}

// Jobs returns the active jobs.
func (l *Lifecycle) Jobs() []*Job {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*Job, 0, len(l.jobs))
	for _, j := range l.jobs {
		out = append(out, j)
	}
	return out
}

// Add makes a stored job active: units are its units as stored (those
// done keep their results), place names each unit's operation for the
// scheduler and whether it runs a module, ext is the caller's Job.Ext.
// A job whose units are all done is assembled (once Start was called).
func (l *Lifecycle) Add(rec store.Job, units []store.Unit, place func(store.Unit) (op string, module bool), ext any) (*Job, error) {
	policy, err := sched.ParsePolicy(rec.Policy)
	if err != nil {
		return nil, err
	}
	sj := sched.Job{ID: rec.ID, Policy: policy, InFlight: rec.InFlight, MaxTries: rec.Spec.MaxTries, Tenant: rec.Owner,
		Units: make([]sched.Unit, len(units))}
	for i, u := range units {
		if u.ID != uint64(i) {
			return nil, fmt.Errorf("job %d: unit %d stored at position %d; the store is inconsistent", rec.ID, u.ID, i)
		}
		op, module := place(u)
		sj.Units[i] = sched.Unit{ID: u.ID, Op: op, Module: module, Deps: u.Deps, Done: u.State == store.UnitDone}
	}
	j := newJob(rec, units, ext)
	l.mu.Lock()
	l.jobs[j.ID] = j
	l.mu.Unlock()
	err = l.sched.AddJob(sj)
	if errors.Is(err, sched.ErrJobComplete) {
		l.mu.Lock()
		if !l.goBG(func() { l.assemble(j) }) && !l.started {
			l.complete = append(l.complete, j)
		}
		l.mu.Unlock()
		return j, nil
	}
	if err != nil {
		l.mu.Lock()
		delete(l.jobs, j.ID)
		l.mu.Unlock()
		return nil, err
	}
	return j, nil
}

// Dispatched books a copy the scheduler handed out and returns its job
// and whether it is the job's first copy. A copy of a job no longer
// active frees its slot, and Dispatched returns nil.
func (l *Lifecycle) Dispatched(a sched.Assignment) (j *Job, first bool) {
	if j = l.Job(a.Job); j == nil {
		l.sched.Done(a)
		return nil, false
	}
	return j, j.dispatched(a)
}

// Started records in the store that the first copy of a job is going out
// to worker: the job is running from now.
func (l *Lifecycle) Started(ctx context.Context, a sched.Assignment, worker string) {
	j := l.Job(a.Job)
	if j == nil {
		return
	}
	_, err := l.store.StartUnit(fenced(ctx, j), a.Job, a.Unit, worker)
	switch {
	case errors.Is(err, store.ErrFenced):
		l.LetGo(j, err.Error())
	case err != nil && !errors.Is(err, store.ErrConflict) && ctx.Err() == nil:
		l.log.Warn("recording job start failed", "job", a.Job, "err", err)
	}
}

// fenced returns ctx for writes of j's progress: fenced by the lease
// epoch j was taken under.
func fenced(ctx context.Context, j *Job) context.Context { return store.Fenced(ctx, j.Rec.Epoch) }

// SetEpoch sets the lease epoch of the jobs the Lifecycle is given from
// now on, which fences the writes of waiting jobs. Let go of every job
// (LetGoAll) before the epoch changes.
func (l *Lifecycle) SetEpoch(e uint64) { l.epoch.Store(e) }

// LetGo drops the active job j without writing its end: another server
// owns it now (a write under j's epoch was fenced, or the store says so)
// or it ended there. why says which, for the log. It reports false if j
// had ended already.
func (l *Lifecycle) LetGo(j *Job, why string) bool {
	if !j.end() {
		return false
	}
	l.sched.CancelJob(j.ID)
	l.letGone(j, why)
	return true
}

// LetGoAll lets go of every active and waiting job: the lease they were
// held under was lost.
func (l *Lifecycle) LetGoAll(why string) {
	for _, j := range l.Jobs() {
		l.LetGo(j, why)
	}
	l.mu.Lock()
	clear(l.waiting)
	clear(l.pending)
	l.mu.Unlock()
}

// Unsent books a copy that could not be sent: the caller could not
// prepare it (err). Bad stored bytes (store.ErrCorrupt) fail the job at
// once, as trying again reads them again; other errors are a failed try.
func (l *Lifecycle) Unsent(a sched.Assignment, err error) {
	j := l.Job(a.Job)
	if j == nil {
		l.sched.Done(a)
		return
	}
	j.release(a.Seq)
	if errors.Is(err, store.ErrCorrupt) {
		l.sched.Fail(a, err)
		l.End(j, store.JobFailed, fmt.Sprintf("unit %d: the server could not prepare it: %v", a.Unit, err))
		return
	}
	l.Failed(a, "", "the server could not prepare it: "+err.Error())
}

// Result books the result of copy a of job j (as Job returned it before
// the caller stored the result) from worker, stored as blob id, with its
// compute time. The first result of a unit counts (counted): it is
// queued for the store, and the one that makes every unit done starts
// the job's assembly. A later copy's different result, or any result
// after the job ended (ended), is spare: j's intermediate blobs include
// it.
func (l *Lifecycle) Result(j *Job, a sched.Assignment, worker, id string, computeNanos int64) (counted, ended bool) {
	j.release(a.Seq)
	id, ended = j.offer(a.Unit, id)
	counted, _ = l.sched.Done(a)
	if ended || !counted {
		return false, ended
	}
	if l.cfg.Counted != nil {
		l.cfg.Counted(a.Job, a.Unit)
	}
	// The result is queued for the store before the job counts it: the
	// result that completes the job is queued behind every other, and
	// the flush before assembly finds them all recorded. (The
	// scheduler's own "job done" cannot say so: another stream's result
	// may be counted there and not queued yet.)
	l.rec.add(store.UnitResult{Job: a.Job, ID: a.Unit, Worker: worker, Result: id, ComputeNanos: computeNanos, Epoch: j.Rec.Epoch})
	if j.count(a.Unit, computeNanos) {
		l.mu.Lock()
		l.goBG(func() { l.assemble(j) })
		l.mu.Unlock()
	}
	return true, false
}

// Preempted books that copy a, which the scheduler took back
// (sched.Preempt), is stopped or gone: the scheduler requeued its unit
// already, and no try or loss is counted.
func (l *Lifecycle) Preempted(a sched.Assignment) {
	if j := l.Job(a.Job); j != nil {
		j.release(a.Seq)
	}
}

// Stale books a result or loss of copy a of a job no longer active.
func (l *Lifecycle) Stale(a sched.Assignment) { l.sched.Done(a) }

// Failed books that copy a failed with msg on worker (empty: before it
// left the server): the unit runs again, on another worker where there
// is one, or, after its last try, its job fails with msg.
func (l *Lifecycle) Failed(a sched.Assignment, worker, msg string) {
	j := l.Job(a.Job)
	if j == nil {
		l.sched.Done(a)
		return
	}
	j.release(a.Seq)
	where := ""
	if worker != "" {
		where = " on worker " + worker
	}
	tries, retried, e := l.sched.Fail(a, errors.New(msg))
	switch {
	case retried:
		j.failed(a.Unit, fmt.Sprintf("failed%s: %s", where, msg),
			fmt.Sprintf("unit %d failed%s (try %d; it runs again): %s", a.Unit, where, tries, msg))
		l.persist(func(ctx context.Context) error { return l.store.RetryUnit(fenced(ctx, j), a.Job, a.Unit, worker, msg) })
		l.log.Warn("unit failed; it runs again", "job", a.Job, "unit", a.Unit, "worker", worker, "err", msg)
	case e != nil:
		j.failed(a.Unit, fmt.Sprintf("failed%s: %s", where, msg), "")
		l.persist(func(ctx context.Context) error { return l.store.FailUnit(fenced(ctx, j), a.Job, a.Unit, worker, msg) })
		tries := ""
		if e.Tries > 1 {
			tries = fmt.Sprintf(" (try %d of %d)", e.Tries, e.Tries)
		}
		l.unitFailed(e, fmt.Sprintf("unit %d failed%s%s: %s", a.Unit, where, tries, msg))
	}
}

// Lost books that copy a will bring no result: why says where it went.
// The unit runs again unless it was lost too often: then its job fails.
func (l *Lifecycle) Lost(a sched.Assignment, why string) {
	if j := l.Job(a.Job); j != nil {
		j.release(a.Seq)
		j.lostCopy(a.Unit, why)
	}
	if e := l.sched.Lost(a); e != nil {
		l.unitFailed(e, "")
	}
}

// LostAll books the copies the scheduler took back from a worker (it
// left, or has fewer streams) and fails the jobs the scheduler gave up.
func (l *Lifecycle) LostAll(lost []sched.Assignment, errs []*sched.UnitError) {
	for _, a := range lost {
		if j := l.Job(a.Job); j != nil {
			j.release(a.Seq)
			j.lostCopy(a.Unit, fmt.Sprintf("lost: worker %s went away while it ran", a.Worker))
		}
	}
	for _, e := range errs {
		l.unitFailed(e, "")
	}
}

// unitFailed fails the job the scheduler gave up. msg, if set, replaces
// the scheduler's account.
func (l *Lifecycle) unitFailed(e *sched.UnitError, msg string) {
	if l.Closing() {
		return // losses while shutting down are not the job's fault
	}
	j := l.Job(e.Job)
	if j == nil {
		return
	}
	if msg == "" {
		msg = e.Error()
	}
	l.End(j, store.JobFailed, msg)
}

// End fails or cancels an active job (state is store.JobFailed or
// store.JobCanceled). It reports false if the job had ended already, or
// is being assembled.
func (l *Lifecycle) End(j *Job, state store.JobState, msg string) bool {
	if !j.end() {
		return false
	}
	l.sched.CancelJob(j.ID)
	err := l.saveEnd(j.ID, unsaved{state: state, msg: msg, save: func(ctx context.Context) error {
		if state == store.JobCanceled {
			return l.store.CancelJob(fenced(ctx, j), j.ID, msg)
		}
		return l.store.FailJob(fenced(ctx, j), j.ID, msg)
	}})
	if errors.Is(err, store.ErrFenced) {
		l.letGone(j, err.Error())
		return true
	}
	l.finish(j, state, msg)
	return true
}

// assemble turns a complete job's results into its output and ends it.
func (l *Lifecycle) assemble(j *Job) {
	ctx, cancel := l.lifetime()
	defer cancel()
	fail := func(msg string) {
		if l.Closing() {
			return // the job resumes at the next start
		}
		l.End(j, store.JobFailed, msg)
	}
	if err := l.rec.flush(ctx); err != nil {
		fail(fmt.Sprintf("recording unit results: %v", err))
		return
	}
	id, _, err := l.hooks.Assemble(ctx, j)
	if err != nil {
		fail(err.Error())
		return
	}
	j.setOutput(id)
	if !j.end() {
		return // canceled meanwhile
	}
	if err := l.store.FinishJob(fenced(ctx, j), j.ID, id); err != nil {
		if l.Closing() {
			return
		}
		if errors.Is(err, store.ErrFenced) {
			l.letGone(j, err.Error())
			return
		}
		if errors.Is(err, store.ErrConflict) {
			// The store disagrees (a unit's result was not recorded):
			// the job cannot be done.
			l.log.Error("recording job done failed", "job", j.ID, "err", err)
			msg := "recording the output: " + err.Error()
			l.saveEnd(j.ID, unsaved{state: store.JobFailed, msg: msg,
				save: func(ctx context.Context) error { return l.store.FailJob(fenced(ctx, j), j.ID, msg) }})
			l.finish(j, store.JobFailed, msg)
			return
		}
		// The output is stored; only the record is missing.
		l.saveEnd(j.ID, unsaved{state: store.JobDone, output: id,
			save: func(ctx context.Context) error { return l.store.FinishJob(fenced(ctx, j), j.ID, id) }})
	}
	l.finish(j, store.JobDone, "")
}

// letGone retires an active job that ended (j.end was called) but
// belongs to another server now.
func (l *Lifecycle) letGone(j *Job, why string) {
	l.log.Warn("letting go of a job another server owns", "job", j.ID, "why", why)
	l.mu.Lock()
	if l.jobs[j.ID] == j {
		delete(l.jobs, j.ID)
	}
	l.mu.Unlock()
	l.hooks.Ended(j, "", why)
	close(j.finished)
}

// finish retires an active job that reached a final state.
func (l *Lifecycle) finish(j *Job, state store.JobState, msg string) {
	if tries, _ := j.Tries(len(j.Units)); len(tries) > 0 {
		l.persist(func(ctx context.Context) error { return l.store.SaveTries(fenced(ctx, j), j.ID, tries) })
	}
	l.mu.Lock()
	if l.jobs[j.ID] == j {
		delete(l.jobs, j.ID)
	}
	l.mu.Unlock()
	l.hooks.Ended(j, state, msg)
	close(j.finished)
	l.releaseLater(j.ID)
}

// persist runs a small state write that must not depend on a request's or
// stream's context.
func (l *Lifecycle) persist(fn func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fn(ctx); err != nil {
		l.log.Warn("state write failed", "err", err)
	}
}

// Wait returns when job id is final, or after d, or when ctx ends or
// the Lifecycle shuts down.
func (l *Lifecycle) Wait(ctx context.Context, id uint64, d time.Duration) {
	j := l.Job(id)
	if j == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-j.finished:
	case <-t.C:
	case <-ctx.Done():
	case <-l.stop:
	}
}

// resultsLost fails the jobs whose results the recorder could not
// record: the store refused them for long (a full disk), so the jobs
// cannot be finished from what the store holds.
func (l *Lifecycle) resultsLost(rs []store.UnitResult, err error) {
	if l.Closing() {
		return // the results are lost with the process anyway; units run again at the next start
	}
	units := map[uint64][]uint64{}
	var order []uint64
	for _, r := range rs {
		if _, ok := units[r.Job]; !ok {
			order = append(order, r.Job)
		}
		units[r.Job] = append(units[r.Job], r.ID)
	}
	for _, id := range order {
		j := l.Job(id)
		if j == nil {
			continue
		}
		what := "the results of units " + joinIDs(units[id])
		if len(units[id]) == 1 {
			what = "the result of unit " + joinIDs(units[id])
		}
		advice := "submit the job again"
		if store.IsNoSpace(err) {
			advice = "free space on the server's data disk, then submit the job again"
		}
		l.End(j, store.JobFailed, fmt.Sprintf("recording %s in the job database failed: %v; %s", what, err, advice))
	}
}
