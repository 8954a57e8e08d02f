package server_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/worker"
)

// relaxed is the transport configuration of a large cluster: each path
// probed once a second, not ten times.
func relaxed() *transport.Config {
	return &transport.Config{HeartbeatInterval: time.Second, PathTimeout: 10 * time.Second}
}

// BenchmarkManyWorkers runs BRAID_BENCH_WORKERS workers (default 100),
// one thread each, in this process against one server on loopback, with
// relaxed heartbeats (one a second, and one probe a path a second), and measures noop units per second
// through all of them, and the heap the process holds per connected
// worker (server and worker sides together: an upper bound of the
// server's share).
func BenchmarkManyWorkers(b *testing.B) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("BRAID_BENCH_WORKERS")); err == nil && v > 0 {
		n = v
	}
	c := newCluster(b, func(cfg *server.Config) {
		cfg.HeartbeatInterval = time.Second
		cfg.WorkerTimeout = 30 * time.Second
		cfg.DataPlaneTimeout = 30 * time.Second
		cfg.Transport = relaxed()
	})
	noop, err := ops.Builtin().Subset("noop")
	if err != nil {
		b.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	start := time.Now()
	for range n {
		c.addWorker(1, func(cfg *worker.Config) {
			cfg.Ops, cfg.Modules = noop, []string{}
			cfg.RetryInterval = time.Second
			cfg.Transport = relaxed()
		})
	}
	if !testwait.Until(5*time.Minute, func() bool {
		h, err := c.c.Health(context.Background())
		return err == nil && h.Workers == n
	}) {
		b.Fatalf("fewer than %d workers live after 5 minutes", n)
	}
	b.Logf("%d workers registered in %s", n, time.Since(start).Round(time.Millisecond))
	perWorker := float64(heap()-before) / float64(n)
	in := c.put([]byte("a small unit's input"))
	units := 20 * n
	var done int
	var busy, cpu time.Duration
	for b.Loop() {
		t0, cpu0 := time.Now(), processCPU()
		st := c.run(api.JobRequest{Op: "noop", Input: in, Repeat: units})
		busy += time.Since(t0)
		cpu += processCPU() - cpu0
		if st.State != api.JobDone {
			b.Fatalf("job %s: %s", st.State, st.Error)
		}
		done += units
	}
	b.ReportMetric(float64(done)/busy.Seconds(), "units/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(done), "cpu-µs/unit")
	b.ReportMetric(perWorker/1024, "heap-KB/worker")
}
