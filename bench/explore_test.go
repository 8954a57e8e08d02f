package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/transport/channel/sctpudp"
)

// countHandler counts pion's debug lines by their first words.
type countHandler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	k := r.Message
	if i := strings.Index(k, "] "); i >= 0 {
		k = k[i+2:]
	}
	k = k[:min(len(k), 24)]
	h.mu.Lock()
	h.n[k]++
	h.mu.Unlock()
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
func (h *countHandler) take() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.n
	h.n = map[string]int{}
	return out
}

var sentRe = regexp.MustCompile(`Sent (\d+) bytes`)

// qdiscSent returns the bytes the client's tbf has sent.
func qdiscSent(t testing.TB, bed *testbed.Bed) int64 {
	out, err := bed.Exec(t.Context(), Client, "tc", "-s", "qdisc", "show", "dev", bed.Dev(Client, 0)).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	m := sentRe.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no Sent in %s", out)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// The exploratory measurements, as benchmarks on a testbed (root; run
// them one at a time, e.g. go test -run '^$' -bench ExploreSCTPBulk -v
// ./bench/). Each iteration is a run of seconds, so the default
// -benchtime makes one. docs/benchmarks.md quotes their figures.

// bedBench makes a testbed of the given link rates for b, or skips it.
func bedBench(b *testing.B, rates []int64) *testbed.Bed {
	b.Helper()
	testbed.Skip(b)
	bed, err := NewBed(b.Context(), rates)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bed.Down() })
	return bed
}

// equalRates returns k rates of 100 Mbit/s.
func equalRates(k int) []int64 {
	rates := make([]int64, k)
	for i := range rates {
		rates[i] = 100e6
	}
	return rates
}

// BenchmarkExplore: braid bulk and ping-pong over 100 + 25 Mbit/s (RATES3
// set: 100 + 50 + 10), ping-pong also with 16 KiB fragments.
func BenchmarkExplore(b *testing.B) {
	rates := []int64{100e6, 25e6}
	if os.Getenv("RATES3") != "" {
		rates = []int64{100e6, 50e6, 10e6}
	}
	bed := bedBench(b, rates)
	b.Run("bulk", func(b *testing.B) {
		var mbps float64
		for b.Loop() {
			r, err := (&Braid{Bed: bed, Nets: seq(len(rates))}).Bulk(b.Context(), 1<<20, 1, 4*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			mbps = r.Mbps
			b.Logf("per path %v Mbit/s", floats(r.PerPath))
		}
		b.ReportMetric(mbps, "Mbit/s")
	})
	for _, size := range []int{64 << 10, 1 << 20, 8 << 20} {
		for _, frag := range []int{0, 16 << 10} {
			b.Run(fmt.Sprintf("pingpong/size=%dKiB/frag=%dKiB", size>>10, frag>>10), func(b *testing.B) {
				var r Result
				for b.Loop() {
					var err error
					r, err = (&Braid{Bed: bed, Nets: seq(len(rates)), Config: transport.Config{FragmentSize: frag}}).PingPong(b.Context(), size, 20)
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(r.Mbps, "Mbit/s")
				b.ReportMetric(float64(r.RTT.Microseconds()), "rtt-µs")
			})
		}
	}
}

// BenchmarkExploreFailover: one "link down" run of the failover
// experiment over 3 x 100 Mbit/s.
func BenchmarkExploreFailover(b *testing.B) {
	bed := bedBench(b, equalRates(3))
	s := &Suite{Log: os.Stderr, Duration: 2 * time.Second}
	var r failoverResult
	for b.Loop() {
		var err error
		if r, err = s.failoverRun(b.Context(), bed, "link down"); err != nil {
			b.Fatal(err)
		}
		if !r.intact {
			b.Fatal("the data did not arrive intact")
		}
	}
	b.ReportMetric(float64(r.detect.Milliseconds()), "detect-ms")
	b.ReportMetric(float64(r.dip.Milliseconds()), "dip-ms")
	b.ReportMetric(r.before, "before-Mbit/s")
	b.ReportMetric(r.after, "after-Mbit/s")
}

// BenchmarkExploreSCTPBulk runs sctp-udp bulk on PATHS (default 1) x 100
// Mbit/s with a SNDBUF-byte UDP send buffer (default 4 MiB) and reports
// the client link's bytes and pion's events per run: where packets are
// lost.
func BenchmarkExploreSCTPBulk(b *testing.B) {
	sndbuf := 4 << 20
	if v, err := strconv.Atoi(os.Getenv("SNDBUF")); err == nil {
		sndbuf = v
	}
	k := 1
	if v, err := strconv.Atoi(os.Getenv("PATHS")); err == nil {
		k = v
	}
	bed := bedBench(b, equalRates(k))
	h := &countHandler{n: map[string]int{}}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	defer slog.SetDefault(old)
	for _, mode := range []transport.StripeMode{transport.StripeOff, transport.StripeEnhanced} {
		b.Run("stripe="+mode.String(), func(b *testing.B) {
			var r Result
			var sent int64
			var ev map[string]int
			for b.Loop() {
				br := &Braid{Bed: bed, Nets: seq(k), Config: transport.Config{Transport: "sctp-udp", Stripe: mode},
					Kind: sctpudp.Kind{Config: sctpudp.Config{SendBuffer: sndbuf}}}
				q0 := qdiscSent(b, bed)
				var err error
				if r, err = br.Bulk(b.Context(), 1<<20, 1, 4*time.Second); err != nil {
					b.Fatal(err)
				}
				sent, ev = qdiscSent(b, bed)-q0, h.take()
			}
			b.ReportMetric(r.Mbps, "Mbit/s")
			b.ReportMetric(float64(sent)/1e6, "link0-MB")
			b.ReportMetric(r.Mbps*r.Elapsed.Seconds()/8, "delivered-MB")
			b.ReportMetric(float64(ev["exit fast-recovery"]), "fast-recoveries")
			b.ReportMetric(float64(ev["T3-rtx timed out: nRto"]), "T3-timeouts")
		})
	}
}

// BenchmarkExploreSCTPSendBuffer: sctp-udp bulk on k x 100 Mbit/s for
// several UDP send buffers.
func BenchmarkExploreSCTPSendBuffer(b *testing.B) {
	for _, k := range []int{1, 2} {
		b.Run(fmt.Sprintf("paths=%d", k), func(b *testing.B) {
			bed := bedBench(b, equalRates(k))
			for _, buf := range []int{4 << 20, 256 << 10, 128 << 10, 64 << 10, 32 << 10} {
				for _, mode := range []transport.StripeMode{transport.StripeOff, transport.StripeEnhanced} {
					b.Run(fmt.Sprintf("sndbuf=%dKiB/stripe=%v", buf>>10, mode), func(b *testing.B) {
						var mbps float64
						for b.Loop() {
							br := &Braid{Bed: bed, Nets: seq(k), Config: transport.Config{Transport: "sctp-udp", Stripe: mode},
								Kind: sctpudp.Kind{Config: sctpudp.Config{SendBuffer: buf}}}
							r, err := br.Bulk(b.Context(), 1<<20, 1, 3*time.Second)
							if err != nil {
								b.Fatal(err)
							}
							mbps = r.Mbps
						}
						b.ReportMetric(mbps, "Mbit/s")
					})
				}
			}
		})
	}
}

// reportHol reports a head-of-line run: stream A's goodput, and B's
// latency percentiles in the log.
func reportHol(b *testing.B, r holResult) {
	b.Helper()
	b.Logf("B's latency p50 | p90 | p99 | max | n: %s of %d sent", percentiles(r.lat), r.sent)
	b.ReportMetric(r.mbps(), "A-Mbit/s")
}

// BenchmarkExploreHolBraid: head-of-line blocking over braid on one 100
// Mbit/s path, for two sizes of stream A's messages.
func BenchmarkExploreHolBraid(b *testing.B) {
	bed := bedBench(b, equalRates(1))
	s := &Suite{Duration: time.Second}
	for _, big := range []int{64 << 10, 64 << 20} {
		b.Run(fmt.Sprintf("big=%dKiB", big>>10), func(b *testing.B) {
			var r holResult
			for b.Loop() {
				var err error
				if r, err = s.holBraid(b.Context(), bed, []int{0}, transport.Config{Transport: "tcp"}, big, false); err != nil {
					b.Fatal(err)
				}
			}
			reportHol(b, r)
		})
	}
}

// BenchmarkExploreHolSCTPSizes: head-of-line blocking over one sctp-udp
// association and over TCP, with 1% loss each way, for several stream
// buffers and message sizes.
func BenchmarkExploreHolSCTPSizes(b *testing.B) {
	testbed.SkipLoss(b)
	bed := bedBench(b, equalRates(1))
	for _, h := range []string{Client, Server} {
		if err := bed.SetLoss(h, 0, 1); err != nil {
			b.Fatal(err)
		}
	}
	s := &Suite{Duration: 3 * time.Second}
	run := func(name string, f func() (holResult, error)) {
		b.Run(name, func(b *testing.B) {
			var r holResult
			for b.Loop() {
				var err error
				if r, err = f(); err != nil {
					b.Fatal(err)
				}
			}
			reportHol(b, r)
		})
	}
	for _, buf := range []int{32 << 10, 64 << 10, 256 << 10} {
		run(fmt.Sprintf("sctp/streambuf=%dKiB", buf>>10), func() (holResult, error) { return s.holSCTP(b.Context(), bed, buf, 64<<10) })
	}
	for _, big := range []int{16 << 10, 4 << 10, 1 << 10} {
		run(fmt.Sprintf("sctp/big=%dKiB", big>>10), func() (holResult, error) { return s.holSCTP(b.Context(), bed, 0, big) })
		run(fmt.Sprintf("tcp/big=%dKiB", big>>10), func() (holResult, error) { return s.holTCP(b.Context(), bed, big) })
	}
}
