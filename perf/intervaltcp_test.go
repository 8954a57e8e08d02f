package perf

import (
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
)

// fakeTCP is a tcpSource whose readings the test sets.
type fakeTCP struct {
	mu      sync.Mutex
	streams map[int]tcpNow
	chans   []tcpNow
	reads   int
}

func (f *fakeTCP) readings() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeTCP) set(streams map[int]tcpNow, chans ...tcpNow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streams, f.chans = streams, chans
}

func (f *fakeTCP) read() (map[int]tcpNow, tcpNow, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.streams != nil {
		all := make([]tcpNow, 0, len(f.streams))
		for _, t := range f.streams {
			all = append(all, t)
		}
		return f.streams, sumTCP(all), true
	}
	return nil, sumTCP(f.chans), len(f.chans) > 0
}

// TestIntervalTCP checks the per-interval Retr, Cwnd and RTT of a
// sender's streams: braid streams sharing two channels each show the
// channels' retransmits of the interval summed, their windows summed and
// their round trips averaged, and the sum counts each channel once;
// streams with sockets of their own (--tcp-baseline) show their own; a
// receiver's intervals have none.
func TestIntervalTCP(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name       string
		sender     bool
		start, end func(*fakeTCP)
		// want per stream id: retransmits, cwnd, rtt µs; and the sum's
		// retransmits (-1: none).
		want    map[int][3]int64
		wantSum int64
	}{
		{"shared channels", true,
			func(f *fakeTCP) {
				f.set(nil, tcpNow{retr: 5, cwnd: 100, rtt: ms}, tcpNow{retr: 7, cwnd: 200, rtt: 3 * ms})
			},
			func(f *fakeTCP) {
				f.set(nil, tcpNow{retr: 8, cwnd: 1000, rtt: 2 * ms}, tcpNow{retr: 11, cwnd: 3000, rtt: 4 * ms})
			},
			map[int][3]int64{1: {3 + 4, 4000, 3000}, 2: {3 + 4, 4000, 3000}}, 7},
		{"own sockets", true,
			func(f *fakeTCP) {
				f.set(map[int]tcpNow{1: {retr: 1, cwnd: 10, rtt: ms}, 2: {retr: 0, cwnd: 10, rtt: ms}})
			},
			func(f *fakeTCP) {
				f.set(map[int]tcpNow{1: {retr: 4, cwnd: 50, rtt: 2 * ms}, 2: {retr: 2, cwnd: 70, rtt: 6 * ms}})
			},
			map[int][3]int64{1: {3, 50, 2000}, 2: {2, 70, 6000}}, 5},
		{"receiver", false,
			func(f *fakeTCP) { f.set(nil, tcpNow{retr: 5, cwnd: 100, rtt: ms}) },
			func(f *fakeTCP) { f.set(nil, tcpNow{retr: 9, cwnd: 100, rtt: ms}) },
			map[int][3]int64{1: {-1}, 2: {-1}}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTCP{}
			tc.start(f)
			c := &streamCounter{}
			c.stream(1).Add(10)
			c.stream(2).Add(20)
			s := startSampler(c, tc.sender, time.Hour, 0, nil, f.read)
			// The sampler's first reading is its base: the counters
			// move after it.
			if tc.sender {
				testwait.For(t, "the sampler to take its base", 5*time.Second, func() bool { return f.readings() > 0 })
			}
			tc.end(f)
			ivs := s.stop() // a test shorter than a period: one interval
			if len(ivs) != 1 {
				t.Fatalf("%d intervals, want 1", len(ivs))
			}
			iv := ivs[0]
			for _, sp := range iv.Streams {
				w := tc.want[*sp.Socket]
				if w[0] < 0 {
					if sp.Retransmits != nil || sp.SendCwnd != nil || sp.RTT != nil {
						t.Errorf("receiver stream %d has TCP figures", *sp.Socket)
					}
					continue
				}
				if sp.Retransmits == nil || sp.SendCwnd == nil || sp.RTT == nil {
					t.Fatalf("stream %d has no TCP figures", *sp.Socket)
				}
				if got := [3]int64{*sp.Retransmits, *sp.SendCwnd, *sp.RTT}; got != w {
					t.Errorf("stream %d: retransmits, snd_cwnd, rtt = %v, want %v", *sp.Socket, got, w)
				}
			}
			switch {
			case tc.wantSum < 0 && iv.Sum.Retransmits != nil:
				t.Errorf("receiver sum has retransmits %d", *iv.Sum.Retransmits)
			case tc.wantSum >= 0 && (iv.Sum.Retransmits == nil || *iv.Sum.Retransmits != tc.wantSum):
				t.Errorf("sum retransmits %v, want %d (each socket once)", iv.Sum.Retransmits, tc.wantSum)
			}
		})
	}
}
