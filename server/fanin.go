package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/store"
)

// Fan-in: a job of several inputs (api.JobRequest.Inputs) runs on their
// concatenation, a blob the server writes once every input is there, so
// that splitting, retries, retention and integrity work as for one input.
// Until then the job waits, as a job:ID job does, for one unfinished
// input job at a time (Spec.InputJob); when that one is done, Release
// looks at the inputs again. A module's units also get, in
// api.ParamFiles, which part of their bytes comes from which input: the
// worker shows each part as a file of its own.

// submitFanIn submits a job of several inputs.
func (s *Server) submitFanIn(ctx context.Context, req api.JobRequest, o submitOpts) (api.JobStatus, error) {
	inputs := req.Inputs
	if len(inputs) > api.MaxInputs {
		return api.JobStatus{}, kindf(errBadRequest, "job request: %d inputs; a job joins at most %d", len(inputs), api.MaxInputs)
	}
	names := o.names
	if names == nil {
		names = make([]string, len(inputs))
		for i, in := range inputs {
			names[i] = inputName(in)
		}
	}
	rec, err := s.jobRecord(req)
	if err != nil {
		return api.JobStatus{}, err
	}
	rec.Input = ""
	rec.Spec.Pipeline, rec.Spec.Step, rec.Owner = o.pipeline, o.step, o.who.owner()
	rec.Spec.Inputs, rec.Spec.InputNames = inputs, uniqueNames(names)
	jo, err := s.jobOps(rec)
	if err != nil {
		return api.JobStatus{}, err
	}
	if err := s.fanInVisible(ctx, o.who, inputs); err != nil {
		return api.JobStatus{}, err
	}
	blobs, wait, err := s.fanInBlobs(ctx, inputs, o.pipeline)
	if err != nil {
		return api.JobStatus{}, err
	}
	if wait == 0 {
		joined, err := s.join(ctx, &rec, blobs)
		if err != nil {
			return api.JobStatus{}, err
		}
		st, err := s.create(ctx, rec, jo, joined)
		s.unpin(joined)
		if err != nil {
			// Refused: the join goes unless something else keeps it.
			s.dropBlobs(context.WithoutCancel(ctx), 0, []string{joined}, nil, nil)
		}
		return st, err
	}
	rec.Spec.InputJob = wait
	return s.createWaiting(ctx, rec, wait, "job accepted; it waits for its input jobs")
}

// inputName is the file a module finds an input as: a step's name (given
// by the pipeline), job-ID, or the blob ID's first 12 digits.
func inputName(in string) string {
	if id, ok, err := inputJob(in); ok && err == nil {
		return "job-" + strconv.FormatUint(id, 10)
	}
	return in[:min(len(in), 12)]
}

// uniqueNames returns names with the second and later copies of a name
// suffixed by their position ("a", "a-2").
func uniqueNames(names []string) []string {
	out := make([]string, len(names))
	seen := map[string]bool{}
	for i, n := range names {
		if seen[n] {
			n += "-" + strconv.Itoa(i+1)
		}
		seen[n] = true
		out[i] = n
	}
	return out
}

// fanInVisible answers 404 for an input who may not see: another
// owner's blob or job, as if it did not exist.
func (s *Server) fanInVisible(ctx context.Context, who principal, inputs []string) error {
	for i, in := range inputs {
		id, ok, err := inputJob(in)
		switch {
		case err != nil:
			return err
		case ok:
			j, err := s.db.Job(ctx, id)
			if errors.Is(err, store.ErrNotFound) || err == nil && !who.sees(j.Owner) {
				return kindf(errNotFound, "job request: input %d (%s): no such job on this server", i+1, in)
			}
			if err != nil {
				return err
			}
		case store.ValidID(in):
			if ok, err := s.blobVisible(ctx, who, in); err != nil {
				return err
			} else if !ok {
				return kindf(errNotFound, "job request: input %d: no blob %s on this server; upload the data first (braid put FILE)", i+1, in)
			}
		}
	}
	return nil
}

// fanInBlobs returns the blobs of a fan-in's inputs, or the first input
// job that is not done yet. An input that can never be there (a failed
// job, an expired output, a missing blob) or a dataset is an error,
// except a failed step of the job's own pipeline (not 0): the job then
// waits for it, and so fails as the pipeline's other steps after it do.
func (s *Server) fanInBlobs(ctx context.Context, inputs []string, pipeline uint64) (blobs []string, wait uint64, err error) {
	for i, in := range inputs {
		what := fmt.Sprintf("job request: input %d (%s)", i+1, in)
		id, ok, err := inputJob(in)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			if !store.ValidID(in) {
				return nil, 0, kindf(errBadRequest, "%s: want a blob id or job:ID", what)
			}
			blobs = append(blobs, in)
			continue
		}
		p, err := s.db.Job(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, 0, kindf(errNotFound, "%s: no such job on this server", what)
		case err != nil:
			return nil, 0, err
		case p.State == store.JobDone && !p.Expired.IsZero():
			return nil, 0, s.goneError(p)
		case p.State == store.JobDone:
			blobs = append(blobs, p.Output)
		case p.State.Final() && samePipeline(p, pipeline):
			wait = id
		case p.State.Final():
			return nil, 0, kindf(errConflict, "%s: the job is %s (%s); it has no output", what, p.State, p.Error)
		case wait == 0:
			wait = id
		}
	}
	if wait != 0 {
		return nil, wait, nil
	}
	for i, b := range blobs {
		if _, err := s.blobs.Stat(b); errors.Is(err, store.ErrNotFound) {
			return nil, 0, kindf(errNotFound, "job request: input %d: no blob %s on this server; upload the data first (braid put FILE)", i+1, b)
		} else if err != nil {
			return nil, 0, err
		}
		if ok, err := s.isDataset(ctx, b); err != nil {
			return nil, 0, err
		} else if ok {
			return nil, 0, kindf(errBadRequest, "job request: input %d (%s) is a dataset: a job joins blobs, or runs over one dataset; run a job over the dataset first and join its output (job:ID)", i+1, b)
		}
	}
	return blobs, 0, nil
}

// join writes the concatenation of blobs, each checked first, as a new
// blob, pinned (the caller unpins it), and records the inputs' sizes in
// rec.
func (s *Server) join(ctx context.Context, rec *store.Job, blobs []string) (string, error) {
	readers := make([]io.Reader, len(blobs))
	sizes := make([]int64, len(blobs))
	var total int64
	for i, b := range blobs {
		if err := s.blobs.Verify(ctx, b); err != nil {
			return "", fmt.Errorf("job input %d: %w", i+1, err)
		}
		f, size, err := s.blobs.Open(b)
		if err != nil {
			return "", fmt.Errorf("job input %d: %w", i+1, err)
		}
		defer f.Close()
		readers[i], sizes[i] = f, size
		total += size
	}
	if err := s.room("joining the job's inputs", total); err != nil {
		return "", err
	}
	st, err := s.blobs.Stage(ctx, io.MultiReader(readers...))
	if err != nil {
		return "", storageError("join the job's inputs", err)
	}
	defer st.Discard()
	s.pin(st.ID)
	if err := st.Commit(ctx); err != nil {
		s.unpin(st.ID)
		return "", storageError("join the job's inputs", err)
	}
	// Joined blobs that are a dataset's very bytes make no claim on it.
	if err := s.claimManifest(ctx, ownerPrincipal(rec.Owner), st.ID, "job request: the joined inputs"); err != nil {
		s.unpin(st.ID)
		return "", err
	}
	rec.Input, rec.Spec.InputSizes = st.ID, sizes
	return st.ID, nil
}

// addFiles tells each unit of a module that reads the input which parts
// of its bytes are which input (api.ParamFiles).
func addFiles(units []store.Unit, input string, names []string, sizes []int64) {
	var total int64
	for _, n := range sizes {
		total += n
	}
	for i := range units {
		u := &units[i]
		if u.Blob != input || u.Reduce {
			continue
		}
		var parts []api.FilePart
		var start int64
		for k, n := range sizes {
			lo, hi := max(start, u.Off), min(start+n, u.Off+u.Len)
			if hi > lo || (u.Off == 0 && u.Len == total) {
				parts = append(parts, api.FilePart{Name: names[k], Len: max(hi-lo, 0)})
			}
			start += n
		}
		u.Params = withParam(u.Params, api.ParamFiles, api.EncodeFiles(parts))
	}
}

// releaseFanIn is Release for a fan-in job: it returns the joined input
// (pinned: the caller unpins it), or makes the job wait for its next
// unfinished input job and returns "".
func (s *Server) releaseFanIn(ctx context.Context, j *store.Job) (string, error) {
	blobs, wait, err := s.fanInBlobs(ctx, j.Spec.Inputs, 0)
	if err != nil {
		return "", err
	}
	if wait != 0 {
		s.lc.WaitFor(j.ID, wait)
		return "", nil
	}
	return s.join(ctx, j, blobs)
}
