package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"

	"github.com/spf13/pflag"
)

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
		server:  fs.String("server", def, "base `url` of the braid server, or of several sharing one database, comma-separated (tried in turn when one is down); BRAID_SERVER sets the default"),
		json:    fs.Bool("json", false, "print one JSON object instead of text"),
		timeout: fs.Duration("timeout", timeout, "give up after this `duration` (0: never)"),
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
	// The dashboard's words: Running computes now, In flight was sent
	// and is not back (computing, or queued at a worker).
	fmt.Fprintf(w, "  units    %d done of %d, %d running, %d in flight, %d failed%s (%s policy)\n",
		st.Units.Done, st.Units.Total, st.Units.Computing, st.Units.Running, st.Units.Failed, retries, st.Policy)
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
		v := p[k]
		if len(v) > maxParamShown {
			// A long value (a file's worth) would fill the terminal:
			// its start and its size tell it apart; --json has it whole.
			v = fmt.Sprintf("%s... (%s)", strings.ToValidUTF8(v[:maxParamShown-16], ""), formatBytes(int64(len(v))))
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}

// maxParamShown is the longest parameter value status prints whole.
const maxParamShown = 80

// jobExit is the exit code for a finished job: 0 if done.
func jobExit(st api.JobStatus) int {
	if st.State == api.JobDone {
		return 0
	}
	return 1
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
