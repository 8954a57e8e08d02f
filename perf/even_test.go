package perf

import (
	"context"
	"testing"
	"time"
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
