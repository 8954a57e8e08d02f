package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	_ "github.com/braid-hpc/braid/transport/channel/sctpudp"
)

var testKey = []byte("test-cluster-key-0123456789")

func testConfig(tb testing.TB) *Config {
	tb.Helper()
	return &Config{Key: testKey, Logger: testLogger()}
}

// pair returns a dialed and an accepted session over k loopback paths
// (127.0.0.1, 127.0.0.2, ...), closed at the end of the test.
func pair(tb testing.TB, k int, mod func(*Config)) (client, server *Session) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	scfg, ccfg := testConfig(tb), testConfig(tb)
	if mod != nil {
		mod(scfg)
		mod(ccfg)
	}
	var addrs []string
	for i := range k {
		addrs = append(addrs, fmt.Sprintf("127.0.0.%d:0", i+1))
	}
	ln, err := Listen(ctx, addrs, scfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	var paths []Path
	for _, a := range ln.Addrs() {
		paths = append(paths, Path{Remote: a.String()})
	}
	c, err := Dial(ctx, paths, ccfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close(); c.wait() })
	s, err := ln.Accept(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	testwait.For(tb, fmt.Sprintf("the server to see %d paths up", k), 5*time.Second, func() bool { return len(upPaths(s)) >= k })
	if n := len(upPaths(s)); n != k {
		tb.Fatalf("server sees %d paths up, want %d", n, k)
	}
	return c, s
}

func upPaths(s *Session) []PathStats {
	var up []PathStats
	for _, p := range s.Stats() {
		if p.State == "up" {
			up = append(up, p)
		}
	}
	return up
}

// modes runs body for each interesting configuration: every channel kind
// that works on this machine, one path and several, every striping mode.
func modes(t *testing.T, body func(t *testing.T, k int, mod func(*Config))) {
	for _, tr := range []string{"tcp", "mptcp", "sctp-udp"} {
		for _, k := range []int{1, 3} {
			for _, m := range []StripeMode{StripeEnhanced, StripeBasic, StripeOff} {
				t.Run(fmt.Sprintf("transport=%s/paths=%d/stripe=%v", tr, k, m), func(t *testing.T) {
					body(t, k, func(c *Config) {
						c.Transport = tr
						c.Stripe = m
						c.FragmentSize = 4 << 10
						c.SegmentSize = 64 << 10
						c.StreamWindow = 256 << 10
					})
				})
			}
		}
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestMessagesArriveWholeAndInOrder(t *testing.T) {
	modes(t, func(t *testing.T, k int, mod func(*Config)) {
		c, s := pair(t, k, mod)
		ctx := t.Context()
		// Twice over, releasing every buffer read: the second round reads
		// into reused memory.
		sizes := []int{0, 1, 100, 4 << 10, 4<<10 + 1, 64 << 10, 200 << 10, 1 << 20}
		sizes = append(sizes, sizes...)
		sendInOrder(t, ctx, c, s, sizes, true)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// sendInOrder sends messages of the given sizes on a new stream of c and
// closes it; it checks that s receives each whole and in order, then EOF.
// With release, each message read is handed back (the next reads reuse
// the memory).
func sendInOrder(t *testing.T, ctx context.Context, c, s *Session, sizes []int, release bool) {
	t.Helper()
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		for i, n := range sizes {
			if err := st.WriteMessage(ctx, randBytes(uint64(i), n)); err != nil {
				errc <- err
				return
			}
		}
		errc <- st.Close()
	}()
	rs, err := s.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		got, err := rs.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(got, randBytes(uint64(i), n)) {
			t.Fatalf("message %d: got %d bytes, want %d (content differs)", i, len(got), n)
		}
		if release {
			rs.Release(got)
		}
	}
	if _, err := rs.ReadMessage(ctx); err != io.EOF {
		t.Fatalf("after close: got %v, want io.EOF", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestStripingUsesEveryPath(t *testing.T) {
	// Every segment of the message is striped (a fixed StripeThreshold:
	// the rate-based plan may rightly send a segment whole), and each of
	// the three paths must have taken fragments of it. How many each takes
	// is the load balancer's business: a path the scheduler starves
	// rightly gets few (a byte floor per path failed in CI, "path 1
	// carried only 33055 bytes of an 8 MiB message"), so the check counts
	// fragments, not bytes.
	//
	// Checked by hand: with claim() handing no fragment to any path but
	// path 0, the test fails ("no striped fragment went on [path 1 (1092
	// bytes ...) path 2 (443734 bytes ...)]", 2 of 2 runs; the transfer
	// crawls, as partitions wait for copies): path 2 still
	// carried 433 KB of copies of path 0's frames, which the old byte floor
	// of 256 KiB let pass. The control below shows that the check also
	// fails when striping is off and every segment travels whole on the
	// path that delivers it soonest.
	const size = 8 << 20
	striped := func(c *Config) { c.StripeThreshold = 64 << 10 }
	stats, ss := sendOneMessage(t, size, striped)
	if want := int64(size / (1 << 20)); ss.Segments != want {
		t.Errorf("%d segments striped, want every one of the message's %d: %+v", ss.Segments, want, ss)
	}
	if err := everyPathStriped(stats); err != nil {
		t.Error(err)
	}
	for _, p := range stats {
		t.Logf("path %d: %d fragments, %d bytes", p.ID, p.Fragments, p.BytesSent)
	}
	t.Run("control/stripe=off", func(t *testing.T) {
		stats, _ := sendOneMessage(t, size, func(c *Config) { striped(c); c.Stripe = StripeOff })
		if everyPathStriped(stats) == nil {
			t.Errorf("the check passed with striping off: %+v", stats)
		}
	})
}

// sendOneMessage sends one message of n bytes over three loopback paths
// configured by mod, checks that it arrives intact, and returns the
// sender's path and striping statistics.
func sendOneMessage(t *testing.T, n int, mod func(*Config)) ([]PathStats, StripeStats) {
	t.Helper()
	c, s := pair(t, 3, mod)
	ctx := t.Context()
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg := randBytes(7, n)
	errc := make(chan error, 1)
	go func() { errc <- st.WriteMessage(ctx, msg) }()
	rs, err := s.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rs.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("message corrupted")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return c.Stats(), c.StripeStats()
}

// everyPathStriped returns an error naming the paths that sent no fragment
// of a striped segment.
func everyPathStriped(stats []PathStats) error {
	var idle []string
	for _, p := range stats {
		if p.Fragments == 0 {
			idle = append(idle, fmt.Sprintf("path %d (%d bytes, state %s)", p.ID, p.BytesSent, p.State))
		}
	}
	if len(idle) > 0 {
		return fmt.Errorf("no striped fragment went on %v", idle)
	}
	return nil
}

func TestManyStreamsBothDirections(t *testing.T) {
	c, s := pair(t, 2, func(c *Config) { c.FragmentSize = 4 << 10 })
	ctx := t.Context()
	const streams, msgs = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, 4*streams)
	// Echo server.
	go func() {
		for {
			rs, err := s.AcceptStream(ctx)
			if err != nil {
				return
			}
			go func() {
				for {
					m, err := rs.ReadMessage(ctx)
					if err != nil {
						rs.Close()
						return
					}
					if err := rs.WriteMessage(ctx, m); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}()
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.OpenStream(ctx)
			if err != nil {
				errs <- err
				return
			}
			for j := range msgs {
				want := randBytes(uint64(i*1000+j), (i*7919+j*104729)%(300<<10))
				if err := st.WriteMessage(ctx, want); err != nil {
					errs <- err
					return
				}
				got, err := st.ReadMessage(ctx)
				if err != nil {
					errs <- fmt.Errorf("stream %d msg %d: %w", i, j, err)
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("stream %d msg %d: echo differs", i, j)
					return
				}
			}
			st.Close()
			if _, err := st.ReadMessage(ctx); err != io.EOF {
				errs <- fmt.Errorf("stream %d: want EOF, got %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestWrongKeyIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ln, err := Listen(ctx, []string{"127.0.0.1:0"}, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bad := testConfig(t)
	bad.Key = []byte("another-key-entirely")
	_, err = Dial(ctx, []Path{{Remote: ln.Addrs()[0].String()}}, bad)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("dial with wrong key: got %v, want ErrAuth", err)
	}
	// The listener still serves good peers.
	c, err := Dial(ctx, []Path{{Remote: ln.Addrs()[0].String()}}, testConfig(t))
	if err != nil {
		t.Fatalf("good peer after a bad one: %v", err)
	}
	c.Close()
}

func TestShaSumLargeTransfer(t *testing.T) {
	c, s := pair(t, 2, nil)
	ctx := t.Context()
	st, _ := c.OpenStream(ctx)
	h := sha256.New()
	go func() {
		for i := range 40 {
			b := randBytes(uint64(i), 1<<20)
			st.WriteMessage(ctx, b)
		}
		st.Close()
	}()
	for i := range 40 {
		h.Write(randBytes(uint64(i), 1<<20))
	}
	want := h.Sum(nil)
	rs, _ := s.AcceptStream(ctx)
	h2 := sha256.New()
	for {
		m, err := rs.ReadMessage(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		h2.Write(m)
	}
	if !bytes.Equal(h2.Sum(nil), want) {
		t.Fatal("sha256 mismatch")
	}
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

func TestRoundRobinTakesPathsInTurn(t *testing.T) {
	// Paper 000's policy: whole messages go to the live paths in turn,
	// whatever their queues hold. Checked by hand: with shouldTake's
	// round-robin branch removed (the default policy then places each
	// message on the path that finishes it first), the order check fails
	// every run; the byte split alone passed 2 runs in 5.
	const k = 3
	c, s := pair(t, k, func(c *Config) {
		c.Policy = PolicyRoundRobin
		c.Stripe = StripeOff
		// A loaded machine must not time a path out mid-test: that sends
		// its turn to the other ones.
		c.PathTimeout = 10 * time.Second
	})
	ctx := t.Context()
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Copies of frames that another path held too long (a loaded machine
	// delays acknowledgements) are not the policy's placement: they are
	// counted apart, as duplicated.
	sent := func(before, after []PathStats, i int) int64 {
		return after[i].BytesSent - before[i].BytesSent - (after[i].Duplicated - before[i].Duplicated)
	}
	const size = 10 << 10
	var rs *Stream

	// The order: one message at a time, each acknowledged before the next
	// is written, so that each is carried by exactly one path and the
	// stats say which, and every path's queue is empty when the next one
	// is placed (the default policy then picks the path it finds fastest,
	// not the next). Heartbeats and acks add far less than a message. A
	// writer counts its bytes once its write returns, which can be after
	// the peer has read them: wait for the counts to catch up.
	const rounds = 8 * k
	var order []int
	for i := range rounds {
		testwait.For(t, "every path's frames to be acknowledged", 5*time.Second, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, p := range c.paths {
				if p.unackedBytes != 0 {
					return false
				}
			}
			return true
		})
		before := c.Stats()
		msg := randBytes(uint64(1000+i), size)
		if err := st.WriteMessage(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if rs == nil {
			if rs, err = s.AcceptStream(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if m, err := rs.ReadMessage(ctx); err != nil || !bytes.Equal(m, msg) {
			t.Fatalf("message %d: %d bytes, %v", i, len(m), err)
		}
		var carriers []int
		testwait.For(t, fmt.Sprintf("message %d to be counted by the path that sent it", i), 5*time.Second, func() bool {
			after := c.Stats()
			carriers = carriers[:0]
			for p := range after {
				if sent(before, after, p) >= size {
					carriers = append(carriers, p)
				}
			}
			return len(carriers) > 0
		})
		if len(carriers) != 1 {
			t.Fatalf("message %d of %d bytes counted whole on paths %v", i, size, carriers)
		}
		order = append(order, carriers[0])
	}
	// In turn: the first k messages take k different paths, and then the
	// same cycle repeats.
	for i := range order {
		if i >= k && order[i] != order[i-k] || i < k && slices.Contains(order[:i], order[i]) {
			t.Fatalf("messages went to paths %v, want the %d paths in turn", order, k)
		}
	}

	// Whatever their queues hold: a burst of messages queued at once
	// splits evenly.
	const n = 40 * k
	before := c.Stats()
	go func() {
		for i := range n {
			if err := st.WriteMessage(ctx, randBytes(uint64(i), size)); err != nil {
				return
			}
		}
	}()
	for i := range n {
		m, err := rs.ReadMessage(ctx)
		if err != nil || !bytes.Equal(m, randBytes(uint64(i), size)) {
			t.Fatalf("message %d: %d bytes, %v", i, len(m), err)
		}
	}
	// A k-th of the payload each, give or take heartbeats and acks.
	want := int64(n / k * size)
	var after []PathStats
	testwait.Until(5*time.Second, func() bool {
		after = c.Stats()
		for i := range after {
			if sent(before, after, i) < want {
				return false
			}
		}
		return true
	})
	for i := range after {
		if got := sent(before, after, i); got < want || got > want+want/10 {
			t.Errorf("path %d sent %d bytes, want about %d (a %dth of the messages)", i, got, want, k)
		}
	}
}

// TestWriteMessageNoCopy sends one buffer many times without copying it,
// striped over two paths: every message must arrive intact, and the
// transport must never recycle the caller's buffer (a later WriteMessage
// would then copy other data into it).
func TestWriteMessageNoCopy(t *testing.T) {
	c, s := pair(t, 2, func(c *Config) { c.FragmentSize = 4 << 10 })
	ctx := t.Context()
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A size class of the buffer pool: were the buffer recycled, the
	// next copying write of the same size would get it.
	buf := randBytes(7, 256<<10)
	want := bytes.Clone(buf)
	const n = 20
	go func() {
		for range n {
			if err := st.WriteMessageNoCopy(ctx, buf); err != nil {
				return
			}
		}
		// Copying writes draw buffers from the pool the acknowledged
		// segments went back to.
		for i := range n {
			if err := st.WriteMessage(ctx, randBytes(uint64(100+i), 256<<10)); err != nil {
				return
			}
		}
	}()
	rs, err := s.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 * n {
		m, err := rs.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		exp := want
		if i >= n {
			exp = randBytes(uint64(100+i-n), 256<<10)
		}
		if !bytes.Equal(m, exp) {
			t.Fatalf("message %d: %d bytes, content differs", i, len(m))
		}
		rs.Release(m)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("the buffer passed to WriteMessageNoCopy was changed")
	}
}

// TestStripedMessageLeavesAtOnce sends one striped message over idle
// paths whose heartbeats are seconds apart: queuing it must wake the
// path writers itself, not leave it for the next heartbeat or
// acknowledgement to do so.
func TestStripedMessageLeavesAtOnce(t *testing.T) {
	c, s := pair(t, 2, func(c *Config) {
		c.HeartbeatInterval = 10 * time.Second
		c.PathTimeout = 30 * time.Second
		c.StripeThreshold = 16 << 10
	})
	st, err := c.OpenStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Far below the heartbeat interval, far above any scheduling delay.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	want := randBytes(1, 256<<10)
	if err := st.WriteMessage(ctx, want); err != nil {
		t.Fatal(err)
	}
	rs, err := s.AcceptStream(ctx)
	if err != nil {
		t.Fatalf("the message did not arrive before the next heartbeat: %v", err)
	}
	got, err := rs.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("the message did not arrive before the next heartbeat: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d (content differs)", len(got), len(want))
	}
	if n := c.StripeStats().Segments; n == 0 {
		t.Fatal("the message was not striped")
	}
}
