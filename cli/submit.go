package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/braid-hpc/braid/api"
)

func init() {
	register(&command{name: "submit", summary: "submit a job: apply an operation to an uploaded blob", run: runSubmit})
}

// paramFlag collects repeated --param k=v.
type paramFlag map[string]string

func (p paramFlag) String() string { return fmtParams(p) }

// Type names the value in the help.
func (p paramFlag) Type() string { return "NAME=VALUE" }

// tileFlag is --tile WxH.
type tileFlag struct{ *api.Tile }

// Type names the value in the help.
func (tileFlag) Type() string { return "WxH" }

func (p paramFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want NAME=VALUE, e.g. radius=5")
	}
	p[strings.TrimSpace(k)] = v
	return nil
}

func runSubmit(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "submit", "--op OP --input ID [flags]", `
Submits a job: apply operation OP (see 'braid ops') to the uploaded blob ID
(see 'braid put'). The server splits the job into computation units, runs
them on its workers and assembles the output blob. Prints the job id, or
with --wait waits for the job and prints its final status (exit code 1
if it failed).

  braid submit --op blur --input ID --param radius=5 --tile 256x256 --wait
  braid submit --op noop --input ID --repeat 1000 --policy proportional
  braid submit --op wordcount --input ID --split lines:1M --merge reduce:sumcounts --wait
  braid submit --op sumcounts --input job:42    # the output of job 42, once it is done
  braid submit --op compare --input job:42 --input ID2   # both joined (fan-in), in this order
  braid submit --op wordcount --input DATASET --merge reduce:sumcounts   # over every member (braid put DIR)
  braid submit --op wordcount --input DATASET --merge none               # a count per member: a dataset

User operations (braid op add) run in a sandbox with per-unit limits:
--unit-mem, --unit-timeout and --unit-output. A unit that fails runs
again, on another worker where there is one, up to --max-tries times;
then the job fails with the unit's error.

With --pipeline FILE it submits a pipeline instead: named steps whose
inputs may be other steps' outputs, all at once (see below); it prints
the pipeline's id (pN, for status and wait) and its steps' job ids.
`+pipelineHelp)
	op := fs.String("op", "", "the `operation` to apply (required)")
	input := fs.StringArray("input", nil, "the blob or dataset `id` to apply it to, or job:ID for the output of another job (required; repeat it to join several inputs)")
	params := paramFlag{}
	fs.Var(params, "param", "an operation parameter `name=value` (repeatable)")
	units := fs.Int("units", 0, "split into about `n` units (0: the operation chooses)")
	var tile api.Tile
	fs.Var(tileFlag{&tile}, "tile", "split an image into tiles of `wxh` pixels, e.g. 256x256")
	repeat := fs.Int("repeat", 0, "process the whole job `n` times as independent units")
	policy := fs.String("policy", api.PolicyDynamic, "scheduling `policy`: equal, proportional or dynamic")
	withChoices(fs, "policy", api.PolicyEqual, api.PolicyProportional, api.PolicyDynamic)
	inFlight := fs.Int("in-flight", 0, "a stream may hold `n` units at once (0: the server's default)")
	split := fs.String("split", "", "the `split` that cuts the input into units: whole, bytes:SIZE, lines:SIZE or tiles:WxH[+HALO] (default: the operation's)")
	merge := fs.String("merge", "", "the `merge` that joins the units' outputs: concat, tiles, reduce:OP, or none (per member of a dataset) (default: the operation's)")
	lim := addLimitFlags(fs)
	maxTries := fs.Int("max-tries", 0, "a unit may fail `n` times before the job fails (0: the server's default, 3)")
	wait := fs.Bool("wait", false, "wait for the job and print its final status; progress on stderr")
	pipeline := fs.String("pipeline", "", "submit the pipeline described in this YAML or JSON `file` instead of one job")
	cf := addClientFlags(fs, 0)
	pos, code := parseInterspersed(env, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		env.Errorf("submit: unexpected argument %q; the input is --input ID", pos[0])
		return 2
	}
	if *pipeline != "" {
		if *op != "" || len(*input) > 0 {
			env.Errorf("submit: --pipeline takes the operations and inputs from its file; drop --op and --input")
			return 2
		}
		return submitPipeline(ctx, env, cf, *pipeline, *wait)
	}
	if *op == "" || len(*input) == 0 {
		env.Errorf("submit: give --op OP and --input ID (upload the data first with 'braid put FILE')")
		return 2
	}
	if *units != 0 && !tile.IsZero() {
		env.Errorf("submit: give --units or --tile, not both")
		return 2
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("submit: %v", err)
		return 2
	}
	defer cancel()
	limits, err := lim.limits()
	if err != nil {
		env.Errorf("submit: %v", err)
		return 2
	}
	req := api.JobRequest{Op: *op, Units: *units, Tile: tile, Repeat: *repeat, Policy: *policy, InFlight: *inFlight,
		Split: *split, Merge: *merge, UnitMem: limits.Memory, UnitOutput: limits.Output, MaxTries: *maxTries}
	if len(*input) == 1 {
		req.Input = (*input)[0]
	} else {
		req.Inputs = *input
	}
	if limits.Timeout > 0 {
		req.UnitTimeout = limits.Timeout.String()
	}
	if len(params) > 0 {
		req.Params = params
	}
	st, err := c.Submit(ctx, req)
	if err != nil {
		return clientFail(env, "submit", err)
	}
	if !*wait {
		if *cf.json {
			printJob(env.Stdout, st, true)
		} else {
			fmt.Fprintln(env.Stdout, st.Job)
			fmt.Fprintf(env.Stderr, "braid: job %d %s: %d units; follow it with 'braid wait %d'\n", st.Job, st.State, st.Units.Total, st.Job)
		}
		return 0
	}
	return waitAndPrint(ctx, env, c, st.Job, *cf.json)
}
