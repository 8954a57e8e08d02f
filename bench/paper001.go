package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/testbed"
)

// setup001 is one cluster layout of paper 001's experiments.
type setup001 struct {
	name      string
	transport string // the data plane's channel kind
	threads   []int  // per worker: threads lent, one stream each
	slow      int    // 1-based: workers from the slow-th on are CPU-capped; 0: none
	policy    string // braid submit --policy; empty: dynamic
	maxTasks  int    // only the task counts up to this; 0: all
	maxReps   int    // at most this many repetitions; 0: all
}

// Paper 001/004's numbers: Fig. 6 (ms per task, TCP and SCTP with 2
// streams, one worker) and Fig. 10 (2 workers vs 1, percentage decrease).
var (
	paper001Tasks = []int{10, 100, 500, 1000}
	paper001TCP   = []float64{172.7, 74.24, 63.848, 62.631}
	paper001SCTP  = []float64{161.2, 46.02, 41.152, 41.398}
	paper001Two   = []float64{15.57, 26.58, 29.65, 40.52}
)

// Paper 001's layouts of one and two workers with 2 streams each, whose
// CPU Fig. 10 shows.
const (
	tcp2   = "TCP, 1 worker x 2 streams"
	sctp2  = "SCTP, 1 worker x 2 streams"
	sctp22 = "SCTP, 2 workers x 2 streams"
	tcp22  = "TCP, 2 workers x 2 streams"
)

// slowCPU001 is the CPU share of the paper's slower machine C3, emulated.
const slowCPU001 = 0.25

func (r *PaperRun) paper001(ctx context.Context, pr *PaperResult) (err error) {
	pr.Title = "Ghinea et al., SCTP as the data transport of data-intensive batch jobs (CSCS 2013)"
	reps := r.reps(5, 1)
	tasks := paper001Tasks
	const (
		tcp1   = "TCP, 1 worker x 1 stream"
		sctp1  = "SCTP, 1 worker x 1 stream"
		sctp3  = "SCTP, 1 worker x 3 streams"
		sctp5  = "SCTP, 1 worker x 5 streams"
		slow2  = "SCTP, slow worker x 2 streams"
		sctp33 = "SCTP, 2 workers x 3 streams"
		sct331 = "SCTP, 3 workers x 3/3/1 streams, third slow"
		tcp33  = "TCP, 2 workers x 3 streams"
		tcp331 = "TCP, 3 workers x 3/3/1 streams, third slow"
		eq22   = "SCTP, 2 workers x 2 streams, static equal"
		eq222  = "SCTP, 3 workers x 2/2/2 streams, third slow, static equal"
		dyn222 = "SCTP, 3 workers x 2/2/2 streams, third slow, dynamic"
		pr221  = "SCTP, 3 workers x 2/2/1 streams, third slow, static proportional"
		dyn221 = "SCTP, 3 workers x 2/2/1 streams, third slow, dynamic"
	)
	setups := []setup001{
		{tcp1, "tcp", []int{1}, 0, "", 0, 0}, {sctp1, "sctp-udp", []int{1}, 0, "", 0, 0},
		{tcp2, "tcp", []int{2}, 0, "", 0, 0}, {sctp2, "sctp-udp", []int{2}, 0, "", 0, 0},
		{sctp3, "sctp-udp", []int{3}, 0, "", 0, 0}, {sctp5, "sctp-udp", []int{5}, 0, "", 0, 0},
		{sctp22, "sctp-udp", []int{2, 2}, 0, "", 0, 0}, {tcp22, "tcp", []int{2, 2}, 0, "", 0, 0},
		{slow2, "sctp-udp", []int{2}, 1, "", 0, 0},
		{sctp33, "sctp-udp", []int{3, 3}, 0, "", 0, 0}, {sct331, "sctp-udp", []int{3, 3, 1}, 3, "", 0, 0},
		{tcp33, "tcp", []int{3, 3}, 0, "", 0, 0}, {tcp331, "tcp", []int{3, 3, 1}, 3, "", 0, 0},
	}
	// Figs. 13-14: static division with a slow third worker. The slow
	// worker takes its share whatever its speed, so these layouts stop at
	// 500 tasks and 3 repetitions.
	static := []setup001{
		{eq22, "sctp-udp", []int{2, 2}, 0, "equal", 500, 3},
		{eq222, "sctp-udp", []int{2, 2, 2}, 3, "equal", 500, 3},
		{dyn222, "sctp-udp", []int{2, 2, 2}, 3, "", 500, 3},
		{pr221, "sctp-udp", []int{2, 2, 1}, 3, "proportional", 500, 3},
		{dyn221, "sctp-udp", []int{2, 2, 1}, 3, "", 500, 3},
	}
	setups = append(setups, static...)
	// The layouts each figure is drawn from: a run of selected figures
	// (PaperRun.Figures) runs their layouts only, and redraws every
	// figure whose layouts all ran.
	needs := map[string][]string{
		"4": {tcp1, sctp1}, "5": {sctp1, sctp2, sctp3, sctp5}, "6": {tcp2, sctp2}, "7": {tcp2, sctp2},
		"8": {tcp2, sctp2, sctp22, tcp22}, "9": {tcp2, sctp2, sctp22, tcp22}, "10": {tcp2, sctp2, sctp22, tcp22},
		"11": {tcp2, sctp22}, "12": {sctp2, slow2}, "13": {eq22, eq222, dyn222}, "14": {eq22, pr221, dyn221},
		"15": {sctp33, sct331, tcp33, tcp331},
	}
	if r.Quick {
		tasks = []int{10, 100}
		setups = []setup001{{tcp2, "tcp", []int{2}, 0, "", 0, 0}, {sctp2, "sctp-udp", []int{2}, 0, "", 0, 0},
			{sctp22, "sctp-udp", []int{2, 2}, 0, "", 0, 0},
			{tcp33, "tcp", []int{3, 3}, 0, "", 0, 0}, {tcp331, "tcp", []int{3, 3, 1}, 3, "", 0, 0},
			{eq22, "sctp-udp", []int{2, 2}, 0, "equal", 0, 0}, {eq222, "sctp-udp", []int{2, 2, 2}, 3, "equal", 0, 0},
			{pr221, "sctp-udp", []int{2, 2, 1}, 3, "proportional", 0, 0}}
	}
	selected := map[string]bool{} // layouts of the selected figures; empty: all
	for _, n := range r.Figures {
		if needs[n] == nil {
			return fmt.Errorf("paper 001 has no figure %q (figures: %s)", n, strings.Join(figures001, ", "))
		}
		for _, l := range needs[n] {
			selected[l] = true
		}
	}
	if len(selected) > 0 {
		var keep []setup001
		for _, s := range setups {
			if selected[s.name] {
				keep = append(keep, s)
			}
		}
		setups = keep
	}
	pr.Setup = fmt.Sprintf("Every role a separate braid process in its own network namespace: the server host and up to three worker hosts on one 1 Gbit/s network. "+
		"A job blurs the 19 KB sample GIF (224 x 168, radius 2) N times as N units (`braid submit --op blur --repeat N`), dynamic scheduling unless a layout says static (`--policy equal` or `proportional`: each worker's share fixed when the job arrives), one stream per lent thread; "+
		"the time per task is the job's time on the server (submission to the last result, as the paper measures) over N. "+
		"SCTP is braid's user-space SCTP data plane (`--transport sctp-udp`), TCP its TCP one. "+
		"The slow worker (the paper's C3) is CPU-capped to %.2f CPU by a cgroup. %d repetition(s) per point, the task counts interleaved; each layout runs on its own fresh cluster.",
		slowCPU001, reps)
	pr.Emulated = []string{
		"The paper's four Core 2 Duo machines running Ubuntu VMs (Java server and workers, kernel SCTP) are emulated by namespaces on one 2-core machine: server, workers and client share both cores, so more streams than 2 cannot add CPU.",
		"Kernel SCTP is not available here (only inside a guest kernel, User-Mode Linux or QEMU); braid's user-space SCTP over UDP stands in.",
		"The paper's absolute times (Java web services on 2013 VMs) are 30-100 times braid's; only the relative figures (Figs. 7 and 10) compare.",
	}
	if r.Quick {
		pr.Missing = append(pr.Missing, "Quick mode: only the TCP and SCTP 2-stream layouts (SCTP on 1 and 2 workers), TCP 3/3 and 3/3/1 and the static layouts of Figs. 13-14, at 10 and 100 tasks, one repetition; "+
			"Dask and Ray run only if an earlier full run left their environment in the cache (quick mode installs nothing), on one worker at 10 and 100 tasks.")
	}
	figTask := func(id, title string) *Figure {
		return pr.fig(&Figure{ID: id, Title: title, XLabel: "tasks (count)", YLabel: "time per task (ms)", Unit: "ms", LogX: true})
	}
	f4 := figTask("001-fig4", "Fig. 4: one worker, one stream")
	f5 := figTask("001-fig5", "Fig. 5: one worker, SCTP with 1, 2, 3, 5 streams")
	f6 := figTask("001-fig6", "Fig. 6: TCP vs SCTP, one worker with 2 streams")
	f6.Apart = "the paper's times are those of Java web services on 2013 VMs, many times braid's on this machine; only the relative figures (Figs. 7 and 10) compare."
	f7 := pr.fig(&Figure{ID: "001-fig7", Title: "Fig. 7: SCTP over TCP, 2 streams: decrease of the time per task",
		XLabel: "tasks (count)", YLabel: "decrease of time per task (%)", Unit: "%", LogX: true, Higher: true, Comparable: true,
		Note: "(TCP - SCTP) / TCP per repetition; the paper's values are its Fig. 6 numbers so divided."})
	f9 := figTask("001-fig9", "Figs. 8-9: SCTP and TCP, 2 streams per worker, 1 worker vs 2")
	f10 := pr.fig(&Figure{ID: "001-fig10", Title: "Fig. 10: 2 workers vs 1, 2 streams each: decrease of the time per task",
		XLabel: "tasks (count)", YLabel: "decrease of time per task (%)", Unit: "%", LogX: true, Higher: true, Comparable: true,
		Note: "(1 worker - 2 workers) / 1 worker; the ideal is 50%."})
	f11 := pr.fig(&Figure{ID: "001-fig11", Title: "Fig. 11: 2 SCTP workers vs 1 TCP worker, 2 streams each: decrease of the time per task",
		XLabel: "tasks (count)", YLabel: "decrease of time per task (%)", Unit: "%", LogX: true, Higher: true,
		Note: "(TCP, 1 worker - SCTP, 2 workers) / TCP, 1 worker per repetition, from the layouts of Figs. 8-10; the ideal is 50%. The paper's values for this figure are lost in both renderings."})
	f12 := figTask("001-fig12", "Fig. 12: a worker with lower performance (CPU-capped), SCTP 2 streams")
	f15 := figTask("001-fig15", "Fig. 15: two workers with 3 streams, with and without a slow third with 1 stream")
	f13 := figTask("001-fig13", "Fig. 13: static equal division, 2 workers vs 2 plus a slow third, 2 streams each")
	f13.Note = "Each worker gets the same number of tasks when the job arrives (`--policy equal`). The paper gives no values, only that adding the slow worker (C3) made the time per task worse; braid's dynamic scheduling on the same three workers is beside it."
	f13.Compare = [][2]string{{eq222, eq22}, {eq222, dyn222}}
	f14 := figTask("001-fig14", "Fig. 14: static proportional division, 2 workers vs 2 plus a slow third with 2/2/1 streams")
	f14.Note = "Each worker gets tasks in proportion to its streams (`--policy proportional`): the slow third half as many as each other. The 2-worker line is the equal division of Fig. 13 (on two equal workers proportional and equal shares are the same). The paper gives no values, only that the slow worker still brought no improvement; braid's dynamic scheduling on the same workers is beside it."
	f14.Compare = [][2]string{{pr221, eq22}, {pr221, dyn221}}
	f15.Compare = [][2]string{{sct331, sctp33}, {tcp331, tcp33}}
	f9.Compare = [][2]string{{sctp22, sctp2}, {tcp22, tcp2}}
	figsOf := map[string][]*Figure{
		tcp1: {f4}, sctp1: {f4, f5}, tcp2: {f6, f9}, sctp2: {f5, f6, f9, f12}, sctp3: {f5}, sctp5: {f5},
		sctp22: {f9}, tcp22: {f9}, slow2: {f12}, sctp33: {f15}, sct331: {f15}, tcp33: {f15}, tcp331: {f15},
		eq22: {f13, f14}, eq222: {f13}, dyn222: {f13}, pr221: {f14}, dyn221: {f14},
	}

	bed, err := testbed.Up(ctx, testbed.Spec{
		Hosts:    []string{ClusterServer, "w1", "w2", "w3"},
		Networks: []testbed.Network{{Name: "lan", Rate: 1e9, FullDuplex: true}},
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, bed.Down()) }()
	dir, err := os.MkdirTemp("", "braid-paper001-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	gif := filepath.Join(dir, "sample.gif")
	if err := os.WriteFile(gif, ops.SampleGIF(), 0o644); err != nil {
		return err
	}
	var limit *CPULimit
	if l, lerr := NewCPULimit("braid-paper001-"+bed.ID(), slowCPU001); lerr != nil {
		pr.Missing = append(pr.Missing, fmt.Sprintf("No CPU cgroup (%v): the slow worker is not slower.", lerr))
	} else {
		limit = l
		defer func() { err = errors.Join(err, l.Remove()) }()
	}
	ms := map[string]map[int][]float64{}                                         // setup -> tasks -> per-rep ms per task
	cpuOf := map[string]bool{tcp2: true, sctp2: true, sctp22: true, tcp22: true} // Fig. 10's layouts
	for i, s := range setups {
		r.logf("001 %s", s.name)
		got, use, err := r.run001(ctx, bed, filepath.Join(dir, strconv.Itoa(i)), gif, s, tasks, reps, limit)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		ms[s.name] = got
		if cpuOf[s.name] {
			f10.CPU = append(f10.CPU, use...)
		}
		for _, n := range tasks {
			for _, v := range got[n] {
				for _, f := range figsOf[s.name] {
					f.add(s.name, kindBraid, float64(n), strconv.Itoa(n), v)
				}
			}
		}
	}
	if len(selected) == 0 || selected[tcp2] { // Figs. 6 and 9 are redrawn
		if err := compute001(ctx, gif, tasks, reps, 100, f6, f9); err != nil {
			pr.Missing = append(pr.Missing, fmt.Sprintf("braid's compute alone: %v", err))
		}
		r.peers001(ctx, pr, dir, gif, tasks, reps, len(selected) > 0, f6, f9)
	}
	decrease := func(f *Figure, name, from, to string) {
		for _, n := range tasks {
			a, b := ms[from][n], ms[to][n]
			for i := range min(len(a), len(b)) {
				f.add(name, kindBraid, float64(n), strconv.Itoa(n), 100*(a[i]-b[i])/a[i])
			}
		}
	}
	// Figs. 13-14 in words: the paper's claim is that the slow third
	// worker made the time per task worse (equal) or no better
	// (proportional); say whether braid's run agrees, at the largest task
	// count both layouts ran.
	claim := func(fig, with, without, paperSays string) {
		n := 0
		for _, m := range tasks {
			if len(ms[with][m]) > 0 && len(ms[without][m]) > 0 {
				n = m
			}
		}
		if n == 0 {
			return
		}
		a, b := mean(ms[with][n]), mean(ms[without][n])
		verdict := "as in the paper"
		if a < b {
			verdict = "unlike the paper"
		}
		pr.Findings = append(pr.Findings, fmt.Sprintf("%s at %d tasks: with the slow third worker %s ms per task, without it %s (%+.0f%%), %s (%s).",
			fig, n, num(a), num(b), 100*(a-b)/b, verdict, paperSays))
	}
	claim("Fig. 13, static equal division", eq222, eq22, "the slow worker made it worse")
	claim("Fig. 14, static proportional division", pr221, eq22, "the slow worker brought no improvement")
	decrease(f7, "SCTP over TCP", tcp2, sctp2)
	decrease(f10, "SCTP: 2 workers over 1", sctp2, sctp22)
	decrease(f10, "TCP: 2 workers over 1", tcp2, tcp22)
	decrease(f11, "SCTP, 2 workers over TCP, 1 worker", tcp2, sctp22)
	pr.Findings = append(pr.Findings, fig11Finding(f11, tasks)...)
	for _, n := range tasks {
		f10.add("ideal: half", kindIdeal, float64(n), strconv.Itoa(n), 50)
		f11.add("ideal: half", kindIdeal, float64(n), strconv.Itoa(n), 50)
	}
	for i, n := range paper001Tasks {
		x := float64(n)
		f6.paper(tcp2, x, paper001TCP[i])
		f6.paper(sctp2, x, paper001SCTP[i])
		f7.paper("SCTP over TCP", x, 100*(paper001TCP[i]-paper001SCTP[i])/paper001TCP[i])
		f10.paper("SCTP: 2 workers over 1", x, paper001Two[i])
	}
	// A figure stays when the layouts it is about ran (quick runs only
	// some); in a run of selected figures, only if all its layouts were
	// selected: the others keep the earlier run's (PaperResult.carry).
	for f, keys := range map[*Figure][]string{f4: {tcp1}, f5: {sctp3}, f6: {tcp2, sctp2}, f7: {tcp2, sctp2},
		f9: {sctp22}, f10: {sctp22}, f11: {sctp22}, f12: {slow2}, f15: {sct331, tcp331}, f13: {eq222}, f14: {pr221}} {
		ran := false
		for _, k := range keys {
			ran = ran || ms[k] != nil
		}
		if len(selected) > 0 {
			for _, k := range needs[strings.TrimPrefix(f.ID, "001-fig")] {
				ran = ran && selected[k]
			}
		}
		if !ran {
			pr.Figures = deleteFig(pr.Figures, f)
		}
	}
	return err
}

// figures001 are the figure numbers of paper 001 that PaperRun.Figures
// may select (8 and 9 are one plot).
var figures001 = []string{"4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15"}

// compute001 times braid's blur without the cluster, on one thread, as
// the cluster's jobs do it: each unit decodes the GIF and blurs it (what a
// worker runs), and each job encodes one PNG of the first copy's result
// (what the server's assembly does once a job, whatever its task count).
// A job of N tasks alone then costs a unit plus 1/N of an encode a task,
// the series "braid's compute alone, 1 thread" of Figs. 6 and 9. It is
// this process's CPU time (getrusage, garbage collection included), which
// other work on the machine does not inflate as it does wall time; the
// note gives both. Each repetition times n units and n encodes.
func compute001(ctx context.Context, gif string, tasks []int, reps, n int, figs ...*Figure) error {
	img, err := os.ReadFile(gif)
	if err != nil {
		return err
	}
	op := ops.Blur()
	params := map[string]string{"radius": "2"}
	var units, encodes, walls []float64
	for range reps {
		var unit, encode, wall time.Duration
		for range n {
			w0, c0 := time.Now(), selfCPU()
			out, err := op.Run(ctx, params, [][]byte{img})
			if err != nil {
				return fmt.Errorf("blur unit: %w", err)
			}
			c1 := selfCPU()
			if _, err := op.Assemble(params, ops.Hint{}, [][]byte{out}); err != nil {
				return fmt.Errorf("encode the output: %w", err)
			}
			c2 := selfCPU()
			unit, encode, wall = unit+c1-c0, encode+c2-c1, wall+time.Since(w0)
		}
		u, e := msOf(unit)/float64(n), msOf(encode)/float64(n)
		units, encodes, walls = append(units, u), append(encodes, e), append(walls, msOf(wall)/float64(n))
		for _, f := range figs {
			for _, m := range tasks {
				f.add(computeAlone, kindIdeal, float64(m), strconv.Itoa(m), u+e/float64(m))
			}
		}
	}
	for _, f := range figs {
		f.Note = strings.TrimSpace(f.Note + " " + fmt.Sprintf(
			"\"%s\" is a job of N tasks without the cluster, on one thread, per task, in CPU time: one unit as a worker runs it (decode the 19 KB GIF and blur it: %s ms, mean over %d x %d) plus 1/N of the job's one PNG encode of the output (%s ms), which the server does once a job, not per task "+
				"(a unit and an encode took %s ms of wall time together on this shared machine). "+
				"The cluster's 2 streams run two units at once on the 2 cores, so its time per task can fall to about half a unit's, less the cores its server and client take. "+
				"Pillow's line and the peers' tasks, where shown, encode a PNG in every task, which braid's units do not.",
			computeAlone, num(mean(units)), reps, n, num(mean(encodes)), num(mean(walls))))
	}
	return nil
}

// computeAlone is compute001's series.
const computeAlone = "braid's compute alone, 1 thread"

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func deleteFig(figs []*Figure, f *Figure) []*Figure {
	var out []*Figure
	for _, g := range figs {
		if g != f {
			out = append(out, g)
		}
	}
	return out
}

// run001 starts a cluster of the setup's layout and times a job of each
// task count reps times; it returns the ms per task by count, and the CPU
// that the cluster's processes used over the jobs of each count.
func (r *PaperRun) run001(ctx context.Context, bed *testbed.Bed, dir, gif string, s setup001, tasks []int, reps int, limit *CPULimit) (out map[int][]float64, use []*CPUUse, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	c := &Cluster{Bed: bed, Bin: r.bin(), Dir: dir, Key: newKey()}
	defer c.Stop()
	tr := "--transport=" + s.transport
	if _, err := c.StartServer(ctx, ClusterServer, 0, tr); err != nil {
		return nil, nil, err
	}
	meter := &cpuMeter{clock: procClock{}, server: c.Server().PID(), client: c.ClientCPU, now: time.Now}
	hosts := []string{"w1", "w2", "w3"}
	for i, th := range s.threads {
		p, err := c.StartWorker(ctx, hosts[i], []int{0}, th, tr)
		if err != nil {
			return nil, nil, err
		}
		meter.workers = append(meter.workers, p.PID())
		if s.slow > 0 && i >= s.slow-1 && limit != nil {
			if err := limit.Add(p.PID()); err != nil {
				return nil, nil, err
			}
		}
	}
	if _, err := c.WaitWorkers(ctx, len(s.threads)); err != nil {
		return nil, nil, fmt.Errorf("%w (logs: %s)", err, strings.TrimSpace(c.exitedProcs()))
	}
	id, err := c.Put(ctx, gif)
	if err != nil {
		return nil, nil, err
	}
	byTasks := map[int]*CPUUse{}
	job := func(n int) (float64, error) {
		args := []string{"--op", "blur", "--input", id, "--repeat", strconv.Itoa(n), "--param", "radius=2"}
		if s.policy != "" {
			args = append(args, "--policy", s.policy)
		}
		from, err := meter.mark()
		if err != nil {
			return 0, err
		}
		j, err := c.Submit(ctx, args...)
		if err != nil {
			return 0, err
		}
		to, err := meter.mark()
		if err != nil {
			return 0, err
		}
		if u := byTasks[n]; u != nil {
			u.add(from, to)
		}
		return float64(j.Elapsed().Microseconds()) / 1000 / float64(n), nil
	}
	// A first job warms the server and the workers up; it is not timed.
	if _, err := job(10); err != nil {
		return nil, nil, err
	}
	out = map[int][]float64{}
	if s.maxReps > 0 {
		reps = min(reps, s.maxReps)
	}
	for _, n := range tasks {
		if s.maxTasks == 0 || n <= s.maxTasks {
			byTasks[n] = &CPUUse{Layout: s.name, Tasks: n, Cores: runtime.NumCPU(), LoadStart: loadAvg()}
			use = append(use, byTasks[n])
		}
	}
	for rep := range reps {
		for _, n := range tasks {
			if byTasks[n] == nil {
				continue
			}
			v, err := job(n)
			if err != nil {
				return nil, nil, err
			}
			out[n] = append(out[n], v)
			r.logf("001 rep %d %s, %d tasks: %.2f ms per task", rep, s.name, n, v)
		}
	}
	for _, u := range use {
		u.LoadEnd = loadAvg()
	}
	return out, use, nil
}

// peers001 runs the tasks on Dask distributed and Ray in the layouts of
// Figs. 6 and 9 (one worker with 2 threads, two with 2 each); a peer that
// cannot run is noted in the report.
// A run of selected figures (cachedOnly) installs nothing, as a quick run:
// it uses the environment an earlier full run left in the cache.
func (r *PaperRun) peers001(ctx context.Context, pr *PaperResult, dir, gif string, tasks []int, reps int, cachedOnly bool, f6, f9 *Figure) {
	var py string
	var err error
	cachedOnly = cachedOnly || r.Quick
	if cachedOnly {
		py, err = CachedPeerVenv(ctx)
	} else {
		py, err = PeerVenv(ctx, r.logf)
	}
	if err != nil {
		pr.Missing = append(pr.Missing, fmt.Sprintf("Dask and Ray did not run: %v.", err))
		return
	}
	where := "the run creates or finds in the user's cache directory, versions checked"
	if cachedOnly {
		where = "an earlier full run left in the cache, versions checked"
	}
	pr.Emulated = append(pr.Emulated, peersText001(where))
	// The task's compute alone in Python (Pillow's), beside braid's
	// (compute001): the frameworks' overhead is what lies above it.
	if got, err := runPeer(ctx, py, dir, gif, "alone", 1, 1, tasks, reps); err != nil {
		pr.Missing = append(pr.Missing, fmt.Sprintf("Pillow's blur alone: %v", err))
	} else {
		for _, f := range []*Figure{f6, f9} {
			for _, m := range tasks {
				for _, v := range got[min(m, 100)] {
					f.add("Pillow's blur alone, 1 thread", kindIdeal, float64(m), strconv.Itoa(m), v)
				}
			}
		}
	}
	peerTasks := tasks[:min(len(tasks), 3)] // up to 500: Pillow's task costs 10 times braid's
	type layout struct {
		workers int
		figs    []*Figure
		braid   string
	}
	layouts := []layout{{1, []*Figure{f6, f9}, "TCP, 1 worker x 2 streams"}, {2, []*Figure{f9}, "TCP, 2 workers x 2 streams"}}
	if r.Quick {
		layouts = layouts[:1] // quick runs have braid's 1-worker layout only
	}
	for _, fw := range []struct{ id, name string }{{"dask", "Dask"}, {"ray", "Ray"}} {
		for _, l := range layouts {
			name := fmt.Sprintf("%s, %d worker(s) x 2 threads", fw.name, l.workers)
			r.logf("001 %s", name)
			got, err := runPeer(ctx, py, dir, gif, fw.id, l.workers, 2, peerTasks, min(reps, 3))
			if err != nil {
				pr.Missing = append(pr.Missing, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			for _, n := range peerTasks {
				for _, v := range got[n] {
					r.logf("001 %s, %d tasks: %.2f ms per task", name, n, v)
					for _, f := range l.figs {
						f.add(name, kindPeer, float64(n), strconv.Itoa(n), v)
					}
				}
			}
			for _, f := range l.figs {
				f.Compare = append(f.Compare, [2]string{l.braid, name})
			}
		}
	}
}

// peersText001 says how the peers of paper 001 ran; where says where
// their environment came from.
func peersText001(where string) string {
	return "Dask distributed and Ray (the peers, in a Python virtual environment " + where + ": " +
		strings.Join(pyPeerPackages, ", ") + ") run the same task with Pillow (decode the GIF, gaussian blur with sigma 1, encode PNG) " +
		"on the same worker count and threads (a LocalCluster of worker processes; Ray with as many CPUs as threads in all), " +
		"on this machine's loopback rather than in the namespaces, at up to 500 tasks and 3 repetitions (Pillow's task costs several times braid's). " +
		"Each task's compute alone (braid's blur in Go, Pillow's in Python, one thread, one after the other) is plotted too: a framework's overhead is what lies above it."
}

// fig11Finding says in words whether 2 SCTP workers beat 1 TCP worker at
// the largest task count measured, as the paper's Fig. 11 reports (its
// values are lost, only the claim of a decrease is left).
func fig11Finding(f *Figure, tasks []int) []string {
	for i := len(tasks) - 1; i >= 0; i-- {
		p := f.point("SCTP, 2 workers over TCP, 1 worker", float64(tasks[i]))
		if p == nil || len(p.Samples) == 0 {
			continue
		}
		d := mean(p.Samples)
		if d > 0 {
			return []string{fmt.Sprintf("Fig. 11 at %d tasks: 2 SCTP workers take %.0f%% less time per task than 1 TCP worker, as in the paper (a decrease; its values are lost).", tasks[i], d)}
		}
		return []string{fmt.Sprintf("Fig. 11 at %d tasks: 2 SCTP workers take %.0f%% more time per task than 1 TCP worker, unlike the paper, which reports a decrease: braid's user-space SCTP costs more per task than its TCP (Fig. 7), and a second worker on this 2-core machine adds little (Fig. 10).", tasks[i], -d)}
	}
	return nil
}

// explain001 says, from the stored measurements, why Fig. 10 looks as
// it does (its CPU table) and what the cluster costs beyond the compute
// alone (Fig. 6), by figure ID. The report words it each time it is
// written, so a redraw words it as this braid does.
func explain001(p *PaperResult) map[string][]string {
	out := map[string][]string{}
	f6, f10 := findFigure(p.Figures, "001-fig6"), findFigure(p.Figures, "001-fig10")
	if f10 == nil {
		return out
	}
	out[f10.ID] = cpuFindings001(f10.CPU, [][2]string{{sctp2, sctp22}, {tcp2, tcp22}})
	if f6 != nil && f6.From == f10.From { // measured in the same run
		out[f6.ID] = computeFinding001(f6, f10.CPU, tcp2, sctp2)
	}
	return out
}

// cpuFindings001 says, under Fig. 10, from the CPU measurement of Fig. 10's layouts, why
// 2 workers are slower or faster than 1 here: for each pair {1 worker, 2
// workers} of layouts, at the largest task count both ran, the cores
// braid's processes and the whole machine kept busy, and braid's CPU per
// task. When the machine's cores were all but saturated, a second worker
// adds threads, not CPU, and the time per task follows the CPU per task.
func cpuFindings001(use []*CPUUse, pairs [][2]string) []string {
	row := func(layout string, tasks int) *CPUUse {
		for _, u := range use {
			if u.Layout == layout && u.Tasks == tasks && u.Jobs > 0 && u.Wall > 0 {
				return u
			}
		}
		return nil
	}
	var out []string
	for _, pair := range pairs {
		var one, two *CPUUse
		for _, u := range use {
			if u.Layout == pair[0] {
				if t := row(pair[1], u.Tasks); t != nil && row(pair[0], u.Tasks) != nil && (one == nil || u.Tasks > one.Tasks) {
					one, two = row(pair[0], u.Tasks), t
				}
			}
		}
		if one == nil {
			continue
		}
		transport, _, _ := strings.Cut(one.Layout, ",")
		wall1, wall2 := 1000*ratio(one.Wall, float64(one.Jobs*one.Tasks)), 1000*ratio(two.Wall, float64(two.Jobs*two.Tasks))
		pt1, pt2 := one.PerTask(), two.PerTask()
		pct := func(a, b float64) float64 { return 100 * (b - a) / a }
		// Wall time per task = CPU per task / cores busy, for both.
		s := fmt.Sprintf("%s at %d tasks: a task took %s ms of wall time with 2 workers, %s with 1 (%+.0f%%; the client's time from submission to output over every repetition, where the figure plots the server's, a median of repetitions). "+
			"That time is braid's CPU per task over the cores its processes got: %s ms of CPU a task with 1 worker and %s with 2 (%+.0f%%), "+
			"over %.2f and %.2f of the %d cores (%+.0f%%; with 2 workers the server used %.1f CPU s, the workers %.1f and the client %.1f in %.1f s).",
			transport, one.Tasks, num(wall2), num(wall1), pct(wall1, wall2),
			num(pt1), num(pt2), pct(pt1, pt2), one.Busy(), two.Busy(), two.Cores, pct(one.Busy(), two.Busy()),
			two.Server, two.WorkerCPU(), two.Client, two.Wall)
		cores := float64(two.Cores)
		other1, other2 := one.MachineBusy()-one.Busy(), two.MachineBusy()-two.Busy()
		switch {
		case two.MachineBusy() < 0.9*cores:
			s += fmt.Sprintf(" The cores were not saturated (%.2f of %d busy with 2 workers), so CPU contention does not explain the difference alone.",
				two.MachineBusy(), two.Cores)
		case max(other1, other2) >= 0.1*cores:
			s += fmt.Sprintf(" The machine's cores were saturated (%.2f and %.2f busy) and other work took %.2f of them with 1 worker and %.2f with 2: "+
				"a second worker's threads changed braid's share of cores it shared with that work, not the cores it had, so this figure moves with the other work on the machine, not with what a second machine would add.",
				one.MachineBusy(), two.MachineBusy(), other1, other2)
		default:
			free := max(cores-one.MachineBusy(), 0)
			s += fmt.Sprintf(" braid's own processes saturated the %d cores: a second worker adds threads but no CPU. "+
				"With 1 worker %.2f cores were left idle, so at equal CPU per task a second worker could cut the time per task by %.0f%% at most, not the ideal 50%% of the paper's second machine.",
				two.Cores, free, 100*free/(one.Busy()+free))
		}
		out = append(out, s)
	}
	return out
}

// computeFinding001 sets, under Fig. 6, braid's time per task in each
// one-worker layout against its compute alone and the CPU its processes
// used (Fig. 10's CPU table), at the largest task count with all three:
// what the cluster costs beyond the blur.
func computeFinding001(f6 *Figure, use []*CPUUse, layouts ...string) []string {
	var out []string
	for _, layout := range layouts {
		for i := len(use) - 1; i >= 0; i-- {
			u := use[i]
			if u.Layout != layout || u.Jobs == 0 {
				continue
			}
			x := float64(u.Tasks)
			p, a := f6.point(layout, x), f6.point(computeAlone, x)
			if p == nil || a == nil || len(p.Samples) == 0 || len(a.Samples) == 0 {
				continue
			}
			t, alone, cpu := mean(p.Samples), mean(a.Samples), u.PerTask()
			out = append(out, fmt.Sprintf("At %d tasks, %s took %s ms a task, braid's compute alone %s ms on one thread (%s on two); "+
				"braid's processes used %s ms of CPU a task (Fig. 10's CPU table), so %s ms a task goes to the server, the transport and the client beyond the blur itself.",
				u.Tasks, layout, num(t), num(alone), num(alone/2), num(cpu), num(cpu-alone)))
			break
		}
	}
	return out
}
