package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/store"
)

// Jobs whose input is another job's output wait for that job: they are
// stored without units, and split when it is done (or fail when it
// fails): the lifecycle keeps which job waits for which, and calls
// Release (below) when a job can start.

// maxSteps bounds the steps of one pipeline.
const maxSteps = 256

// submitOpts place a job in a pipeline.
type submitOpts struct {
	// who submits: the job is its owner's.
	who      principal
	pipeline uint64
	step     string
	// names are the files a fan-in's inputs are for a module (nil: by
	// inputName).
	names []string
}

// inputJob parses "job:ID".
func inputJob(input string) (uint64, bool, error) {
	s, ok := strings.CutPrefix(input, api.InputJobPrefix)
	if !ok {
		return 0, false, nil
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, true, kindf(errBadRequest, "job request: input %q: want job:ID with the id of an earlier job", input)
	}
	return id, true, nil
}

// submitAfter submits a job whose input is the output of job parent.
func (s *Server) submitAfter(ctx context.Context, req api.JobRequest, parent uint64, o submitOpts) (api.JobStatus, error) {
	rec, err := s.jobRecord(req)
	if err != nil {
		return api.JobStatus{}, err
	}
	rec.Input, rec.Spec.InputJob = "", parent
	rec.Spec.Pipeline, rec.Spec.Step, rec.Owner = o.pipeline, o.step, o.who.owner()
	jo, err := s.jobOps(rec)
	if err != nil {
		return api.JobStatus{}, err
	}
	p, err := s.db.Job(ctx, parent)
	if errors.Is(err, store.ErrNotFound) || err == nil && !o.who.sees(p.Owner) {
		return api.JobStatus{}, kindf(errNotFound, "job request: input job %d: no such job on this server", parent)
	}
	if err != nil {
		return api.JobStatus{}, err
	}
	switch {
	case p.State == store.JobDone && !p.Expired.IsZero():
		return api.JobStatus{}, s.goneError(p)
	case p.State == store.JobDone:
		rec.Input = p.Output
		return s.create(ctx, rec, jo, p.Output)
	case p.State.Final() && !samePipeline(p, o.pipeline):
		return api.JobStatus{}, kindf(errConflict, "job request: input job %d is %s (%s); it has no output", parent, p.State, p.Error)
	}
	// A step whose input step already failed is accepted with its
	// pipeline, and fails as the jobs waiting for a failed job do: the
	// pipeline was accepted as a whole, whatever its steps did while it
	// was stored.
	return s.createWaiting(ctx, rec, parent, "job accepted; it waits for its input job")
}

// samePipeline reports whether job j is a step of pipeline (not 0).
func samePipeline(j store.Job, pipeline uint64) bool {
	return pipeline != 0 && j.Spec.Pipeline == pipeline
}

// createWaiting stores a job that waits for the job parent to end
// before it can start, logging msg.
func (s *Server) createWaiting(ctx context.Context, rec store.Job, parent uint64, msg string) (api.JobStatus, error) {
	if s.isClosing() {
		return api.JobStatus{}, kindf(errUnavailable, "the server is shutting down; submit again once it is back")
	}
	job, err := s.db.CreateJob(ctx, rec, nil)
	if err != nil {
		return api.JobStatus{}, err
	}
	s.lc.WaitFor(job.ID, parent)
	s.metrics.jobsSubmitted.Inc()
	s.log.Info(msg, "job", job.ID, "op", rec.Op, "input_job", parent)
	return s.status(ctx, job.ID)
}

// create stores a job that can start now and starts it.
func (s *Server) create(ctx context.Context, rec store.Job, jo jobOps, input string) (api.JobStatus, error) {
	units, err := s.splitJob(ctx, rec, jo, input)
	if err != nil {
		return api.JobStatus{}, err
	}
	defer s.unpinUnits(input, units)
	if s.isClosing() {
		return api.JobStatus{}, kindf(errUnavailable, "the server is shutting down; submit again once it is back")
	}
	job, err := s.db.CreateJob(ctx, rec, units)
	if err != nil {
		return api.JobStatus{}, err
	}
	if err := s.start(job, jo, units); err != nil {
		return api.JobStatus{}, err
	}
	s.metrics.jobsSubmitted.Inc()
	s.log.Info("job accepted", "job", job.ID, "op", rec.Op, "units", len(units), "policy", job.Policy)
	return s.status(ctx, job.ID)
}

// Release implements lifecycle.Hooks: it starts job id, whose input job
// p is done.
func (h hooks) Release(ctx context.Context, id uint64, p store.Job) error {
	s := h.s
	j, err := s.db.Job(ctx, id)
	if err != nil || j.State.Final() {
		return nil // canceled meanwhile
	}
	jo, err := s.jobOps(j)
	if err != nil {
		return err
	}
	input := p.Output
	if len(j.Spec.Inputs) > 0 {
		if input, err = s.releaseFanIn(ctx, &j); err != nil || input == "" {
			return err
		}
		defer s.unpin(input)
	}
	units, err := s.splitJob(ctx, j, jo, input)
	if err != nil {
		return fmt.Errorf("split the output of job %d: %v", p.ID, err)
	}
	defer s.unpinUnits(input, units)
	if err := s.db.SetUnits(ctx, id, input, units); err != nil {
		if s.isClosing() {
			return nil // it resumes at the next start
		}
		return fmt.Errorf("store its units: %w", err)
	}
	j.Input, j.Total = input, len(units)
	if err := s.start(j, jo, units); err != nil {
		s.log.Warn("job could not start", "job", id, "err", err)
		return nil
	}
	s.log.Info("job started after its input job", "job", id, "input_job", p.ID, "units", len(units))
	return nil
}

// Pipelines.

var stepName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// submitPipeline checks a pipeline and submits its steps in an order
// where every step comes after the step whose output it reads.
func (s *Server) submitPipeline(ctx context.Context, who principal, req api.PipelineRequest) (api.PipelineStatus, error) {
	bad := func(format string, args ...any) (api.PipelineStatus, error) {
		return api.PipelineStatus{}, kindf(errBadRequest, "pipeline: "+format, args...)
	}
	if len(req.Steps) == 0 || len(req.Steps) > maxSteps {
		return bad("%d steps; want 1 to %d", len(req.Steps), maxSteps)
	}
	index := map[string]int{}
	for i, st := range req.Steps {
		if !stepName.MatchString(st.Name) {
			return bad("step %d: name %q: want a letter or digit, then up to 63 letters, digits, '-' or '_'", i+1, st.Name)
		}
		if _, dup := index[st.Name]; dup {
			return bad("step %q appears twice", st.Name)
		}
		index[st.Name] = i
	}
	// deps[i] are the steps whose outputs step i reads.
	deps := make([][]int, len(req.Steps))
	for i, st := range req.Steps {
		if st.Input != "" && len(st.Inputs) > 0 {
			return bad("step %q: give input or inputs, not both", st.Name)
		}
		ins := st.InputList()
		if len(ins) == 0 {
			return bad("step %q: no input; give a blob id, step:NAME or job:ID", st.Name)
		}
		if len(ins) > api.MaxInputs {
			return bad("step %q: %d inputs; a step joins at most %d", st.Name, len(ins), api.MaxInputs)
		}
		for _, in := range ins {
			from, ok := strings.CutPrefix(in, api.InputStepPrefix)
			switch {
			case ok:
				d, known := index[from]
				if !known {
					return bad("step %q: input %q names no step of the pipeline (steps: %s)", st.Name, in, stepNames(req.Steps))
				}
				deps[i] = append(deps[i], d)
			case strings.HasPrefix(in, api.InputJobPrefix):
				if _, _, err := inputJob(in); err != nil {
					return bad("step %q: %v", st.Name, err)
				}
			case !store.ValidID(in):
				return bad("step %q: input %q: want a blob id, step:NAME or job:ID", st.Name, in)
			}
		}
		if _, err := s.jobRecord(st.JobRequest); err != nil {
			return api.PipelineStatus{}, withKind(err, fmt.Errorf("pipeline: step %q: %w", st.Name, err))
		}
	}
	order, err := topoOrder(req.Steps, deps)
	if err != nil {
		return bad("%v", err)
	}
	p, err := s.db.CreatePipeline(ctx, store.Pipeline{Name: req.Name, Steps: []store.PipelineStep{}, Owner: who.owner()})
	if err != nil {
		return api.PipelineStatus{}, err
	}
	jobs := make([]uint64, len(req.Steps))
	for _, i := range order {
		st := req.Steps[i]
		jr := st.JobRequest
		o := submitOpts{who: who, pipeline: p.ID, step: st.Name}
		var js api.JobStatus
		var err error
		if ins := jr.InputList(); len(ins) > 1 {
			// A join: step:NAME becomes job:ID, and NAME the file a
			// module finds its output as.
			jr.Input, jr.Inputs, o.names = "", make([]string, len(ins)), make([]string, len(ins))
			for k, in := range ins {
				jr.Inputs[k], o.names[k] = in, inputName(in)
				if from, ok := strings.CutPrefix(in, api.InputStepPrefix); ok {
					jr.Inputs[k] = api.InputJobPrefix + strconv.FormatUint(jobs[index[from]], 10)
					o.names[k] = from
				}
			}
			js, err = s.submitWith(ctx, jr, o)
		} else if len(deps[i]) > 0 {
			jr.Input, jr.Inputs = "", nil
			js, err = s.submitAfter(ctx, jr, jobs[deps[i][0]], o)
		} else {
			js, err = s.submitWith(ctx, jr, o)
		}
		if err != nil {
			// Cancel what was submitted: the pipeline is all or nothing.
			for _, id := range jobs {
				if id != 0 {
					s.cancel(context.WithoutCancel(ctx), id)
				}
			}
			return api.PipelineStatus{}, withKind(err, fmt.Errorf("pipeline: step %q: %w", st.Name, err))
		}
		jobs[i] = js.Job
		if s.cfg.stepStored != nil {
			s.cfg.stepStored(st.Name, js.Job)
		}
	}
	steps := make([]store.PipelineStep, len(req.Steps))
	for i, st := range req.Steps {
		steps[i] = store.PipelineStep{Name: st.Name, Job: jobs[i]}
	}
	if err := s.db.SetPipelineSteps(ctx, p.ID, steps); err != nil {
		return api.PipelineStatus{}, err
	}
	s.log.Info("pipeline accepted", "pipeline", p.ID, "steps", len(steps))
	return s.pipelineStatus(ctx, who, p.ID)
}

func stepNames(steps []api.PipelineStep) string {
	names := make([]string, len(steps))
	for i, st := range steps {
		names[i] = st.Name
	}
	return strings.Join(names, ", ")
}

// topoOrder orders the steps so that each comes after its input steps;
// a cycle is an error naming its steps.
func topoOrder(steps []api.PipelineStep, deps [][]int) ([]int, error) {
	order := make([]int, 0, len(steps))
	state := make([]int, len(steps)) // 0 new, 1 on the path, 2 placed
	var path []int
	// visit places step i after its inputs; the depth is at most
	// len(steps) (maxSteps).
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 2:
			return nil
		case 1:
			k := slices.Index(path, i)
			names := make([]string, 0, len(path)-k+1)
			for _, c := range path[k:] {
				names = append(names, strconv.Quote(steps[c].Name))
			}
			names = append(names, strconv.Quote(steps[i].Name))
			return fmt.Errorf("the steps' inputs form a cycle: %s", strings.Join(names, " reads "))
		}
		state[i] = 1
		path = append(path, i)
		for _, d := range deps[i] {
			if err := visit(d); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		state[i] = 2
		order = append(order, i)
		return nil
	}
	for i := range steps {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// pipelineStatus returns a pipeline with its steps' jobs.
func (s *Server) pipelineStatus(ctx context.Context, who principal, id uint64) (api.PipelineStatus, error) {
	p, err := s.db.Pipeline(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && !who.sees(p.Owner) {
		return api.PipelineStatus{}, kindf(errNotFound, "no pipeline %d on this server", id)
	}
	if err != nil {
		return api.PipelineStatus{}, err
	}
	ps := api.PipelineStatus{Pipeline: p.ID, Name: p.Name, Steps: make([]api.JobStatus, 0, len(p.Steps))}
	done, final := 0, 0
	ps.State = api.JobQueued
	for _, st := range p.Steps {
		js, err := s.status(ctx, st.Job)
		if err != nil {
			return api.PipelineStatus{}, err
		}
		ps.Steps = append(ps.Steps, js)
		switch {
		case js.State == api.JobDone:
			done++
			final++
		case js.State.Final():
			final++
			if ps.State != api.JobFailed {
				ps.State = js.State
			}
		case js.State == api.JobRunning && !ps.State.Final():
			ps.State = api.JobRunning
		}
	}
	switch {
	case done == len(p.Steps) && done > 0:
		ps.State = api.JobDone
	case ps.State.Final() && final < len(p.Steps):
		ps.State = api.JobRunning // a step failed; the others are still finishing
	}
	return ps, nil
}

func (s *Server) postPipeline(w http.ResponseWriter, r *http.Request) error {
	var req api.PipelineRequest
	if err := s.readJSON(w, r, "pipeline", &req); err != nil {
		return err
	}
	ps, err := s.submitPipeline(r.Context(), caller(r), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", api.PathPipelines+"/"+strconv.FormatUint(ps.Pipeline, 10))
	return writeJSON(w, http.StatusCreated, &ps)
}

func (s *Server) getPipeline(w http.ResponseWriter, r *http.Request) error {
	v := r.PathValue("id")
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil || id == 0 {
		return kindf(errBadRequest, "%q is not a pipeline id: want a positive whole number", v)
	}
	ps, err := s.pipelineStatus(r.Context(), caller(r), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, &ps)
}
