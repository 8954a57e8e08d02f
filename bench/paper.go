package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Papers lists the seed papers that PaperRun re-runs, by number.
var Papers = []string{"000", "001", "002", "003"}

// paperExplainers word, from a paper's stored measurements, why some of
// its figures look as they do, by figure ID; the report prints it under
// the figure's tables.
var paperExplainers = map[string]func(*PaperResult) map[string][]string{
	"001": explain001,
}

// paperRunners are the papers implemented so far.
var paperRunners = map[string]func(*PaperRun, context.Context, *PaperResult) error{
	"000": (*PaperRun).paper000,
	"001": (*PaperRun).paper001,
	"002": (*PaperRun).paper002,
	"003": (*PaperRun).paper003,
}

// PaperRun re-runs the measurements of seed papers on the testbed and
// writes results.json, one plot per figure or table and report.md into
// Out.
type PaperRun struct {
	// Papers are the papers to run ("000", "001", "003"); "all" means
	// every implemented one.
	Papers []string
	// Quick runs a reduced version of each paper: fewer sizes, counts and
	// repetitions.
	Quick bool
	// Out is the directory written; created if missing. Required.
	Out string
	// Command is the command line shown in the report.
	Command string
	// Braid is the braid binary that the job-system papers start as
	// processes; empty means this executable.
	Braid string
	// Log receives progress lines; nil means none.
	Log io.Writer
	// Figures, when not empty, re-runs only these figures of the one
	// paper in Papers (001 only; ParseFigures checks them): the layouts
	// they are drawn from run, and the other figures of results.json
	// already in Out are kept, marked as from their earlier run.
	Figures []string
}

// Results is what results.json holds.
type Results struct {
	Command string         `json:"command"`
	Machine Machine        `json:"machine"`
	Started time.Time      `json:"started"`
	Elapsed float64        `json:"elapsed_s"`
	Quick   bool           `json:"quick"`
	Papers  []*PaperResult `json:"papers"`
}

// Machine describes where a run ran.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	// Load is /proc/loadavg when the run started: other work on the
	// machine disturbs the figures.
	Load string `json:"load,omitempty"`
}

// PaperResult is one paper's part of a run.
type PaperResult struct {
	Paper string `json:"paper"`
	Title string `json:"title"`
	// Setup says what ran, Emulated what stands in for the paper's setup,
	// Missing what of the paper is not measured here.
	Setup    string   `json:"setup"`
	Emulated []string `json:"emulated,omitempty"`
	Missing  []string `json:"missing,omitempty"`
	// Findings are plain-words statements: where braid falls short of the
	// paper or of a peer, and by how much.
	Findings []string  `json:"findings,omitempty"`
	Figures  []*Figure `json:"figures"`
	Elapsed  float64   `json:"elapsed_s"`
}

// Figure is one of a paper's figures or tables, re-measured.
type Figure struct {
	ID     string `json:"id"` // e.g. "003-fig5"; the plot is ID.svg
	Title  string `json:"title"`
	XLabel string `json:"x_label"` // with the unit
	YLabel string `json:"y_label"` // with the unit
	Unit   string `json:"unit"`    // of the values
	LogX   bool   `json:"log_x,omitempty"`
	// Higher says higher values are better (bandwidth); else lower ones
	// are (time).
	Higher bool `json:"higher_is_better"`
	// Comparable says the paper's values can be compared with braid's
	// directly; when false (another era's hardware or a simulator) the
	// report shows them but states no shortfall against them.
	Comparable bool `json:"paper_comparable"`
	// Apart says why the paper's values do not compare with this run's
	// where a figure that is not Comparable shows them: the report gives
	// no ratio there and says this instead ("" means a sentence that
	// points at the paper's Emulated list).
	Apart string `json:"paper_apart,omitempty"`
	// Compare lists pairs of series {braid, peer}: the report says where
	// the first falls short of the second.
	Compare [][2]string `json:"compare,omitempty"`
	Note    string      `json:"note,omitempty"`
	// CPU is the CPU the processes of the figure's layouts used, shown
	// in a table under the figure's.
	CPU []*CPUUse `json:"cpu,omitempty"`
	// From names the earlier run a figure comes from when a run of
	// selected figures kept it ("" means this run measured it).
	From   string   `json:"from_run,omitempty"`
	Plot   string   `json:"plot"`
	Points []*Point `json:"points"`
}

// Point is one measured point of a figure.
type Point struct {
	Name    string    `json:"name"` // figure/series/x
	Series  string    `json:"series"`
	Kind    string    `json:"kind"` // braid, peer or ideal
	X       float64   `json:"x"`
	XLabel  string    `json:"x_label"`
	Unit    string    `json:"unit"`
	Value   float64   `json:"value"` // mean over the repetitions
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Stddev  float64   `json:"stddev"`
	Reps    int       `json:"reps"`
	Samples []float64 `json:"samples"`
	Paper   *float64  `json:"paper,omitempty"`
	Ratio   *float64  `json:"ratio,omitempty"` // Value / Paper
	// From names the earlier run a point comes from when a run of
	// selected figures kept it in a figure it re-measured ("" means this
	// run measured it).
	From string `json:"from_run,omitempty"`
}

// Kinds of series.
const (
	kindBraid = "braid"
	kindPeer  = "peer"
	kindIdeal = "ideal"
)

// fig adds a figure to the paper's result.
func (pr *PaperResult) fig(f *Figure) *Figure {
	f.Plot = f.ID + ".svg"
	pr.Figures = append(pr.Figures, f)
	return f
}

// add records one sample of series at x.
func (f *Figure) add(series, kind string, x float64, xlabel string, v float64) {
	p := f.point(series, x)
	if p == nil {
		p = &Point{Name: fmt.Sprintf("%s/%s/%s", f.ID, series, xlabel), Series: series, Kind: kind, X: x, XLabel: xlabel, Unit: f.Unit}
		f.Points = append(f.Points, p)
	}
	p.Samples = append(p.Samples, v)
}

func (f *Figure) point(series string, x float64) *Point {
	for _, p := range f.Points {
		if p.Series == series && p.X == x {
			return p
		}
	}
	return nil
}

// paper sets the paper's value of series at x; the point must have been
// measured.
func (f *Figure) paper(series string, x, v float64) {
	if p := f.point(series, x); p != nil {
		p.Paper = &v
	}
}

// series returns the figure's series names in order of first appearance.
func (f *Figure) series() []string {
	var out []string
	for _, p := range f.Points {
		if !slices.Contains(out, p.Series) {
			out = append(out, p.Series)
		}
	}
	return out
}

// xs returns the figure's x values, sorted, with their labels.
func (f *Figure) xs() ([]float64, map[float64]string) {
	labels := map[float64]string{}
	var xs []float64
	for _, p := range f.Points {
		if _, ok := labels[p.X]; !ok {
			xs = append(xs, p.X)
			labels[p.X] = p.XLabel
		}
	}
	slices.Sort(xs)
	return xs, labels
}

// finish computes every point's statistics and the figure's findings.
func (f *Figure) finish() []string {
	for _, p := range f.Points {
		p.Reps = len(p.Samples)
		if p.Reps == 0 {
			continue
		}
		p.Min, p.Max = slices.Min(p.Samples), slices.Max(p.Samples)
		var sum float64
		for _, s := range p.Samples {
			sum += s
		}
		p.Value = sum / float64(p.Reps)
		var ss float64
		for _, s := range p.Samples {
			ss += (s - p.Value) * (s - p.Value)
		}
		if p.Reps > 1 {
			p.Stddev = math.Sqrt(ss / float64(p.Reps-1))
		}
		p.Ratio = nil
		// A ratio of two percentages means nothing when either may be
		// negative or near zero (paper 001 Fig. 10's decreases cross
		// zero): such figures are compared by their difference in points.
		if p.Paper != nil && *p.Paper != 0 && f.Comparable && f.Unit != "%" {
			r := p.Value / *p.Paper
			p.Ratio = &r
		}
	}
	var out []string
	worse := func(v, than float64) float64 { // how much worse v is, as a fraction of than
		if than == 0 {
			return 0
		}
		if f.Higher {
			return (than - v) / than
		}
		return (v - than) / than
	}
	word := "below"
	if !f.Higher {
		word = "above"
	}
	for _, p := range f.Points {
		if p.Kind != kindBraid || p.Paper == nil || !f.Comparable {
			continue
		}
		switch w := worse(p.Value, *p.Paper); {
		case f.Unit == "%" && math.Abs(p.Value-*p.Paper) > 5 && w > 0:
			out = append(out, fmt.Sprintf("%s at %s: braid measured %s%%, %.0f points %s the paper's %s%%.",
				subject(f.Title, p.Series), p.XLabel, num(p.Value), math.Abs(p.Value-*p.Paper), word, num(*p.Paper)))
		case f.Unit != "%" && w > 0.1 && !f.Higher:
			out = append(out, fmt.Sprintf("%s at %s: braid measured %s %s, %.1f times the paper's %s.",
				subject(f.Title, p.Series), p.XLabel, num(p.Value), f.Unit, p.Value / *p.Paper, num(*p.Paper)))
		case f.Unit != "%" && w > 0.1:
			out = append(out, fmt.Sprintf("%s at %s: braid measured %s %s, %.0f%% %s the paper's %s.",
				subject(f.Title, p.Series), p.XLabel, num(p.Value), f.Unit, 100*w, word, num(*p.Paper)))
		}
	}
	for _, c := range f.Compare {
		for _, m := range f.Points {
			if m.Series != c[0] {
				continue
			}
			p := f.point(c[1], m.X)
			if p == nil || p.Reps == 0 {
				continue
			}
			// A shortfall counts when it is larger than both spreads.
			if w := worse(m.Value, p.Value); w > 0.05 && (f.Higher && m.Max < p.Min || !f.Higher && m.Min > p.Max) {
				by := fmt.Sprintf("by %.0f%%", 100*w)
				if !f.Higher {
					by = fmt.Sprintf("(%.1f times as much)", m.Value/p.Value)
				}
				out = append(out, fmt.Sprintf("%s at %s: %s (%s %s) falls short of %s (%s %s) %s.",
					f.Title, m.XLabel, m.Series, num(m.Value), f.Unit, p.Series, num(p.Value), f.Unit, by))
			}
		}
	}
	return out
}

// num formats a value with three significant digits or so.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

func (r *PaperRun) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, format+"\n", args...)
	}
}

// reps is the number of repetitions of each point: full runs repeat
// full times, quick ones quick times.
func (r *PaperRun) reps(full, quick int) int {
	if r.Quick {
		return quick
	}
	return full
}

func (r *PaperRun) bin() string {
	if r.Braid != "" {
		return r.Braid
	}
	exe, _ := os.Executable()
	return exe
}

// ParsePapers turns the --paper argument into paper numbers: one number,
// several separated by commas, or "all".
func ParsePapers(arg string) ([]string, error) {
	if arg == "all" {
		var out []string
		for _, p := range Papers {
			if paperRunners[p] != nil {
				out = append(out, p)
			}
		}
		return out, nil
	}
	var out []string
	for _, p := range strings.Split(arg, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(Papers, p) {
			return nil, fmt.Errorf("unknown paper %q: want one of %s or all", p, strings.Join(Papers, ", "))
		}
		if paperRunners[p] == nil {
			return nil, fmt.Errorf("paper %s is not re-run yet (implemented: %s)", p, strings.Join(implemented(), ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// ParseFigures turns the --figures argument into figure numbers of the
// one paper in papers: numbers separated by commas. Only paper 001 runs
// selected figures so far.
func ParseFigures(papers []string, arg string) ([]string, error) {
	if len(papers) != 1 || papers[0] != "001" {
		return nil, fmt.Errorf("--figures selects figures of paper 001 only, run alone (--paper 001), not %s", strings.Join(papers, ","))
	}
	var out []string
	for _, n := range strings.Split(arg, ",") {
		n = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(n), "fig"))
		if !slices.Contains(figures001, n) {
			return nil, fmt.Errorf("paper 001 has no figure %q: want some of %s", n, strings.Join(figures001, ", "))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func implemented() []string {
	var out []string
	for _, p := range Papers {
		if paperRunners[p] != nil {
			out = append(out, p)
		}
	}
	return out
}

// Run runs the papers and writes the results, the plots and the report.
// A paper that fails is reported as such; the others still run.
func (r *PaperRun) Run(ctx context.Context) (*Results, error) {
	if r.Out == "" {
		return nil, errors.New("bench: PaperRun needs an output directory")
	}
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return nil, err
	}
	if len(r.Figures) > 0 {
		if _, err := ParseFigures(r.Papers, strings.Join(r.Figures, ",")); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	res := &Results{Command: r.Command, Machine: ThisMachine(), Started: time.Now().UTC(), Quick: r.Quick}
	var errs []error
	// A run of selected figures keeps the others as the earlier run in
	// Out measured them.
	var old *Results
	if len(r.Figures) > 0 {
		var err error
		if old, err = ReadResults(r.Out); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("bench: keep the figures not re-run: %w", err)
		}
	}
	for _, p := range r.Papers {
		run := paperRunners[p]
		if run == nil {
			return nil, fmt.Errorf("bench: paper %q is not implemented", p)
		}
		pr := &PaperResult{Paper: p}
		t0 := time.Now()
		r.logf("== paper %s", p)
		err := run(r, ctx, pr)
		pr.Elapsed = time.Since(t0).Seconds()
		if old != nil {
			pr.carry(old)
		}
		for _, f := range pr.Figures {
			pr.Findings = append(pr.Findings, f.finish()...)
		}
		pr.Findings = unique(pr.Findings) // a kept figure's findings come again from finish
		if err != nil {
			errs = append(errs, fmt.Errorf("paper %s: %w", p, err))
			pr.Missing = append(pr.Missing, fmt.Sprintf("The run stopped early: %v.", err))
		}
		res.Papers = append(res.Papers, pr)
		if ctx.Err() != nil {
			break
		}
	}
	res.Elapsed = time.Since(res.Started).Seconds()
	if len(r.Figures) > 0 && len(errs) > 0 {
		// A run of selected figures that failed would replace a whole
		// run's results with part of a few figures: Out stays as it was.
		errs = append(errs, fmt.Errorf("bench: nothing in %s was replaced", r.Out))
		return res, errors.Join(errs...)
	}
	if err := res.Write(r.Out); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// Write writes results.json, the plots and report.md into dir.
func (res *Results) Write(dir string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return res.Redraw(dir)
}

// Redraw writes the plots and report.md into dir again from res, as this
// braid draws and words them (sizes in binary units, as the axes read
// them), leaving results.json as it is.
func (res *Results) Redraw(dir string) error {
	res.binaryUnits()
	if err := res.DrawPlots(dir); err != nil {
		return err
	}
	rf, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	if err := Report(rf, "", res); err != nil {
		rf.Close()
		return err
	}
	return rf.Close()
}

// DrawPlots writes each figure's plot, SVG and PNG, into dir.
func (res *Results) DrawPlots(dir string) error {
	for _, p := range res.Papers {
		for _, f := range p.Figures {
			if err := f.DrawAll(dir); err != nil {
				return fmt.Errorf("plot %s: %w", f.ID, err)
			}
		}
	}
	return nil
}

// ReadResults reads a run's results.json from dir.
func ReadResults(dir string) (*Results, error) {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "results.json"), err)
	}
	return &res, nil
}

// ThisMachine describes this machine.
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), CPU: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	m.Load = loadAvg()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return m
}

// subject names a figure's series in a finding: "title, series", except
// that a series whose first word repeats the title's last part replaces
// that part ("SCTP over TCP: throughput" and "throughput, SCTP / TCP"
// give "SCTP over TCP: throughput, SCTP / TCP", not "throughput,
// throughput").
func subject(title, series string) string {
	head, tail := "", title
	if i := strings.LastIndex(title, ": "); i >= 0 {
		head, tail = title[:i+2], title[i+2:]
	}
	first := func(s string) string {
		if f := strings.Fields(s); len(f) > 0 {
			return strings.ToLower(strings.TrimRight(f[0], ","))
		}
		return ""
	}
	if tail != "" && first(tail) == first(series) {
		return head + series
	}
	return title + ", " + series
}
