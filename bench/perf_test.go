package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/testbed"
)

// braid perf -P N splits a bulk test's bytes evenly over its streams on
// a testbed too, where the session's paths are shaped links between two
// namespaces (2 x 100 Mbit/s) rather than loopback: every stream within
// 10% of the streams' mean, sent and received, both directions.
//
// Load cannot fail it: the streams take turns (perf's fairShare lets
// none run more than 2 messages ahead of the slowest), so their bytes
// differ by at most a few messages whatever the rate, and the messages
// are small (16 KB) beside what a stream carries in a second even at a
// tenth of the links' rate (about 1.2 MB).
func TestPerfStreamsEvenOnTestbed(t *testing.T) {
	testbed.Skip(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bed, err := NewBed(ctx, []int64{100e6, 100e6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Down(); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	b := &Braid{Bed: bed, Nets: seq(2)}
	for _, tc := range []struct {
		streams int
		reverse bool
	}{{2, false}, {2, true}, {4, false}} {
		name := fmt.Sprintf("P=%d", tc.streams)
		if tc.reverse {
			name += "/R"
		}
		t.Run(name, func(t *testing.T) {
			_, ip, err := b.measure(ctx, perf.Options{Mode: "bulk", Size: 16 << 10, Streams: tc.streams, Seconds: 1.5, Reverse: tc.reverse})
			if err != nil {
				t.Fatal(err)
			}
			if len(ip.End.Streams) != tc.streams {
				t.Fatalf("%d streams in the report, want %d", len(ip.End.Streams), tc.streams)
			}
			for _, side := range []string{"sender", "receiver"} {
				var got []int64
				var sum int64
				var secs float64
				for _, s := range ip.End.Streams {
					span := s.Receiver
					if side == "sender" {
						span = s.Sender
					}
					got = append(got, span.Bytes)
					sum += span.Bytes
					secs = max(secs, span.Seconds)
				}
				mean := float64(sum) / float64(len(got))
				t.Logf("%s: bytes per stream %v, %.1f Mbit/s in all", side, got, 8*float64(sum)/1e6/secs)
				if sum == 0 {
					t.Fatalf("%s: no bytes", side)
				}
				for i, n := range got {
					if d := float64(n) - mean; d > 0.1*mean || d < -0.1*mean {
						t.Errorf("%s: stream %d carried %d bytes, more than 10%% from the mean %.0f: %v", side, i, n, mean, got)
					}
				}
			}
		})
	}
}
