package perf

import (
	"context"
	"testing"
	"time"
)

// Bidir (iperf3 --bidir) runs a bulk test both ways at once: each
// direction is paced and counted on its own, at both ends, and the
// iperf3-shaped report has each direction's sums and streams.
func TestBidir(t *testing.T) {
	paths, cfg, stop := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	o := &Options{Paths: paths, Config: cfg, Mode: "bulk", Size: 32 << 10, Seconds: 1, Streams: 2, Interval: 0.5,
		Bitrate: 40e6, Bidir: true}
	rep, ip, err := Run(ctx, o)
	if err != nil {
		for _, tt := range stop() {
			t.Logf("server's test: %v", tt.Err)
		}
		t.Fatal(err)
	}
	const want = 40e6 / 8 // one second at 40 Mbit/s, each way
	near := func(n int64) bool { return float64(n) > 0.7*want && float64(n) < 1.3*want }
	if !near(rep.Bytes) || rep.Bidir == nil || !near(rep.Bidir.Bytes) {
		t.Fatalf("report: %d bytes client -> server, bidir %+v; want about %.0f each way", rep.Bytes, rep.Bidir, want)
	}
	e := ip.End
	if ip.Start.TestStart.Bidir != 1 || e.SumSentBidirReverse == nil || e.SumReceivedBidirReverse == nil ||
		!near(e.SumReceivedBidirReverse.Bytes) || e.SumReceivedBidirReverse.Bytes != rep.Bidir.Bytes || e.SumReceivedBidirReverse.Sender {
		t.Errorf("iperf end: test_start %+v, reverse sums %+v / %+v", ip.Start.TestStart, e.SumSentBidirReverse, e.SumReceivedBidirReverse)
	}
	if !near(e.SumReceived.Bytes) || !e.SumReceived.Sender {
		t.Errorf("forward sum_received %+v", e.SumReceived)
	}
	var fwd, back int
	for _, st := range e.Streams {
		if st.Sender.Sender {
			fwd++
		} else {
			back++
		}
	}
	if fwd != 2 || back != 2 {
		t.Errorf("%d streams client -> server, %d back; want 2 and 2", fwd, back)
	}
	if len(ip.Intervals) == 0 || ip.Intervals[0].SumBidirReverse == nil || len(ip.Intervals[0].Streams) != 4 {
		t.Errorf("intervals %+v", ip.Intervals)
	}
	for _, tt := range stop() {
		if tt.Err != nil || tt.Result.Rev == nil || !near(tt.Result.Rev.Bytes) {
			t.Errorf("server's test: %v, sent back %+v", tt.Err, tt.Result.Rev)
		}
	}
	if err := (&Options{Paths: paths, Config: cfg, Mode: "bulk", Size: 1 << 10, Seconds: 1, Streams: 1, Bidir: true, Reverse: true}).Validate(); err == nil {
		t.Error("--bidir with --reverse accepted")
	}
}
