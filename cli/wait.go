package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
)

func init() {
	register(&command{name: "wait", summary: "wait for a job to finish, with a progress bar", run: runWait})
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
