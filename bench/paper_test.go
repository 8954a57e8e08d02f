package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/vmkernel"
	"github.com/braid-hpc/braid/testbed"
)

// checkRun checks what a paper run wrote into dir: results.json parses
// and has the papers asked for, every point a finite value and its
// repetitions, every figure a valid SVG plot that report.md shows.
func checkRun(t *testing.T, dir string, papers []string) *Results {
	t.Helper()
	res, err := ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Papers) != len(papers) {
		t.Fatalf("results.json has %d papers, want %d (%v)", len(res.Papers), len(papers), papers)
	}
	if res.Machine.Cores == 0 || res.Machine.CPU == "" || res.Command == "" {
		t.Errorf("results.json: machine %+v, command %q; want both", res.Machine, res.Command)
	}
	for i, p := range res.Papers {
		if p.Paper != papers[i] {
			t.Errorf("paper %d is %s, want %s", i, p.Paper, papers[i])
		}
		if len(p.Figures) == 0 {
			t.Errorf("paper %s: no figure", p.Paper)
		}
		if !bytes.Contains(report, []byte("### Paper "+p.Paper)) {
			t.Errorf("report.md has no section for paper %s", p.Paper)
		}
		for _, f := range p.Figures {
			if len(f.Points) == 0 {
				t.Errorf("%s: no point", f.ID)
			}
			for _, pt := range f.Points {
				if pt.Reps == 0 || len(pt.Samples) != pt.Reps || math.IsNaN(pt.Value) || math.IsInf(pt.Value, 0) ||
					pt.Min > pt.Value || pt.Value > pt.Max {
					t.Errorf("%s: value %v (min %v, max %v) over %d repetitions, samples %v", pt.Name, pt.Value, pt.Min, pt.Max, pt.Reps, pt.Samples)
				}
				switch {
				case pt.Paper != nil && f.Comparable && f.Unit == "%" && pt.Ratio != nil:
					t.Errorf("%s: ratio %v of two percentages; want none (the report gives the difference in points)", pt.Name, *pt.Ratio)
				case pt.Paper != nil && f.Comparable && f.Unit != "%" && (pt.Ratio == nil || math.Abs(*pt.Ratio - pt.Value / *pt.Paper) > 1e-9):
					t.Errorf("%s: paper %v, ratio %v; want value / paper", pt.Name, *pt.Paper, pt.Ratio)
				case !f.Comparable && pt.Ratio != nil:
					t.Errorf("%s: ratio %v to the paper's value, in a figure whose setup does not compare", pt.Name, *pt.Ratio)
				}
			}
			checkSVG(t, filepath.Join(dir, f.Plot))
			if !bytes.Contains(report, []byte("]("+f.Plot+")")) {
				t.Errorf("report.md does not show %s", f.Plot)
			}
		}
	}
	return res
}

// checkSVG checks that file is a well-formed SVG document with drawing in it.
func checkSVG(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Error(err)
		return
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	var root string
	paths := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Errorf("%s: %v", file, err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "path" {
				paths++
			}
		}
	}
	if root != "svg" || paths < 10 {
		t.Errorf("%s: root element %q with %d paths; want an svg plot", file, root, paths)
	}
}

// TestPaperReportWithoutTestbed writes a made-up run and checks the files,
// the table's paper column and the findings: it needs no root.
func TestPaperReportWithoutTestbed(t *testing.T) {
	dir := t.TempDir()
	pr := &PaperResult{Paper: "003", Title: "made up"}
	f := pr.fig(&Figure{ID: "003-fig5", Title: "Fig. 5, 2 MB messages", XLabel: "size (bytes)", YLabel: "bandwidth (Mbit/s)", Unit: "Mbit/s",
		LogX: true, Higher: true, Comparable: true, Compare: [][2]string{{"braid", "peak"}}})
	for _, v := range []float64{50, 60} {
		f.add("braid", kindBraid, 8192, "8 KB", v)
		f.add("peak", kindPeer, 8192, "8 KB", 2*v)
		f.add("braid", kindBraid, 1<<20, "1 MB", 3*v)
		f.add("peak", kindPeer, 1<<20, "1 MB", 3*v)
	}
	f.paper("braid", 8192, 87.37)
	pr.Findings = f.finish()
	// A figure whose setup does not compare (the paper's times on links of
	// unstated speed): its paper value is shown, with no ratio and why.
	apart := pr.fig(&Figure{ID: "000-table1", Title: "Table I", XLabel: "data size (MB)", YLabel: "exchange time (ms)", Unit: "ms",
		Apart: "the paper's links are of unstated speed."})
	apart.add("braid", kindBraid, 20, "20 MB", 1834)
	apart.paper("braid", 20, 2.29)
	pr.Findings = append(pr.Findings, apart.finish()...)
	res := &Results{Command: "braid bench --paper 003", Machine: ThisMachine(), Started: time.Now(), Papers: []*PaperResult{pr}}
	if err := res.Write(dir); err != nil {
		t.Fatal(err)
	}
	checkRun(t, dir, []string{"003"})
	p := f.point("braid", 8192)
	if p.Value != 55 || p.Min != 50 || p.Max != 60 || math.Abs(*p.Ratio-55/87.37) > 1e-9 {
		t.Errorf("braid at 8 KB: %+v; want mean 55, 50-60, ratio 55/87.37", p)
	}
	report, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	// Sizes read in binary units, as the plots' axes do, even where the
	// run wrote them in decimal ones.
	for _, want := range []string{"| paper | ratio |", "| 8 KiB | 55.0 [50.0, 60.0] | 87.4 | 0.63 |", "37% below the paper's 87.4", "falls short of peak",
		"| data size (MiB) | braid (ms) | paper |\n", "| 20 MiB | 1834 | 2.29 |\n", "No ratio column: the paper's links are of unstated speed.", "#### Fig. 5, 2 MiB messages\n"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(string(report), "—") {
		t.Errorf("report.md has a column of dashes; want it dropped with the reason under the table:\n%s", report)
	}
	if strings.Contains(string(report), "800.87") || strings.Contains(string(report), "Table I, braid") {
		t.Errorf("report.md compares with the paper where the setups do not compare:\n%s", report)
	}
	// Equal at 1 MB: no finding there.
	if strings.Contains(string(report), "at 1 MiB: braid") {
		t.Errorf("report.md states a shortfall at 1 MB, where braid equals the peak:\n%s", report)
	}
}

func TestParsePapers(t *testing.T) {
	for arg, want := range map[string]string{"003": "003", "all": "000,001,002,003", "000,003,000": "000,003"} {
		got, err := ParsePapers(arg)
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("ParsePapers(%q) = %v, %v; want %s", arg, got, err, want)
		}
	}
	for _, arg := range []string{"", "5", "004", "003,x"} {
		if got, err := ParsePapers(arg); err == nil {
			t.Errorf("ParsePapers(%q) = %v, want an error", arg, got)
		}
	}
}

// TestPaperQuick runs every implemented paper in quick mode on the
// testbed and checks what it wrote.
func TestPaperQuick(t *testing.T) {
	testbed.Skip(t)
	bin := buildBraid(t)
	dir := t.TempDir()
	papers, _ := ParsePapers("all")
	start := time.Now()
	run := &PaperRun{Papers: papers, Quick: true, Out: dir, Braid: bin, Command: "braid bench --paper all --quick", Log: testWriter{t}}
	if _, err := run.Run(t.Context()); err != nil {
		logTails(t, dir)
		t.Fatal(err)
	}
	res := checkRun(t, dir, papers)
	t.Logf("quick run: %v", time.Since(start).Round(time.Second))
	for _, p := range res.Papers {
		if len(p.Emulated) == 0 || p.Setup == "" {
			t.Errorf("paper %s: setup %q, emulated %v; want both", p.Paper, p.Setup, p.Emulated)
		}
		t.Logf("paper %s: %d figures in %.0f s", p.Paper, len(p.Figures), p.Elapsed)
	}
	// The comparators this run must have measured, by figure.
	want := map[string][]string{
		"003-fig11": {"braid enhanced", "bonding-like (layer3+4 hash)"},
		"001-fig13": {"SCTP, 2 workers x 2 streams, static equal", "SCTP, 3 workers x 2/2/2 streams, third slow, static equal"},
		"001-fig14": {"SCTP, 3 workers x 2/2/1 streams, third slow, static proportional"},
		"002-fig9":  {"TCP, 1 connection", "SCTP, 1 association"},
		"002-fig8":  {"TCP, 1 connection", "SCTP, 1 association"},
	}
	// Figs. 10-11 are decreases in percent, which a loaded run can make
	// negative: they must be measured, whatever their sign.
	for id, series := range map[string]string{"001-fig10": "SCTP: 2 workers over 1", "001-fig11": "SCTP, 2 workers over TCP, 1 worker"} {
		if f := figure(res, id); f == nil {
			t.Errorf("no figure %s", id)
		} else if p := f.point(series, 100); p == nil || p.Reps == 0 {
			t.Errorf("%s: no point of %q at 100 tasks (series %v)", id, series, f.series())
		}
	}
	// Fig. 10's CPU measurement: the server and every worker of its
	// layouts used CPU over the timed jobs.
	if f := figure(res, "001-fig10"); f != nil {
		workers := map[string]int{"SCTP, 1 worker x 2 streams": 1, "SCTP, 2 workers x 2 streams": 2}
		for _, u := range f.CPU {
			if n, ok := workers[u.Layout]; ok && u.Jobs > 0 && u.Wall > 0 && u.Server > 0 && len(u.Workers) == n && u.WorkerCPU() > 0 && u.Cores > 0 {
				delete(workers, u.Layout)
			}
		}
		if len(workers) > 0 {
			t.Errorf("001-fig10: no CPU measurement of %v among %d rows", workers, len(f.CPU))
		}
	}
	if c, err := vmkernel.Choose(t.Context()); err == nil {
		t.Logf("kernel rows: %s", c.Reason)
		tag := kernelTag(c.Backend)
		k := func(s ...string) []string {
			for i := range s {
				s[i] = retag(s[i], tag)
			}
			return s
		}
		want["002-tables"] = k(kTCP1, kSCTP1, kTCP4, kSCTP4x2)
		want["002-fig9"] = append(want["002-fig9"], k(kTCP1, kSCTP1)...)
		want["002-fig8"] = append(want["002-fig8"], k(kTCP1, kSCTP1)...)
		checkFig10(t, res, tag)
		checkKernelNote(t, res, tag)
	} else if os.Getenv("BRAID_REQUIRE_KSCTP") == "1" {
		t.Errorf("BRAID_REQUIRE_KSCTP=1 but no kernel-SCTP rows: %v", err)
	} else {
		t.Logf("no kernel-SCTP rows: %v", err)
	}
	for id, series := range want {
		f := figure(res, id)
		if f == nil {
			t.Errorf("no figure %s", id)
			continue
		}
		for _, s := range series {
			n := 0
			for _, p := range f.Points {
				if p.Series == s && p.Value > 0 {
					n++
				}
			}
			if n == 0 {
				t.Errorf("%s: no measured point of %q (series %v)", id, s, f.series())
			}
		}
	}
}

func figure(res *Results, id string) *Figure {
	for _, p := range res.Papers {
		for _, f := range p.Figures {
			if f.ID == id {
				return f
			}
		}
	}
	return nil
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// TestLayer34 checks the bonding-like comparator's hash: in range, the
// same flow always on the same path, and consecutive source ports (one
// flow per message) spread over every path.
func TestLayer34(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1")
	for _, k := range []int{1, 2, 3, 4} {
		seen := make([]int, k)
		for sport := uint16(40000); sport < 40064; sport++ {
			p := layer34(src, dst, sport, 5000, k)
			if p < 0 || p >= k {
				t.Fatalf("k=%d: path %d out of range", k, p)
			}
			if q := layer34(src, dst, sport, 5000, k); q != p {
				t.Fatalf("k=%d sport %d: path %d then %d for the same flow", k, sport, p, q)
			}
			seen[p]++
		}
		for i, n := range seen {
			if n < 64/k/4 {
				t.Errorf("k=%d: path %d got %d of 64 flows (%v); want them spread", k, i, n, seen)
			}
		}
	}
}

// TestCachedPeerVenv checks that a cached environment is reused only when
// its versions are the pinned ones, and that none is an error, not an
// install.
func TestCachedPeerVenv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BRAID_BENCH_VENV", dir)
	if _, err := CachedPeerVenv(t.Context()); err == nil || !strings.Contains(err.Error(), "no cached environment") {
		t.Fatalf("empty cache: err %v, want no cached environment", err)
	}
	var want []string
	for _, p := range pyPeerPackages {
		_, v, _ := strings.Cut(p, "==")
		want = append(want, v)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(dir, "bin", "python")
	fake := func(versions string) {
		if err := os.WriteFile(py, []byte("#!/bin/sh\necho "+versions+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fake(strings.Join(want, " "))
	if got, err := CachedPeerVenv(t.Context()); err != nil || got != py {
		t.Errorf("matching cache: %q, %v; want %s", got, err, py)
	}
	want[len(want)-1] = "0.1"
	fake(strings.Join(want, " "))
	if _, err := CachedPeerVenv(t.Context()); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("cache with another version: err %v, want does not match", err)
	}
}

func TestGuestSpec(t *testing.T) {
	g, err := parseGuestSpec("d=300ms,reps=2,loss=0.1:1:3,gbn=0:2.5")
	if err != nil || g.d != 300*time.Millisecond || g.reps != 2 || len(g.losses) != 3 || g.losses[1] != 1 || len(g.gbn) != 2 || g.gbn[1] != 2.5 {
		t.Fatalf("parseGuestSpec: %+v, %v", g, err)
	}
	if n := guestRuns(g); n != 2*(8+2*3+3*2) {
		t.Errorf("guestRuns(%v) = %d, want %d (all three SACK frequencies)", g, n, 2*(8+2*3+3*2))
	}
	g2, err := parseGuestSpec("d=1s,reps=1,gbn=2.5,sack=1:2")
	if err != nil || len(g2.sacks) != 2 || guestRuns(g2) != 8+2 {
		t.Errorf("parseGuestSpec with sack=1:2: %+v (%d runs), %v", g2, guestRuns(g2), err)
	}
	if back, err := parseGuestSpec(g2.String()); err != nil || back.String() != g2.String() {
		t.Errorf("round trip %q: %q, %v", g2, back, err)
	}
	if back, err := parseGuestSpec(g.String()); err != nil || back.String() != g.String() {
		t.Errorf("round trip %q: %q, %v", g, back, err)
	}
	for _, bad := range []string{"", "d=1h", "reps=0", "reps=x", "loss=60", "loss=a", "x=1", "d", "gbn=-1", "gbn=1:", "gbn=", "sack=3", "sack=", "sack=1:x"} {
		if _, err := parseGuestSpec(bad); err == nil {
			t.Errorf("parseGuestSpec(%q): no error", bad)
		}
	}
}

// checkFig10 checks paper 002's emulated Fig. 10: the two SACK
// frequencies measured at the quick run's one loss rate (a run may stall
// in loss recovery and move nothing, so a point may be 0 Mbit/s, but
// not every one), their ratios where delayed SACK moved data, and the
// notes that say GBN was not reproduced.
func checkFig10(t *testing.T, res *Results, tag string) {
	t.Helper()
	f := figure(res, "002-fig10")
	if f == nil {
		t.Error("no figure 002-fig10")
		return
	}
	moved := 0
	sack1, sack2 := retag(kSACK1, tag), retag(kSACK2, tag)
	for _, s := range []string{sack1, sack2} { // the quick run's two
		p := f.point(s, 2.5)
		if p == nil || p.Reps == 0 {
			t.Errorf("002-fig10: no point of %q at 2.5%% (series %v)", s, f.series())
			continue
		}
		if p.Value > 0 {
			moved++
		}
	}
	if moved == 0 {
		// A quick run's 300 ms at 2.5% loss on a loaded machine can move
		// nothing; the report then says there is no comparison.
		t.Logf("002-fig10: nothing moved at 2.5%% loss with any SACK frequency in this run")
	}
	if p := f.point(sack2, 2.5); p != nil && p.Value > 0 && figure(res, "002-fig10-ratio") == nil {
		t.Error("no figure 002-fig10-ratio though delayed SACK moved data")
	}
	var finding, emulated bool
	for _, p := range res.Papers {
		for _, s := range p.Findings {
			finding = finding || strings.HasPrefix(s, "Fig. 10 (emulated, GBN not reproduced)")
		}
		for _, s := range p.Emulated {
			emulated = emulated || strings.Contains(s, "GBN was NOT reproduced")
		}
	}
	if !finding || !emulated {
		t.Errorf("paper 002: a Fig. 10 finding %v, an emulated note %v saying GBN was not reproduced; want both", finding, emulated)
	}
}

// checkKernelNote checks that paper 002's report says which kernel ran
// its kernel rows and how far its figures can be trusted.
func checkKernelNote(t *testing.T, res *Results, tag string) {
	t.Helper()
	for _, p := range res.Papers {
		if p.Paper != "002" {
			continue
		}
		for _, s := range p.Emulated {
			if strings.HasPrefix(s, "Kernel rows ("+tag+"): measured in ") && strings.Contains(s, "Only the ratios of SCTP to TCP measured side by side in the same guest compare") {
				return
			}
		}
		t.Errorf("paper 002: no note on the kernel rows (%s) among %q", tag, p.Emulated)
	}
}

// TestRelabel002 renames the kernel rows for QEMU, in figures, compare
// pairs and text, and leaves UML's and the host's alone.
func TestRelabel002(t *testing.T) {
	mk := func() *PaperResult {
		pr := &PaperResult{Findings: []string{"Fig. 8, kernel SCTP against kernel TCP (UML): ..."}}
		f := pr.fig(&Figure{ID: "t", Compare: [][2]string{{kSCTP1, kTCP1}}})
		f.add(kSCTP1, kindPeer, 1, "1", 5)
		f.add(kSACK7, kindPeer, 1, "1", 5)
		f.add(sctp1Layout.name, kindBraid, 1, "1", 5)
		return pr
	}
	pr := mk()
	relabel002(pr, "QEMU")
	var got []string
	for _, p := range pr.Figures[0].Points {
		got = append(got, p.Series)
	}
	want := []string{"kernel SCTP, 1 association (QEMU)", "kernel SCTP, SACK every 7 packets (sack_freq 7, QEMU)", sctp1Layout.name}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("series %q, want %q", got, want)
	}
	if c := pr.Figures[0].Compare[0]; c != [2]string{"kernel SCTP, 1 association (QEMU)", "kernel TCP, 1 connection (QEMU)"} {
		t.Errorf("compare %q", c)
	}
	if !strings.Contains(pr.Findings[0], "kernel TCP (QEMU)") {
		t.Errorf("finding %q", pr.Findings[0])
	}
	pr = mk()
	relabel002(pr, "UML")
	if p := pr.Figures[0].Points[0]; p.Series != kSCTP1 {
		t.Errorf("UML run renamed %q", p.Series)
	}
	for _, b := range []vmkernel.Backend{vmkernel.UML, vmkernel.QEMU} {
		s := emulated002(vmkernel.Choice{Backend: b, Reason: string(b) + ": test"}, "6.1.0")
		for _, want := range []string{"Kernel rows (" + kernelTag(b) + ")", "6.1.0", "Only the ratios", "unreliable"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s: %q lacks %q", b, s, want)
			}
		}
	}
}

// TestDrawSortsSeries draws a series whose points were measured out of
// order of x (as the kernel rows arrive, from a map) and checks that its
// line runs left to right instead of doubling back.
func TestDrawSortsSeries(t *testing.T) {
	f := &Figure{ID: "t", Title: "t", XLabel: "x", YLabel: "y", Unit: "u", Higher: true}
	for _, x := range []float64{4, 1, 2} {
		f.add("s", kindBraid, x, strconv.FormatFloat(x, 'g', -1, 64), 10*x)
	}
	f.finish()
	file := filepath.Join(t.TempDir(), "t.svg")
	if err := f.Draw(file); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The series' line is the path with 3 points (M x,y L x,y L x,y).
	re := regexp.MustCompile(`d="M([-0-9.]+),[-0-9.]+L([-0-9.]+),[-0-9.]+L([-0-9.]+),[-0-9.]+"`)
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no 3-point line in the plot", file)
	}
	var xs []float64
	for _, s := range m[1:] {
		x, err := strconv.ParseFloat(string(s), 64)
		if err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
	}
	if !(xs[0] < xs[1] && xs[1] < xs[2]) {
		t.Errorf("the line's x coordinates are %v; want them increasing", xs)
	}
}

// TestFig10Findings: the emulated Fig. 10 is compared in words against the
// paper's GBN claims, and a run in which the default SACK moved nothing
// says so instead of comparing against zero or saying nothing.
func TestFig10Findings(t *testing.T) {
	f := &Figure{ID: "002-fig10", Unit: "Mbit/s"}
	f.add(kSACK2, kindBraid, 0, "0", 400)
	f.add(kSACK1, kindBraid, 0, "0", 500)
	f.add(kSACK2, kindBraid, 2.5, "2.5", 0)
	f.add(kSACK1, kindBraid, 2.5, "2.5", 0)
	f.finish()
	pr := &PaperResult{}
	fig10Findings(pr, f)
	if len(pr.Findings) != 2 {
		t.Fatalf("findings %q, want one at 0%% and one at 2.5%%", pr.Findings)
	}
	if !strings.Contains(pr.Findings[0], "a SACK every packet 500 Mbit/s (+25%, unlike the paper's GBN against SACK)") {
		t.Errorf("0%% finding: %q", pr.Findings[0])
	}
	if !strings.Contains(pr.Findings[1], "at 2.5% loss: the kernel's delayed SACK moved nothing") {
		t.Errorf("2.5%% finding: %q", pr.Findings[1])
	}
}

// TestDrawReadable: a figure reads at a glance. Its byte axis says 1 KiB
// and 1 MiB (not 1024 and 1.049e+06, nor 1.05 MB for 1 MiB) with ticks at
// powers of two, under the points' sizes; the legend stands right of the
// data (every legend label starts right of the last x tick label); the
// paper's points are drawn in their series' colour, each series in its
// own; and DrawAll writes a PNG beside the SVG.
func TestDrawReadable(t *testing.T) {
	f := &Figure{ID: "t", Title: "t", XLabel: "message size (bytes)", YLabel: "effective bandwidth (Mbit/s)", Unit: "Mbit/s",
		Higher: true, LogX: true, Comparable: true}
	xs := []float64{1 << 10, 16 << 10, 128 << 10, 1 << 20, 4 << 20}
	for i := range 9 {
		name := fmt.Sprintf("series %d", i)
		for _, x := range xs {
			f.add(name, kindBraid, x, strconv.FormatFloat(x, 'g', -1, 64), 100+10*float64(i))
		}
	}
	paper := 150.0
	for _, p := range f.Points {
		if p.Series == "series 8" && p.X == 1<<20 {
			p.Paper = &paper
		}
	}
	f.finish()
	f.Plot = "t.svg"
	dir := t.TempDir()
	if err := f.DrawAll(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "t.svg"))
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{">1 KiB<", ">16 KiB<", ">1 MiB<", ">4 MiB<", "series 8 (paper)"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot lacks %q", want)
		}
	}
	if strings.Contains(svg, "e+06") || strings.Contains(svg, ">1024<") || strings.Contains(svg, " MB<") || strings.Contains(svg, " KB<") {
		t.Error("the x axis has raw numbers or decimal units for binary sizes")
	}
	// gonum's SVG places text with x="..." on the <text> element.
	xOf := func(label string) float64 {
		m := regexp.MustCompile(`<text x="([-0-9.]+)"[^>]*>` + regexp.QuoteMeta(label) + `<`).FindStringSubmatch(svg)
		if m == nil {
			t.Fatalf("no text %q in the plot", label)
		}
		x, _ := strconv.ParseFloat(m[1], 64)
		return x
	}
	if lastTick, legend := xOf("4 MiB"), xOf("series 0"); legend <= lastTick {
		t.Errorf("the legend (x %v) is not right of the data (last tick at x %v)", legend, lastTick)
	}
	colours := map[string]bool{}
	for i := range 9 {
		r, g, bl, _ := seriesColor(i).RGBA()
		colours[fmt.Sprint(r, g, bl)] = true
	}
	if len(colours) != 9 {
		t.Errorf("9 series share %d colours", len(colours))
	}
	r, g, bl, _ := seriesColor(8).RGBA()
	if c := fmt.Sprintf("stroke:#%02X%02X%02X", r>>8, g>>8, bl>>8); strings.Count(svg, c) < 3 {
		t.Errorf("series 8's colour %s is not on its line, markers and paper point", c)
	}
	if _, err := os.Stat(filepath.Join(dir, "t.png")); err != nil {
		t.Errorf("no PNG beside the SVG: %v", err)
	}
}

// TestDrawWholeImage: nothing of a figure falls outside its image or on
// no background. A title wider than the plot is wrapped (before, its
// start was cut at the left edge: "14: static proportional..."); the
// SVG's white background covers the legend too (before, it ended at the
// plot); rates of 1000 Mbit/s and more read in Gbit/s; a linear byte axis
// around one 2 MiB point has its tick at "2 MiB" (before: "2.1 MB").
func TestDrawWholeImage(t *testing.T) {
	title := "Fig. 14: static proportional division, 2 workers vs 2 plus a slow third with 2/2/1 streams, and more words to be sure"
	f := &Figure{ID: "t", Title: title, XLabel: "message size (bytes)", YLabel: "throughput (Mbit/s)", Unit: "Mbit/s", Higher: true}
	f.add("a series with a long name that makes the legend wide", kindBraid, 2<<20, "2M", 9000)
	f.add("a series with a long name that makes the legend wide", kindBraid, 2<<20, "2M", 9500)
	f.finish()
	file := filepath.Join(t.TempDir(), "t.svg")
	if err := f.Draw(file); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	// The long legend went below the plot: the image is taller than 360.
	m := regexp.MustCompile(`viewBox="0 0 720 ([0-9.]+)"`).FindStringSubmatch(svg)
	if m == nil {
		t.Fatal("no 720-wide viewBox in the SVG")
	}
	if !strings.Contains(svg, `<path d="M0,0L720,0L720,`+m[1]+`L0,`+m[1]+`Z" style="fill:#FFFFFF" />`) {
		t.Errorf("no white background over the whole 720x%s image", m[1])
	}
	var words []string
	for _, m := range regexp.MustCompile(`<text x="([-0-9.]+)"[^>]*>([^<]*)<`).FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		if x < 0 {
			t.Errorf("text %q starts left of the image, at x %v", m[2], x)
		}
		if strings.HasPrefix(title, m[2]) || strings.Contains(title, m[2]) && len(m[2]) > 10 {
			words = append(words, m[2])
		}
	}
	if got := strings.Join(words, " "); got != title {
		t.Errorf("the title reads %q; want it whole, wrapped: %q", got, title)
	}
	for _, want := range []string{"throughput (Gbit/s)", ">10<", ">2 MiB<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot lacks %q", want)
		}
	}
}

// drawSVG finishes f, draws it as SVG and returns the SVG.
func drawSVG(t *testing.T, f *Figure) string {
	t.Helper()
	f.finish()
	file := filepath.Join(t.TempDir(), "t.svg")
	if err := f.Draw(file); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(svg)
}

// TestPaperMarkersAtTheirX: on a log size axis the paper's markers sit at
// their size: at most a marker's radius (6 points) beside the series' own
// point there (before, a shift of 2% of the axis per series in data units
// put them 20 points and more off, at another size), and those of two
// series with equal values are still told apart.
func TestPaperMarkersAtTheirX(t *testing.T) {
	f := &Figure{ID: "t", Title: "t", XLabel: "message size (bytes)", YLabel: "bandwidth (Mbit/s)", Unit: "Mbit/s", Higher: true, LogX: true, Comparable: true}
	for i := range 6 {
		name := fmt.Sprintf("series %d", i)
		for _, x := range []float64{1 << 10, 16 << 10, 1 << 20, 4 << 20} {
			f.add(name, kindBraid, x, "x", 100+float64(i))
		}
		f.paper(name, 1<<20, 150)
	}
	svg := drawSVG(t, f)
	// gonum draws a ring of radius r around x as "M(x+r),y A r,r ...":
	// series 0 and 5 have rings, their paper markers too, of radius 6.
	centres := func(r string) []float64 {
		var xs []float64
		for _, m := range regexp.MustCompile(`d="M([-0-9.]+),[-0-9.]+A`+r+`,`+r+` `).FindAllStringSubmatch(svg, -1) {
			x, _ := strconv.ParseFloat(m[1], 64)
			rr, _ := strconv.ParseFloat(r, 64)
			xs = append(xs, x-rr)
		}
		return xs
	}
	points, paper := centres("2.5"), centres("6")
	// The legend has two paper rings too, right of the data: the two
	// leftmost are the plot's.
	slices.Sort(paper)
	if len(paper) < 2 {
		t.Fatalf("%d paper rings in the plot, want 2 (series 0 and 5)", len(paper))
	}
	paper = paper[:2]
	for _, px := range paper {
		nearest := math.Inf(1)
		for _, x := range points {
			nearest = min(nearest, math.Abs(x-px))
		}
		if nearest > 6.01 {
			t.Errorf("a paper marker at 1 MiB is %.1f points from the series' point at 1 MiB; want at most its radius, 6", nearest)
		}
	}
	if d := paper[1] - paper[0]; d < 4 {
		t.Errorf("the paper markers of series 0 and 5, of equal value, are %.1f points apart; want them told apart", d)
	}
}

// TestLegendLayout: legend rows are at least a paper marker's height
// apart (before, the rows were the text's height and a marker reached
// into its neighbours), and a legend of long names goes below the plot,
// which keeps the image's width (before, the legend took a third of it).
func TestLegendLayout(t *testing.T) {
	textsOf := func(svg string) map[string][2]float64 {
		out := map[string][2]float64{}
		for _, m := range regexp.MustCompile(`<text x="([-0-9.]+)" y="([-0-9.]+)"[^>]*>([^<]*)<`).FindAllStringSubmatch(svg, -1) {
			x, _ := strconv.ParseFloat(m[1], 64)
			y, _ := strconv.ParseFloat(m[2], 64)
			out[m[3]] = [2]float64{x, -y} // the SVG's y runs down
		}
		return out
	}
	draw := func(names []string) map[string][2]float64 {
		f := &Figure{ID: "t", Title: "t", XLabel: "message size (bytes)", YLabel: "bandwidth (Mbit/s)", Unit: "Mbit/s", Higher: true, LogX: true, Comparable: true}
		for i, name := range names {
			for _, x := range []float64{1 << 10, 1 << 20} {
				f.add(name, kindBraid, x, "x", 100+float64(i))
			}
			f.paper(name, 1<<20, 150)
		}
		return textsOf(drawSVG(t, f))
	}
	short := draw([]string{"a", "b", "c"})
	rows := []string{"a", "a (paper)", "b", "b (paper)", "c", "c (paper)"}
	for i := 1; i < len(rows); i++ {
		if d := short[rows[i-1]][1] - short[rows[i]][1]; d < 2*6+3 {
			t.Errorf("legend rows %q and %q are %.1f points apart; want at least a paper marker (12) and some room", rows[i-1], rows[i], d)
		}
	}
	if short["a"][0] < short["1 MiB"][0] {
		t.Errorf("a short legend (x %v) is not right of the data (1 MiB at x %v)", short["a"][0], short["1 MiB"][0])
	}
	long := []string{"braid enhanced, 2 KiB fragments, over both networks", "Peak 2x100 (TCP x2 by hand), the split done by hand", "bonding-like (layer3+4 hash)"}
	wide := draw(long)
	axis := wide["message size (bytes)"]
	for _, name := range long {
		if wide[name][1] >= axis[1] {
			t.Errorf("legend entry %q (y %v) is not below the plot (its x label at y %v)", name, wide[name][1], axis[1])
		}
	}
	if x := wide["1 MiB"][0]; x < 0.8*720 {
		t.Errorf("with a long legend the data end at x %v of 720; want them to keep the width", x)
	}
}

// TestBinaryUnits: sizes are written in binary units, as the plots' byte
// axes read them (003-starts' title said "2 MB" above an axis in MiB);
// rates and other units stay as they are.
func TestBinaryUnits(t *testing.T) {
	for in, want := range map[string]string{
		"Sec. 5: Start control messages per 2 MB message, 4 paths, 2 KB fragments": "Sec. 5: Start control messages per 2 MiB message, 4 paths, 2 KiB fragments",
		"data size (MB)":                             "data size (MiB)",
		"12KB messages at 1.5 GB":                    "12 KiB messages at 1.5 GiB",
		"effective bandwidth (Mbit/s), 128 B, 2 MiB": "effective bandwidth (Mbit/s), 128 B, 2 MiB",
		"CPU time per GB (s/GB)":                     "CPU time per GB (s/GB)",
		"throughput (Gbit/s)":                        "throughput (Gbit/s)",
	} {
		if got := binaryUnits(in); got != want {
			t.Errorf("binaryUnits(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFindingSubjectNoStutter checks that a finding does not repeat the
// title's last words when the series starts with them (paper 002's
// "SCTP over TCP: throughput, throughput, SCTP / TCP").
func TestFindingSubjectNoStutter(t *testing.T) {
	for _, c := range [][3]string{
		{"SCTP over TCP: throughput", "throughput, SCTP / TCP", "SCTP over TCP: throughput, SCTP / TCP"},
		{"SCTP over TCP: CPU per byte", "CPU per GB, SCTP / TCP", "SCTP over TCP: CPU per GB, SCTP / TCP"},
		{"Fig. 5", "braid", "Fig. 5, braid"},
	} {
		if got := subject(c[0], c[1]); got != c[2] {
			t.Errorf("subject(%q, %q) = %q; want %q", c[0], c[1], got, c[2])
		}
	}
}

// TestPercentFigureNoRatio: a figure in percent that crosses zero (paper
// 001 Fig. 10's decrease of the time per task) compares with the paper by
// the difference in points, never by a ratio (-54% over 15.6% is -3.47,
// which means nothing), and says why under the table.
func TestPercentFigureNoRatio(t *testing.T) {
	f := &Figure{ID: "001-fig10", Title: "Fig. 10", XLabel: "tasks (count)", Unit: "%", Higher: true, Comparable: true}
	f.add("SCTP", kindBraid, 10, "10", -54)
	f.add("SCTP", kindBraid, 100, "100", 20)
	f.paper("SCTP", 10, 15.6)
	f.paper("SCTP", 100, 26.6)
	f.finish()
	if p := f.point("SCTP", 10); p.Ratio != nil {
		t.Errorf("percent figure has a ratio %v; want none", *p.Ratio)
	}
	var b strings.Builder
	table(&b, f)
	out := b.String()
	for _, want := range []string{"| paper | braid - paper (points) |", "| 10 | -54.0 | 15.6 | -69.6 |", "| 100 | 20.0 | 26.6 | -6.6 |", "in percentage points"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ratio |") || strings.Contains(out, "-3.47") {
		t.Errorf("table gives a ratio of percentages:\n%s", out)
	}
}

// TestAxesReadable: linear ticks step by 1, 2 or 5 times a power of ten
// (never 0.25 or 25), and a figure whose values span decades is drawn on
// a log axis (its y label says so) while one that crosses zero is not.
func TestAxesReadable(t *testing.T) {
	for _, c := range []struct{ lo, hi float64 }{{0, 97}, {-263, 54}, {0.3, 1.7}, {1200, 13745}, {0, 1}} {
		ticks := steps125(c.lo, c.hi)
		if len(ticks) < 3 || len(ticks) > 12 {
			t.Errorf("ticks over [%g, %g]: %d, want 3-12", c.lo, c.hi, len(ticks))
			continue
		}
		step := ticks[1].Value - ticks[0].Value
		m := step / math.Pow(10, math.Floor(math.Log10(step)+1e-9))
		if math.Abs(m-1) > 1e-6 && math.Abs(m-2) > 1e-6 && math.Abs(m-5) > 1e-6 {
			t.Errorf("ticks over [%g, %g] step by %g; want 1, 2 or 5 x 10^k", c.lo, c.hi, step)
		}
	}
	dir := t.TempDir()
	for _, c := range []struct {
		vals []float64
		log  bool
	}{{[]float64{2, 40, 9000}, true}, {[]float64{-50, 10, 40}, false}, {[]float64{20, 40, 60}, false}} {
		f := &Figure{ID: "x", Title: "x", XLabel: "tasks (count)", YLabel: "time (ms)", Unit: "ms", Plot: "x.svg"}
		for i, v := range c.vals {
			f.add("a", kindBraid, float64(i+1), fmt.Sprint(i+1), v)
		}
		f.finish()
		if err := f.Draw(filepath.Join(dir, "x.svg")); err != nil {
			t.Fatal(err)
		}
		svg, _ := os.ReadFile(filepath.Join(dir, "x.svg"))
		if got := strings.Contains(string(svg), "log scale"); got != c.log {
			t.Errorf("values %v: log axis %v, want %v", c.vals, got, c.log)
		}
	}
}
