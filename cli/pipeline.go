package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
)

// pipelineFile is a pipeline as written in YAML or JSON.
type pipelineFile struct {
	Name  string         `yaml:"name"`
	Steps []pipelineStep `yaml:"steps"`
}

type pipelineStep struct {
	Name string `yaml:"name"`
	Op   string `yaml:"op"`
	// Input is blob:ID (or a bare ID), file:PATH (uploaded first; relative
	// to the pipeline file), step:NAME or job:ID.
	Input string `yaml:"input"`
	// Inputs join several inputs, each written as Input (fan-in).
	Inputs      []string          `yaml:"inputs"`
	Params      map[string]string `yaml:"params"`
	Split       string            `yaml:"split"`
	Merge       string            `yaml:"merge"`
	Units       int               `yaml:"units"`
	Tile        string            `yaml:"tile"`
	Repeat      int               `yaml:"repeat"`
	Policy      string            `yaml:"policy"`
	UnitMem     string            `yaml:"unit_mem"`
	UnitTimeout string            `yaml:"unit_timeout"`
	UnitOutput  string            `yaml:"unit_output"`
	MaxTries    int               `yaml:"max_tries"`
}

const pipelineHelp = `
A pipeline file (YAML or JSON) lists named steps; each is a job whose input
is a blob, a local file (uploaded first), another step's output or an
earlier job's output:

  name: words
  steps:
    - name: count
      op: wordcount
      input: file:book.txt        # or blob:ID, step:NAME, job:ID
      split: lines:1M
      merge: reduce:sumcounts
    - name: top
      op: topwords
      input: step:count
      params: {N: "10"}
    - name: both
      op: compare
      inputs: [step:count, step:top, job:42]   # a join (fan-in)

A step with inputs (a list) reads them joined, in order (see docs/ops.md).
An input file:DIR is uploaded as a dataset (see 'braid put DIR'): the step
maps its operation over every file; merge: none makes its output a dataset
of the same names, which the next step maps over in turn.
A step also takes units, tile, repeat, policy, unit_mem, unit_timeout,
unit_output and max_tries, as submit's flags. The server refuses the whole
pipeline, naming the step, if a step names an unknown operation or step,
or if the steps' inputs form a cycle.`

// loadPipeline reads a pipeline file, uploads its file inputs and returns
// the request.
func loadPipeline(ctx context.Context, c *client.Client, path string) (api.PipelineRequest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return api.PipelineRequest{}, err
	}
	var pf pipelineFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&pf); err != nil && err != io.EOF {
		return api.PipelineRequest{}, fmt.Errorf("%s: %v", path, err)
	}
	if len(pf.Steps) == 0 {
		return api.PipelineRequest{}, fmt.Errorf("%s: no steps; see 'braid submit --help'", path)
	}
	req := api.PipelineRequest{Name: pf.Name}
	uploaded := map[string]string{}
	for i, st := range pf.Steps {
		where := fmt.Sprintf("%s: step %d (%q)", path, i+1, st.Name)
		jr := api.JobRequest{Op: st.Op, Params: st.Params, Split: st.Split, Merge: st.Merge, Units: st.Units,
			Repeat: st.Repeat, Policy: st.Policy, UnitTimeout: st.UnitTimeout, MaxTries: st.MaxTries}
		if st.Tile != "" {
			if jr.Tile, err = api.ParseTile(st.Tile); err != nil {
				return req, fmt.Errorf("%s: %v", where, err)
			}
		}
		for _, sz := range []struct {
			v   string
			dst *int64
			f   string
		}{{st.UnitMem, &jr.UnitMem, "unit_mem"}, {st.UnitOutput, &jr.UnitOutput, "unit_output"}} {
			if sz.v != "" {
				if *sz.dst, err = parseSize(sz.v); err != nil {
					return req, fmt.Errorf("%s: %s: %v", where, sz.f, err)
				}
			}
		}
		ins := st.Inputs
		switch {
		case st.Input != "" && len(ins) > 0:
			return req, fmt.Errorf("%s: give input or inputs, not both", where)
		case st.Input != "":
			ins = []string{st.Input}
		case len(ins) == 0:
			return req, fmt.Errorf("%s: no input; give file:PATH, blob:ID, step:NAME or job:ID", where)
		}
		resolved := make([]string, len(ins))
		for k, in := range ins {
			if resolved[k], err = pipelineInput(ctx, c, path, in, uploaded); err != nil {
				return req, fmt.Errorf("%s: %v", where, err)
			}
		}
		if len(st.Inputs) > 0 {
			jr.Inputs = resolved
		} else {
			jr.Input = resolved[0]
		}
		req.Steps = append(req.Steps, api.PipelineStep{Name: st.Name, JobRequest: jr})
	}
	return req, nil
}

// pipelineInput resolves one input of a pipeline file: file:PATH is
// uploaded (once; relative to the pipeline file), blob:ID is ID, the rest
// is as written.
func pipelineInput(ctx context.Context, c *client.Client, path, in string, uploaded map[string]string) (string, error) {
	switch {
	case strings.HasPrefix(in, "file:"):
		name := strings.TrimPrefix(in, "file:")
		if !filepath.IsAbs(name) {
			name = filepath.Join(filepath.Dir(path), name)
		}
		if id, ok := uploaded[name]; ok {
			return id, nil
		}
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			files, err := datasetFiles([]string{name})
			if err != nil {
				return "", fmt.Errorf("input: %v", err)
			}
			info, err := putDataset(ctx, c, files)
			if err != nil {
				return "", fmt.Errorf("upload %s as a dataset: %w", name, err)
			}
			uploaded[name] = info.ID
			return info.ID, nil
		}
		f, err := os.Open(name)
		if err != nil {
			return "", fmt.Errorf("input: %v", err)
		}
		id, err := c.Put(ctx, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("upload %s: %w", name, err)
		}
		uploaded[name] = id
		return id, nil
	case strings.HasPrefix(in, "blob:"):
		return strings.TrimPrefix(in, "blob:"), nil
	case in == "":
		return "", fmt.Errorf("an empty input; give file:PATH, blob:ID, step:NAME or job:ID")
	}
	return in, nil
}

// pipelineID parses "p3" (or "pipeline:3"); ok is false for a job id.
func pipelineID(s string) (uint64, bool) {
	for _, p := range []string{"pipeline:", "p"} {
		if v, ok := strings.CutPrefix(s, p); ok {
			var id uint64
			if _, err := fmt.Sscan(v, &id); err == nil && id > 0 && fmt.Sprint(id) == v {
				return id, true
			}
		}
	}
	return 0, false
}

// printPipeline prints a pipeline's steps as text or JSON.
func printPipeline(w io.Writer, ps api.PipelineStatus, asJSON bool) {
	if asJSON {
		steps := make([]jobJSON, len(ps.Steps))
		for i, st := range ps.Steps {
			steps[i] = toJobJSON(st)
		}
		jsonLine(w, map[string]any{"pipeline": ps.Pipeline, "name": ps.Name, "state": ps.State, "steps": steps})
		return
	}
	name := ""
	if ps.Name != "" {
		name = " (" + ps.Name + ")"
	}
	fmt.Fprintf(w, "pipeline p%d%s: %s\n", ps.Pipeline, name, ps.State)
	for _, st := range ps.Steps {
		out := ""
		switch {
		case st.Output != "":
			out = "output " + st.Output
		case st.Error != "":
			out = st.Error
		}
		fmt.Fprintf(w, "  %-12s job %-5d %-9s %d/%d units  %s\n", st.Step, st.Job, st.State, st.Units.Done, st.Units.Total, out)
	}
}

// pipelineExit is the exit code for a finished pipeline: 0 if done.
func pipelineExit(ps api.PipelineStatus) int {
	if ps.State == api.JobDone {
		return 0
	}
	return 1
}

// submitPipeline submits the pipeline in file and prints it, or waits for
// it.
func submitPipeline(ctx context.Context, env *Env, cf *clientFlags, file string, wait bool) int {
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("submit: %v", err)
		return 2
	}
	defer cancel()
	req, err := loadPipeline(ctx, c, file)
	if err != nil {
		env.Errorf("submit: %v", err)
		return 2
	}
	ps, err := c.SubmitPipeline(ctx, req)
	if err != nil {
		return clientFail(env, "submit", err)
	}
	if !wait {
		printPipeline(env.Stdout, ps, *cf.json)
		if !*cf.json {
			fmt.Fprintf(env.Stderr, "braid: follow it with 'braid wait p%d'\n", ps.Pipeline)
		}
		return 0
	}
	return waitPipeline(ctx, env, c, ps.Pipeline, *cf.json)
}

// waitPipeline waits for every step, with a line of progress on stderr
// whenever a step changes state, and prints the pipeline.
func waitPipeline(ctx context.Context, env *Env, c *client.Client, id uint64, asJSON bool) int {
	last := map[uint64]api.JobState{}
	ps, err := c.WaitPipeline(ctx, id, func(ps api.PipelineStatus) {
		for _, st := range ps.Steps {
			if last[st.Job] != st.State {
				last[st.Job] = st.State
				fmt.Fprintf(env.Stderr, "braid: p%d step %s (job %d): %s\n", id, st.Step, st.Job, st.State)
			}
		}
	})
	if err != nil {
		return clientFail(env, "wait", err)
	}
	printPipeline(env.Stdout, ps, asJSON)
	return pipelineExit(ps)
}
