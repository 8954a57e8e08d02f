package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/braid-hpc/braid/api"
)

func init() {
	register(&command{name: "workers", summary: "list a server's workers", run: runWorkers})
}

func runWorkers(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "workers", "[flags]", `
Lists the workers the server knows, live and dead, with the dashboard's
columns: STATE (live or dead), THREADS, RUNNING and QUEUED (units
computing and waiting at the worker, as of its last heartbeat; 0 for a
dead worker, whose units run elsewhere), UNITS DONE (the units whose
result it delivered first), TRIES (the tries it computed: its units
done, and copies whose result came second, such as the dynamic policy's
backup copies, or failed; a worker can show 0 units done and a compute
share), COMPUTE SHARE (the share of its lent thread time spent computing
its tries while it had units: their compute time over threads x time with
units in flight; the rest went to waiting for units and moving them),
then what it registered (cores, memory, addresses, operations)
and for a live worker the megabytes each data-plane path carried.

A dead worker stays listed for the server's forget time (10 minutes by
default) after it was last seen, then the server forgets it; one that
registers again with the same name and addresses (restarted) replaces it
at once. --forget removes a dead worker now. A worker stopped with
SIGTERM or Ctrl-C deregisters and leaves the list at once.`)
	forget := fs.String("forget", "", "forget the dead worker with this `id` now (a live worker is refused: stop it instead)")
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
	if *forget != "" {
		w, err := c.Worker(ctx, *forget, false)
		if err != nil {
			return clientFail(env, "workers --forget", err)
		}
		if w.Alive {
			env.Errorf("workers --forget: worker %s is live; stop it (it deregisters as it stops) instead", w.ID)
			return 1
		}
		if err := c.Deregister(ctx, w.ID); err != nil {
			return clientFail(env, "workers --forget", err)
		}
		fmt.Fprintf(env.Stdout, "forgot dead worker %s\n", w.ID)
		return 0
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		return clientFail(env, "workers", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, api.WorkerList{Workers: ws})
		return 0
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tNAME\tSTATE\tTHREADS\tRUNNING\tQUEUED\tUNITS DONE\tTRIES\tCOMPUTE SHARE\tCORES\tMEMORY\tADDRESSES\tMB PER PATH\tOPS")
	for _, w := range ws {
		state := "live"
		if !w.Alive {
			state = "dead"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%.1f GiB\t%s\t%s\t%s\n", w.ID, w.Name, state, w.Threads,
			w.Running, w.Queued, w.Done, w.Tries, computeShare(w), w.Cores, float64(w.Memory)/(1<<30),
			strings.Join(w.Addresses, ","), pathMB(w.Paths), strings.Join(w.Ops, ","))
	}
	tw.Flush()
	return 0
}

// computeShare formats a worker's compute fraction as a percentage:
// "98.5%"; "-" before it had a unit.
func computeShare(w api.WorkerInfo) string {
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
