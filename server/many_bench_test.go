package server_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/store/storetest"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/worker"
)

// relaxed is the transport configuration of a large cluster: each path
// probed once a second, not ten times.
func relaxed() *transport.Config {
	return &transport.Config{HeartbeatInterval: time.Second, PathTimeout: 10 * time.Second}
}

// BenchmarkManyWorkers runs BRAID_BENCH_WORKERS workers (default 100),
// one thread each, in this process, registered with every one of
// BRAID_BENCH_SERVERS servers (default 1), each a process of its own on
// loopback with relaxed timers (a heartbeat a second, one probe a path a
// second). One server keeps its state in SQLite; several share the
// PostgreSQL database of BRAID_TEST_POSTGRES and one blob directory (one
// server does too with BRAID_BENCH_DB=postgres).
//
// Each round submits one noop job of 20 units a worker
// (BRAID_BENCH_UNITS), split evenly
// over the servers, and waits for all of them. It reports units per
// second through the whole cluster, the servers' CPU per unit, and the
// heap the servers hold per connected worker (measured in the server
// processes alone, after a collection, with every worker connected and
// before any job, so job state is not counted), and the CPU the servers
// use while every worker is connected and no job runs.
// BRAID_BENCH_CPU_PROFILE=PATH writes each server's CPU profile while
// idle to PATH.idle.NAME and during the rounds to PATH.run.NAME.
func BenchmarkManyWorkers(b *testing.B) {
	n, k := 100, 1
	if v, err := strconv.Atoi(os.Getenv("BRAID_BENCH_WORKERS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("BRAID_BENCH_SERVERS")); err == nil && v > 0 {
		k = v
	}
	var db string
	blobs := b.TempDir()
	if k > 1 || os.Getenv("BRAID_BENCH_DB") == "postgres" {
		db = storetest.Postgres(b).Fresh(b)
	}
	servers := make([]*childServer, k)
	urls := make([]string, k)
	for i := range servers {
		sc := sharedConfig{Name: fmt.Sprintf("s%d", i+1), Relaxed: true, Takeover: time.Minute}
		if db != "" {
			sc.DB, sc.Blobs = db, "dir:"+blobs
		}
		servers[i] = startChildServer(b, sc)
		urls[i] = servers[i].url
	}
	heap := func() uint64 {
		var sum uint64
		for _, s := range servers {
			sum += s.heap(b)
		}
		return sum
	}
	before := heap()

	noop, err := ops.Builtin().Subset("noop")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for range n {
		runWorker(b, worker.Config{
			Servers: urls, Key: testKey, Threads: 1, Listen: []string{"127.0.0.1:0"}, Logger: testLogger(),
			RetryInterval: time.Second, Ops: noop, Modules: []string{}, Transport: relaxed(),
		})
	}
	clients := make([]*client.Client, k)
	for i, u := range urls {
		clients[i] = client.New(u, client.WithKey(testKey))
		if !testwait.Until(10*time.Minute, func() bool {
			h, err := clients[i].Health(context.Background())
			return err == nil && h.Workers == n
		}) {
			b.Fatalf("server %d has fewer than %d workers live after 10 minutes", i+1, n)
		}
	}
	b.Logf("%d workers registered with %d servers in %s", n, k, time.Since(start).Round(time.Millisecond))
	perWorker := float64(heap()-before) / float64(n)
	// What the connected workers cost the servers while no job runs:
	// heartbeats, path probes, syncs.
	cpuProfile := os.Getenv("BRAID_BENCH_CPU_PROFILE")
	profile := func(phase string) {
		if cpuProfile == "" {
			return
		}
		path := "" // ends the profile
		if phase != "" {
			path = cpuProfile + "." + phase
		}
		for _, s := range servers {
			s.profile(b, path)
		}
	}
	profile("idle")
	idle0, idleCPU0 := time.Now(), serversCPU(b, servers)
	idleFor := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("BRAID_BENCH_IDLE")); err == nil && d > 0 {
		idleFor = d
	}
	time.Sleep(idleFor)
	idle := float64(serversCPU(b, servers)-idleCPU0) / float64(time.Since(idle0))
	profile("")

	in, err := clients[0].Put(context.Background(), strings.NewReader("a small unit's input"))
	if err != nil {
		b.Fatal(err)
	}
	per := 20
	if v, err := strconv.Atoi(os.Getenv("BRAID_BENCH_UNITS")); err == nil && v > 0 {
		per = v
	}
	units := per * n
	var done int
	var busy, cpu, wcpu time.Duration
	profile("run")
	for b.Loop() {
		t0, cpu0, wcpu0 := time.Now(), serversCPU(b, servers), processCPU()
		var wg sync.WaitGroup
		errs := make([]error, k)
		for i, c := range clients {
			share := units / k
			if i < units%k {
				share++
			}
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				st, err := c.Submit(ctx, api.JobRequest{Op: "noop", Input: in, Repeat: share})
				if err == nil {
					st, err = c.Wait(ctx, st.Job, nil)
				}
				if err == nil && st.State != api.JobDone {
					err = fmt.Errorf("job %d %s: %s", st.Job, st.State, st.Error)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		busy += time.Since(t0)
		cpu += serversCPU(b, servers) - cpu0
		wcpu += processCPU() - wcpu0
		for i, err := range errs {
			if err != nil {
				b.Fatalf("server %d: %v", i+1, err)
			}
		}
		done += units
	}
	profile("")
	b.ReportMetric(float64(done)/busy.Seconds(), "units/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(done), "server-cpu-µs/unit")
	b.ReportMetric(float64(wcpu.Microseconds())/float64(done), "worker-cpu-µs/unit")
	b.ReportMetric(perWorker/1024/float64(k), "server-heap-KB/worker")
	b.ReportMetric(100*idle, "servers-idle-cpu-%")
}

// serversCPU returns the user plus system CPU time the server processes
// have used, from /proc.
func serversCPU(b *testing.B, servers []*childServer) time.Duration {
	var sum time.Duration
	for _, s := range servers {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
		if err != nil {
			b.Fatal(err)
		}
		// Fields after the command's closing parenthesis: state is the
		// 1st, utime the 12th and stime the 13th.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 13 {
			b.Fatalf("short /proc stat of server %d", s.cmd.Process.Pid)
		}
		ut, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		sum += time.Duration(ut+st) * time.Second / 100 // USER_HZ
	}
	return sum
}
