package bench

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/testbed"
)

var braidBin struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// buildBraid builds the braid binary once per test process (without the
// race detector: the processes are the system under test, not the test).
func buildBraid(t testing.TB) string {
	t.Helper()
	braidBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "braid-bench-bin-")
		if err != nil {
			braidBin.err = err
			return
		}
		goTool := "go"
		if _, err := exec.LookPath(goTool); err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		braidBin.path = filepath.Join(dir, "braid")
		cmd := exec.Command(goTool, "build", "-o", braidBin.path, "github.com/braid-hpc/braid/cmd/braid")
		braidBin.out, braidBin.err = cmd.CombinedOutput()
	})
	if braidBin.err != nil {
		t.Fatalf("go build braid: %v\n%s", braidBin.err, braidBin.out)
	}
	return braidBin.path
}

// TestClusterTestbed is the job system end to end: a server host and two
// dual-homed worker hosts on a testbed, each role a braid process, a blur
// job on a 4096 x 4096 PNG in 256 tiles driven by braid put, submit and
// get. The output must be pixel-identical to the same blur in one unit,
// both workers must have done units, and both networks must have carried
// a substantial share of the tiles.
func TestClusterTestbed(t *testing.T) {
	bin, ctx, dir := processTest(t, "runs a 4096 x 4096 job")
	res, err := (&ClusterRun{Bin: bin, Dir: dir, Size: 4096, Tile: 256, Rate: 1e9}).Run(ctx)
	if err != nil {
		logTails(t, dir)
		t.Fatal(err)
	}
	if res.Job.Units.Total != 256 || res.Job.Units.Done != 256 {
		t.Errorf("job units %+v, want 256 done", res.Job.Units)
	}
	// Both outputs are PNGs written by the same encoder, so equal pixels
	// mean equal bytes. (Decoding and blurring 4096 x 4096 here, under
	// the race detector, would take a minute.)
	got, err := os.ReadFile(res.Output)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(res.Reference)
	if err != nil {
		t.Fatal(err)
	}
	if res.RefJob.Units.Total != 1 {
		t.Fatalf("reference job has %d units, want 1", res.RefJob.Units.Total)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the output of 256 tiles (%d bytes) differs from the single-unit blur of the same image (%d bytes)", len(got), len(want))
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(got)); err != nil || cfg.Width != 4096 || cfg.Height != 4096 {
		t.Errorf("output image %+v, %v; want a 4096 x 4096 PNG", cfg, err)
	}

	// Every tile crosses to a worker with its halo and comes back: at
	// least 2 x 4096 x 4096 x 4 bytes of pixels in all.
	const tileBytes = 2 * 4096 * 4096 * 4
	var perNet [2]int64
	for _, h := range []string{ClusterW1, ClusterW2} {
		nb := res.NetBytes[h]
		if len(nb) != 2 {
			t.Fatalf("%s: counters for %d networks, want 2", h, len(nb))
		}
		perNet[0] += nb[0]
		perNet[1] += nb[1]
		t.Logf("%s: network a %d bytes, network b %d bytes", h, nb[0], nb[1])
	}
	if perNet[0]+perNet[1] < tileBytes {
		t.Errorf("the workers' interfaces carried %d bytes in all, less than the %d bytes of tiles and results", perNet[0]+perNet[1], tileBytes)
	}
	for j, n := range perNet {
		if n < tileBytes/10 {
			t.Errorf("network %d carried %d bytes, less than 10%% of the %d bytes of tiles and results", j, n, tileBytes)
		}
	}
	// braid workers --json shows the same from the server's side: each
	// worker's two paths, each with a share of its traffic.
	var credited uint64
	for _, w := range res.Workers {
		var sum int64
		for _, p := range w.Paths {
			sum += p.BytesSent + p.BytesReceived
		}
		if len(w.Paths) != 2 {
			t.Errorf("worker %s: %d paths in braid workers --json, want 2", w.Name, len(w.Paths))
		}
		for _, p := range w.Paths {
			if b := p.BytesSent + p.BytesReceived; p.State != "up" || b < sum/10 {
				t.Errorf("worker %s: path to %s is %s with %d of the worker's %d bytes; want up with at least 10%%",
					w.Name, p.Remote, p.State, b, sum)
			}
		}
		if !w.Alive || len(w.Addresses) != 2 {
			t.Errorf("worker %s (%s): alive %v, addresses %v; want alive on 2 addresses", w.ID, w.Name, w.Alive, w.Addresses)
		}
		if w.Done == 0 {
			t.Errorf("worker %s (%s) did no unit", w.ID, w.Name)
		}
		credited += w.Done
	}
	if len(res.Workers) != 2 || credited != 256 {
		t.Errorf("%d workers credited with %d units, want 2 with 256", len(res.Workers), credited)
	}
	t.Logf("job %d: %d units in %v", res.Job.Job, res.Job.Units.Total, res.Job.Elapsed())
}

// processTest starts a test that runs braid processes on a testbed: it
// skips without the testbed or in -short (naming what the test would
// do), builds braid, and returns the binary, a context of 2 minutes and a
// scratch directory.
func processTest(t *testing.T, does string) (bin string, ctx context.Context, dir string) {
	t.Helper()
	testbed.Skip(t)
	if testing.Short() {
		t.Skipf("builds braid and %s on a testbed; not in -short", does)
	}
	bin = buildBraid(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return bin, ctx, t.TempDir()
}

// logTails logs the processes' logs of a failed run.
func logTails(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		t.Logf("%s:\n%s", filepath.Base(l), b)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if braidBin.path != "" {
		os.RemoveAll(filepath.Dir(braidBin.path))
	}
	os.Exit(code)
}

// TestSlowWorkerRun runs the slowworker experiment's machinery briefly:
// real worker processes, the slow one in a CPU cgroup. It checks what
// does not depend on timing: each policy's share of the slow worker on
// real processes (equal: a third; proportional: its 1 thread of 5), and
// that every job completed in both setups.
func TestSlowWorkerRun(t *testing.T) {
	bin, ctx, dir := processTest(t, "runs worker processes")
	run := &SlowWorkerRun{Bin: bin, Dir: dir, Units: 30, Radius: 2, FastThreads: 2, SlowThreads: 1,
		FastCPU: 0.6, SlowCPU: 0.25, Rounds: 1, Logf: t.Logf}
	res, err := run.Run(ctx)
	if err != nil {
		logTails(t, dir)
		t.Fatal(err)
	}
	if res.Note != "" {
		t.Logf("fallback: %s", res.Note)
	} else if !strings.Contains(res.Slow, "25% of a CPU (cgroup v") {
		t.Errorf("slow worker %q, want it capped at 25%% of a CPU by a cgroup", res.Slow)
	}
	want := map[string]uint64{api.PolicyEqual: 10, api.PolicyProportional: 6}
	if len(res.Cells) != 3 {
		t.Fatalf("%d policies measured, want 3", len(res.Cells))
	}
	for _, cell := range res.Cells {
		if len(cell.Fast) != 1 || len(cell.WithSlow) != 1 || len(cell.SlowUnits) != 1 || cell.Fast[0] <= 0 || cell.WithSlow[0] <= 0 {
			t.Errorf("%s: %+v, want one timed job in each setup", cell.Policy, cell)
			continue
		}
		if n, ok := want[cell.Policy]; ok && cell.SlowUnits[0] != n {
			t.Errorf("%s: the slow worker delivered %d of 30 units, want %d", cell.Policy, cell.SlowUnits[0], n)
		}
		if cell.SlowUnits[0] > 30 {
			t.Errorf("%s: the slow worker credited with %d of 30 units", cell.Policy, cell.SlowUnits[0])
		}
	}
	if res.Note == "" && len(res.Cgroups) != 3 {
		t.Errorf("cgroups %v, want one per worker", res.Cgroups)
	}
	for _, dir := range res.Cgroups {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left behind (%v)", dir, err)
		}
	}
}

// TestFractionRun runs the fraction experiment's machinery briefly: a
// server and a worker process on a testbed, two small jobs. It checks
// what does not depend on timing: every job is measured, its compute
// fraction lies in (0, 1], and the worker process used CPU.
func TestFractionRun(t *testing.T) {
	bin, ctx, dir := processTest(t, "runs worker processes")
	w := FractionWorkloads(40, 512)
	run := &FractionRun{Bin: bin, Dir: dir, Threads: []int{2}, Workloads: []FractionWorkload{w[2], w[3]}, Rounds: 1, Logf: t.Logf}
	cells, err := run.Run(ctx)
	if err != nil {
		logTails(t, dir)
		t.Fatal(err)
	}
	if len(cells) != 2 {
		t.Fatalf("%d cells, want 2", len(cells))
	}
	for i, want := range []int{40, 4} {
		c := cells[i]
		if c.Units != want || c.Threads != 2 || len(c.Fraction) != 1 || len(c.CPU) != 1 {
			t.Errorf("%s: %+v, want one job of %d units on 2 threads", c.Workload, c, want)
			continue
		}
		if f := c.Fraction[0]; f <= 0 || f > 1 {
			t.Errorf("%s: compute fraction %.3f, want within (0, 1]", c.Workload, f)
		}
		if c.CPU[0] < 0 {
			t.Errorf("%s: worker CPU %.3f of the lent time, want >= 0", c.Workload, c.CPU[0])
		}
	}
}
