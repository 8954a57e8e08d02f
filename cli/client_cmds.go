package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/outfile"

	"github.com/spf13/pflag"
)

func init() {
	for _, c := range []*command{
		{name: "put", summary: "upload a file to a braid server; prints its blob id", run: runPut},
		{name: "get", summary: "download a blob (e.g. a job's output) to a file", run: runGet},
		{name: "submit", summary: "submit a job: apply an operation to an uploaded blob", run: runSubmit},
		{name: "status", summary: "show a job's status", run: runStatus},
		{name: "wait", summary: "wait for a job to finish, with a progress bar", run: runWait},
		{name: "jobs", summary: "list a server's jobs", run: runJobs},
		{name: "workers", summary: "list a server's workers", run: runWorkers},
		{name: "cancel", summary: "cancel an unfinished job", run: runCancel},
		{name: "ops", summary: "list the operations a server runs", run: runOps},
	} {
		register(c)
	}
}

// defaultServerURL is where client commands go without --server and
// BRAID_SERVER.
const defaultServerURL = "https://127.0.0.1:7400"

// clientFlags are the flags every client command takes.
type clientFlags struct {
	server  *string
	json    *bool
	timeout *time.Duration
	auth    *controlFlags
}

func addClientFlags(fs *pflag.FlagSet, timeout time.Duration) *clientFlags {
	def := os.Getenv("BRAID_SERVER")
	if def == "" {
		def = defaultServerURL
	}
	return &clientFlags{
		server:  fs.String("server", def, "base `URL` of the braid server; BRAID_SERVER sets the default"),
		json:    fs.Bool("json", false, "print one JSON object instead of text"),
		timeout: fs.Duration("timeout", timeout, "give up after this `long` (0: never)"),
		auth:    addControlFlags(fs),
	}
}

// client returns a client of the server and a context bounded by
// --timeout.
func (f *clientFlags) client(ctx context.Context) (*client.Client, context.Context, context.CancelFunc, error) {
	auth, err := f.auth.resolve(false)
	if err != nil {
		return nil, nil, nil, err
	}
	if *f.server == "" {
		return nil, nil, nil, errors.New("no server: pass --server URL or set BRAID_SERVER")
	}
	cancel := context.CancelFunc(func() {})
	if *f.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, *f.timeout)
	}
	return client.New(*f.server, auth.options()...), ctx, cancel, nil
}

// clientFail reports a failed client command and returns its exit code:
// 2 for a usage problem the server pointed out (4xx) or a server
// certificate that could not be checked, else 1.
func clientFail(env *Env, cmd string, err error) int {
	env.Errorf("%s: %v", cmd, err)
	if errors.Is(err, client.ErrCertificate) || errors.Is(err, client.ErrNoPin) {
		return 2 // a key, token or fingerprint to fix
	}
	if st := client.StatusOf(err); st >= 400 && st < 500 && st != 404 && st != 409 {
		return 2
	}
	return 1
}

// oneArg parses args expecting exactly one positional argument.
func oneArg(env *Env, fs *pflag.FlagSet, args []string, what string) (string, int) {
	pos, code := parseInterspersed(env, fs, args)
	if code >= 0 {
		return "", code
	}
	if len(pos) != 1 {
		env.Errorf("%s: want exactly one %s, got %d arguments", fs.Name(), what, len(pos))
		helpHint(env, fs.Name())
		return "", 2
	}
	return pos[0], -1
}

func parseJobID(env *Env, cmd, s string) (uint64, int) {
	id, err := strconv.ParseUint(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id == 0 {
		env.Errorf("%s: %q is not a job id (a positive number, as submit printed)", cmd, s)
		return 0, 2
	}
	return id, -1
}

// jsonLine prints v as one line of JSON.
func jsonLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jobJSON is a job as the --json output of submit, status, wait and
// cancel: job, state, output, units and error are always present.
type jobJSON struct {
	Job    uint64       `json:"job"`
	State  api.JobState `json:"state"`
	Output string       `json:"output"`
	// OutputExpires and OutputExpired as in api.JobStatus.
	OutputExpires time.Time         `json:"output_expires,omitzero"`
	OutputExpired time.Time         `json:"output_expired,omitzero"`
	Units         api.UnitCounts    `json:"units"`
	Error         string            `json:"error"`
	Op            string            `json:"op"`
	Input         string            `json:"input"`
	Params        map[string]string `json:"params,omitempty"`
	Policy        string            `json:"policy"`
	Timings       api.Timings       `json:"timings"`
	Module        string            `json:"module,omitempty"`
	Split         string            `json:"split,omitempty"`
	Merge         string            `json:"merge,omitempty"`
	// InputJob, Pipeline and Step as in api.JobStatus.
	InputJob uint64 `json:"input_job,omitempty"`
	Pipeline uint64 `json:"pipeline,omitempty"`
	Step     string `json:"step,omitempty"`
}

func toJobJSON(st api.JobStatus) jobJSON {
	return jobJSON{Job: st.Job, State: st.State, Output: st.Output, OutputExpires: st.OutputExpires, OutputExpired: st.OutputExpired, Units: st.Units, Error: st.Error, Op: st.Op,
		Input: st.Input, Params: st.Params, Policy: st.Policy, Timings: st.Timings, Module: st.Module, Split: st.Split,
		Merge: st.Merge, InputJob: st.InputJob, Pipeline: st.Pipeline, Step: st.Step}
}

// printJob prints a job's status as text or JSON.
func printJob(w io.Writer, st api.JobStatus, asJSON bool) {
	if asJSON {
		jsonLine(w, toJobJSON(st))
		return
	}
	fmt.Fprintf(w, "job %d: %s\n", st.Job, st.State)
	if st.Pipeline != 0 {
		fmt.Fprintf(w, "  step     %s of pipeline %d\n", st.Step, st.Pipeline)
	}
	fmt.Fprintf(w, "  op       %s%s\n", st.Op, fmtParams(st.Params))
	if st.InputJob != 0 {
		fmt.Fprintf(w, "  input    the output of job %d\n", st.InputJob)
		if st.Input != "" {
			fmt.Fprintf(w, "           sha256 %s\n", st.Input)
		}
	} else {
		fmt.Fprintf(w, "  input    sha256 %s\n", st.Input)
	}
	if st.Module != "" {
		fmt.Fprintf(w, "  module   sha256 %s\n", st.Module)
	}
	if st.Split != "" || st.Merge != "" {
		fmt.Fprintf(w, "  split    %s, merge %s\n", or(st.Split, "the operation's"), or(st.Merge, "the operation's"))
	}
	retries := ""
	if st.Units.Retries > 0 {
		retries = fmt.Sprintf(", %d failed tries run again", st.Units.Retries)
	}
	fmt.Fprintf(w, "  units    %d done of %d, %d running, %d failed%s (%s policy)\n",
		st.Units.Done, st.Units.Total, st.Units.Running, st.Units.Failed, retries, st.Policy)
	for i, u := range st.RetriedUnits {
		head := "  retried  "
		if i > 0 {
			head = "           "
		}
		fmt.Fprintf(w, "%sunit %d: %s; last: %s\n", head, u.Unit, tryCounts(u), u.Error)
	}
	if more := st.Units.Retried - len(st.RetriedUnits); more > 0 && len(st.RetriedUnits) > 0 {
		fmt.Fprintf(w, "           and %d more units\n", more)
	}
	t := st.Timings
	if !t.Started.IsZero() {
		end := t.Finished
		if end.IsZero() {
			end = time.Now()
		}
		fmt.Fprintf(w, "  time     %v since the first unit, compute %v\n",
			end.Sub(t.Started).Round(time.Millisecond), time.Duration(t.ComputeNanos).Round(time.Millisecond))
	}
	if st.Output != "" {
		fmt.Fprintf(w, "  output   sha256 %s\n", st.Output)
		switch {
		case !st.OutputExpired.IsZero():
			fmt.Fprintf(w, "           expired: removed on %s after the server's retention period; submit the job again to make it anew\n",
				st.OutputExpired.Local().Format(time.DateTime))
		case !st.OutputExpires.IsZero():
			fmt.Fprintf(w, "           kept until %s (braid get %s -o FILE)\n", st.OutputExpires.Local().Format(time.DateTime), st.Output)
		default:
			fmt.Fprintf(w, "           braid get %s -o FILE\n", st.Output)
		}
	}
	if st.Error != "" {
		fmt.Fprintf(w, "  error    %s\n", st.Error)
	}
}

func fmtParams(p map[string]string) string {
	if len(p) == 0 {
		return ""
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, p[k])
	}
	return b.String()
}

// jobExit is the exit code for a finished job: 0 if done.
func jobExit(st api.JobStatus) int {
	if st.State == api.JobDone {
		return 0
	}
	return 1
}

func runPut(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "put", "FILE [flags]", `
Uploads FILE ("-" for standard input) to the server and prints the blob id
to pass to submit --input. The id is the SHA-256 of the content, so
uploading the same bytes again gives the same id. The upload streams:
the file is not held in memory. A progress bar is drawn on stderr when it
is a terminal (or with --progress).`)
	cf := addClientFlags(fs, 0)
	showProgress := fs.Bool("progress", false, "draw progress on stderr even when it is not a terminal")
	name, code := oneArg(env, fs, args, "FILE")
	if code >= 0 {
		return code
	}
	var in io.Reader = os.Stdin
	var size int64 // 0: unknown
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			env.Errorf("put: %v", err)
			return 1
		}
		defer f.Close()
		in = f
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("put: %v", err)
		return 2
	}
	defer cancel()
	var prog *progress
	if *showProgress || isTerminal(env.Stderr) {
		prog = startProgress(env.Stderr, isTerminal(env.Stderr), size, nil)
		in = progressReader{in, prog}
		defer prog.stop()
	}
	info, err := c.PutInfo(ctx, in)
	if prog != nil {
		prog.stop() // the bar's last line before any other output
	}
	if err != nil {
		return clientFail(env, "put", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, info)
	} else {
		fmt.Fprintln(env.Stdout, info.ID)
	}
	return 0
}

func runGet(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "get", "ID -o FILE [flags]", `
Downloads blob ID, e.g. a job's output, into FILE ("-" for standard
output). The file appears whole or not at all. A progress bar is drawn on
stderr when it is a terminal (or with --progress).`)
	out := fs.StringP("output", "o", "", "write to this `FILE` (required; - for standard output)")
	cf := addClientFlags(fs, 0)
	showProgress := fs.Bool("progress", false, "draw progress on stderr even when it is not a terminal")
	id, code := oneArg(env, fs, args, "blob ID")
	if code >= 0 {
		return code
	}
	if *out == "" {
		env.Errorf("get: give the output file with -o FILE (or -o - for standard output)")
		return 2
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("get: %v", err)
		return 2
	}
	defer cancel()
	var prog *progress
	if *showProgress || isTerminal(env.Stderr) {
		prog = startProgress(env.Stderr, isTerminal(env.Stderr), 0, nil)
		defer prog.stop()
	}
	if *out == "-" {
		_, err := c.Get(ctx, id, progressWriter{env.Stdout, prog})
		if prog != nil {
			prog.stop()
		}
		if err != nil {
			return clientFail(env, "get", err)
		}
		return 0
	}
	tmp, err := outfile.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".part-*", outfile.Perm)
	if err != nil {
		env.Errorf("get: %v", err)
		return 1
	}
	defer os.Remove(tmp.Name())
	n, err := c.Get(ctx, id, progressWriter{tmp, prog})
	if prog != nil {
		prog.stop()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return clientFail(env, "get", err)
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		env.Errorf("get: %v", err)
		return 1
	}
	if *cf.json {
		jsonLine(env.Stdout, map[string]any{"id": id, "size": n, "file": *out})
	} else {
		fmt.Fprintf(env.Stderr, "braid: wrote %s (%d bytes)\n", *out, n)
	}
	return 0
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

User operations (braid op add) run in a sandbox with per-unit limits:
--unit-mem, --unit-timeout and --unit-output. A unit that fails runs
again, on another worker where there is one, up to --max-tries times;
then the job fails with the unit's error.

With --pipeline FILE it submits a pipeline instead: named steps whose
inputs may be other steps' outputs, all at once (see below); it prints
the pipeline's id (pN, for status and wait) and its steps' job ids.
`+pipelineHelp)
	op := fs.String("op", "", "the `operation` to apply (required)")
	input := fs.String("input", "", "the blob `ID` to apply it to, or job:ID for the output of another job (required)")
	params := paramFlag{}
	fs.Var(params, "param", "an operation parameter `NAME=VALUE` (repeatable)")
	units := fs.Int("units", 0, "split into about `N` units (0: the operation chooses)")
	var tile api.Tile
	fs.Var(tileFlag{&tile}, "tile", "split an image into tiles of `WxH` pixels, e.g. 256x256")
	repeat := fs.Int("repeat", 0, "process the whole job `N` times as independent units")
	policy := fs.String("policy", api.PolicyDynamic, "scheduling `policy`: equal, proportional or dynamic")
	inFlight := fs.Int("in-flight", 0, "units a stream may hold at once (0: the server's default)")
	split := fs.String("split", "", "cut the input into units: whole, bytes:SIZE, lines:SIZE or tiles:WxH[+HALO] (default: the operation's)")
	merge := fs.String("merge", "", "join the units' outputs: concat, tiles or reduce:OP (default: the operation's)")
	lim := addLimitFlags(fs)
	maxTries := fs.Int("max-tries", 0, "times a unit may fail before the job fails (0: the server's default, 3)")
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
		if *op != "" || *input != "" {
			env.Errorf("submit: --pipeline takes the operations and inputs from its file; drop --op and --input")
			return 2
		}
		return submitPipeline(ctx, env, cf, *pipeline, *wait)
	}
	if *op == "" || *input == "" {
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
	req := api.JobRequest{Op: *op, Input: *input, Units: *units, Tile: tile, Repeat: *repeat, Policy: *policy, InFlight: *inFlight,
		Split: *split, Merge: *merge, UnitMem: limits.Memory, UnitOutput: limits.Output, MaxTries: *maxTries}
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

func runStatus(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "status", "JOB|pPIPELINE [flags]", "Prints a job's state, unit counts, output blob id or error; for pN, every step of pipeline N.")
	cf := addClientFlags(fs, 30*time.Second)
	arg, code := oneArg(env, fs, args, "JOB id")
	if code >= 0 {
		return code
	}
	if pid, ok := pipelineID(arg); ok {
		c, ctx, cancel, err := cf.client(ctx)
		if err != nil {
			env.Errorf("status: %v", err)
			return 2
		}
		defer cancel()
		ps, err := c.Pipeline(ctx, pid)
		if err != nil {
			return clientFail(env, "status", err)
		}
		printPipeline(env.Stdout, ps, *cf.json)
		return 0
	}
	id, code := parseJobID(env, "status", arg)
	if code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("status: %v", err)
		return 2
	}
	defer cancel()
	st, err := c.Status(ctx, id)
	if err != nil {
		return clientFail(env, "status", err)
	}
	printJob(env.Stdout, st, *cf.json)
	return 0
}

func runWait(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "wait", "JOB|pPIPELINE [flags]", `
Waits until the job is done, failed or canceled, drawing progress (units
done of total, units per second) on stderr, then prints its status. The
exit code is 0 if the job is done, 1 otherwise. For pN, waits for every
step of pipeline N.`)
	cf := addClientFlags(fs, 0)
	arg, code := oneArg(env, fs, args, "JOB id")
	if code >= 0 {
		return code
	}
	if pid, ok := pipelineID(arg); ok {
		c, ctx, cancel, err := cf.client(ctx)
		if err != nil {
			env.Errorf("wait: %v", err)
			return 2
		}
		defer cancel()
		return waitPipeline(ctx, env, c, pid, *cf.json)
	}
	id, code := parseJobID(env, "wait", arg)
	if code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("wait: %v", err)
		return 2
	}
	defer cancel()
	return waitAndPrint(ctx, env, c, id, *cf.json)
}

// waitAndPrint waits for a job with a progress bar on stderr and prints
// the final status.
func waitAndPrint(ctx context.Context, env *Env, c *client.Client, id uint64, asJSON bool) int {
	bar := newUnitsBar(env.Stderr)
	st, err := c.Wait(ctx, id, bar.update)
	bar.finish()
	if err != nil {
		return clientFail(env, "wait", err)
	}
	printJob(env.Stdout, st, asJSON)
	return jobExit(st)
}

// unitsBar draws a job's progress: units done of total and the rate. On a
// terminal it redraws one line; elsewhere it prints a line when the
// count changed, at most every two seconds.
type unitsBar struct {
	w         io.Writer
	tty       bool
	start     time.Time
	lastDraw  time.Time
	lastDone  int
	drawn     bool
	lastWidth int
}

func newUnitsBar(w io.Writer) *unitsBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &unitsBar{w: w, tty: tty, start: time.Now(), lastDone: -1}
}

func (b *unitsBar) update(st api.JobStatus) {
	now := time.Now()
	final := st.State.Final()
	if !final {
		if b.tty && now.Sub(b.lastDraw) < 100*time.Millisecond {
			return
		}
		if !b.tty && (st.Units.Done == b.lastDone || now.Sub(b.lastDraw) < 2*time.Second) {
			return
		}
	}
	b.lastDraw, b.lastDone = now, st.Units.Done
	const width = 30
	total := max(st.Units.Total, 1)
	filled := width * st.Units.Done / total
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	elapsed := now.Sub(b.start)
	if !st.Timings.Started.IsZero() {
		elapsed = now.Sub(st.Timings.Started)
		if !st.Timings.Finished.IsZero() {
			elapsed = st.Timings.Finished.Sub(st.Timings.Started)
		}
	}
	rate := 0.0
	if elapsed > 0 {
		rate = float64(st.Units.Done) / elapsed.Seconds()
	}
	line := fmt.Sprintf("job %d %-8s [%s] %d/%d units  %.1f units/s  %s", st.Job, st.State, bar,
		st.Units.Done, st.Units.Total, rate, elapsed.Round(100*time.Millisecond))
	if b.tty {
		pad := ""
		if n := b.lastWidth - len(line); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		fmt.Fprint(b.w, "\r"+line+pad)
		b.lastWidth = len(line)
	} else {
		fmt.Fprintln(b.w, line)
	}
	b.drawn = true
}

func (b *unitsBar) finish() {
	if b.tty && b.drawn {
		fmt.Fprintln(b.w)
	}
}

func runJobs(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "jobs", "[flags]", "Lists the server's jobs, newest first.")
	state := fs.String("state", "", "only jobs in this `state`: queued, running, done, failed or canceled")
	limit := fs.Int("limit", 20, "at most `N` jobs")
	cf := addClientFlags(fs, 30*time.Second)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("jobs: %v", err)
		return 2
	}
	defer cancel()
	jobs, err := c.Jobs(ctx, api.JobState(*state), *limit)
	if err != nil {
		return clientFail(env, "jobs", err)
	}
	if *cf.json {
		out := make([]jobJSON, len(jobs))
		for i, j := range jobs {
			out[i] = toJobJSON(j)
		}
		jsonLine(env.Stdout, map[string]any{"jobs": out})
		return 0
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tOP\tUNITS\tSUBMITTED\tOUTPUT / ERROR")
	for _, j := range jobs {
		detail := j.Output
		if j.Error != "" {
			detail = j.Error
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\n", j.Job, j.State, j.Op, j.Units.Done, j.Units.Total,
			j.Timings.Submitted.Local().Format("2006-01-02 15:04:05"), detail)
	}
	tw.Flush()
	return 0
}

func runWorkers(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "workers", "[flags]", `
Lists the workers the server knows, live and dead: what each registered
(threads, cores, memory, addresses, operations), the units it delivered,
and for a live worker, the megabytes each data-plane path carried and
COMPUTING, the share of its lent thread time spent computing while it had
units (its results' compute time over threads x time with units in
flight; the rest went to waiting for units and moving them).`)
	cf := addClientFlags(fs, 30*time.Second)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("workers: %v", err)
		return 2
	}
	defer cancel()
	ws, err := c.Workers(ctx)
	if err != nil {
		return clientFail(env, "workers", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, api.WorkerList{Workers: ws})
		return 0
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tNAME\tALIVE\tTHREADS\tCORES\tMEMORY\tUNITS\tCOMPUTING\tADDRESSES\tMB PER PATH\tOPS")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d\t%.1f GiB\t%d\t%s\t%s\t%s\t%s\n", w.ID, w.Name, w.Alive, w.Threads, w.Cores,
			float64(w.Memory)/(1<<30), w.Done, computing(w), strings.Join(w.Addresses, ","), pathMB(w.Paths), strings.Join(w.Ops, ","))
	}
	tw.Flush()
	return 0
}

// computing formats a worker's compute fraction as a percentage: "98.5%";
// "-" before it had a unit.
func computing(w api.WorkerInfo) string {
	if w.LentNanos <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*w.ComputeFraction())
}

// pathMB formats the megabytes each data-plane path carried, both ways:
// "37.5/33.8"; "-" for a worker without a live session.
func pathMB(paths []api.PathInfo) string {
	if len(paths) == 0 {
		return "-"
	}
	parts := make([]string, len(paths))
	for i, p := range paths {
		parts[i] = fmt.Sprintf("%.1f", float64(p.BytesSent+p.BytesReceived)/1e6)
	}
	return strings.Join(parts, "/")
}

func runCancel(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "cancel", "JOB [flags]", "Cancels an unfinished job; its units stop being sent.")
	cf := addClientFlags(fs, 30*time.Second)
	arg, code := oneArg(env, fs, args, "JOB id")
	if code >= 0 {
		return code
	}
	id, code := parseJobID(env, "cancel", arg)
	if code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("cancel: %v", err)
		return 2
	}
	defer cancel()
	st, err := c.Cancel(ctx, id)
	if err != nil {
		return clientFail(env, "cancel", err)
	}
	printJob(env.Stdout, st, *cf.json)
	return 0
}

func runOps(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "ops", "[flags]", "Lists the operations jobs may name, with their parameters.")
	cf := addClientFlags(fs, 30*time.Second)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("ops: %v", err)
		return 2
	}
	defer cancel()
	list, err := c.Ops(ctx)
	if err != nil {
		return clientFail(env, "ops", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, api.OpList{Ops: list})
		return 0
	}
	for _, op := range list {
		tiles := ""
		if op.Tiles {
			tiles = " (takes --tile)"
		}
		fmt.Fprintf(env.Stdout, "%-10s %s%s\n", op.Name, op.Doc, tiles)
		if op.Kind == api.OpModule {
			fmt.Fprintf(env.Stdout, "  module v%d sha256 %s, %s, added %s\n", op.Version, op.Hash, formatBytes(op.Size),
				op.Added.Local().Format(time.DateTime))
			if op.Split != "" || op.Merge != "" {
				fmt.Fprintf(env.Stdout, "  default --split %s --merge %s\n", or(op.Split, "whole"), or(op.Merge, "concat"))
			}
			if len(op.Params) == 0 {
				fmt.Fprintf(env.Stdout, "  --param NAME=VALUE  any; each is an environment variable of the module\n")
			}
		}
		for _, p := range op.Params {
			def := ""
			if p.Default != "" {
				def = " (default " + p.Default + ")"
			}
			fmt.Fprintf(env.Stdout, "  --param %s=...  %s%s\n", p.Name, p.Doc, def)
		}
	}
	return 0
}

// or returns s, or def if s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// tryCounts says how a unit's tries without a result went.
func tryCounts(u api.UnitTries) string {
	var parts []string
	if u.Failed > 0 {
		parts = append(parts, plural(u.Failed, "failed try", "failed tries"))
	}
	if u.Lost > 0 {
		parts = append(parts, plural(u.Lost, "lost copy", "lost copies"))
	}
	return strings.Join(parts, ", ")
}
