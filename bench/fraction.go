package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/testbed"
)

// FractionRun measures the share of a worker's lent thread time that goes
// into computing, the way the worker would run in a cluster: the server
// and the worker are separate braid processes on hosts of their own
// (namespaces of one testbed network), so the operating system, not one
// Go scheduler, shares the machine's cores between them. The figure is
// the server's (braid workers --json): the compute time the worker's
// results report over its threads times the time it had units in flight.
type FractionRun struct {
	// Bin is the braid binary. Required.
	Bin string
	// Dir holds the server's data, the inputs and the logs. Required.
	Dir string
	// Threads are the thread counts the worker lends, one worker process
	// each in turn; nil means 1 and 2.
	Threads []int
	// Workloads are the jobs; nil means FractionWorkloads(0, 0).
	Workloads []FractionWorkload
	// Rounds is how many times each job runs; 0 means 3.
	Rounds int
	// Logf, if not nil, receives progress lines.
	Logf func(format string, args ...any)
}

// FractionWorkload is one job of a FractionRun.
type FractionWorkload struct {
	// Name describes the job in the table.
	Name string
	// Input returns the input file's bytes.
	Input func() []byte
	// Args are braid submit's arguments besides --input.
	Args []string
	// InFlight is the job's units in flight per stream; 0 means the
	// server's default.
	InFlight int
}

// FractionWorkloads returns the paper's blur (the 19 KB GIF, repeat
// units, at 2, 8 and the default units in flight) and a tiled blur of a
// size x size PNG in 256 x 256 tiles. 0 means 1000 units and 4096.
func FractionWorkloads(repeat, size int) []FractionWorkload {
	repeat, size = cmp0(repeat, 1000), cmp0(size, 4096)
	gifArgs := []string{"--op", "blur", "--param", "radius=5", "--repeat", strconv.Itoa(repeat)}
	var w []FractionWorkload
	for _, f := range []int{2, 8, 0} {
		name := fmt.Sprintf("19 KB GIF x %d", repeat)
		w = append(w, FractionWorkload{Name: name, Input: ops.SampleGIF, Args: gifArgs, InFlight: f})
	}
	return append(w, FractionWorkload{
		Name:  fmt.Sprintf("%d x %d PNG in 256 x 256 tiles", size, size),
		Input: func() []byte { return ops.SamplePNG(size, size) },
		Args:  []string{"--op", "blur", "--param", "radius=5", "--tile", "256x256"},
	})
}

// FractionCell is one workload on one worker, a value per round.
type FractionCell struct {
	Workload string
	Threads  int
	// InFlight is what the job asked for; 0 is the server's default.
	InFlight int
	// Fraction is compute / lent thread time, from the server.
	Fraction []float64
	// CPU is the worker process's CPU time (user + system, from
	// /proc/PID/stat) over the same lent thread time: how much of it the
	// worker was on a core at all, with the server sharing the cores.
	CPU []float64
	// UnitsPerSec is the job's units over its time on the server.
	UnitsPerSec []float64
	// Units is the job's unit count.
	Units int
}

// Hosts of a FractionRun.
const (
	FractionServer = "srv"
	FractionWorker = "wk"
)

func (r *FractionRun) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// Run brings up the bed, measures every workload on a worker of each
// thread count and takes everything down again, on failure too.
func (r *FractionRun) Run(ctx context.Context) (cells []FractionCell, err error) {
	threads, workloads, rounds := r.Threads, r.Workloads, cmp0(r.Rounds, 3)
	if threads == nil {
		threads = []int{1, 2}
	}
	if workloads == nil {
		workloads = FractionWorkloads(0, 0)
	}
	bed, err := testbed.Up(ctx, testbed.Spec{
		Hosts:    []string{FractionServer, FractionWorker},
		Networks: []testbed.Network{{Name: "lan"}},
	})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, bed.Down()) }()
	c := &Cluster{Bed: bed, Bin: r.Bin, Dir: r.Dir, Key: newKey()}
	defer c.Stop()
	if _, err := c.StartServer(ctx, FractionServer, 0); err != nil {
		return nil, err
	}
	inputs := make([]string, len(workloads))
	for i, w := range workloads {
		file := filepath.Join(r.Dir, fmt.Sprintf("input-%d", i))
		if err := os.WriteFile(file, w.Input(), 0o644); err != nil {
			return nil, err
		}
		if inputs[i], err = c.Put(ctx, file); err != nil {
			return nil, err
		}
	}
	for _, t := range threads {
		wp, err := c.StartWorker(ctx, FractionWorker, []int{0}, t)
		if err != nil {
			return nil, err
		}
		if _, err := c.WaitWorkers(ctx, 1); err != nil {
			return nil, err
		}
		for i, w := range workloads {
			cell := FractionCell{Workload: w.Name, Threads: t, InFlight: w.InFlight}
			args := append([]string{"--input", inputs[i], "--in-flight", strconv.Itoa(w.InFlight)}, w.Args...)
			// A first job warms the worker and the server's caches up.
			if _, err := c.Submit(ctx, args...); err != nil {
				return nil, err
			}
			for range rounds {
				before, err := c.liveWorker(ctx)
				if err != nil {
					return nil, err
				}
				cpu0, err := procClock{}.proc(wp.PID())
				if err != nil {
					return nil, err
				}
				j, err := c.Submit(ctx, args...)
				if err != nil {
					return nil, err
				}
				cpu1, err := procClock{}.proc(wp.PID())
				if err != nil {
					return nil, err
				}
				after, err := c.liveWorker(ctx)
				if err != nil {
					return nil, err
				}
				compute, lent := after.ComputeNanos-before.ComputeNanos, after.LentNanos-before.LentNanos
				if lent <= 0 || compute <= 0 {
					return nil, fmt.Errorf("worker reported compute %d ns over %d ns lent for job %d", compute, lent, j.Job)
				}
				cell.Units = j.Units.Total
				cell.Fraction = append(cell.Fraction, float64(compute)/float64(lent))
				cell.CPU = append(cell.CPU, float64(cpu1-cpu0)/float64(lent))
				cell.UnitsPerSec = append(cell.UnitsPerSec, float64(j.Units.Total)/j.Elapsed().Seconds())
				r.logf("fraction: %s, %d threads, in flight %d: %.4f of the lent time computing (worker CPU %.3f), %.0f units/s",
					w.Name, t, w.InFlight, cell.Fraction[len(cell.Fraction)-1], cell.CPU[len(cell.CPU)-1],
					cell.UnitsPerSec[len(cell.UnitsPerSec)-1])
			}
			cells = append(cells, cell)
		}
		StopProc(wp)
		if _, err := c.WaitWorkers(ctx, 0); err != nil {
			return nil, err
		}
	}
	return cells, nil
}

// liveWorker returns the one live worker's record.
func (c *Cluster) liveWorker(ctx context.Context) (api.WorkerInfo, error) {
	ws, err := c.Workers(ctx)
	if err != nil {
		return api.WorkerInfo{}, err
	}
	for _, w := range ws {
		if w.Alive {
			return w, nil
		}
	}
	return api.WorkerInfo{}, errors.New("no live worker")
}

// fraction is the `fraction` experiment.
func (s *Suite) fraction(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "braid-bench-fraction-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	run := &FractionRun{Bin: s.bin(), Dir: dir, Logf: s.logf}
	cells, err := run.Run(ctx)
	if err != nil {
		return err
	}
	t := s.section("Compute fraction of a worker in its own process",
		fmt.Sprintf("A server host and a worker host (one testbed network, every role a braid process; they share this machine's cores). "+
			"Compute fraction: the compute time the worker's results report over its threads times the time it had units in flight "+
			"(braid workers --json, compute_ns / lent_ns). Worker CPU: the worker process's CPU time over the same lent time. "+
			"Median of %d jobs after a warm-up job (every job in the next column).", cmp0(run.Rounds, 3))).
		table(text("job", "job"), integer("units", "units", "units"), integer("threads", "threads", "threads"), text("in_flight", "in flight"),
			numCol("compute_fraction", "compute fraction", "", "%.3f"), Column{Key: "compute_fractions", Head: "every job", Type: Numbers, Format: "%.3f"},
			numCol("cpu_per_lent", "worker CPU / lent", "", "%.2f"), numCol("units_per_s", "units/s", "units/s", "%.0f"))
	for _, c := range cells {
		inFlight := strconv.Itoa(c.InFlight)
		if c.InFlight == 0 {
			inFlight = "default"
		}
		t.add(c.Workload, c.Units, c.Threads, inFlight, median(c.Fraction), c.Fraction, median(c.CPU), median(c.UnitsPerSec))
	}
	return nil
}
