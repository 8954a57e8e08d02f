package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/braid-hpc/braid/store"
)

// Jobs whose input is another job's output wait for that job: they are
// stored without units, and released (split and Added, by
// Hooks.Release) when it is done, or failed when it fails.

// WaitFor makes job id wait for job parent. If parent is neither active
// nor waiting here, the store says whether it ended (id is released at
// once) or not: it is between two waits (a join released by one input
// job waits for the next) or another server runs it, and its end
// releases id (finish, failWaiting or Sweep).
func (l *Lifecycle) WaitFor(id, parent uint64) {
	l.mu.Lock()
	_, running := l.jobs[parent]
	_, waiting := l.pending[parent]
	l.waiting[parent] = append(l.waiting[parent], id)
	l.pending[id] = parent
	l.mu.Unlock()
	if running || waiting {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p, err := l.store.Job(ctx, parent); err != nil || p.State.Final() {
		l.releaseLater(parent)
	}
}

// releaseLater releases the jobs waiting for parent, which reached a
// final state, in the background; while shutting down they stay waiting,
// to be released at the next start.
func (l *Lifecycle) releaseLater(parent uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiting[parent]) == 0 {
		return
	}
	if !l.goBG(func() { l.releaseWaiting(parent) }) && !l.started && !l.closing {
		l.release = append(l.release, parent)
	}
}

// releaseWaiting starts or fails the jobs waiting for parent.
func (l *Lifecycle) releaseWaiting(parent uint64) {
	l.mu.Lock()
	kids := l.waiting[parent]
	delete(l.waiting, parent)
	for _, k := range kids {
		delete(l.pending, k)
	}
	l.mu.Unlock()
	if len(kids) == 0 {
		return
	}
	ctx, cancel := l.lifetime()
	defer cancel()
	p, err := l.store.Job(ctx, parent)
	for _, id := range kids {
		if err != nil {
			l.failWaiting(ctx, id, fmt.Sprintf("reading input job %d: %v", parent, err))
			continue
		}
		l.startWaiting(ctx, id, p)
	}
}

// startWaiting starts job id, whose input job p reached a final state.
// Its writes are fenced by the Lifecycle's epoch: a waiting job another
// server took over is left to it.
func (l *Lifecycle) startWaiting(ctx context.Context, id uint64, p store.Job) {
	ctx = store.Fenced(ctx, l.epoch.Load())
	if p.State != store.JobDone {
		j, err := l.store.Job(ctx, id)
		if err != nil || j.State.Final() {
			return // canceled meanwhile
		}
		l.failWaiting(ctx, id, fmt.Sprintf("input job %d is %s: %s", p.ID, p.State, p.Error))
		return
	}
	if err := l.hooks.Release(ctx, id, p); errors.Is(err, store.ErrFenced) {
		l.log.Warn("a waiting job belongs to another server now", "job", id, "err", err)
	} else if err != nil {
		l.failWaiting(ctx, id, err.Error())
	}
}

// failWaiting fails a waiting job and, in turn, the jobs waiting for it.
func (l *Lifecycle) failWaiting(ctx context.Context, id uint64, msg string) {
	err := l.store.FailJob(store.Fenced(ctx, l.epoch.Load()), id, msg)
	if errors.Is(err, store.ErrFenced) {
		// Another server owns it, and the jobs waiting for it follow
		// its end there (Sweep).
		l.log.Warn("a waiting job belongs to another server now", "job", id, "err", err)
		return
	}
	if err != nil && !errors.Is(err, store.ErrConflict) {
		l.log.Warn("failing a waiting job failed", "job", id, "err", err)
	}
	l.log.Warn("job failed", "job", id, "err", msg)
	l.releaseWaiting(id)
}

// CancelWaiting cancels job id if it waits for its input job; ok
// reports whether it did.
func (l *Lifecycle) CancelWaiting(ctx context.Context, id uint64) (ok bool, err error) {
	l.mu.Lock()
	parent, ok := l.pending[id]
	if ok {
		delete(l.pending, id)
		l.waiting[parent] = slices.DeleteFunc(l.waiting[parent], func(k uint64) bool { return k == id })
	}
	l.mu.Unlock()
	if !ok {
		return false, nil
	}
	if err := l.store.CancelJob(ctx, id, "canceled by a client"); err != nil {
		return true, err
	}
	l.releaseWaiting(id)
	return true, nil
}

// RecoverWaiting puts back the waiting jobs of the store after a
// restart: started if their input job is final (done: released; else
// failed), waiting otherwise. jobs are in ID order, so an input job
// comes first.
func (l *Lifecycle) RecoverWaiting(ctx context.Context, jobs []store.Job) {
	for _, j := range jobs {
		p, err := l.store.Job(ctx, j.Spec.InputJob)
		switch {
		case err != nil:
			l.failWaiting(ctx, j.ID, fmt.Sprintf("input job %d: %v", j.Spec.InputJob, err))
		case p.State.Final():
			l.startWaiting(ctx, j.ID, p)
		default:
			l.mu.Lock()
			l.pending[j.ID] = p.ID
			l.waiting[p.ID] = append(l.waiting[p.ID], j.ID)
			l.mu.Unlock()
		}
	}
}

// Sweep brings the Lifecycle in line with a job store other servers
// share: it lets go of the active jobs that ended elsewhere (a client
// canceled them through another server) or that another server took
// over, forgets the waiting jobs that did, and releases the jobs waiting
// for an input job that ended elsewhere. A server that shares its
// database calls it every few moments.
func (l *Lifecycle) Sweep(ctx context.Context) error {
	active := l.Jobs()
	l.mu.Lock()
	ids := make([]uint64, 0, len(active)+len(l.pending)+len(l.waiting))
	for _, j := range active {
		ids = append(ids, j.ID)
	}
	var parents, waiters []uint64
	for p := range l.waiting {
		if _, ok := l.jobs[p]; !ok {
			parents = append(parents, p)
		}
	}
	for w := range l.pending {
		waiters = append(waiters, w)
	}
	l.mu.Unlock()
	ids = append(append(ids, parents...), waiters...)
	if len(ids) == 0 {
		return nil
	}
	owners, err := l.store.Owners(ctx, ids)
	if err != nil {
		return err
	}
	for _, j := range active {
		o, ok := owners[j.ID]
		switch {
		case !ok:
			l.LetGo(j, "it is no longer in the job database")
		case o.State.Final():
			l.LetGo(j, fmt.Sprintf("it is %s in the job database", o.State))
		case o.Epoch != j.Rec.Epoch:
			l.LetGo(j, fmt.Sprintf("server %q took it over", o.Server))
		}
	}
	e := l.epoch.Load()
	for _, w := range waiters {
		if o, ok := owners[w]; !ok || o.State.Final() || o.Epoch != e {
			l.mu.Lock()
			if p, ok := l.pending[w]; ok {
				delete(l.pending, w)
				l.waiting[p] = slices.DeleteFunc(l.waiting[p], func(k uint64) bool { return k == w })
				if len(l.waiting[p]) == 0 {
					delete(l.waiting, p)
				}
			}
			l.mu.Unlock()
		}
	}
	for _, p := range parents {
		if o, ok := owners[p]; !ok || o.State.Final() {
			l.releaseLater(p)
		}
	}
	return nil
}
