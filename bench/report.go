package bench

import (
	"fmt"
	"io"
	"path"
	"strings"
)

// Report writes a run's results as Markdown: per paper what ran and what
// stands in for the paper's setup, per figure its plot and a table with
// the paper's values beside braid's and their ratio, and the findings.
// Plots are linked as imgDir/ID.svg.
func Report(w io.Writer, imgDir string, res *Results) error {
	ew := &errWriter{w: w}
	mode := ""
	if res.Quick {
		mode = " (quick: reduced sizes, counts and repetitions)"
	}
	fmt.Fprintf(ew, "## Papers re-run: `%s`%s\n\n", res.Command, mode)
	m := res.Machine
	fmt.Fprintf(ew, "Run %s, %.0f s. Machine: %s, %d cores, %s, %s", res.Started.Format("2006-01-02 15:04 MST"), res.Elapsed, m.CPU, m.Cores, m.Kernel, m.Go)
	if m.Load != "" {
		fmt.Fprintf(ew, "; load average %s at the start (the cores are shared)", m.Load)
	}
	fmt.Fprintf(ew, ".\n")
	fmt.Fprintf(ew, "Values are means over the repetitions, [min, max] over them. \"paper\" is the paper's figure where it gives one, \"ratio\" braid's value over it where the paper's setup and this one compare (no ratio column where they do not, with the reason under the table).\n")
	for _, p := range res.Papers {
		fmt.Fprintf(ew, "\n### Paper %s: %s\n\n%s\n", p.Paper, p.Title, p.Setup)
		if len(p.Emulated) > 0 {
			fmt.Fprintf(ew, "\nEmulated instead of the paper's setup:\n\n")
			for _, e := range p.Emulated {
				fmt.Fprintf(ew, "- %s\n", e)
			}
		}
		if len(p.Missing) > 0 {
			fmt.Fprintf(ew, "\nNot measured in this run:\n\n")
			for _, e := range p.Missing {
				fmt.Fprintf(ew, "- %s\n", e)
			}
		}
		var remarks map[string][]string
		if explain := paperExplainers[p.Paper]; explain != nil {
			remarks = explain(p)
		}
		for _, f := range p.Figures {
			fmt.Fprintf(ew, "\n#### %s\n\n", f.Title)
			if f.From != "" {
				fmt.Fprintf(ew, "Not re-run by this command: from %s.\n\n", f.From)
			}
			if f.Note != "" {
				fmt.Fprintf(ew, "%s\n\n", f.Note)
			}
			fmt.Fprintf(ew, "![%s](%s)\n\n", f.Title, path.Join(imgDir, f.Plot))
			table(ew, f)
			cpuTable(ew, f.CPU)
			if len(remarks[f.ID]) > 0 {
				fmt.Fprintf(ew, "\n")
				for _, r := range remarks[f.ID] {
					fmt.Fprintf(ew, "- %s\n", r)
				}
			}
		}
		fmt.Fprintf(ew, "\n#### Where braid falls short (paper %s)\n\n", p.Paper)
		if len(p.Findings) == 0 {
			fmt.Fprintf(ew, "Nowhere by more than the repetitions' spread (peers) or 10%% (the paper's comparable figures).\n")
		}
		for _, s := range p.Findings {
			fmt.Fprintf(ew, "- %s\n", s)
		}
	}
	return ew.err
}

// table writes a figure's points: one row per x, one column per series
// (mean and range), and for series with paper values the paper's value
// and the ratio.
func table(w io.Writer, f *Figure) {
	series := f.series()
	withPaper := map[string]bool{}
	for _, p := range f.Points {
		if p.Paper != nil {
			withPaper[p.Series] = true
		}
	}
	head := []string{f.XLabel}
	for _, s := range series {
		head = append(head, fmt.Sprintf("%s (%s)", s, f.Unit))
		if withPaper[s] {
			head = append(head, "paper", cmpHead(f))
		}
	}
	var rows [][]string
	xs, labels := f.xs()
	for _, x := range xs {
		row := []string{labels[x]}
		for _, s := range series {
			p := f.point(s, x)
			switch {
			case p == nil || p.Reps == 0:
				row = append(row, "")
			case p.Reps == 1:
				row = append(row, num(p.Value))
			default:
				row = append(row, fmt.Sprintf("%s [%s, %s]", num(p.Value), num(p.Min), num(p.Max)))
			}
			if withPaper[s] {
				if p != nil && p.Paper != nil {
					ratio := ""
					switch {
					case !f.Comparable:
						ratio = "—"
					case f.Unit == "%":
						ratio = fmt.Sprintf("%+.1f", p.Value-*p.Paper)
					case p.Ratio != nil:
						ratio = fmt.Sprintf("%.2f", *p.Ratio)
					}
					row = append(row, num(*p.Paper), ratio)
				} else {
					row = append(row, "", "")
				}
			}
		}
		rows = append(rows, row)
	}
	head, rows = dropDashColumns(head, rows)
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, row := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	if len(withPaper) > 0 && !f.Comparable {
		why := f.Apart
		if why == "" {
			why = "the paper's setup differs from this one too much for its values to compare (see \"Emulated instead of the paper's setup\" above); they are shown for reference."
		}
		fmt.Fprintf(w, "\nNo ratio column: %s\n", why)
	}
	if len(withPaper) > 0 && f.Comparable && f.Unit == "%" {
		fmt.Fprintf(w, "\n\"%s\" is braid's percentage minus the paper's, in percentage points: a ratio of two percentages means nothing when either can be negative or near zero, as here.\n", cmpHead(f))
	}
}

// cmpHead is the heading of the column comparing braid with the paper:
// the ratio, or for percentages the difference in points.
func cmpHead(f *Figure) string {
	if f.Unit == "%" {
		return "braid - paper (points)"
	}
	return "ratio"
}

// dropDashColumns removes the columns whose every filled row reads "—": such a
// column says nothing a single sentence under the table does not, and
// the caller writes that sentence. The first column (the x labels) stays.
func dropDashColumns(head []string, rows [][]string) ([]string, [][]string) {
	keep := make([]bool, len(head))
	keep[0] = true
	for c := 1; c < len(head); c++ {
		dash := false
		for _, row := range rows {
			switch {
			case c >= len(row) || row[c] == "":
			case row[c] == "—":
				dash = true
			default:
				keep[c] = true
			}
		}
		keep[c] = keep[c] || !dash
	}
	pick := func(cells []string) []string {
		var out []string
		for c, v := range cells {
			if c >= len(keep) || keep[c] {
				out = append(out, v)
			}
		}
		return out
	}
	out := make([][]string, len(rows))
	for i, row := range rows {
		out[i] = pick(row)
	}
	return pick(head), out
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

// cpuTable writes the CPU that the processes of a figure's layouts used
// (Figure.CPU), one row per layout and task count, if any.
func cpuTable(w io.Writer, use []*CPUUse) {
	if len(use) == 0 {
		return
	}
	cores := use[0].Cores
	fmt.Fprintf(w, "\nCPU over the timed jobs: user+system seconds of each process (/proc/PID/stat, 10 ms ticks), summed over the jobs of a row; "+
		"\"cores busy\" is CPU seconds over wall seconds, braid's processes (server, workers, client) and the machine's (every process, /proc/stat); this machine has %d cores.\n\n", cores)
	fmt.Fprintf(w, "| layout | tasks | jobs | wall (s) | server CPU (s) | workers CPU (s) | client CPU (s) | braid cores busy | machine cores busy | braid CPU per task (ms) | load average, start → end |\n")
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", 11))
	for _, u := range use {
		workers := fmt.Sprintf("%.2f", u.WorkerCPU())
		if len(u.Workers) > 1 {
			var each []string
			for _, v := range u.Workers {
				each = append(each, fmt.Sprintf("%.2f", v))
			}
			workers += " (" + strings.Join(each, " + ") + ")"
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.2f | %.2f | %s | %.2f | %.2f | %.2f | %s | %s → %s |\n",
			u.Layout, u.Tasks, u.Jobs, u.Wall, u.Server, workers, u.Client, u.Busy(), u.MachineBusy(), num(u.PerTask()), u.LoadStart, u.LoadEnd)
	}
}
