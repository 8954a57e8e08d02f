package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/lifecycle"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/wasm"
)

// maxInFlight bounds a job's in_flight.
const maxInFlight = 1024

// submit validates a job request, splits the job into units, stores it
// and hands it to the scheduler.
func (s *Server) submit(ctx context.Context, who principal, req api.JobRequest) (api.JobStatus, error) {
	return s.submitWith(ctx, req, submitOpts{who: who})
}

func (s *Server) submitWith(ctx context.Context, req api.JobRequest, o submitOpts) (api.JobStatus, error) {
	if err := s.room("job request", 0); err != nil {
		return api.JobStatus{}, err
	}
	switch {
	case req.Input != "" && len(req.Inputs) > 0:
		return api.JobStatus{}, kindf(errBadRequest, "job request: give input or inputs, not both")
	case len(req.Inputs) > 1:
		return s.submitFanIn(ctx, req, o)
	case len(req.Inputs) == 1:
		req.Input, req.Inputs = req.Inputs[0], nil
	}
	if parent, ok, err := inputJob(req.Input); err != nil {
		return api.JobStatus{}, err
	} else if ok {
		return s.submitAfter(ctx, req, parent, o)
	}
	rec, err := s.jobRecord(req)
	if err != nil {
		return api.JobStatus{}, err
	}
	rec.Spec.Pipeline, rec.Spec.Step, rec.Owner = o.pipeline, o.step, o.who.owner()
	jo, err := s.jobOps(rec)
	if err != nil {
		return api.JobStatus{}, err
	}
	if !store.ValidID(req.Input) {
		return api.JobStatus{}, kindf(errBadRequest, "job request: input %q is not a blob id; upload the data first (braid put FILE) and pass the id it prints, or give job:ID", req.Input)
	}
	if ok, err := s.blobVisible(ctx, o.who, req.Input); err != nil {
		return api.JobStatus{}, err
	} else if !ok {
		return api.JobStatus{}, kindf(errNotFound, "job request: no blob %s on this server; upload it first (braid put FILE)", req.Input)
	}
	return s.create(ctx, rec, jo, req.Input)
}

// start makes a stored job with units active. Its input and its units'
// data were verified (or written) just now.
func (s *Server) start(job store.Job, jo jobOps, units []store.Unit) error {
	for i := range units {
		units[i].State = store.UnitPending
	}
	r, err := newRun(job, jo, units)
	if err != nil {
		return err
	}
	for _, u := range units {
		if u.Blob != "" {
			r.checked[u.Blob] = true
		}
	}
	if _, err := s.lc.Add(job, units, r.place(job), r); err != nil {
		s.persist(func(ctx context.Context) error { return s.db.FailJob(ctx, job.ID, err.Error()) })
		return err
	}
	return nil
}

// splitJob reads the input blob and splits the job into units. On
// success the input and the units' data are pinned: the caller unpins
// them (unpinUnits) once the job's record refers to them.
func (s *Server) splitJob(ctx context.Context, rec store.Job, jo jobOps, input string) ([]store.Unit, error) {
	s.pin(input)
	units, err := s.split(ctx, rec, jo, input)
	if err != nil {
		s.unpin(input)
		return nil, err
	}
	if len(rec.Spec.InputSizes) > 0 && jo.main.module != "" {
		addFiles(units, input, rec.Spec.InputNames, rec.Spec.InputSizes)
	}
	return units, nil
}

func (s *Server) split(ctx context.Context, rec store.Job, jo jobOps, input string) ([]store.Unit, error) {
	in, size, err := s.blobs.Open(input)
	if errors.Is(err, store.ErrNotFound) {
		return nil, kindf(errNotFound, "job request: no blob %s on this server; upload the data first (braid put FILE)", input)
	}
	if err != nil {
		return nil, err
	}
	defer in.Close()
	if d, ok, err := s.dataset(ctx, input); err != nil {
		return nil, fmt.Errorf("job input: %w", err)
	} else if ok {
		return s.splitDataset(ctx, rec, jo, d)
	}
	if jo.merge.Kind == ops.MergeNone {
		return nil, kindf(errBadRequest, "job request: merge none keeps a dataset's members apart, and the input %s is no dataset; merge by concat or reduce:OP", input)
	}
	// Split and the units read the input at offsets, which cannot be
	// checked as they go: the whole input is checked once, streamed.
	if err := s.blobs.Verify(ctx, input); err != nil {
		return nil, fmt.Errorf("job input: %w", err)
	}
	hint := ops.Hint{Units: rec.Units, TileW: rec.TileW, TileH: rec.TileH, Repeat: rec.Repeat}
	st, ok := jo.op.(ops.Streamer)
	if !ok {
		specs, err := jo.op.Split(in, size, rec.Params, hint)
		if err != nil {
			return nil, opsError("job request", err)
		}
		return s.layout(ctx, input, specs, nil)
	}
	// The units' data (image tiles) goes to a scratch file, then into
	// one blob: a large image is never whole in memory.
	dir, data, err := s.scratchFile()
	if err != nil {
		return nil, err
	}
	defer data.Close()
	specs, n, err := st.SplitStored(in, size, rec.Params, hint, dir, data)
	if err != nil {
		return nil, opsError("job request", err)
	}
	return s.layout(ctx, input, specs, io.NewSectionReader(data, 0, n))
}

// scratchFile returns the server's scratch directory, where operations
// keep large intermediates, and a new file in it, already removed from
// the directory so that nothing is left behind.
func (s *Server) scratchFile() (string, *os.File, error) {
	dir := filepath.Join(s.cfg.Data, "scratch")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("scratch directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "split-*")
	if err != nil {
		return "", nil, fmt.Errorf("scratch file: %w", err)
	}
	_ = os.Remove(f.Name())
	return dir, f, nil
}

// jobRecord checks a job request and turns it into the job's record
// (without ID, state and counts).
func (s *Server) jobRecord(req api.JobRequest) (store.Job, error) {
	res, err := s.resolve(req.Op)
	if err != nil {
		return store.Job{}, err
	}
	policy, err := sched.ParsePolicy(req.Policy)
	if err != nil {
		return store.Job{}, kindf(errBadRequest, "job request: %v", err)
	}
	if req.InFlight < 0 || req.InFlight > maxInFlight {
		return store.Job{}, kindf(errBadRequest, "job request: in_flight %d: want 0 (the server's default) to %d", req.InFlight, maxInFlight)
	}
	rec := store.Job{Op: req.Op, Input: req.Input, Params: req.Params, Units: req.Units, TileW: req.Tile.W, TileH: req.Tile.H,
		Repeat: req.Repeat, Policy: policy.String(), InFlight: req.InFlight, Server: s.name, Epoch: s.lease.get().Epoch}
	sp := &rec.Spec
	sp.Module = res.module
	split, merge := req.Split, req.Merge
	if res.rec != nil {
		if split == "" && req.Units == 0 && req.Tile.IsZero() {
			split = res.rec.Split
		}
		if merge == "" {
			merge = res.rec.Merge
		}
	}
	if split != "" {
		v, err := ops.ParseSplit(split)
		if err != nil {
			return store.Job{}, opsError("job request: split", err)
		}
		if req.Units != 0 || !req.Tile.IsZero() {
			return store.Job{}, kindf(errBadRequest, "job request: give a split or units or a tile, not two of them")
		}
		sp.Split = v.String()
	}
	if merge != "" {
		v, err := ops.ParseMerge(merge)
		if err != nil {
			return store.Job{}, opsError("job request: merge", err)
		}
		sp.Merge = v.String()
		if v.Kind == ops.MergeReduce {
			red, err := s.resolve(v.Op)
			if err != nil {
				return store.Job{}, fmt.Errorf("job request: merge %s: %w", v, err)
			}
			sp.ReduceOp, sp.ReduceModule = v.Op, red.module
		}
	}
	switch {
	case req.UnitMem < 0 || req.UnitMem > wasm.MaxMemory:
		return store.Job{}, kindf(errBadRequest, "job request: unit_mem %d: want 0 (the server's default, %d) to %d bytes", req.UnitMem, s.cfg.UnitMem, int64(wasm.MaxMemory))
	case req.UnitOutput < 0 || req.UnitOutput > api.DefaultMaxMessage:
		return store.Job{}, kindf(errBadRequest, "job request: unit_output %d: want 0 (the server's default, %d) to %d bytes", req.UnitOutput, s.cfg.UnitOutput, api.DefaultMaxMessage)
	case req.MaxTries < 0 || req.MaxTries > 100:
		return store.Job{}, kindf(errBadRequest, "job request: max_tries %d: want 0 (the server's default, %d) to 100", req.MaxTries, s.cfg.MaxTries)
	}
	if sp.Module != "" || sp.ReduceModule != "" {
		mem := req.UnitMem
		if mem == 0 {
			mem = s.cfg.UnitMem
		}
		if most := s.maxUnitMem(); most > 0 && mem > most {
			return store.Job{}, kindf(errBadRequest, "job request: unit_mem %d: more than any live worker allows (the largest braid worker --max-unit-mem is %d); ask for less", mem, most)
		}
	}
	sp.UnitMem, sp.UnitOutput, sp.MaxTries = req.UnitMem, req.UnitOutput, req.MaxTries
	if req.UnitTimeout != "" {
		d, err := time.ParseDuration(req.UnitTimeout)
		if err != nil || d <= 0 || d > 24*time.Hour {
			return store.Job{}, kindf(errBadRequest, "job request: unit_timeout %q: want a duration from 1ms to 24h, e.g. 30s", req.UnitTimeout)
		}
		sp.UnitTimeoutMillis = max(d.Milliseconds(), 1)
	}
	return rec, nil
}

// jobOps are the operations of a job: the planned operation that splits
// and assembles it, what its units and its reduce unit run, and the
// reserved parameters of module units.
type jobOps struct {
	op           ops.Op
	main, reduce resolved
	// split and merge are the job's own (zero: the operation's).
	split ops.Split
	merge ops.Merge
	// extra are the reserved parameters of main's (0) and reduce's (1)
	// units when they run modules.
	extra [2]map[string]string
}

// jobOps resolves the operations of a job record, as submitted: modules
// by the hashes the job recorded.
func (s *Server) jobOps(j store.Job) (jobOps, error) {
	var jo jobOps
	var err error
	if jo.main, err = s.resolveRecorded(j.Op, j.Spec.Module); err != nil {
		return jobOps{}, opsError("job", err)
	}
	var sp ops.Split
	var mg ops.Merge
	if j.Spec.Split != "" {
		if sp, err = ops.ParseSplit(j.Spec.Split); err != nil {
			return jobOps{}, opsError("job: split", err)
		}
	}
	if j.Spec.Merge != "" {
		if mg, err = ops.ParseMerge(j.Spec.Merge); err != nil {
			return jobOps{}, opsError("job: merge", err)
		}
	}
	var reduce ops.Op
	if mg.Kind == ops.MergeReduce {
		if jo.reduce, err = s.resolveRecorded(j.Spec.ReduceOp, j.Spec.ReduceModule); err != nil {
			return jobOps{}, opsError("job: reduce", err)
		}
		reduce = jo.reduce.op
	}
	jo.split, jo.merge = sp, mg
	if jo.op, err = ops.Planned(jo.main.op, sp, mg, reduce); err != nil {
		return jobOps{}, opsError("job request", err)
	}
	limits := func(name string) map[string]string {
		mem, out, tmo := j.Spec.UnitMem, j.Spec.UnitOutput, j.Spec.UnitTimeoutMillis
		if mem == 0 {
			mem = s.cfg.UnitMem
		}
		if out == 0 {
			out = s.cfg.UnitOutput
		}
		if tmo == 0 {
			tmo = s.cfg.UnitTimeout.Milliseconds()
		}
		return map[string]string{api.ParamOpName: name, api.ParamMemory: strconv.FormatInt(mem, 10),
			api.ParamOutput: strconv.FormatInt(out, 10), api.ParamTimeout: strconv.FormatInt(tmo, 10)}
	}
	if jo.main.module != "" {
		jo.extra[0] = limits(j.Op)
	}
	if jo.reduce.module != "" {
		jo.extra[1] = limits(j.Spec.ReduceOp)
	}
	return jo, nil
}

// opsError words an error of package ops for the API: without its
// sentinel in the text, with it for httpStatus.
func opsError(what string, err error) error {
	return withKind(err, fmt.Errorf("%s: %s", what, ops.Message(err)))
}

// layout describes the units for the store. A unit reading the input
// refers to its byte range; data Split made (image tiles) goes into one
// new blob, each distinct slice once (a repeated job shares them); data
// SplitStored wrote to stored becomes a blob as it is.
func (s *Server) layout(ctx context.Context, input string, specs []ops.UnitSpec, stored *io.SectionReader) ([]store.Unit, error) {
	units := make([]store.Unit, len(specs))
	type key struct {
		p *byte
		n int
	}
	offsets := map[key]int64{}
	var data bytes.Buffer
	var fromData, fromStored []int
	for i, sp := range specs {
		u := store.Unit{ID: uint64(i), Params: sp.Params}
		for _, d := range sp.Deps {
			u.Deps = append(u.Deps, uint64(d))
		}
		switch {
		case sp.FromInput:
			u.Blob, u.Off, u.Len = input, sp.Off, sp.Len
		case sp.Stored:
			if stored == nil || sp.Off < 0 || sp.Len < 0 || sp.Off+sp.Len > stored.Size() {
				return nil, fmt.Errorf("unit %d: its data lies outside what the split stored", i)
			}
			u.Off, u.Len = sp.Off, sp.Len
			fromStored = append(fromStored, i)
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
		u.Reduce = sp.Reduce
		units[i] = u
	}
	for _, blob := range []struct {
		r     io.Reader
		units []int
	}{{&data, fromData}, {stored, fromStored}} {
		if len(blob.units) == 0 {
			continue
		}
		st, err := s.blobs.Stage(ctx, blob.r)
		if err != nil {
			return nil, storageError("store the units' data", err)
		}
		defer st.Discard()
		s.pin(st.ID)
		if err := st.Commit(ctx); err != nil {
			s.unpin(st.ID)
			return nil, storageError("store the units' data", err)
		}
		for _, i := range blob.units {
			units[i].Blob = st.ID
		}
	}
	return units, nil
}

// resume makes the unfinished jobs this server claimed active: units
// that were out on workers when their server stopped are pending again
// (store.ClaimJobs), units done keep their results.
func (s *Server) resume(ctx context.Context, jobs []store.Job) error {
	fail := func(j store.Job, msg string) {
		s.log.Error("job cannot resume; failing it", "job", j.ID, "err", msg)
		if err := s.db.FailJob(store.Fenced(ctx, j.Epoch), j.ID, msg); err != nil {
			s.log.Error("failing job", "job", j.ID, "err", err)
		}
	}
	resumed := 0
	var waiting []store.Job
	for _, j := range jobs {
		if j.Total == 0 && j.Spec.InputJob != 0 {
			waiting = append(waiting, j)
			continue
		}
		jo, err := s.jobOps(j)
		if err != nil {
			fail(j, fmt.Sprintf("the server restarted without operation %q: %v", j.Op, err))
			continue
		}
		units, err := s.db.Units(ctx, j.ID)
		if err != nil {
			return err
		}
		r, err := newRun(j, jo, units)
		if err != nil {
			fail(j, err.Error())
			continue
		}
		// A result lost with the machine (unit results are not synced
		// unless Config.Durable) makes its unit run again.
		for i := range units {
			if u := &units[i]; u.State == store.UnitDone {
				if _, err := s.results.Stat(u.Result); err != nil {
					u.State, u.Result = store.UnitPending, ""
				}
			}
		}
		if _, err := s.lc.Add(j, units, r.place(j), r); err != nil {
			fail(j, err.Error())
			continue
		}
		resumed++
	}
	s.lc.RecoverWaiting(ctx, waiting)
	if len(jobs) > 0 {
		s.log.Info("resumed unfinished jobs", "jobs", resumed, "waiting", len(waiting))
	}
	return nil
}

// Assemble implements lifecycle.Hooks: it turns a job's results into
// its output blob.
func (h hooks) Assemble(ctx context.Context, j *lifecycle.Job) (string, int64, error) {
	start := time.Now()
	id, size, err := h.s.assembleOutput(ctx, j)
	r := runOf(j)
	r.mu.Lock()
	r.size, r.took = size, time.Since(start)
	r.mu.Unlock()
	return id, size, err
}

// assembleOutput assembles r's output into a blob. An operation that
// streams (ops.Streamer) reads the results as it needs them and writes
// the output straight into the blob store; others get the results in
// memory.
//
// An output that is not a dataset but has the very bytes of one (blobs
// are content-addressed: a module may write any bytes) is refused
// unless the job's owner may read that dataset or all its members
// (claimManifest), as an upload of them is.
func (s *Server) assembleOutput(ctx context.Context, j *lifecycle.Job) (string, int64, error) {
	if d, ok, err := s.dataset(ctx, j.Rec.Input); err != nil {
		return "", 0, fmt.Errorf("assemble: %w", err)
	} else if ok {
		return s.assembleDataset(ctx, j, d)
	}
	id, size, err := s.assembleBlob(ctx, j)
	if err == nil {
		err = s.claimManifest(ctx, ownerPrincipal(j.Rec.Owner), id, "output")
	}
	return id, size, err
}

// assembleBlob assembles j's output, no dataset, into a blob.
func (s *Server) assembleBlob(ctx context.Context, j *lifecycle.Job) (string, int64, error) {
	r := runOf(j)
	st, ok := r.ops.op.(ops.Streamer)
	if !ok {
		results, err := s.readResults(j)
		if err != nil {
			return "", 0, fmt.Errorf("assemble: %w", err)
		}
		out, err := r.ops.op.Assemble(j.Rec.Params, r.hint, results)
		if err != nil {
			return "", 0, fmt.Errorf("assemble: %w", err)
		}
		id, size, err := s.blobs.Put(ctx, bytes.NewReader(out))
		if err != nil {
			return "", 0, fmt.Errorf("store the output: %w", err)
		}
		return id, size, nil
	}
	dir := filepath.Join(s.cfg.Data, "scratch")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("assemble: scratch directory: %w", err)
	}
	pr, pw := io.Pipe()
	assembled := make(chan error, 1)
	go func() {
		err := st.AssembleStored(j.Rec.Params, r.hint, &runResults{s: s, ids: j.ResultIDs()}, dir, pw)
		pw.CloseWithError(err)
		assembled <- err
	}()
	id, size, err := s.blobs.Put(ctx, pr)
	pr.CloseWithError(io.ErrClosedPipe) // ends the assembly if Put failed
	aerr := <-assembled
	switch {
	case aerr != nil && !errors.Is(aerr, io.ErrClosedPipe):
		return "", 0, fmt.Errorf("assemble: %w", aerr)
	case err != nil:
		return "", 0, fmt.Errorf("store the output: %w", err)
	case aerr != nil:
		return "", 0, fmt.Errorf("assemble: %w", aerr)
	}
	return id, size, nil
}

// runResults are a run's results in the result store, for
// ops.Streamer.AssembleStored.
type runResults struct {
	s   *Server
	ids []string
}

func (rr *runResults) Len() int        { return len(rr.ids) }
func (rr *runResults) ID(i int) string { return rr.ids[i] }

func (rr *runResults) Open(i int) (ops.Result, error) {
	id := rr.ids[i]
	if id == "" {
		return nil, fmt.Errorf("unit %d has no result", i)
	}
	f, size, err := rr.s.results.Open(id)
	if err != nil {
		return nil, fmt.Errorf("result of unit %d: %w", i, err)
	}
	return sizedReader{f, size}, nil
}

type sizedReader struct {
	store.Reader
	size int64
}

func (r sizedReader) Size() int64 { return r.size }

// readResults reads the results of r's units in order; identical results
// share one slice.
func (s *Server) readResults(j *lifecycle.Job) ([][]byte, error) {
	ids := j.ResultIDs()
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

func (s *Server) readBlob(d store.Blobs, id string) ([]byte, error) {
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

// endJob fails or cancels an active job.
func (s *Server) endJob(j *lifecycle.Job, state store.JobState, msg string) bool {
	return s.lc.End(j, state, msg)
}

// hooks are the server's side of the lifecycle: the bytes.
type hooks struct{ s *Server }

// Ended implements lifecycle.Hooks: it records the job's timeline, closes
// its readers and removes its intermediate blobs.
func (h hooks) Ended(j *lifecycle.Job, state store.JobState, msg string) {
	s := h.s
	r := runOf(j)
	defer r.unpinOutput(s)
	if state == "" {
		// Let go: another server owns the job now and needs its units'
		// results; nothing of it is written or removed here.
		r.closeReaders()
		s.log.Info("job handed over", "job", j.ID, "why", msg)
		return
	}
	s.saveTimeline(j.ID)
	r.closeReaders()
	s.dropOnWorkers(j.ID)
	s.dropIntermediates(j)
	s.metrics.jobsFinished.WithLabelValues(string(state)).Inc()
	switch state {
	case store.JobDone:
		_, _, out := j.Blobs()
		r.mu.Lock()
		size, took := r.size, r.took
		r.mu.Unlock()
		s.log.Info("job done", "job", j.ID, "op", j.Rec.Op, "units", len(j.Units), "blob", out, "bytes", size,
			"assembly", took.Round(time.Millisecond))
	case store.JobCanceled:
		s.log.Info("job canceled", "job", j.ID, "err", msg)
	default:
		s.log.Warn("job failed", "job", j.ID, "err", msg)
	}
}

// cancel cancels an unfinished job.
func (s *Server) cancel(ctx context.Context, id uint64) error {
	if ok, err := s.lc.CancelWaiting(ctx, id); ok {
		return err
	}
	j := s.lc.Job(id)
	if j == nil {
		j, err := s.db.Job(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return kindf(errNotFound, "no job %d on this server", id)
		}
		if err != nil {
			return err
		}
		if j.State.Final() || !s.shared {
			return kindf(errConflict, "job %d is already %s", id, j.State)
		}
		// Another server owns it: the store's cancel is final, and its
		// owner lets go of it at its next sync.
		err = s.db.CancelJob(ctx, id, "canceled by a client")
		if errors.Is(err, store.ErrConflict) {
			return kindf(errConflict, "job %d is finishing or finished; it cannot be canceled any more", id)
		}
		return err
	}
	if !s.endJob(j, store.JobCanceled, "canceled by a client") {
		return kindf(errConflict, "job %d is finishing; it cannot be canceled any more", id)
	}
	return nil
}

// waitJob returns when job id is final, or after d, or when ctx ends.
// A job this server does not run (another server sharing the database
// does) is watched in the store.
func (s *Server) waitJob(ctx context.Context, id uint64, d time.Duration) {
	if !s.shared || s.lc.Job(id) != nil {
		s.lc.Wait(ctx, id, d)
		return
	}
	deadline := time.Now().Add(d)
	for {
		changed := s.changed.wait()
		if j, err := s.db.Job(ctx, id); err != nil || j.State.Final() {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		t := time.NewTimer(min(left, remoteWaitPoll))
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.stop:
			t.Stop()
			return
		}
		if s.lc.Job(id) != nil { // taken over by this server meanwhile
			s.lc.Wait(ctx, id, time.Until(deadline))
			return
		}
	}
}

// remoteWaitPoll is how often a wait for a job another server runs reads
// the job's state, besides when the database notifies a change.
const remoteWaitPoll = 250 * time.Millisecond

// status returns a job's status.
func (s *Server) status(ctx context.Context, id uint64) (api.JobStatus, error) {
	j, err := s.db.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return api.JobStatus{}, kindf(errNotFound, "no job %d on this server", id)
	}
	if err != nil {
		return api.JobStatus{}, err
	}
	st := s.jobStatus(j)
	var tries []store.UnitTries
	if j := s.lc.Job(id); j != nil {
		tries, st.Units.Retried = j.Tries(maxTriesShown)
	} else if tries, st.Units.Retried, err = s.db.Tries(ctx, id, maxTriesShown); err != nil {
		return api.JobStatus{}, err
	}
	for _, t := range tries {
		st.RetriedUnits = append(st.RetriedUnits, api.UnitTries{Unit: t.Unit, Failed: t.Fails, Lost: t.Lost, Error: t.Error})
	}
	return st, nil
}

// maxTriesShown bounds the units a job's status lists with their tries.
const maxTriesShown = 100

// jobStatus is the API view of a job record, with the live counts of an
// active job (the store's lag behind by a batch).
func (s *Server) jobStatus(j store.Job) api.JobStatus {
	note := s.lc.Overlay(&j)
	st := api.JobStatus{
		Job: j.ID, Op: j.Op, Input: j.Input, Params: j.Params, Policy: j.Policy, State: api.JobState(j.State),
		Output: j.Output, Error: j.Error,
		Units:   api.UnitCounts{Total: j.Total, Done: j.Done, Failed: j.Failed, Running: j.Running, Retries: j.Retries},
		Timings: api.Timings{Submitted: j.Submitted, Started: j.Started, Finished: j.Finished, ComputeNanos: j.ComputeNanos},
		Module:  j.Spec.Module, Split: j.Spec.Split, Merge: j.Spec.Merge, InputJob: j.Spec.InputJob,
		Pipeline: j.Spec.Pipeline, Step: j.Spec.Step, Inputs: j.Spec.Inputs,
	}
	if len(st.Params) == 0 {
		st.Params = nil
	}
	switch {
	case !j.Expired.IsZero():
		st.OutputExpired = j.Expired
	case st.State == api.JobDone && s.cfg.Retain > 0 && !j.Finished.IsZero():
		st.OutputExpires = j.Finished.Add(s.cfg.Retain)
	}
	if note != "" {
		st.Error = strings.TrimPrefix(st.Error+"; ", "; ") + note
	}
	if j.Spec.InputJob != 0 && j.Total == 0 && !j.State.Final() {
		st.Error = fmt.Sprintf("waiting for job %d, whose output is the input", j.Spec.InputJob)
		if len(j.Spec.Inputs) > 0 {
			st.Error = fmt.Sprintf("waiting for job %d, whose output is one of the inputs", j.Spec.InputJob)
		}
	}
	if r := s.lc.Job(j.ID); r != nil && !j.State.Final() {
		done, running, compute, started := r.Counts()
		st.Units.Done, st.Units.Running, st.Timings.ComputeNanos = done, running, compute
		// A heartbeat can be a little older than the last results.
		st.Units.Computing = min(s.computing(j.ID), running)
		if retries, last := r.Failures(); retries > 0 {
			st.Units.Retries = retries
			st.Error = last
		}
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
