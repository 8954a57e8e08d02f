package server_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/transport"
	_ "github.com/braid-hpc/braid/transport/channel/sctpudp" // the sctp-udp channel kind
	"github.com/braid-hpc/braid/worker"
)

// BenchmarkNoop measures units per second through one server and one
// worker on loopback: noop units of the 19 KB sample GIF, one job of
// many repeats per iteration (the paper's workload, without the blur).
func BenchmarkNoop(b *testing.B) {
	for _, threads := range []int{1, 2, 4} {
		for _, inFlight := range []int{2, 8, 16, 32} {
			b.Run(fmt.Sprintf("threads=%d/in_flight=%d", threads, inFlight), func(b *testing.B) {
				const units = 4000
				c := newCluster(b, nil)
				c.addWorker(threads, nil)
				c.waitWorkers(1)
				gif := ops.SampleGIF()
				in := c.put(gif)
				b.SetBytes(int64(units * len(gif)))
				b.ReportAllocs()
				var n int
				var busy, cpu time.Duration
				for b.Loop() {
					start, cpu0 := time.Now(), processCPU()
					st := c.run(api.JobRequest{Op: "noop", Input: in, Repeat: units, InFlight: inFlight})
					busy += time.Since(start)
					cpu += processCPU() - cpu0
					if st.State != api.JobDone {
						b.Fatalf("job %s: %s", st.State, st.Error)
					}
					n += units
				}
				b.ReportMetric(float64(n)/busy.Seconds(), "units/s")
				// CPU time per unit (server, worker and client together)
				// is what bounds units/s on this 2-core machine, and it
				// varies less than wall time when the machine is shared.
				b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/unit")
			})
		}
	}
}

// processCPU returns the user plus system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBlurCompute measures the fraction of the worker's thread time
// spent computing: the sum of the units' compute time over threads x the
// wall time from the first unit in to the last result out. Two blur
// workloads: the paper's (the 19 KB GIF blurred many times, one unit
// each) and a 2048x2048 PNG in 256x256 tiles. Server, worker and client
// share this process and its Go scheduler: with as many lent threads as
// cores, the threads' goroutines keep the server's from running until one
// of them blocks, which a worker in its own process does not suffer (its
// threads and the server's are the operating system's to share). braid
// bench --only fraction measures that setup.
func BenchmarkBlurCompute(b *testing.B) {
	workloads := []struct {
		name  string
		input []byte
		req   api.JobRequest
	}{
		{"gif-repeat=400", ops.SampleGIF(), api.JobRequest{Op: "blur", Repeat: 400}},
		{"png-2048-tiles=256", ops.SamplePNG(2048, 2048), api.JobRequest{Op: "blur", Tile: api.Tile{W: 256, H: 256}}},
	}
	for _, wl := range workloads {
		for _, threads := range []int{1, 2} {
			for _, inFlight := range []int{2, 8, 16, 32} {
				name := fmt.Sprintf("%s/threads=%d/in_flight=%d", wl.name, threads, inFlight)
				b.Run(name, func(b *testing.B) { benchCompute(b, wl.input, wl.req, threads, inFlight) })
			}
		}
	}
}

func benchCompute(b *testing.B, input []byte, req api.JobRequest, threads, inFlight int) {
	c := newCluster(b, nil)
	w := c.addWorker(threads, nil)
	c.waitWorkers(1)
	req.Input = c.put(input)
	req.InFlight = inFlight
	var fraction float64
	var units, jobs int
	for b.Loop() {
		w.w.ResetStats()
		st := c.run(req)
		if st.State != api.JobDone {
			b.Fatalf("job %s: %s", st.State, st.Error)
		}
		fraction += w.w.Stats().ComputeFraction()
		units += st.Units.Total
		jobs++
	}
	b.ReportMetric(fraction/float64(jobs), "compute-fraction")
	b.ReportMetric(float64(units)/b.Elapsed().Seconds(), "units/s")
}

// BenchmarkTransportEcho is the ceiling BenchmarkNoop runs into: 19 KB
// messages echoed over one braid session on loopback, in this process,
// with the same pipelining (streams x messages in flight), and no job
// system at all.
func BenchmarkTransportEcho(b *testing.B) {
	for _, streams := range []int{1, 2} {
		for _, inFlight := range []int{2, 8} {
			b.Run(fmt.Sprintf("streams=%d/in_flight=%d", streams, inFlight), func(b *testing.B) {
				ctx := context.Background()
				cfg := &transport.Config{Key: testKey, Logger: testLogger()}
				ln, err := transport.Listen(ctx, []string{"127.0.0.1:0"}, cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer ln.Close()
				go func() {
					s, err := ln.Accept(ctx)
					if err != nil {
						return
					}
					for {
						st, err := s.AcceptStream(ctx)
						if err != nil {
							return
						}
						go func() {
							for {
								m, err := st.ReadMessage(ctx)
								if err != nil {
									return
								}
								if st.WriteMessage(ctx, m) != nil {
									return
								}
							}
						}()
					}
				}()
				sess, err := transport.Dial(ctx, []transport.Path{{Remote: ln.Addrs()[0].String()}}, cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer sess.Close()
				msg := ops.SampleGIF()
				const perIter = 1000
				b.SetBytes(int64(perIter * len(msg)))
				var total int
				for b.Loop() {
					var wg sync.WaitGroup
					for range streams {
						st, err := sess.OpenStream(ctx)
						if err != nil {
							b.Fatal(err)
						}
						wg.Go(func() {
							defer st.Close()
							slots := make(chan struct{}, inFlight)
							done := make(chan struct{})
							go func() {
								defer close(done)
								for range perIter / streams {
									if _, err := st.ReadMessage(ctx); err != nil {
										return
									}
									<-slots
								}
							}()
							for range perIter / streams {
								slots <- struct{}{}
								if st.WriteMessage(ctx, msg) != nil {
									break
								}
							}
							<-done
						})
					}
					wg.Wait()
					total += perIter
				}
				b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkPaperBlur is the workload of the paper's Figs. 6 and 10: the
// 19 KB GIF blurred N times as N units (--repeat N), on one worker lending
// 1, 2, 3 or 5 threads (one stream each), and on two workers. It reports
// milliseconds per unit, the paper's measure.
func BenchmarkPaperBlur(b *testing.B) {
	type setup struct {
		transport string // the data plane's channel kind
		name      string
		workers   []int // threads per worker
	}
	setups := []setup{
		{"tcp", "workers=1/streams=1", []int{1}},
		{"tcp", "workers=1/streams=2", []int{2}},
		{"tcp", "workers=1/streams=3", []int{3}},
		{"tcp", "workers=1/streams=5", []int{5}},
		{"tcp", "workers=2/streams=2+2", []int{2, 2}},
		// The paper's comparison: TCP against SCTP, 2 streams.
		{"sctp-udp", "workers=1/streams=2", []int{2}},
	}
	for _, s := range setups {
		for _, units := range []int{10, 100, 500, 1000} {
			b.Run(fmt.Sprintf("transport=%s/%s/units=%d", s.transport, s.name, units), func(b *testing.B) {
				c := newCluster(b, func(cfg *server.Config) {
					cfg.Transport = &transport.Config{Transport: s.transport}
				})
				for _, th := range s.workers {
					c.addWorker(th, func(cfg *worker.Config) {
						cfg.Transport = &transport.Config{Transport: s.transport}
					})
				}
				c.waitWorkers(len(s.workers))
				in := c.put(ops.SampleGIF())
				var busy time.Duration
				n := 0
				for b.Loop() {
					start := time.Now()
					st := c.run(api.JobRequest{Op: "blur", Input: in, Repeat: units, Params: map[string]string{"radius": "2"}})
					busy += time.Since(start)
					if st.State != api.JobDone {
						b.Fatalf("job %s: %s", st.State, st.Error)
					}
					n += units
				}
				b.ReportMetric(float64(busy.Microseconds())/1000/float64(n), "ms/unit")
			})
		}
	}
}

// BenchmarkGoodJobBesideHostile measures the latency of one client's
// well-behaved job (cat of 4 bytes, one unit, compiled and warm) alone
// and while another client's hostile module runs beside it: fillsModule,
// one unit on each of the two 2-thread workers (the other thread of
// each free), stopped by its 3 s unit timeout. Each iteration times 15
// good jobs alone, then 15 while the hostile units run, and reports the
// medians and their ratio (the issue asks for at most 2x). When hostile
// units hold every thread, a good job waits for one to free instead:
// that is scheduling, up to the unit timeout, not the sandbox.
func BenchmarkGoodJobBesideHostile(b *testing.B) {
	const jobs = 15
	// The server's default heartbeats (1 s, a worker lost after 5 s), not
	// the test cluster's 50 ms and 400 ms, which a machine loaded by
	// others (load 10 on 2 cores) misses even without a hostile unit:
	// this measures latency; TestHostileBulkModuleBesideGoodJob checks
	// that the workers stay alive.
	c := newCluster(b, func(cfg *server.Config) { cfg.HeartbeatInterval, cfg.WorkerTimeout = 0, 0 })
	c.addWorker(2, nil)
	c.addWorker(2, nil)
	c.waitWorkers(2)
	as := func(name string) *cluster {
		tok, err := c.c.CreateToken(b.Context(), api.RoleClient, name)
		if err != nil {
			b.Fatal(err)
		}
		return c.as(client.New(c.srv.URL(), client.WithToken(tok.Join)))
	}
	good, bad := as("good"), as("hostile")
	if _, err := c.c.AddOp(b.Context(), "fills", bytes.NewReader(fillsModule()), client.OpOptions{}); err != nil {
		b.Fatal(err)
	}
	c.addOp("cat", wasmtest.Cat, client.OpOptions{})
	in := good.put([]byte("abc\n"))
	badIn := bad.put([]byte("xx"))
	median := func() time.Duration {
		var ds []time.Duration
		for range jobs {
			start := time.Now()
			if st := good.run(api.JobRequest{Op: "cat", Input: in}); st.State != api.JobDone {
				b.Fatalf("cat: %s %q", st.State, st.Error)
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	median() // compiled and warm on both workers
	var alone, beside time.Duration
	for b.Loop() {
		alone += median()
		h := bad.submit(api.JobRequest{Op: "fills", Input: badIn, Split: "bytes:1", UnitTimeout: "3s", MaxTries: 1, UnitMem: 16 << 20})
		if !testwait.Until(10*time.Second, func() bool {
			st, err := bad.c.Status(b.Context(), h.Job)
			return err == nil && st.Units.Computing == 2
		}) {
			b.Fatal("the hostile units did not start within 10 s")
		}
		beside += median()
		if st := bad.wait(h.Job); st.State != api.JobFailed || !strings.Contains(st.Error, "timed out after 3s") {
			b.Fatalf("the hostile job: %s %q, want it timed out", st.State, st.Error)
		}
	}
	b.ReportMetric(float64(alone.Microseconds())/1e3/float64(b.N), "alone-ms/job")
	b.ReportMetric(float64(beside.Microseconds())/1e3/float64(b.N), "beside-ms/job")
	b.ReportMetric(beside.Seconds()/alone.Seconds(), "beside/alone")
}
