package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/ops"
)

func TestParseProcStat(t *testing.T) {
	// A command name with a space and a parenthesis; utime 250 and stime
	// 75 ticks (fields 14 and 15).
	line := "4242 (braid (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 9 0 123 456 789\n"
	got, err := parseProcStat([]byte(line))
	if err != nil || got != 3250*time.Millisecond {
		t.Errorf("parseProcStat = %v, %v; want 3.25s", got, err)
	}
	for _, bad := range []string{"", "4242 braid S 1", "1 (a) S 1 2 3", "1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 75 0"} {
		if got, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) = %v, want an error", bad, got)
		}
	}
}

func TestParseMachineStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice:
	// busy is all but idle and iowait, guests left out (already in user).
	stat := "cpu  100 20 30 5000 40 5 6 7 99 99\ncpu0 50 10 15 2500 20 2 3 3 0 0\n"
	got, err := parseMachineStat([]byte(stat))
	if want := 168 * time.Second / userHZ; err != nil || got != want {
		t.Errorf("parseMachineStat = %v, %v; want %v", got, err, want)
	}
	if _, err := parseMachineStat([]byte("intr 1 2 3\n")); err == nil {
		t.Error("parseMachineStat accepted a /proc/stat without its cpu line")
	}
}

// TestProcClock reads this process's CPU time before and after spinning
// on a core: it must have grown, and the machine's with it.
func TestProcClock(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var c procClock
	p0, err := c.proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	m0, err := c.machine()
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the process's CPU time has grown by two ticks (10 ms
	// each), for at most 10 s.
	deadline := time.Now().Add(10 * time.Second)
	p1 := p0
	for x := 0; p1-p0 < 2*time.Second/userHZ && time.Now().Before(deadline); x++ {
		for range 1 << 20 {
			x ^= x<<1 + 1
		}
		if p1, err = c.proc(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	m1, err := c.machine()
	if err != nil {
		t.Fatal(err)
	}
	if p1-p0 < 2*time.Second/userHZ || m1-m0 < p1-p0-time.Second/userHZ {
		t.Errorf("after spinning: process CPU %v -> %v, machine %v -> %v; want the process's to grow 20ms or more and the machine's about as much", p0, p1, m0, m1)
	}
	if _, err := c.proc(-1); err == nil {
		t.Error("proc(-1) gave no error")
	}
}

// fakeClock is a cpuClock whose readings the test sets.
type fakeClock struct {
	procs map[int]time.Duration
	busy  time.Duration // the machine's
}

func (f *fakeClock) proc(pid int) (time.Duration, error) { return f.procs[pid], nil }
func (f *fakeClock) machine() (time.Duration, error)     { return f.busy, nil }

// TestCPUMeter: what a meter records between two marks, per job and
// summed over jobs, and the figures derived from it.
func TestCPUMeter(t *testing.T) {
	clock := &fakeClock{procs: map[int]time.Duration{10: 0, 20: 0, 21: 0}}
	now := time.Unix(1000, 0)
	var client time.Duration
	m := &cpuMeter{clock: clock, server: 10, workers: []int{20, 21},
		client: func() time.Duration { return client }, now: func() time.Time { return now }}
	u := &CPUUse{Layout: "SCTP, 2 workers x 2 streams", Tasks: 100, Cores: 2}
	for range 2 { // two jobs of 1 s each: server 0.5, workers 0.7 + 0.6, client 0.1, machine 1.95
		from, err := m.mark()
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		clock.procs[10] += 500 * time.Millisecond
		clock.procs[20] += 700 * time.Millisecond
		clock.procs[21] += 600 * time.Millisecond
		clock.busy += 1950 * time.Millisecond
		client += 100 * time.Millisecond
		to, err := m.mark()
		if err != nil {
			t.Fatal(err)
		}
		u.add(from, to)
	}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if u.Jobs != 2 || !near(u.Wall, 2) || !near(u.Server, 1) || len(u.Workers) != 2 || !near(u.Workers[0], 1.4) ||
		!near(u.Workers[1], 1.2) || !near(u.Client, 0.2) || !near(u.Machine, 3.9) {
		t.Errorf("recorded %+v; want 2 jobs, 2 s wall, server 1 s, workers 1.4 and 1.2 s, client 0.2 s, machine 3.9 s", u)
	}
	if !near(u.Busy(), 1.9) || !near(u.MachineBusy(), 1.95) || !near(u.PerTask(), 19) {
		t.Errorf("busy %v, machine busy %v, per task %v ms; want 1.9, 1.95, 19", u.Busy(), u.MachineBusy(), u.PerTask())
	}
}

// cpuRow is one CPUUse of 5 jobs of 1000 tasks.
func cpuRow(layout string, wall, server float64, workers []float64, machine float64) *CPUUse {
	return &CPUUse{Layout: layout, Tasks: 1000, Jobs: 5, Wall: wall, Server: server, Workers: workers, Client: 0.5,
		Machine: machine, Cores: 2, LoadStart: "0.40 0.30 0.20", LoadEnd: "1.90 0.80 0.40"}
}

// TestFig10CPUReport: Fig. 10's CPU measurement is stored in
// results.json, shown in a table under the figure, and a remark under it
// says from its figures why 2 workers are slower or faster: their CPU per
// task and the cores they got, and whether braid, other work or nothing
// saturated the cores.
func TestFig10CPUReport(t *testing.T) {
	const one, two = "SCTP, 1 worker x 2 streams", "SCTP, 2 workers x 2 streams"
	pr := &PaperResult{Paper: "001", Title: "made up"}
	f := pr.fig(&Figure{ID: "001-fig10", Title: "Fig. 10: 2 workers vs 1", XLabel: "tasks (count)", YLabel: "decrease (%)", Unit: "%", LogX: true})
	f.add("SCTP: 2 workers over 1", kindBraid, 1000, "1000", -20)
	f.CPU = []*CPUUse{cpuRow(one, 30, 9, []float64{40}, 55), cpuRow(two, 36, 12, []float64{26, 31}, 71.4)}
	pr.Findings = f.finish()
	if got := explain001(pr)["001-fig10"]; len(got) != 1 {
		t.Fatalf("remarks %q; want one, for SCTP (TCP was not measured)", got)
	}
	res := &Results{Command: "braid bench --paper 001", Machine: ThisMachine(), Started: time.Now(), Papers: []*PaperResult{pr}}
	dir := t.TempDir()
	if err := res.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g := figure(back, "001-fig10"); g == nil || len(g.CPU) != 2 || g.CPU[1].Workers[1] != 31 || g.CPU[1].LoadEnd != "1.90 0.80 0.40" {
		t.Fatalf("results.json's Fig. 10 CPU: %+v; want both rows as recorded", g)
	}
	report, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	// 1 worker: braid 9+40+0.5 = 49.5 CPU s over 30 s = 1.65 cores, 9.90
	// ms a task; the machine 55/30 = 1.83. 2 workers: 69.5 CPU s over 36
	// s = 1.93 cores, 13.9 ms a task; the machine 71.4/36 = 1.98.
	for _, want := range []string{
		"| layout | tasks | jobs | wall (s) | server CPU (s) | workers CPU (s) | client CPU (s) | braid cores busy | machine cores busy | braid CPU per task (ms) |",
		"| SCTP, 1 worker x 2 streams | 1000 | 5 | 30.00 | 9.00 | 40.00 | 0.50 | 1.65 | 1.83 | 9.90 | 0.40 0.30 0.20 → 1.90 0.80 0.40 |",
		"| SCTP, 2 workers x 2 streams | 1000 | 5 | 36.00 | 12.00 | 57.00 (26.00 + 31.00) | 0.50 | 1.93 | 1.98 | 13.9 |",
		"this machine has 2 cores",
		"| 0.40 0.30 0.20 → 1.90 0.80 0.40 |\n\n- SCTP at 1000 tasks: a task took 7.20 ms of wall time with 2 workers, 6.00 with 1 (+20%; the client's time from submission to output over every repetition, where the figure plots the server's, a median of repetitions). " +
			"That time is braid's CPU per task over the cores its processes got: 9.90 ms of CPU a task with 1 worker and 13.9 with 2 (+40%), " +
			"over 1.65 and 1.93 of the 2 cores (+17%; with 2 workers the server used 12.0 CPU s, the workers 57.0 and the client 0.5 in 36.0 s). " +
			"braid's own processes saturated the 2 cores: a second worker adds threads but no CPU. " +
			"With 1 worker 0.17 cores were left idle, so at equal CPU per task a second worker could cut the time per task by 9% at most, not the ideal 50% of the paper's second machine.",
	} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q:\n%s", want, report)
		}
	}
	// Cores saturated with other work: the remark says how much it took.
	other := cpuFindings001([]*CPUUse{cpuRow(one, 30, 9, []float64{20}, 58), cpuRow(two, 36, 12, []float64{13, 13}, 70)}, [][2]string{{one, two}})
	if len(other) != 1 || !strings.Contains(other[0], "The machine's cores were saturated (1.93 and 1.94 busy) and other work took 0.95 of them with 1 worker and 0.8") {
		t.Errorf("remarks with other work: %q", other)
	}
	// Cores left idle: the remark says contention does not explain it.
	idle := cpuFindings001([]*CPUUse{cpuRow(one, 30, 9, []float64{20}, 30), cpuRow(two, 36, 12, []float64{13, 13}, 40)}, [][2]string{{one, two}})
	if len(idle) != 1 || !strings.Contains(idle[0], "The cores were not saturated (1.11 of 2 busy with 2 workers), so CPU contention does not explain the difference alone.") {
		t.Errorf("remarks with idle cores: %q", idle)
	}
}

// TestCompute001: braid's compute alone is a unit (decode and blur) plus
// the job's one PNG encode spread over its tasks, so it falls with the
// task count, and the figure's note gives both parts.
func TestCompute001(t *testing.T) {
	gif := filepath.Join(t.TempDir(), "sample.gif")
	if err := os.WriteFile(gif, ops.SampleGIF(), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &Figure{ID: "001-fig6", Unit: "ms"}
	if err := compute001(t.Context(), gif, []int{1, 1000}, 2, 3, f); err != nil {
		t.Fatal(err)
	}
	few, many := f.point(computeAlone, 1), f.point(computeAlone, 1000)
	if few == nil || many == nil || len(few.Samples) != 2 || len(many.Samples) != 2 {
		t.Fatalf("points %+v, %+v; want 2 samples at 1 and 1000 tasks", few, many)
	}
	for i := range 2 {
		if !(many.Samples[i] > 0 && few.Samples[i] > many.Samples[i]) {
			t.Errorf("rep %d: %v ms a task at 1 task, %v at 1000; want both above 0, the first higher (the encode is once a job)", i, few.Samples[i], many.Samples[i])
		}
	}
	if !strings.Contains(f.Note, "in CPU time: one unit as a worker runs it (decode the 19 KB GIF and blur it: ") ||
		!strings.Contains(f.Note, "ms, mean over 2 x 3) plus 1/N of the job's one PNG encode") || !strings.Contains(f.Note, "ms of wall time together") {
		t.Errorf("note %q does not give the unit's and the encode's times", f.Note)
	}
}

// TestComputeFinding001: the time per task against the compute alone and
// the CPU per task, at the largest task count with all three.
func TestComputeFinding001(t *testing.T) {
	const sctp2 = "SCTP, 1 worker x 2 streams"
	f := &Figure{ID: "001-fig6", Unit: "ms"}
	for _, n := range []float64{100, 1000} {
		f.add(sctp2, kindBraid, n, "", 6)
		f.add(computeAlone, kindIdeal, n, "", 2.5)
	}
	use := []*CPUUse{cpuRow(sctp2, 30, 9, []float64{40}, 55)} // 49.5 CPU s / 5000 tasks
	got := computeFinding001(f, use, sctp2)
	want := "At 1000 tasks, SCTP, 1 worker x 2 streams took 6.00 ms a task, braid's compute alone 2.50 ms on one thread (1.25 on two); " +
		"braid's processes used 9.90 ms of CPU a task (Fig. 10's CPU table), so 7.40 ms a task goes to the server, the transport and the client beyond the blur itself."
	if len(got) != 1 || got[0] != want {
		t.Errorf("finding %q\nwant %q", got, want)
	}
	// explain001 words it under Fig. 6 only when Figs. 6 and 10 come from
	// the same run.
	pr := &PaperResult{Paper: "001", Figures: []*Figure{f, {ID: "001-fig10", CPU: use}}}
	if got := explain001(pr)["001-fig6"]; len(got) != 1 || got[0] != want {
		t.Errorf("explain001 under Fig. 6: %q", got)
	}
	f.From = "the run of yesterday"
	if got := explain001(pr)["001-fig6"]; len(got) != 0 {
		t.Errorf("explain001 set an earlier Fig. 6 against this run's CPU: %q", got)
	}
}

// TestCarry: a run of selected figures keeps the earlier run's other
// figures whole, marked with their run, and its peers' series in the
// figures re-measured, but never its braid series; findings follow their
// figures.
func TestCarry(t *testing.T) {
	old := &Results{Command: "braid bench --paper 001", Started: time.Date(2026, 11, 23, 20, 39, 0, 0, time.UTC), Machine: Machine{Load: "13.02 12.99 8.31"}}
	op := &PaperResult{Paper: "001", Emulated: []string{"peers text", "Kernel SCTP is not available here (only inside User-Mode Linux)."},
		Findings: []string{"Fig. 4 at 10 tasks: old", "Fig. 6: TCP vs SCTP at 10: old"}}
	old.Papers = []*PaperResult{op}
	f4 := op.fig(&Figure{ID: "001-fig4", Title: "Fig. 4: one worker, one stream", Unit: "ms"})
	f4.add("TCP, 1 worker x 1 stream", kindBraid, 10, "10", 10)
	g6 := op.fig(&Figure{ID: "001-fig6", Title: "Fig. 6: TCP vs SCTP", Unit: "ms", Compare: [][2]string{{"TCP, 1 worker x 2 streams", "Dask, 1 worker(s) x 2 threads"}}})
	for _, s := range [][2]string{{"TCP, 1 worker x 2 streams", kindBraid}, {"braid's blur alone, 1 thread", kindIdeal},
		{"Dask, 1 worker(s) x 2 threads", kindPeer}, {"Pillow's blur alone, 1 thread", kindIdeal}} {
		g6.add(s[0], s[1], 10, "10", 100)
	}
	pr := &PaperResult{Paper: "001", Emulated: []string{"Kernel SCTP is not available here (only inside a guest kernel)."}}
	f6 := pr.fig(&Figure{ID: "001-fig6", Title: "Fig. 6: TCP vs SCTP", Unit: "ms"})
	f6.add("TCP, 1 worker x 2 streams", kindBraid, 10, "10", 5)
	f6.add(computeAlone, kindIdeal, 10, "10", 2.5)
	pr.carry(old)
	if len(pr.Figures) != 2 || pr.Figures[0].ID != "001-fig4" || pr.Figures[1] != f6 {
		t.Fatalf("figures %v; want the earlier Fig. 4, then this run's Fig. 6", pr.Figures)
	}
	if from := pr.Figures[0].From; !strings.Contains(from, "2026-11-23 20:39 UTC") || !strings.Contains(from, "load average 13.02 12.99 8.31") {
		t.Errorf("Fig. 4 kept from %q; want the earlier run's time and load", from)
	}
	want := []string{"TCP, 1 worker x 2 streams", computeAlone, "Dask, 1 worker(s) x 2 threads (earlier run)", "Pillow's blur alone, 1 thread (earlier run)"}
	if got := f6.series(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Fig. 6 series %q; want %q (braid's earlier series left out)", got, want)
	}
	if f6.point("TCP, 1 worker x 2 streams", 10).Samples[0] != 5 {
		t.Error("Fig. 6's braid series is not this run's")
	}
	if len(f6.Compare) != 1 || f6.Compare[0][1] != "Dask, 1 worker(s) x 2 threads (earlier run)" {
		t.Errorf("Fig. 6 compares %q; want braid against the earlier Dask", f6.Compare)
	}
	if !strings.Contains(f6.Note, "were not re-run: they come from the run of 2026-11-23 20:39 UTC") {
		t.Errorf("Fig. 6 note %q does not say where the earlier series come from", f6.Note)
	}
	if strings.Join(pr.Findings, "|") != "Fig. 4 at 10 tasks: old" || strings.Join(pr.Emulated, "|") != "Kernel SCTP is not available here (only inside a guest kernel).|peers text" {
		t.Errorf("findings %q, emulated %q; want the kept Fig. 4's finding, and of the earlier setup notes the one this run rewords not", pr.Findings, pr.Emulated)
	}
	if p := f6.point("Dask, 1 worker(s) x 2 threads (earlier run)", 10); p == nil || !strings.Contains(p.From, "2026-11-23 20:39 UTC") {
		t.Errorf("the earlier Dask point %+v does not say where it comes from", p)
	}
	// A second run of selected figures keeps the earlier series under
	// their names, from the run that measured them.
	again := &Results{Command: "braid bench --paper 001 --figures 6", Started: time.Date(2026, 11, 28, 10, 57, 0, 0, time.UTC), Papers: []*PaperResult{pr}}
	next := &PaperResult{Paper: "001"}
	n6 := next.fig(&Figure{ID: "001-fig6", Title: "Fig. 6: TCP vs SCTP", Unit: "ms"})
	n6.add("TCP, 1 worker x 2 streams", kindBraid, 10, "10", 4)
	next.carry(again)
	if got := strings.Join(n6.series(), "|"); got != "TCP, 1 worker x 2 streams|Dask, 1 worker(s) x 2 threads (earlier run)|Pillow's blur alone, 1 thread (earlier run)" {
		t.Errorf("after a second run, Fig. 6 series %q", got)
	}
	if !strings.Contains(n6.Note, "they come from the run of 2026-11-23 20:39 UTC") || strings.Contains(n6.Note, "2026-11-28") {
		t.Errorf("after a second run, Fig. 6 note %q; want the series' own run, 2026-11-23", n6.Note)
	}
	res := &Results{Command: "braid bench --paper 001 --figures 6", Machine: ThisMachine(), Started: time.Now(), Papers: []*PaperResult{pr}}
	var b strings.Builder
	if err := Report(&b, "", res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "#### Fig. 4: one worker, one stream\n\nNot re-run by this command: from the run of 2026-11-23 20:39 UTC (`braid bench --paper 001`") {
		t.Errorf("report does not mark Fig. 4 as from the earlier run:\n%s", b.String())
	}
}

func TestParseFigures(t *testing.T) {
	got, err := ParseFigures([]string{"001"}, "6, fig9,10,6")
	if err != nil || strings.Join(got, ",") != "6,9,10" {
		t.Errorf("ParseFigures(6, fig9,10,6) = %v, %v; want 6,9,10", got, err)
	}
	for _, c := range []struct {
		papers []string
		arg    string
	}{{[]string{"001"}, "3"}, {[]string{"001"}, ""}, {[]string{"003"}, "5"}, {[]string{"001", "003"}, "6"}} {
		if got, err := ParseFigures(c.papers, c.arg); err == nil {
			t.Errorf("ParseFigures(%v, %q) = %v; want an error", c.papers, c.arg, got)
		}
	}
}

// TestRunSelectedFigures: a run of selected figures writes the earlier
// run's other figures back beside its own, and one that fails replaces
// nothing in its output directory.
func TestRunSelectedFigures(t *testing.T) {
	dir := t.TempDir()
	old := &Results{Command: "braid bench --paper 001", Started: time.Date(2026, 11, 23, 20, 39, 0, 0, time.UTC)}
	op := &PaperResult{Paper: "001", Title: "t"}
	f4 := op.fig(&Figure{ID: "001-fig4", Title: "Fig. 4: one worker, one stream", XLabel: "tasks (count)", YLabel: "ms", Unit: "ms"})
	f4.add("TCP, 1 worker x 1 stream", kindBraid, 10, "10", 10)
	old.Papers = []*PaperResult{op}
	if err := old.Write(dir); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "results.json"))

	saved := paperRunners["001"]
	defer func() { paperRunners["001"] = saved }()
	paperRunners["001"] = func(r *PaperRun, ctx context.Context, pr *PaperResult) error {
		f := pr.fig(&Figure{ID: "001-fig6", Title: "Fig. 6: TCP vs SCTP", XLabel: "tasks (count)", YLabel: "ms", Unit: "ms"})
		f.add("TCP, 1 worker x 2 streams", kindBraid, 10, "10", 5)
		return errors.New("the testbed fell over")
	}
	run := &PaperRun{Papers: []string{"001"}, Figures: []string{"6"}, Out: dir, Command: "braid bench --paper 001 --figures 6"}
	if _, err := run.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "nothing in "+dir+" was replaced") {
		t.Errorf("failed run: %v; want it to say nothing was replaced", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "results.json")); string(after) != string(before) {
		t.Error("a failed run of selected figures rewrote results.json")
	}

	paperRunners["001"] = func(r *PaperRun, ctx context.Context, pr *PaperResult) error {
		f := pr.fig(&Figure{ID: "001-fig6", Title: "Fig. 6: TCP vs SCTP", XLabel: "tasks (count)", YLabel: "ms", Unit: "ms"})
		f.add("TCP, 1 worker x 2 streams", kindBraid, 10, "10", 5)
		return nil
	}
	if _, err := run.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g := figure(res, "001-fig4"); g == nil || !strings.Contains(g.From, "2026-11-23 20:39 UTC") || figure(res, "001-fig6") == nil {
		t.Errorf("after the run: Fig. 4 %+v, Fig. 6 %v; want Fig. 4 kept from 2026-11-23 and this run's Fig. 6", g, figure(res, "001-fig6"))
	}
}
