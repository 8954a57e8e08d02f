package perf

import (
	"context"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport"
)

// The streams of a bulk test carry about the same bytes, as iperf3's TCP
// connections do, whichever side sends and however the test ends (by
// time or by -n). Before the sender took turns, one of two streams on
// loopback carried seven times the other's bytes.
func TestStreamsEven(t *testing.T) {
	paths, cfg, _ := serve(t)
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"2 streams", Options{Streams: 2, Seconds: 1}},
		{"2 streams reverse", Options{Streams: 2, Seconds: 1, Reverse: true}},
		{"4 streams", Options{Streams: 4, Seconds: 1}},
		{"3 streams -n", Options{Streams: 3, Seconds: 10, Bytes: 60 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			o := tc.o
			o.Paths, o.Config, o.Mode, o.Size = paths[:1], cfg, "bulk", 256<<10
			_, ip, err := Run(ctx, &o)
			if err != nil {
				t.Fatal(err)
			}
			if len(ip.End.Streams) != o.Streams {
				t.Fatalf("%d streams in the report, want %d", len(ip.End.Streams), o.Streams)
			}
			for _, side := range []string{"sender", "receiver"} {
				var got []int64
				var sum int64
				for _, s := range ip.End.Streams {
					b := s.Receiver.Bytes
					if side == "sender" {
						b = s.Sender.Bytes
					}
					got = append(got, b)
					sum += b
				}
				mean := float64(sum) / float64(len(got))
				for i, b := range got {
					if d := float64(b) - mean; d > 0.1*mean || d < -0.1*mean {
						t.Errorf("%s: stream %d carried %d bytes, more than 10%% from the mean %.0f: %v", side, i, b, mean, got)
					}
				}
			}
		})
	}
}

// Each stream's sender figures have the TCP_INFO of the sender's TCP
// channels, as iperf3's have its sockets', whichever side sends.
func TestStreamsTCPFigures(t *testing.T) {
	paths, cfg, _ := serve(t)
	for _, reverse := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		o := &Options{Paths: paths, Config: cfg, Mode: "bulk", Size: 256 << 10, Seconds: 0.5, Streams: 2, Reverse: reverse}
		_, ip, err := Run(ctx, o)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range ip.End.Streams {
			s := st.Sender
			if s.MaxSendCwnd == nil || s.MaxRTT == nil || s.MinRTT == nil || s.MeanRTT == nil || s.Retransmits == nil {
				t.Fatalf("reverse %v: stream %v's sender lacks TCP figures: %+v", reverse, s.Socket, s)
			}
			if *s.MaxSendCwnd <= 0 || *s.MinRTT <= 0 || *s.MinRTT > *s.MeanRTT || *s.MeanRTT > *s.MaxRTT || *s.Retransmits < 0 {
				t.Errorf("reverse %v: stream %v: cwnd %d B, rtt min %d mean %d max %d µs, %d retransmits", reverse, *s.Socket,
					*s.MaxSendCwnd, *s.MinRTT, *s.MeanRTT, *s.MaxRTT, *s.Retransmits)
			}
		}
	}
}

// The streams of a test share the session's channels: the sender's sum
// counts each channel's retransmits once, not once per stream, and each
// path has its own channel's figures. Before, sum_sent.retransmits held
// the bytes sent again after a failover (0) while each of two streams
// said 4.
func TestRetransmitsCountedOnce(t *testing.T) {
	o := &Options{Mode: "bulk", Streams: 2, Paths: make([]transport.Path, 2), Config: &transport.Config{}}
	rep := newReport(o)
	rep.Seconds, rep.Bytes = 1, 200
	rep.PerPath = []Path{{ID: 0}, {ID: 1}}
	tcp := &TCPFigures{MaxSendCwnd: 10, MaxRTT: 3, MinRTT: 1, MeanRTT: 2, Retransmits: 7, Channels: []ChannelTCP{
		{Path: 0, MaxSendCwnd: 10, MaxRTT: 3, MinRTT: 1, MeanRTT: 2, Retransmits: 4},
		{Path: 1, MaxSendCwnd: 8, MaxRTT: 2, MinRTT: 1, MeanRTT: 1, Retransmits: 3}}}
	sent := bulkSendResult{bytes: 200, seconds: 1, tcp: tcp}
	e := o.IperfEnd(rep, &Result{Bytes: 200, Seconds: 1}, sent, []int{3, 5}, []int64{100, 100})
	if e.SumSent.Retransmits == nil || *e.SumSent.Retransmits != 7 {
		t.Errorf("sum_sent.retransmits %v, want 7 (4 + 3, each channel once)", e.SumSent.Retransmits)
	}
	for _, s := range e.Streams {
		if s.Sender.Retransmits == nil || *s.Sender.Retransmits != 7 {
			t.Errorf("stream %d: retransmits %v, want the channels' 7", *s.Sender.Socket, s.Sender.Retransmits)
		}
	}
	if rep.StreamTCP != "channels" {
		t.Errorf("braid.stream_tcp %q, want \"channels\"", rep.StreamTCP)
	}
	for i, want := range []int64{4, 3} {
		if p := rep.PerPath[i]; p.TCP == nil || p.TCP.Retransmits != want {
			t.Errorf("path %d: tcp %+v, want %d retransmits", i, p.TCP, want)
		}
	}
	// Channels that are not TCP have no retransmit count at all.
	e = o.IperfEnd(newReport(o), &Result{Bytes: 200, Seconds: 1}, bulkSendResult{bytes: 200, seconds: 1}, []int{3}, []int64{200})
	if e.SumSent.Retransmits != nil {
		t.Errorf("sum_sent.retransmits %d without TCP channels, want none", *e.SumSent.Retransmits)
	}
}

// The braid section says whether the data plane was encrypted.
func TestReportEncrypted(t *testing.T) {
	for _, tc := range []struct {
		plain, baseline, want bool
	}{{false, false, true}, {true, false, false}, {false, true, false}} {
		o := &Options{Mode: "bulk", Streams: 1, Paths: make([]transport.Path, 1), Baseline: tc.baseline,
			Config: &transport.Config{InsecurePlaintext: tc.plain}}
		if got := newReport(o).Encrypted; got != tc.want {
			t.Errorf("plaintext %v, baseline %v: encrypted %v, want %v", tc.plain, tc.baseline, got, tc.want)
		}
	}
}
