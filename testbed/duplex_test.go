package testbed

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestPingPongWithinRate: a ping-pong over a 100 Mbit/s link as Up makes
// it by default (half duplex) never measures above 100 Mbit/s of effective bandwidth (the papers'
// 8 x size / (RTT / 2): the bytes of both ways over the time), at 1 KB as
// at every other size, and SetRate moves the bound.
//
// This is an upper bound, so load cannot fail it: load only adds time.
// Each host's one bucket passes at most its burst plus the rate times the
// elapsed time, and carries every request and reply with 66 bytes of
// Ethernet, IP and TCP headers per packet, more than the burst adds over
// the megabyte or so each size moves.
//
// On FullDuplex links the same 1 KB ping-pong measures up to twice the
// rate: BenchmarkPingPong shows both.
func TestPingPongWithinRate(t *testing.T) {
	t.Parallel()
	const rate = 100e6
	b := upBed(t, Spec{Hosts: []string{"a", "b"}, Networks: []Network{{Rate: rate}}})
	sent0 := shaperSent(t, b, "a", 0)
	var moved int64 // payload bytes that crossed, both ways
	for _, size := range []int{64, 1 << 10, 8 << 10, 64 << 10} {
		n := pingPongCount(size)
		got := pingPong(t, b, "b", "a", 0, size, n)
		t.Logf("%d B x %d round trips: %.1f Mbit/s effective on a %s link (half duplex, the default)", size, n, got/1e6, FormatRate(rate))
		if got > rate {
			t.Errorf("%d B ping-pong: %.1f Mbit/s effective on a %s link", size, got/1e6, FormatRate(rate))
		}
		moved += int64(2 * size * (n + pingPongWarmup))
	}
	// Both ways went through host a's one bucket: its tbf counted every
	// request and every reply (the bound above rests on it).
	if sent := shaperSent(t, b, "a", 0) - sent0; sent < moved {
		t.Errorf("host a's shaper passed %d bytes; the ping-pongs moved %d both ways: a direction bypasses it", sent, moved)
	}

	if err := b.SetRate(0, rate/4); err != nil {
		t.Fatal(err)
	}
	if got := pingPong(t, b, "b", "a", 0, 1<<10, pingPongCount(1<<10)/4); got > rate/4 {
		t.Errorf("after SetRate(%s): 1 KB ping-pong at %.1f Mbit/s effective", FormatRate(rate/4), got/1e6)
	}
}

// pingPongCount is how many round trips pingPong times at size: about
// 1 MB each way, 16 to 2,000 of them.
func pingPongCount(size int) int { return min(2000, max(16, (1<<20)/size)) }

// pingPong is Bed.PingPong bounded by a minute, failing t on an error.
func pingPong(t testing.TB, b *Bed, client, server string, net_, size, count int) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got, err := b.PingPong(ctx, client, server, net_, size, count)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

var tbfSent = regexp.MustCompile(`Sent (\d+) bytes`)

// shaperSent returns the bytes the tbf of host's half-duplex shaper on
// network net has passed.
func shaperSent(t testing.TB, b *Bed, host string, net_ int) int64 {
	t.Helper()
	out, err := run(t.Context(), "tc", "-n", b.Namespace(host), "-s", "qdisc", "show", "dev", b.shaper(net_), "root")
	if err != nil {
		t.Fatal(err)
	}
	m := tbfSent.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no byte count in tc's statistics of %s: %s", b.shaper(net_), out)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// BenchmarkPingPong reports the effective bandwidth of a ping-pong over
// one 100 Mbit/s link, full duplex (each direction its own bucket) and
// half duplex (one bucket for both), over the link's rate: above 1 is
// more than any wire of that rate carries. Large messages show what the
// half-duplex link costs a serial exchange (TCP's acknowledgements share
// its bucket).
//
//	go test -run '^$' -bench PingPong -benchtime 1x -count 3 ./testbed/
func BenchmarkPingPong(b *testing.B) {
	const rate = 100e6
	for _, half := range []bool{false, true} {
		duplex := "full"
		if half {
			duplex = "half"
		}
		b.Run("duplex="+duplex, func(b *testing.B) {
			bed := upBed(b, Spec{Hosts: []string{"a", "b"}, Networks: []Network{{Rate: rate, FullDuplex: !half}}})
			for _, size := range []int{1 << 10, 8 << 10, 64 << 10, 1 << 20} {
				b.Run(fmt.Sprintf("size=%dKiB", size>>10), func(b *testing.B) {
					var sum float64
					var runs int
					for b.Loop() {
						sum += pingPong(b, bed, "b", "a", 0, size, pingPongCount(size))
						runs++
					}
					b.ReportMetric(sum/float64(runs)/1e6, "Mbit/s")
					b.ReportMetric(sum/float64(runs)/rate, "effective/rate")
				})
			}
		})
	}
}
