package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
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
	asJSON := fs.BoolP("json", "J", false, "print the report as one JSON object: its sections, and each table's rows keyed by column")
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
		r := parseReport(md.String())
		r.Args, r.Time = args, began
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

// benchReport is bench --json: the Markdown report's sections, each with
// its prose and its tables, a table's rows keyed by column header, the
// cells that are numbers as numbers.
type benchReport struct {
	Args     []string       `json:"args"`
	Time     time.Time      `json:"time"`
	Sections []benchSection `json:"sections"`
	Error    string         `json:"error,omitempty"`
}

type benchSection struct {
	Title  string       `json:"title"`
	Text   []string     `json:"text"`
	Tables []benchTable `json:"tables"`
}

type benchTable struct {
	Columns []string         `json:"columns"`
	Rows    []map[string]any `json:"rows"`
}

// parseReport reads the Markdown that bench.Suite writes: "###" headings,
// paragraphs and pipe tables.
func parseReport(md string) benchReport {
	r := benchReport{Sections: []benchSection{}}
	var sec *benchSection
	var tab *benchTable
	section := func(title string) {
		r.Sections = append(r.Sections, benchSection{Title: title, Text: []string{}, Tables: []benchTable{}})
		sec, tab = &r.Sections[len(r.Sections)-1], nil
	}
	cells := func(line string) []string {
		f := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		return f
	}
	for _, line := range strings.Split(md, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "## "):
			// the report's own heading: Args and Time say it
		case strings.HasPrefix(t, "#"):
			section(strings.TrimSpace(strings.TrimLeft(t, "#")))
		case strings.HasPrefix(t, "|"):
			if sec == nil {
				section("")
			}
			c := cells(t)
			switch {
			case tab == nil:
				sec.Tables = append(sec.Tables, benchTable{Columns: c, Rows: []map[string]any{}})
				tab = &sec.Tables[len(sec.Tables)-1]
			case strings.Trim(strings.Join(c, ""), "-: ") == "":
				// the header's underline
			default:
				row := map[string]any{}
				for i, v := range c {
					if i >= len(tab.Columns) {
						break
					}
					if f, err := strconv.ParseFloat(v, 64); err == nil {
						row[tab.Columns[i]] = f
					} else {
						row[tab.Columns[i]] = v
					}
				}
				tab.Rows = append(tab.Rows, row)
			}
		case t == "":
			tab = nil
		default:
			if sec == nil {
				section("")
			}
			sec.Text = append(sec.Text, t)
			tab = nil
		}
	}
	return r
}
