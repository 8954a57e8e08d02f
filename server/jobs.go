package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
)

// maxInFlight bounds a job's in_flight.
const maxInFlight = 1024

// submit validates a job request, splits the job into units, stores it
// and hands it to the scheduler.
func (s *Server) submit(ctx context.Context, req api.JobRequest) (api.JobStatus, error) {
	op, err := s.cfg.Ops.Lookup(req.Op)
	if err != nil {
		return api.JobStatus{}, opsError("job request", err)
	}
	policy, err := sched.ParsePolicy(req.Policy)
	if err != nil {
		return api.JobStatus{}, kindf(errBadRequest, "job request: %v", err)
	}
	if req.InFlight < 0 || req.InFlight > maxInFlight {
		return api.JobStatus{}, kindf(errBadRequest, "job request: in_flight %d: want 0 (the server's default) to %d", req.InFlight, maxInFlight)
	}
	if !store.ValidID(req.Input) {
		return api.JobStatus{}, kindf(errBadRequest, "job request: input %q is not a blob id; upload the data first (braid put FILE) and pass the id it prints", req.Input)
	}
	in, size, err := s.blobs.Open(req.Input)
	if errors.Is(err, store.ErrNotFound) {
		return api.JobStatus{}, kindf(errNotFound, "job request: no blob %s on this server; upload the data first (braid put FILE)", req.Input)
	}
	if err != nil {
		return api.JobStatus{}, err
	}
	defer in.Close()
	hint := ops.Hint{Units: req.Units, TileW: req.Tile.W, TileH: req.Tile.H, Repeat: req.Repeat}
	specs, err := op.Split(in, size, req.Params, hint)
	if err != nil {
		return api.JobStatus{}, opsError("job request", err)
	}
	units, err := s.layout(ctx, req.Input, specs)
	if err != nil {
		return api.JobStatus{}, err
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return api.JobStatus{}, kindf(errUnavailable, "the server is shutting down; submit again once it is back")
	}
	job, err := s.db.CreateJob(ctx, store.Job{Op: req.Op, Input: req.Input, Params: req.Params, Units: req.Units,
		TileW: req.Tile.W, TileH: req.Tile.H, Repeat: req.Repeat, Policy: policy.String(), InFlight: req.InFlight}, units)
	if err != nil {
		return api.JobStatus{}, err
	}
	for i := range units {
		units[i].State = store.UnitPending
	}
	r, err := newRun(job, op, units)
	if err != nil {
		return api.JobStatus{}, err
	}
	if err := s.schedule(r); err != nil {
		s.persist(func(ctx context.Context) error { return s.db.FailJob(ctx, job.ID, err.Error()) })
		return api.JobStatus{}, err
	}
	s.log.Info("job accepted", "job", job.ID, "op", req.Op, "units", len(units), "policy", policy.String())
	return s.status(ctx, job.ID)
}

// opsError words an error of package ops for the API: without its
// sentinel in the text, with it for httpStatus.
func opsError(what string, err error) error {
	return withKind(err, fmt.Errorf("%s: %s", what, ops.Message(err)))
}

// layout describes the units for the store. A unit reading the input
// refers to its byte range; data Split made (image tiles) goes into one
// new blob, each distinct slice once (a repeated job shares them).
func (s *Server) layout(ctx context.Context, input string, specs []ops.UnitSpec) ([]store.Unit, error) {
	units := make([]store.Unit, len(specs))
	type key struct {
		p *byte
		n int
	}
	offsets := map[key]int64{}
	var data bytes.Buffer
	var fromData []int
	for i, sp := range specs {
		u := store.Unit{ID: uint64(i), Params: sp.Params}
		for _, d := range sp.Deps {
			u.Deps = append(u.Deps, uint64(d))
		}
		switch {
		case sp.FromInput:
			u.Blob, u.Off, u.Len = input, sp.Off, sp.Len
		case len(sp.Data) > 0:
			k := key{&sp.Data[0], len(sp.Data)}
			off, ok := offsets[k]
			if !ok {
				off = int64(data.Len())
				data.Write(sp.Data)
				offsets[k] = off
			}
			u.Off, u.Len = off, int64(len(sp.Data))
			fromData = append(fromData, i)
		}
		units[i] = u
	}
	if len(fromData) > 0 {
		id, _, err := s.blobs.Put(ctx, &data)
		if err != nil {
			return nil, fmt.Errorf("store the units' data: %w", err)
		}
		for _, i := range fromData {
			units[i].Blob = id
		}
	}
	return units, nil
}

// schedule makes r an active job and gives it to the scheduler; a job
// whose units are all done is assembled instead (once Run runs).
func (s *Server) schedule(r *run) error {
	sj := sched.Job{ID: r.id, Policy: r.policy, InFlight: r.job.InFlight, Units: make([]sched.Unit, len(r.units))}
	for i, u := range r.units {
		sj.Units[i] = sched.Unit{ID: uint64(i), Op: r.op.Name(), Deps: u.deps, Done: u.done}
	}
	s.mu.Lock()
	s.jobs[r.id] = r
	s.mu.Unlock()
	err := s.sched.AddJob(sj)
	if errors.Is(err, sched.ErrJobComplete) {
		s.mu.Lock()
		if s.started {
			s.bg.Go(func() { s.assemble(r) })
		} else {
			s.resume = append(s.resume, r)
		}
		s.mu.Unlock()
		return nil
	}
	if err != nil {
		s.mu.Lock()
		delete(s.jobs, r.id)
		s.mu.Unlock()
	}
	return err
}

// recover resumes the unfinished jobs of the store: units that were out
// on workers when the server stopped are pending again, units done keep
// their results.
func (s *Server) recover(ctx context.Context) error {
	reset, err := s.db.ResetRunning(ctx)
	if err != nil {
		return err
	}
	jobs, err := s.db.Unfinished(ctx)
	if err != nil {
		return err
	}
	fail := func(j store.Job, msg string) {
		s.log.Error("job cannot resume; failing it", "job", j.ID, "err", msg)
		if err := s.db.FailJob(ctx, j.ID, msg); err != nil {
			s.log.Error("failing job", "job", j.ID, "err", err)
		}
	}
	resumed := 0
	for _, j := range jobs {
		op, err := s.cfg.Ops.Lookup(j.Op)
		if err != nil {
			fail(j, fmt.Sprintf("the server restarted without operation %q: %v", j.Op, err))
			continue
		}
		units, err := s.db.Units(ctx, j.ID)
		if err != nil {
			return err
		}
		r, err := newRun(j, op, units)
		if err != nil {
			fail(j, err.Error())
			continue
		}
		// A result lost with the machine (unit results are not synced
		// unless Config.Durable) makes its unit run again.
		for i := range r.units {
			if u := &r.units[i]; u.done {
				if _, err := s.results.Stat(u.result); err != nil {
					u.done, u.result = false, ""
					r.done--
				}
			}
		}
		if err := s.schedule(r); err != nil {
			fail(j, err.Error())
			continue
		}
		resumed++
	}
	if len(jobs) > 0 {
		s.log.Info("resumed unfinished jobs", "jobs", resumed, "units", reset)
	}
	return nil
}

// assemble turns a job's results into its output.
func (s *Server) assemble(r *run) {
	ctx, cancel := s.lifetime()
	defer cancel()
	start := time.Now()
	fail := func(msg string) {
		if s.isClosing() {
			return // the job resumes at the next start
		}
		s.endJob(r, store.JobFailed, msg)
	}
	if err := s.rec.flush(ctx); err != nil {
		fail(fmt.Sprintf("recording unit results: %v", err))
		return
	}
	results, err := s.readResults(r)
	if err != nil {
		fail(fmt.Sprintf("assemble: %v", err))
		return
	}
	out, err := r.op.Assemble(r.job.Params, r.hint, results)
	if err != nil {
		fail(fmt.Sprintf("assemble: %v", err))
		return
	}
	id, size, err := s.blobs.Put(ctx, bytes.NewReader(out))
	if err != nil {
		fail(fmt.Sprintf("store the output: %v", err))
		return
	}
	if !r.end() {
		return // canceled meanwhile
	}
	if err := s.db.FinishJob(ctx, r.id, id); err != nil {
		if s.isClosing() {
			return
		}
		s.log.Error("recording job done failed", "job", r.id, "err", err)
		s.persist(func(ctx context.Context) error { return s.db.FailJob(ctx, r.id, "recording the output: "+err.Error()) })
	}
	s.finish(r)
	s.log.Info("job done", "job", r.id, "op", r.op.Name(), "units", len(r.units), "blob", id, "bytes", size,
		"assembly", time.Since(start).Round(time.Millisecond))
}

// readResults reads the results of r's units in order; identical results
// share one slice.
func (s *Server) readResults(r *run) ([][]byte, error) {
	ids := r.resultIDs()
	out := make([][]byte, len(ids))
	byID := map[string][]byte{}
	for i, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("unit %d has no result", i)
		}
		b, ok := byID[id]
		if !ok {
			var err error
			if b, err = s.readBlob(s.results, id); err != nil {
				return nil, fmt.Errorf("result of unit %d: %w", i, err)
			}
			byID[id] = b
		}
		out[i] = b
	}
	return out, nil
}

func (s *Server) readBlob(d *store.Disk, id string) ([]byte, error) {
	f, size, err := d.Open(id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("read blob %s: %w", id, err)
	}
	return b, nil
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// run returns the active job id, or nil.
func (s *Server) run(id uint64) *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[id]
}

// unitFailed fails the job the scheduler gave up. msg, if set, replaces
// the scheduler's account.
func (s *Server) unitFailed(e *sched.UnitError, msg string) {
	if s.isClosing() {
		return // losses while shutting down are not the job's fault
	}
	r := s.run(e.Job)
	if r == nil {
		return
	}
	if msg == "" {
		msg = e.Error()
	}
	s.endJob(r, store.JobFailed, msg)
}

// endJob fails or cancels an active job.
func (s *Server) endJob(r *run, state store.JobState, msg string) bool {
	if !r.end() {
		return false
	}
	s.sched.CancelJob(r.id)
	s.persist(func(ctx context.Context) error {
		if state == store.JobCanceled {
			return s.db.CancelJob(ctx, r.id, msg)
		}
		return s.db.FailJob(ctx, r.id, msg)
	})
	s.finish(r)
	if state == store.JobCanceled {
		s.log.Info("job canceled", "job", r.id, "err", msg)
	} else {
		s.log.Warn("job failed", "job", r.id, "err", msg)
	}
	return true
}

// finish retires an active job that reached a final state.
func (s *Server) finish(r *run) {
	s.mu.Lock()
	if s.jobs[r.id] == r {
		delete(s.jobs, r.id)
	}
	s.mu.Unlock()
	r.closeReaders()
	close(r.finished)
}

// cancel cancels an unfinished job.
func (s *Server) cancel(ctx context.Context, id uint64) error {
	r := s.run(id)
	if r == nil {
		j, err := s.db.Job(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return kindf(errNotFound, "no job %d on this server", id)
		}
		if err != nil {
			return err
		}
		return kindf(errConflict, "job %d is already %s", id, j.State)
	}
	if !s.endJob(r, store.JobCanceled, "canceled by a client") {
		return kindf(errConflict, "job %d is finishing; it cannot be canceled any more", id)
	}
	return nil
}

// waitJob returns when job id is final, or after d, or when ctx ends.
func (s *Server) waitJob(ctx context.Context, id uint64, d time.Duration) {
	r := s.run(id)
	if r == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.finished:
	case <-t.C:
	case <-ctx.Done():
	case <-s.stop:
	}
}

// status returns a job's status.
func (s *Server) status(ctx context.Context, id uint64) (api.JobStatus, error) {
	j, err := s.db.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return api.JobStatus{}, kindf(errNotFound, "no job %d on this server", id)
	}
	if err != nil {
		return api.JobStatus{}, err
	}
	return s.jobStatus(j), nil
}

// jobStatus is the API view of a job record, with the live counts of an
// active job (the store's lag behind by a batch).
func (s *Server) jobStatus(j store.Job) api.JobStatus {
	st := api.JobStatus{
		Job: j.ID, Op: j.Op, Input: j.Input, Params: j.Params, Policy: j.Policy, State: api.JobState(j.State),
		Output: j.Output, Error: j.Error,
		Units:   api.UnitCounts{Total: j.Total, Done: j.Done, Failed: j.Failed, Running: j.Running},
		Timings: api.Timings{Submitted: j.Submitted, Started: j.Started, Finished: j.Finished, ComputeNanos: j.ComputeNanos},
	}
	if len(st.Params) == 0 {
		st.Params = nil
	}
	if r := s.run(j.ID); r != nil && !j.State.Final() {
		done, running, compute, started := r.counts()
		st.Units.Done, st.Units.Running, st.Timings.ComputeNanos = done, running, compute
		if !started.IsZero() {
			st.State = api.JobRunning
			if st.Timings.Started.IsZero() {
				st.Timings.Started = started.UTC()
			}
		}
		if running == 0 && done < st.Units.Total {
			if err := s.sched.Blocked(j.ID); err != nil {
				st.Error = err.Error()
			}
		}
	}
	return st
}
