package transport

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/braid-hpc/braid/testbed/relay"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

// TestHeterogeneousPingPong echoes messages over paths of very different
// speeds: every message must come back intact whatever the striping
// decides (slow paths leaving the end of a segment to fast ones).
func TestHeterogeneousPingPong(t *testing.T) {
	c, s, relays := relayed(t, 3, nil)
	for i, r := range []int64{80e6, 40e6, 8e6} {
		relays[i].(*relay.TCP).SetRate(r)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	go func() {
		rs, err := s.AcceptStream(ctx)
		if err != nil {
			return
		}
		for {
			m, err := rs.ReadMessage(ctx)
			if err != nil {
				return
			}
			if rs.WriteMessage(ctx, m) != nil {
				return
			}
		}
	}()
	st, _ := c.OpenStream(ctx)
	for i, size := range []int{64 << 10, 1 << 20, 1 << 20, 300 << 10, 1 << 20, 2 << 20, 1 << 20, 1 << 20} {
		msg := randBytes(uint64(i), size)
		if err := st.WriteMessage(ctx, msg); err != nil {
			t.Fatal(err)
		}
		got, err := st.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("message %d (%d bytes): %v", i, size, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("message %d corrupted", i)
		}
	}
}

func TestFragmentSizeFollowsTheSlowestPath(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	up := func(rate float64) *path { return &path{conn: c1, drate: rate} }
	for _, tc := range []struct {
		name  string
		frag  int
		paths []*path
		want  int
	}{
		{"rates unknown", 32 << 10, []*path{up(0), up(0)}, 32 << 10},
		{"1 Gbit/s paths", 32 << 10, []*path{up(125e6), up(125e6)}, 32 << 10},
		{"100 Mbit/s paths", 32 << 10, []*path{up(125e6), up(12.5e6)}, 25000},
		{"one 25 Mbit/s path", 32 << 10, []*path{up(12.5e6), up(3.125e6)}, 6250},
		{"very slow path", 32 << 10, []*path{up(12.5e6), up(10e3)}, minFragment},
		{"slow path down", 32 << 10, []*path{up(125e6), {drate: 10e3}}, 32 << 10},
		{"configured below the floor", 1 << 10, []*path{up(10e3)}, 1 << 10},
	} {
		s := &Session{cfg: &Config{FragmentSize: tc.frag}, paths: tc.paths}
		if got := s.fragBound(); got != tc.want {
			t.Errorf("%s: fragment size %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestPlanStripesWhenItPays(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	up := func(rate float64, rtt time.Duration) *path {
		return &path{conn: c1, drate: rate, rtt: rtt, minRTT: rtt}
	}
	const mbit = 1e6 / 8
	for _, tc := range []struct {
		name   string
		cfg    Config
		paths  []*path
		size   int
		want   int // fragment size; 0: whole
		stripe bool
	}{
		{"2 x 100 Mbit/s, 1 KB", Config{}, []*path{up(100*mbit, 200*time.Microsecond), up(100*mbit, 200*time.Microsecond)}, 1 << 10, 0, false},
		{"2 x 100 Mbit/s, 4 KB", Config{}, []*path{up(100*mbit, 200*time.Microsecond), up(100*mbit, 200*time.Microsecond)}, 4 << 10, 0, false},
		{"2 x 100 Mbit/s, 8 KB", Config{}, []*path{up(100*mbit, 200*time.Microsecond), up(100*mbit, 200*time.Microsecond)}, 8 << 10, 4 << 10, true},
		{"2 x 100 Mbit/s, 16 KB", Config{}, []*path{up(100*mbit, 200*time.Microsecond), up(100*mbit, 200*time.Microsecond)}, 16 << 10, 4 << 10, true},
		{"2 x 1 Gbit/s, 8 KB", Config{}, []*path{up(1000*mbit, 50*time.Microsecond), up(1000*mbit, 50*time.Microsecond)}, 8 << 10, 0, false},
		{"2 x 1 Gbit/s, 64 KB", Config{}, []*path{up(1000*mbit, 50*time.Microsecond), up(1000*mbit, 50*time.Microsecond)}, 64 << 10, 8 << 10, true},
		{"loopback-fast paths, 64 KB", Config{}, []*path{up(4e9, 10*time.Microsecond), up(4e9, 10*time.Microsecond)}, 64 << 10, 0, false},
		{"2 x 100 Mbit/s, 64 KB", Config{}, []*path{up(100*mbit, 200*time.Microsecond), up(100*mbit, 200*time.Microsecond)}, 64 << 10, 8 << 10, true},
		{"2 x 100 Mbit/s, 1 MB", Config{}, []*path{up(100*mbit, 200*time.Microsecond), up(100*mbit, 200*time.Microsecond)}, 1 << 20, 25000, true},
		{"100 + 1 Mbit/s, 64 KB", Config{}, []*path{up(100*mbit, 200*time.Microsecond), up(1*mbit, 200*time.Microsecond)}, 64 << 10, 0, false},
		{"long round trip on the second path", Config{}, []*path{up(100*mbit, 200*time.Microsecond), up(100*mbit, 20*time.Millisecond)}, 64 << 10, 0, false},
		{"rates unknown, 64 KB", Config{}, []*path{up(0, 0), up(0, 0)}, 64 << 10, 0, false},
		{"rates unknown, 1 MB", Config{}, []*path{up(0, 0), up(0, 0)}, 1 << 20, 32 << 10, true},
		{"one fast path, 1 MB", Config{}, []*path{up(2e9, 50*time.Microsecond)}, 1 << 20, 1 << 20, false},
		{"one fast path, 4 MB", Config{SegmentSize: 4 << 20}, []*path{up(2e9, 50*time.Microsecond)}, 4 << 20, 1 << 20, true},
		{"fixed threshold", Config{StripeThreshold: 100 << 10, FragmentSize: 16 << 10}, []*path{up(100*mbit, 0), up(100*mbit, 0)}, 128 << 10, 16 << 10, true},
		{"striping off", Config{Stripe: StripeOff}, []*path{up(100*mbit, 0), up(100*mbit, 0)}, 8 << 20, 0, false},
	} {
		cfg := tc.cfg
		s := &Session{cfg: &cfg, paths: tc.paths}
		s.pathsChanged()
		got := s.plan(tc.size)
		if (got > 0) != tc.stripe || (tc.stripe && got != tc.want) {
			t.Errorf("%s: plan(%d) = %d, want striped=%v in fragments of %d", tc.name, tc.size, got, tc.stripe, tc.want)
		}
	}
}

// TestBurstRate checks the rate a ping-pong of whole messages teaches a
// path: an 8 KiB message acknowledged 760 us after it left, on a path whose
// round trip is 100 us, says about 12.4 MB/s (100 Mbit/s), which is what
// lets the next 8 KB message stripe; a 4 KiB burst (half of a striped 8 KB
// message, which a shaper's bucket lets through at once) teaches nothing.
func TestBurstRate(t *testing.T) {
	t0 := time.Now()
	burst := func(n int) *path {
		p := &path{minRTT: 100 * time.Microsecond, burstStart: t0, inflight: 1, unackedBytes: int64(n)}
		p.sampleDelivery([]txRef{{seg: &txSeg{ref: wire.SegmentRef{Len: uint32(n)}}, idx: -1}}, t0.Add(760*time.Microsecond))
		return p
	}
	if r := burst(8 << 10).planRate(); r < 12e6 || r > 13e6 {
		t.Errorf("8 KiB acknowledged after 760 us with a 100 us round trip: rate %.0f B/s, want about 12.4e6", r)
	}
	if r := burst(4 << 10).planRate(); r != 0 {
		t.Errorf("a 4 KiB burst gave a rate of %.0f B/s, want none", r)
	}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	p0, p1 := burst(8<<10), burst(8<<10)
	p0.conn, p1.conn = c1, c1
	s := &Session{cfg: &Config{}, paths: []*path{p0, p1}}
	s.pathsChanged()
	if got := s.plan(8 << 10); got != 4<<10 {
		t.Errorf("after 8 KiB bursts at 100 Mbit/s on both paths, plan(8 KiB) = %d, want 4 KiB fragments", got)
	}
}

// TestDeliveryRateBehindQueue checks the delivery rate of a path whose
// acknowledgements wait behind a queue, as on a half-duplex link where
// they share a shaper with the sender's own data: 320 KB sent at once at
// 100 Mbit/s (12.5 MB/s), acknowledged 25 KB at a time every 2 ms from
// 25 ms after the send. The path delivers at 12.5 MB/s; windows that
// began at the send counted the 25 ms before the first acknowledgement
// and read 3.9 MB/s, so the path was given less work, read slower still,
// and a 512 KB ping-pong over two such links ran at 104 Mbit/s where
// 256 KB ran at 172.
func TestDeliveryRateBehindQueue(t *testing.T) {
	const frame, frames = 25_000, 13
	t0 := time.Now()
	p := &path{minRTT: 100 * time.Microsecond, burstStart: t0, inflight: frames, unackedBytes: frame * frames}
	ref := txRef{seg: &txSeg{ref: wire.SegmentRef{Len: frame}}, idx: -1}
	for i := range frames {
		p.sampleDelivery([]txRef{ref}, t0.Add(25*time.Millisecond+time.Duration(i)*2*time.Millisecond))
		p.inflight--
		p.unackedBytes -= frame
	}
	if r := p.speed(); r < 11e6 || r > 14e6 {
		t.Errorf("320 KB acknowledged at 12.5 MB/s from 25 ms after the send: delivery rate %.3g B/s, want about 12.5e6", r)
	}
	// A path given two frames learns nothing from them: too short a
	// window to say what the path could deliver.
	q := &path{minRTT: 100 * time.Microsecond, burstStart: t0, inflight: 2, unackedBytes: 2 * frame, drate: 12.5e6}
	for i := range 2 {
		q.sampleDelivery([]txRef{ref}, t0.Add(25*time.Millisecond+time.Duration(i)*2*time.Millisecond))
		q.inflight--
		q.unackedBytes -= frame
	}
	if r := q.speed(); r != 12.5e6 {
		t.Errorf("two frames acknowledged 25 ms after the send changed a known rate of 12.5e6 B/s to %.3g", r)
	}
}

// TestBurstRaisesRate checks that a path thought slow proves itself fast
// with a burst too short for a delivery window, and that a slow burst
// never lowers the rate: a path that was given 100 KB of a striped
// message and drained it at 12.5 MB/s in 8 ms is thought to do 12.5 MB/s,
// not the 2 MB/s its first, slow-start messages taught; the same bytes
// acknowledged over 24 ms (fed slowly, or waiting behind a queue) leave a
// known 12.5 MB/s alone.
func TestBurstRaisesRate(t *testing.T) {
	const frame, frames = 10_000, 10
	t0 := time.Now()
	drain := func(rate float64, first, every time.Duration) *path {
		p := &path{minRTT: 200 * time.Microsecond, burstStart: t0, inflight: frames, unackedBytes: frame * frames, drate: rate}
		ref := txRef{seg: &txSeg{ref: wire.SegmentRef{Len: frame}}, idx: -1}
		for i := range frames {
			p.sampleDelivery([]txRef{ref}, t0.Add(first+time.Duration(i)*every))
			p.inflight--
			p.unackedBytes -= frame
		}
		return p
	}
	// 100 KB at 12.5 MB/s: the last frame acknowledged 8 ms + 200 us
	// after the first send.
	if r := drain(2e6, 1000*time.Microsecond, 800*time.Microsecond).speed(); r < 11e6 || r > 13.5e6 {
		t.Errorf("100 KB drained at 12.5 MB/s by a path thought to do 2e6 B/s: rate %.3g B/s, want about 12.5e6", r)
	}
	if r := drain(12.5e6, 10*time.Millisecond, 1500*time.Microsecond).speed(); r != 12.5e6 {
		t.Errorf("100 KB acknowledged over 24 ms changed a known rate of 12.5e6 B/s to %.3g", r)
	}
}
