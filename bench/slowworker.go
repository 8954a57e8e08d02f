package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/testbed"
)

// SlowWorkerRun times one job on two fast workers, and on the same two
// plus a slow one, under each scheduling policy. Every role is a braid
// process on a one-network testbed; the slow worker is capped by a CPU
// cgroup (and may lend fewer threads). Rounds alternate the two setups,
// so drift in the machine's load hits both alike.
type SlowWorkerRun struct {
	// Bin is the braid binary. Required.
	Bin string
	// Dir holds the server's data and the logs. Required.
	Dir string
	// Units is how many times the job blurs the sample GIF, one unit each;
	// 0 means 1500.
	Units int
	// Radius is the blur radius; 0 means 5.
	Radius int
	// FastThreads and SlowThreads are what the workers lend; 0 means 1.
	FastThreads, SlowThreads int
	// FastCPU caps each fast worker at this many CPUs; 0 means no cap.
	FastCPU float64
	// SlowCPU caps the slow worker; 0 means 0.2 CPUs.
	SlowCPU float64
	// Rounds is how many times each setup runs each policy; 0 means 3.
	Rounds int
	// InFlight is the jobs' units in flight per stream; 0 means the
	// server's default.
	InFlight int
	// Policies are the policies to run; nil means all three.
	Policies []string
	// Logf, if not nil, receives progress lines.
	Logf func(format string, args ...any)
}

// Hosts of a SlowWorkerRun.
const (
	SlowServer = "srv"
	SlowFast1  = "f1"
	SlowFast2  = "f2"
	SlowHost   = "slow"
)

// SlowWorkerCell is one policy's measurements.
type SlowWorkerCell struct {
	Policy string
	// Fast and WithSlow are the job times without and with the slow
	// worker, one per round.
	Fast, WithSlow []time.Duration
	// SlowUnits counts the units the slow worker delivered first, per
	// round.
	SlowUnits []uint64
}

// SlowWorkerResult is what a SlowWorkerRun measured.
type SlowWorkerResult struct {
	Cells []SlowWorkerCell
	// Units is the job's unit count.
	Units int
	// Fast and Slow describe the workers, e.g. "1 thread, 60% of a CPU
	// (cgroup v1 cpu.cfs_quota_us)".
	Fast, Slow string
	// Note says what fallback was taken, if any.
	Note string
	// Cgroups are the directories of the CPU cgroups the run made and
	// removed.
	Cgroups []string
}

// Policies in table order.
var slowPolicies = []string{api.PolicyEqual, api.PolicyProportional, api.PolicyDynamic}

func (r *SlowWorkerRun) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// Run brings up the bed, runs the rounds and takes everything down again,
// on failure too.
func (r *SlowWorkerRun) Run(ctx context.Context) (res SlowWorkerResult, err error) {
	units, radius := cmp0(r.Units, 1500), cmp0(r.Radius, 5)
	fastThreads, slowThreads, rounds := cmp0(r.FastThreads, 1), cmp0(r.SlowThreads, 1), cmp0(r.Rounds, 3)
	slowCPU := r.SlowCPU
	if slowCPU == 0 {
		slowCPU = 0.2
	}
	res.Units = units
	policies := r.Policies
	if policies == nil {
		policies = slowPolicies
	}
	for _, p := range policies {
		res.Cells = append(res.Cells, SlowWorkerCell{Policy: p})
	}
	bed, err := testbed.Up(ctx, testbed.Spec{
		Hosts:    []string{SlowServer, SlowFast1, SlowFast2, SlowHost},
		Networks: []testbed.Network{{Name: "lan"}},
	})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, bed.Down()) }()

	// CPU caps; without cgroups the slow worker only lends fewer threads.
	var limits []*CPULimit
	defer func() {
		for _, l := range limits {
			err = errors.Join(err, l.Remove())
		}
	}()
	limit := func(host string, cpus float64) (*CPULimit, error) {
		l, err := NewCPULimit(fmt.Sprintf("braid-bench-%s-%s", bed.ID(), host), cpus)
		if err == nil {
			limits = append(limits, l)
			res.Cgroups = append(res.Cgroups, l.dir)
		}
		return l, err
	}
	res.Fast, res.Slow = threadsName(fastThreads), threadsName(slowThreads)
	fastLimits := map[string]*CPULimit{}
	if r.FastCPU > 0 {
		for _, h := range []string{SlowFast1, SlowFast2} {
			l, err := limit(h, r.FastCPU)
			if err != nil {
				res.Note = fmt.Sprintf("no CPU cgroup (%v): no worker is CPU-capped", err)
				break
			}
			fastLimits[h] = l
		}
		if res.Note == "" {
			res.Fast += ", " + fastLimits[SlowFast1].String()
		}
	}
	var slowLimit *CPULimit
	if res.Note == "" {
		if slowLimit, err = limit(SlowHost, slowCPU); err != nil {
			res.Note = fmt.Sprintf("no CPU cgroup (%v): the slow worker only lends fewer threads", err)
			slowLimit = nil
		} else {
			res.Slow += ", " + slowLimit.String()
		}
	}
	if res.Note != "" {
		fastLimits = nil
		res.Fast, res.Slow = threadsName(fastThreads), threadsName(slowThreads)
		r.logf("slowworker: %s", res.Note)
	}

	c := &Cluster{Bed: bed, Bin: r.Bin, Dir: r.Dir, Key: newKey()}
	defer c.Stop() // before the cgroups go: deferred later, runs first
	if _, err := c.StartServer(ctx, SlowServer, 0); err != nil {
		return res, err
	}
	startWorker := func(host string, threads int, l *CPULimit) (*Proc, error) {
		p, err := c.StartWorker(ctx, host, []int{0}, threads)
		if err != nil {
			return nil, err
		}
		if l != nil {
			if err := l.Add(p.PID()); err != nil {
				return nil, err
			}
		}
		return p, nil
	}
	for _, h := range []string{SlowFast1, SlowFast2} {
		if _, err := startWorker(h, fastThreads, fastLimits[h]); err != nil {
			return res, err
		}
	}
	if _, err := c.WaitWorkers(ctx, 2); err != nil {
		return res, err
	}
	gif := filepath.Join(r.Dir, "sample.gif")
	if err := os.WriteFile(gif, ops.SampleGIF(), 0o644); err != nil {
		return res, err
	}
	id, err := c.Put(ctx, gif)
	if err != nil {
		return res, err
	}
	job := func(policy string) (JobResult, error) {
		return c.Submit(ctx, "--op", "blur", "--input", id, "--repeat", strconv.Itoa(units),
			"--param", "radius="+strconv.Itoa(radius), "--policy", policy, "--in-flight", strconv.Itoa(r.InFlight))
	}
	// A first job warms the server and the workers up; it is not timed.
	if _, err := job(api.PolicyDynamic); err != nil {
		return res, err
	}
	for round := range rounds {
		for i, p := range policies {
			j, err := job(p)
			if err != nil {
				return res, err
			}
			res.Cells[i].Fast = append(res.Cells[i].Fast, j.Elapsed())
			r.logf("slowworker round %d: %s, 2 fast: %v", round+1, p, j.Elapsed().Round(time.Millisecond))
		}
		slow, err := startWorker(SlowHost, slowThreads, slowLimit)
		if err != nil {
			return res, err
		}
		if _, err := c.WaitWorkers(ctx, 3); err != nil {
			return res, err
		}
		for i, p := range policies {
			before, err := c.slowDone(ctx)
			if err != nil {
				return res, err
			}
			j, err := job(p)
			if err != nil {
				return res, err
			}
			after, err := c.slowDone(ctx)
			if err != nil {
				return res, err
			}
			res.Cells[i].WithSlow = append(res.Cells[i].WithSlow, j.Elapsed())
			res.Cells[i].SlowUnits = append(res.Cells[i].SlowUnits, after-before)
			r.logf("slowworker round %d: %s, 2 fast + slow: %v, %d units on the slow worker",
				round+1, p, j.Elapsed().Round(time.Millisecond), after-before)
		}
		StopProc(slow)
		if _, err := c.WaitWorkers(ctx, 2); err != nil {
			return res, err
		}
	}
	return res, nil
}

// slowDone returns the units the live slow worker delivered first.
func (c *Cluster) slowDone(ctx context.Context) (uint64, error) {
	ws, err := c.Workers(ctx)
	if err != nil {
		return 0, err
	}
	for _, w := range ws {
		if w.Name == SlowHost && w.Alive {
			return w.Done, nil
		}
	}
	return 0, errors.New("the slow worker is not registered")
}

func threadsName(n int) string {
	if n == 1 {
		return "1 thread"
	}
	return strconv.Itoa(n) + " threads"
}

// Median returns the median of ds (the mean of the middle two for an even
// count); 0 for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// slowWorker is the `slowworker` experiment.
func (s *Suite) slowWorker(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "braid-bench-slow-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	run := &SlowWorkerRun{Bin: s.bin(), Dir: dir, Units: 1000, FastThreads: 2, SlowThreads: 1, Rounds: 5,
		FastCPU: slowBenchFastCPU, SlowCPU: slowBenchSlowCPU, Logf: s.logf}
	res, err := run.Run(ctx)
	if err != nil {
		return err
	}
	notes := []string{fmt.Sprintf("Blur (radius 5) of the 19 KB sample GIF, %d units (--repeat %d); fast workers: %s each; slow worker: %s. "+
		"Job time on the server (submission to output), median of %d rounds; the rounds alternate the two setups.",
		res.Units, res.Units, res.Fast, res.Slow, len(res.Cells[0].Fast))}
	if res.Note != "" {
		notes = append(notes, fmt.Sprintf("Note: %s.", res.Note))
	}
	t := s.section("Two fast workers plus a slow one", notes...).
		table(text("policy", "policy"), numCol("fast_s", "2 fast: job s", "s", "%.2f"), numCol("with_slow_s", "2 fast + 1 slow: job s", "s", "%.2f"),
			numCol("ratio", "with slow / without", "", "%.2f"), integer("slow_units", "units on the slow worker", "units"),
			Column{Key: "fast_rounds_s", Head: "all rounds without (s)", Type: Numbers, Unit: "s", Format: "%.2f"},
			Column{Key: "with_slow_rounds_s", Head: "all rounds with (s)", Type: Numbers, Unit: "s", Format: "%.2f"})
	for _, cell := range res.Cells {
		f, w := Median(cell.Fast), Median(cell.WithSlow)
		var su []time.Duration
		for _, u := range cell.SlowUnits {
			su = append(su, time.Duration(u))
		}
		t.add(cell.Policy, f.Seconds(), w.Seconds(), w.Seconds()/f.Seconds(), int64(Median(su)), seconds(cell.Fast), seconds(cell.WithSlow))
	}
	return nil
}

// The CPU caps of the slowworker experiment. Each worker stands for a
// host of its own: the caps keep the three workers from sharing this
// machine's 2 cores among themselves, so the slow worker adds capacity
// instead of taking it from the fast ones. Two fast workers of 60% of a
// CPU leave the server and the clients the rest; the slow one gets a
// sixth of a fast one's CPU and half its threads.
const (
	slowBenchFastCPU = 0.6
	slowBenchSlowCPU = 0.1
)

// seconds is ds in seconds.
func seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}
