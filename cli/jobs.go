package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/braid-hpc/braid/api"
)

func init() {
	register(&command{name: "jobs", summary: "list a server's jobs", run: runJobs})
}

func runJobs(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "jobs", "[flags]", "Lists the server's jobs, newest first.")
	state := fs.String("state", "", "only jobs in this `state`: queued, running, done, failed or canceled")
	withChoices(fs, "state", "queued", "running", "done", "failed", "canceled")
	limit := fs.Int("limit", 20, "at most `n` jobs")
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
