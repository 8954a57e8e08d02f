package worker

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/wasmtest"
)

// fills is a module without loops that runs memory.fill over size bytes
// n times (n a multiple of 10): each one instruction, which wazero lowers
// to one native memset (issue 25's bulk-memory units).
func fills(size int32, n int) []byte {
	fill := wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), 1), size)
	fill = append(fill, wasmtest.MemoryFill...)
	return wasmtest.Module{MemPages: uint32(size>>16) + 1, Funcs: [][]byte{wasmtest.Repeat(fill, 10)}, Start: wasmtest.Repeat([]byte{0x10, 1}, n/10)}.Bytes()
}

// BenchmarkBeatGapBulkFill measures how late a worker's heartbeats come
// while every one of its threads runs memory.fill-heavy units: a real
// braid server and `braid worker --threads 2` (processes of the braid
// binary, without -race), a job of two units that each fill 128 MiB 300
// times (about 10 s on 2 threads of a quiet host) or 1 GiB 20 times, and
// the server's view of the worker before and after (braid workers
// --json): the longest gap between two frames on the data-plane path (a
// path goes down at 500 ms) and between two heartbeats (HTTP or data
// plane; a worker is dead after 5 s), and the "path down" lines the
// server and the worker logged. The "idle" figures are the same maxima
// after 3 s of an idle worker: a gap the fills caused shows as busy above
// idle.
//
// procs=2 runs the worker as it runs by default on this 2-core host
// (GOMAXPROCS = the CPUs, here its threads); procs=3 gives its Go runtime
// one more P than it lends threads, so that the data plane never waits
// for a unit to reach a point where Go can preempt it. Figures in
// docs/benchmarks.md ("Heartbeats beside bulk-memory units"). Run it with
// -benchtime=1x, under the quiet lock for figures.
func BenchmarkBeatGapBulkFill(b *testing.B) {
	for _, bc := range []struct {
		name  string
		size  int32 // bytes a fill
		n     int   // fills a unit
		procs int
	}{
		{"fill=128MiB/procs=2", 128 << 20, 300, 2},
		{"fill=128MiB/procs=3", 128 << 20, 300, 3},
		{"fill=1GiB/procs=2", 1 << 30, 20, 2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newCluster(b, braidBinary(b))
			w := c.worker("w", 2, []string{"env", fmt.Sprintf("GOMAXPROCS=%d", bc.procs)})
			ws := c.waitWorkers(1)
			c.addOp("fills", fills(bc.size, bc.n))
			in := c.put([]byte("x"))
			time.Sleep(3 * time.Second) // idle maxima: pings and heartbeats at their own pace
			idle := c.waitWorkers(1)[0]
			var busy api.WorkerInfo
			var took time.Duration
			for b.Loop() {
				start := time.Now()
				j := c.run("--op", "fills", "--input", in, "--repeat", "2", "--unit-mem", fmt.Sprint(bc.size+1<<20), "--unit-timeout", "5m", "--max-tries", "1")
				took = time.Since(start)
				if j.State != api.JobDone {
					b.Fatalf("the fills job: %s %q", j.State, j.Error)
				}
				busy = c.waitWorkers(1)[0]
			}
			if busy.ID != ws[0].ID {
				b.Fatalf("the worker changed: %s, then %s (it was declared dead)", ws[0].ID, busy.ID)
			}
			gap := func(w api.WorkerInfo) float64 {
				var most int64
				for _, p := range w.Paths {
					most = max(most, p.MaxGapNanos)
				}
				return float64(most) / 1e6
			}
			downs := 0
			for _, p := range []*proc{c.procs[0], w} {
				out, _ := os.ReadFile(p.log)
				downs += strings.Count(string(out), "path down")
			}
			b.ReportMetric(gap(idle), "idle-path-gap-ms")
			b.ReportMetric(gap(busy), "busy-path-gap-ms")
			b.ReportMetric(float64(idle.MaxBeatGapNanos)/1e6, "idle-beat-gap-ms")
			b.ReportMetric(float64(busy.MaxBeatGapNanos)/1e6, "busy-beat-gap-ms")
			b.ReportMetric(float64(downs), "path-downs")
			b.ReportMetric(took.Seconds(), "job-s")
			b.Logf("GOMAXPROCS=%d: 2 units of %d fills of %d MiB in %v; path gap %.0f ms idle, %.0f ms with the fills; heartbeat gap %v idle, %v with the fills; %d path down",
				bc.procs, bc.n, bc.size>>20, took.Round(time.Millisecond), gap(idle), gap(busy), time.Duration(idle.MaxBeatGapNanos).Round(time.Millisecond),
				time.Duration(busy.MaxBeatGapNanos).Round(time.Millisecond), downs)
		})
	}
}
