package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/braid-hpc/braid/bench"
	"github.com/braid-hpc/braid/testbed"
)

func init() {
	register(&command{name: "bench", summary: "run the transport experiments or re-run the seed papers on an emulated testbed (root)", run: runBench, subs: []string{"report"}})
}

func runBench(ctx context.Context, env *Env, args []string) int {
	if len(args) > 0 && args[0] == "report" {
		return runBenchReport(env, args[1:])
	}
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

Experiments: `+strings.Join(names, ", ")+`.

--paper re-runs a seed paper's measurements (000, 001, 002, 003, or all): it
sets up its own testbed, runs braid and the peers side by side, tears
the testbed down, and writes results.json, one SVG plot per figure or
table and report.md (the paper's numbers beside braid's) into --out.
--quick runs a reduced version of each paper in under 3 minutes.
--figures re-runs only some figures of paper 001 (the cluster layouts they
are drawn from) into an --out that holds a full run: the other figures are
kept, marked as from their earlier run.

  braid bench --paper 003 --out results/
  braid bench --paper all --quick --out /tmp/quick
  braid bench --paper 001 --figures 6,9,10 --out docs/paper/001
  braid bench report results/ /tmp/quick > papers.md`)
	only := fs.String("only", "", "run only the experiment of this `name`, or else those whose name contains it")
	secs := fs.Float64("time", 5, "`seconds` per bulk measurement")
	out := fs.StringP("output", "o", "", "append the report to this `file` (default: stdout)")
	asJSON := fs.BoolP("json", "J", false, "print the results as one JSON object: the experiments' sections, each table's typed columns and its rows keyed by column, and the Markdown report")
	paper := fs.String("paper", "", "re-run the seed `paper` 000, 001, 002, 003 (comma-separated) or all, writing into --out")
	quick := fs.Bool("quick", false, "with --paper: a reduced run (fewer sizes, counts and repetitions), under 3 minutes")
	outDir := fs.String("out", "", "with --paper: the `directory` of results.json, the plots and report.md (default: braid-paper-PAPER)")
	figures := fs.String("figures", "", "with --paper 001: re-run only these `figures` (comma-separated numbers, e.g. 6,9,10), keeping the others of results.json in --out")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		env.Errorf("bench: unexpected argument %q (did you mean braid bench report DIR...?)", fs.Arg(0))
		return 2
	}
	if *paper == "" && (*quick || *outDir != "" || *figures != "") {
		env.Errorf("bench: --quick, --out and --figures go with --paper")
		return 2
	}
	if *paper != "" {
		papers, err := bench.ParsePapers(*paper)
		if err != nil {
			env.Errorf("bench --paper: %v", err)
			return 2
		}
		if *only != "" || *out != "" {
			env.Errorf("bench: --only and -o do not go with --paper (it writes into --out)")
			return 2
		}
		var figs []string
		if *figures != "" {
			if figs, err = bench.ParseFigures(papers, *figures); err != nil {
				env.Errorf("bench: %v", err)
				return 2
			}
		}
		if err := testbed.Available(); err != nil {
			env.Errorf("bench needs the testbed: %v", err)
			return 1
		}
		dir := *outDir
		if dir == "" {
			dir = "braid-paper-" + strings.ReplaceAll(*paper, ",", "-")
		}
		run := &bench.PaperRun{Papers: papers, Quick: *quick, Out: dir, Log: env.Stderr, Figures: figs,
			Command: "braid bench " + strings.Join(args, " ")}
		_, err = run.Run(ctx)
		fmt.Fprintf(env.Stdout, "%s\n", filepath.Join(dir, "report.md"))
		if err != nil {
			env.Errorf("%v", err)
			return 1
		}
		return 0
	}
	if !(*secs > 0) {
		env.Errorf("bench: --time %v: want seconds above 0", *secs)
		return 2
	}
	if !bench.Known(*only) {
		env.Errorf("bench: --only %q names no experiment; experiments: %s", *only, strings.Join(names, ", "))
		return 2
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
	began := time.Now().UTC()
	var md strings.Builder
	report := w
	if *asJSON {
		report = &md
	}
	fmt.Fprintf(report, "\n## braid bench %s (%s)\n", strings.Join(args, " "), began.Format("2006-01-02 15:04 MST"))
	s := &bench.Suite{Out: report, Log: env.Stderr, Duration: time.Duration(*secs * float64(time.Second)), Only: *only}
	err := s.Run(ctx)
	if *asJSON {
		r := benchJSON{Args: args, Time: began, Sections: s.Results, Markdown: md.String()}
		if r.Sections == nil {
			r.Sections = []*bench.Section{}
		}
		if err != nil {
			r.Error = err.Error()
		}
		if jerr := printJSON(w, r); jerr != nil && err == nil {
			err = jerr
		}
	}
	if err != nil {
		env.Errorf("%v", err)
		return 1
	}
	return 0
}

// benchJSON is bench --json: the experiments' results, from which the
// Markdown report (also given) was rendered.
type benchJSON struct {
	Args     []string         `json:"args"`
	Time     time.Time        `json:"time"`
	Sections []*bench.Section `json:"sections"`
	Markdown string           `json:"markdown"`
	Error    string           `json:"error,omitempty"`
}

func runBenchReport(env *Env, args []string) int {
	fs := newFlags(env, "bench report", "[flags] DIR...", `
Gathers the runs of braid bench --paper in the directories DIR... into one
Markdown report, with the plots linked relative to the -o file's folder
(docs/benchmarks.md is made this way). --redraw draws each run's plots
and writes its report.md again from its results.json, without running
anything.`)
	out := fs.StringP("output", "o", "", "write the report to this `file` (default: stdout)")
	redraw := fs.Bool("redraw", false, "redraw the plots (SVG and PNG) and report.md in each DIR from its results.json, as this braid draws them")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() == 0 {
		env.Errorf("bench report: give the directories of braid bench --paper runs")
		return 2
	}
	var w io.Writer = env.Stdout
	base := "."
	if *out != "" {
		base = filepath.Dir(*out)
	}
	var b strings.Builder
	for _, dir := range fs.Args() {
		res, err := bench.ReadResults(dir)
		if err == nil && *redraw {
			err = res.Redraw(dir)
		}
		if err != nil {
			env.Errorf("bench report: %v", err)
			return 1
		}
		rel, err := filepath.Rel(base, dir)
		if err != nil {
			rel = dir
		}
		if err := bench.Report(&b, filepath.ToSlash(rel), res); err != nil {
			env.Errorf("bench report: %v", err)
			return 1
		}
		b.WriteString("\n")
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			env.Errorf("bench report: %v", err)
			return 1
		}
		return 0
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return 1
	}
	return 0
}
