package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/server"
)

// TestFanIn: a job of several inputs (blobs and job outputs, one still
// running at submit) reads them joined in order on stdin, and a module
// finds each as a file named after it; a pipeline step joins two steps
// the same way.
func TestFanIn(t *testing.T) {
	c := newCluster(t, nil)
	c.addOp("files", wasmtest.Files, client.OpOptions{})
	c.addOp("count", wasmtest.Lines, client.OpOptions{})
	a, b := c.put([]byte("alpha\n")), c.put([]byte("beta\n"))
	// No worker yet: the input job waits, and the join with it.
	slow := c.submit(api.JobRequest{Op: "noop", Input: c.put([]byte("gamma\n"))})
	st := c.submit(api.JobRequest{Op: "files", Inputs: []string{a, fmt.Sprintf("job:%d", slow.Job), b, a}})
	if !strings.Contains(st.Error, fmt.Sprintf("waiting for job %d", slow.Job)) {
		t.Errorf("a join waiting for its input job says %q", st.Error)
	}
	c.addWorker(2, nil)
	c.waitWorkers(1)
	st = c.wait(st.Job)
	want := fmt.Sprintf("%s: 6 bytes\njob-%d: 6 bytes\n%s: 5 bytes\n%s-4: 6 bytes\nalpha\ngamma\nbeta\nalpha\n", a[:12], slow.Job, b[:12], a[:12])
	if st.State != api.JobDone || string(c.get(st.Output)) != want {
		t.Fatalf("join: %s %q: output\n%s\nwant\n%s", st.State, st.Error, c.get(st.Output), want)
	}
	if len(st.Inputs) != 4 || st.Inputs[1] != fmt.Sprintf("job:%d", slow.Job) {
		t.Errorf("status inputs %v", st.Inputs)
	}
	// Split by lines, each unit finds the parts of the inputs it holds.
	st = c.run(api.JobRequest{Op: "files", Inputs: []string{a, b}, Split: "lines:1"})
	if want := a[:12] + ": 6 bytes\nalpha\n" + b[:12] + ": 5 bytes\nbeta\n"; st.State != api.JobDone || string(c.get(st.Output)) != want {
		t.Errorf("split join: %s %q: %q, want %q", st.State, st.Error, c.get(st.Output), want)
	}

	// A pipeline joins two steps; the module finds them by step name.
	ps, err := c.c.SubmitPipeline(t.Context(), api.PipelineRequest{Steps: []api.PipelineStep{
		{Name: "join", JobRequest: api.JobRequest{Op: "files", Inputs: []string{"step:left", "step:right"}}},
		{Name: "left", JobRequest: api.JobRequest{Op: "noop", Input: a}},
		{Name: "right", JobRequest: api.JobRequest{Op: "count", Input: b}},
		{Name: "total", JobRequest: api.JobRequest{Op: "count", Inputs: []string{"step:join", "step:left"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if ps, err = c.c.WaitPipeline(ctx, ps.Pipeline, nil); err != nil || ps.State != api.JobDone {
		t.Fatalf("pipeline %+v: %v", ps, err)
	}
	if got, want := string(c.get(ps.Steps[0].Output)), "left: 6 bytes\nright: 2 bytes\nalpha\n1\n"; got != want {
		t.Errorf("joined steps: %q, want %q", got, want)
	}
	if got := string(c.get(ps.Steps[3].Output)); got != "5\n" {
		t.Errorf("total: %q", got)
	}
}

// TestFanInRefused: a join of inputs that cannot be there, or that an
// operation cannot take, is refused at submit, naming the input; nothing
// is left behind.
func TestFanInRefused(t *testing.T) {
	c := newCluster(t, nil)
	a := c.put([]byte("alpha\n"))
	failing := c.submit(api.JobRequest{Op: "sleep", Input: a, Units: 1, MaxTries: 1, Params: map[string]string{"ms": "1", "fail": "0"}})
	c.addWorker(1, nil)
	c.wait(failing.Job)
	many := make([]string, api.MaxInputs+1)
	for i := range many {
		many[i] = a
	}
	missing := strings.Repeat("ab", 32)
	for _, b := range []struct {
		req    api.JobRequest
		status int
		want   string
	}{
		{api.JobRequest{Op: "noop", Input: a, Inputs: []string{a, a}}, http.StatusBadRequest, "input or inputs, not both"},
		{api.JobRequest{Op: "noop", Inputs: many}, http.StatusBadRequest, "65 inputs; a job joins at most 64"},
		{api.JobRequest{Op: "noop", Inputs: []string{a, "nonsense"}}, http.StatusBadRequest, "input 2 (nonsense): want a blob id or job:ID"},
		{api.JobRequest{Op: "noop", Inputs: []string{a, missing}}, http.StatusNotFound, "input 2: no blob " + missing},
		{api.JobRequest{Op: "noop", Inputs: []string{a, "job:9999"}}, http.StatusNotFound, "input 2 (job:9999): no such job"},
		{api.JobRequest{Op: "noop", Inputs: []string{fmt.Sprintf("job:%d", failing.Job), a}}, http.StatusConflict, "the job is failed"},
	} {
		before, err := c.c.Jobs(t.Context(), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.c.Submit(t.Context(), b.req)
		if client.StatusOf(err) != b.status || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%v: %v; want %d saying %q", b.req.Inputs, err, b.status, b.want)
		}
		if after, err := c.c.Jobs(t.Context(), "", 0); err != nil || len(after) != len(before) {
			t.Errorf("%v: %d jobs before, %d after (%v)", b.req.Inputs, len(before), len(after), err)
		}
	}

	// A pipeline of 10,000 steps, each joining the one before: refused
	// whole, naming the limit, before any step is submitted.
	steps := make([]api.PipelineStep, 10_000)
	for i := range steps {
		steps[i] = api.PipelineStep{Name: fmt.Sprintf("s%d", i), JobRequest: api.JobRequest{Op: "noop", Inputs: []string{a}}}
		if i > 0 {
			steps[i].Inputs = append(steps[i].Inputs, fmt.Sprintf("step:s%d", i-1))
		}
	}
	before, _ := c.c.Jobs(t.Context(), "", 0)
	_, err := c.c.SubmitPipeline(t.Context(), api.PipelineRequest{Steps: steps})
	if client.StatusOf(err) != http.StatusBadRequest && client.StatusOf(err) != http.StatusRequestEntityTooLarge {
		t.Errorf("10,000 steps: %v; want 400 or 413", err)
	}
	if err != nil && !strings.Contains(err.Error(), "10000 steps; want 1 to 256") && !strings.Contains(err.Error(), "larger than") {
		t.Errorf("10,000 steps: %v; want it to name the limit", err)
	}
	if after, _ := c.c.Jobs(t.Context(), "", 0); len(after) != len(before) {
		t.Errorf("10,000 steps: %d jobs before, %d after", len(before), len(after))
	}
	// A join in a pipeline that names an unknown step, or a step that
	// joins itself (a cycle), is refused whole too.
	for _, b := range []struct {
		steps []api.PipelineStep
		want  string
	}{
		{[]api.PipelineStep{{Name: "x", JobRequest: api.JobRequest{Op: "noop", Inputs: []string{a, "step:nope"}}}}, `input "step:nope" names no step`},
		{[]api.PipelineStep{{Name: "x", JobRequest: api.JobRequest{Op: "noop", Inputs: []string{a, "step:y"}}},
			{Name: "y", JobRequest: api.JobRequest{Op: "noop", Inputs: []string{"step:x", a}}}}, `cycle: "x" reads "y" reads "x"`},
		{[]api.PipelineStep{{Name: "x", JobRequest: api.JobRequest{Op: "noop", Input: a, Inputs: []string{a}}}}, "input or inputs, not both"},
	} {
		_, err := c.c.SubmitPipeline(t.Context(), api.PipelineRequest{Steps: b.steps})
		if client.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), b.want) {
			t.Errorf("pipeline %v: %v; want 400 saying %s", b.steps, err, b.want)
		}
	}
}

// TestPipelineStepFailsWhileStored: a step that fails before the steps
// reading it are stored does not make the pipeline's submission fail
// (it used to answer 409 "input job N is failed"): the pipeline is
// accepted, and the steps after the failed one fail naming it, a plain
// reader and a join alike.
func TestPipelineStepFailsWhileStored(t *testing.T) {
	var c *cluster
	c = newCluster(t, func(cfg *server.Config) {
		server.AfterStep(cfg, func(step string, job uint64) {
			if step == "first" {
				// The test's seam: the step ends before the next is
				// stored, as a fast failure does under load.
				if st := c.wait(job); st.State != api.JobFailed {
					t.Errorf("step first: %s, want failed", st.State)
				}
			}
		})
	})
	c.addWorker(1, nil)
	c.waitWorkers(1)
	a := c.put([]byte("alpha\n"))
	ps, err := c.c.SubmitPipeline(t.Context(), api.PipelineRequest{Steps: []api.PipelineStep{
		{Name: "first", JobRequest: api.JobRequest{Op: "sleep", Input: a, Units: 1, MaxTries: 1,
			Params: map[string]string{"ms": "0", "fail": "0"}}},
		{Name: "after", JobRequest: api.JobRequest{Op: "noop", Input: "step:first"}},
		{Name: "join", JobRequest: api.JobRequest{Op: "noop", Inputs: []string{a, "step:first"}}},
	}})
	if err != nil {
		t.Fatalf("submit a pipeline whose first step fails while it is stored: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if ps, err = c.c.WaitPipeline(ctx, ps.Pipeline, nil); err != nil || ps.State != api.JobFailed {
		t.Fatalf("pipeline %+v: %v, want failed", ps, err)
	}
	first := ps.Steps[0].Job
	for _, st := range ps.Steps[1:] {
		if want := fmt.Sprintf("input job %d is failed", first); st.State != api.JobFailed || !strings.Contains(st.Error, want) {
			t.Errorf("step %s: %s %q, want failed saying %q", st.Step, st.State, st.Error, want)
		}
	}
	// Outside a pipeline a failed input job is still refused at once.
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "noop", Input: fmt.Sprintf("job:%d", first)}); client.StatusOf(err) != http.StatusConflict {
		t.Errorf("a job reading a failed job: %v, want 409", err)
	}
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "noop", Inputs: []string{a, fmt.Sprintf("job:%d", first)}}); client.StatusOf(err) != http.StatusConflict {
		t.Errorf("a join reading a failed job: %v, want 409", err)
	}
}
