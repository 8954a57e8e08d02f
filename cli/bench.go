package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/braid-hpc/braid/bench"
	"github.com/braid-hpc/braid/testbed"
)

func init() {
	register(&command{name: "bench", summary: "run the transport experiments on an emulated testbed (root)", run: runBench})
}

func runBench(ctx context.Context, env *Env, args []string) int {
	var names []string
	for _, e := range bench.Experiments() {
		names = append(names, e.Name)
	}
	fs := newFlags(env, "bench", "[flags]", `
Runs braid's transport experiments on an emulated multi-homed testbed
(network namespaces with tbf-shaped links; needs root) and prints a Markdown
report. Each experiment measures its peers in the same run: one plain TCP
connection per path alone (the "ideal" is their sum), k TCP connections
striped by hand, and Linux MPTCP over the same links.

The job-system experiments (cluster, slowworker, fraction) run this braid
binary as separate server, worker and client processes in the testbed's
hosts; slowworker caps worker CPU with a cgroup it creates and removes;
fraction measures the share of a worker's lent thread time spent computing.

Experiments: `+strings.Join(names, ", ")+`.`)
	only := fs.String("only", "", "run only the experiment of this `name`, or else those whose name contains it")
	secs := fs.Float64("time", 5, "`seconds` per bulk measurement")
	out := fs.StringP("output", "o", "", "append the report to this `file` (default: stdout)")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if err := testbed.Available(); err != nil {
		env.Errorf("bench needs the testbed: %v", err)
		return 1
	}
	var w io.Writer = env.Stdout
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			env.Errorf("%v", err)
			return 1
		}
		defer f.Close()
		w = f
	}
	fmt.Fprintf(w, "\n## braid bench %s (%s)\n", strings.Join(args, " "), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	s := &bench.Suite{Out: w, Log: env.Stderr, Duration: time.Duration(*secs * float64(time.Second)), Only: *only}
	if err := s.Run(ctx); err != nil {
		env.Errorf("%v", err)
		return 1
	}
	return 0
}
