package bench

import (
	"context"
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

// TestExploreSCTPBulk runs sctp-udp bulk on one 100 Mbit/s path and prints
// the qdisc and UDP counters of both hosts: where the packets are lost.
func TestExploreSCTPBulk(t *testing.T) {
	sndbuf := 4 << 20
	if v, err := strconv.Atoi(os.Getenv("SNDBUF")); err == nil {
		sndbuf = v
	}
	if !*explore {
		t.Skip("exploratory; run with -explore")
	}
	testbed.Skip(t)
	ctx := t.Context()
	k := 1
	if v, err := strconv.Atoi(os.Getenv("PATHS")); err == nil {
		k = v
	}
	rates := make([]int64, k)
	for i := range rates {
		rates[i] = 100e6
	}
	bed, err := NewBed(ctx, rates)
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Down()
	h := &countHandler{n: map[string]int{}}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	defer slog.SetDefault(old)
	for _, mode := range []transport.StripeMode{transport.StripeOff, transport.StripeEnhanced, transport.StripeOff} {
		b := &Braid{Bed: bed, Nets: seq(k), Config: transport.Config{Transport: "sctp-udp", Stripe: mode},
			Kind: sctpudp.Kind{Config: sctpudp.Config{SendBuffer: sndbuf}}}
		q0 := qdiscSent(t, bed)
		r, err := b.Bulk(ctx, 1<<20, 1, 4*time.Second)
		sent := qdiscSent(t, bed) - q0
		ev := h.take()
		t.Logf("%v: %.1f Mbit/s %v per path %v; client link 0 carried %.1f MB for %.1f MB delivered; associations up %d, fast recoveries %d, T3 timeouts logged %d",
			mode, r.Mbps, err, floats(r.PerPath), float64(sent)/1e6, r.Mbps*r.Elapsed.Seconds()/8,
			ev["sctp-udp: association up"], ev["exit fast-recovery"], ev["T3-rtx timed out: nRto"])
	}
}

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

// TestExploreSCTPSendBuffer compares sctp-udp bulk on k x 100 Mbit/s for
// several UDP send buffers.
func TestExploreSCTPSendBuffer(t *testing.T) {
	if !*explore {
		t.Skip("exploratory; run with -explore")
	}
	testbed.Skip(t)
	ctx := t.Context()
	for _, k := range []int{1, 2} {
		rates := make([]int64, k)
		for i := range rates {
			rates[i] = 100e6
		}
		bed, err := NewBed(ctx, rates)
		if err != nil {
			t.Fatal(err)
		}
		for _, buf := range []int{4 << 20, 256 << 10, 128 << 10, 64 << 10, 32 << 10} {
			for _, mode := range []transport.StripeMode{transport.StripeOff, transport.StripeEnhanced} {
				var res []float64
				for range 2 {
					b := &Braid{Bed: bed, Nets: seq(k), Config: transport.Config{Transport: "sctp-udp", Stripe: mode},
						Kind: sctpudp.Kind{Config: sctpudp.Config{SendBuffer: buf}}}
					r, err := b.Bulk(ctx, 1<<20, 1, 3*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					res = append(res, r.Mbps)
				}
				t.Logf("k=%d sndbuf=%dK %v: %.1f Mbit/s", k, buf>>10, mode, res)
			}
		}
		bed.Down()
	}
}

func TestExploreHolBraid(t *testing.T) {
	if !*explore {
		t.Skip("exploratory; run with -explore")
	}
	testbed.Skip(t)
	ctx := t.Context()
	bed, err := NewBed(ctx, []int64{100e6})
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Down()
	s := &Suite{Duration: time.Second}
	for _, big := range []int{64 << 10, 64 << 20} {
		r, err := s.holBraid(ctx, bed, []int{0}, transport.Config{Transport: "tcp"}, big, false)
		t.Logf("big=%d: %s A=%.1f err=%v", big, percentiles(r.lat), r.mbps(), err)
	}
}

var sentRe = regexp.MustCompile(`Sent (\d+) bytes`)

// qdiscSent returns the bytes the client's tbf has sent.
func qdiscSent(t *testing.T, bed *testbed.Bed) int64 {
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

func TestExploreHolSCTPSizes(t *testing.T) {
	if !*explore {
		t.Skip("exploratory; run with -explore")
	}
	testbed.Skip(t)
	ctx := t.Context()
	bed, err := NewBed(ctx, []int64{100e6})
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Down()
	for _, h := range []string{Client, Server} {
		if err := bed.SetLoss(h, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	s := &Suite{Duration: 3 * time.Second}
	for _, buf := range []int{32 << 10, 64 << 10, 256 << 10} {
		r, err := s.holSCTP(ctx, bed, buf, 64<<10)
		t.Logf("sctp streambuf=%d: %s of %d, A=%.1f err=%v", buf, percentiles(r.lat), r.sent, r.mbps(), err)
	}
	for _, big := range []int{16 << 10, 4 << 10, 1 << 10} {
		r, err := s.holSCTP(ctx, bed, 0, big)
		t.Logf("sctp big=%d: %s of %d, A=%.1f err=%v", big, percentiles(r.lat), r.sent, r.mbps(), err)
		r, err = s.holTCP(ctx, bed, big)
		t.Logf("tcp  big=%d: %s of %d, A=%.1f err=%v", big, percentiles(r.lat), r.sent, r.mbps(), err)
	}
}
