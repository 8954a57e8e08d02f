package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

func TestLaneOf(t *testing.T) {
	for _, tt := range []struct {
		id   uint32
		n    int
		want uint16
	}{
		{0, 8, 0}, {5, 1, 0}, {1, 8, 1}, {2, 8, 2}, {3, 8, 2}, {13, 8, 7}, {15, 8, 1}, {4, 2, 1},
	} {
		if got := laneOf(tt.id, tt.n); got != tt.want {
			t.Errorf("laneOf(%d, %d) = %d, want %d", tt.id, tt.n, got, tt.want)
		}
	}
	// The dialer's streams 1, 3, 5, ... cover every data lane.
	seen := map[uint16]bool{}
	for id := uint32(1); id < 2*16; id += 2 {
		seen[laneOf(id, 16)] = true
	}
	if len(seen) != 15 || seen[0] {
		t.Errorf("odd stream ids use lanes %v, want 1..15", seen)
	}
}

// holdProxy relays UDP datagrams between clients and a target, and
// withholds, in order, those from clients that match a predicate until
// released: a loss of exactly the datagrams that carry some data, undone
// at a moment of the test's choosing.
type holdProxy struct {
	pc     *net.UDPConn
	target *net.UDPAddr
	wg     sync.WaitGroup

	mu        sync.Mutex
	ups       map[netip.AddrPort]*net.UDPConn
	match     func([]byte) bool
	held      []heldDatagram
	heldBytes int
}

type heldDatagram struct {
	up *net.UDPConn // towards the target, for the client that sent it
	b  []byte
}

func newHoldProxy(tb testing.TB, target string) *holdProxy {
	tb.Helper()
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		tb.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	p := &holdProxy{pc: pc, target: ta, ups: map[netip.AddrPort]*net.UDPConn{}}
	p.wg.Add(1)
	go p.fromClients()
	tb.Cleanup(p.close)
	return p
}

func (p *holdProxy) addr() string { return p.pc.LocalAddr().String() }

func (p *holdProxy) fromClients() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.pc.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		p.mu.Lock()
		up := p.ups[from]
		if up == nil {
			if up, err = net.DialUDP("udp", nil, p.target); err != nil {
				p.mu.Unlock()
				continue
			}
			p.ups[from] = up
			p.wg.Add(1)
			go p.fromTarget(up, from)
		}
		if p.match != nil && p.match(buf[:n]) {
			p.held = append(p.held, heldDatagram{up, bytes.Clone(buf[:n])})
			p.heldBytes += n
		} else {
			_, _ = up.Write(buf[:n])
		}
		p.mu.Unlock()
	}
}

func (p *holdProxy) fromTarget(up *net.UDPConn, client netip.AddrPort) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err == nil {
			_, _ = p.pc.WriteToUDPAddrPort(buf[:n], client)
		}
	}
}

// hold starts withholding datagrams for which match is true.
func (p *holdProxy) hold(match func([]byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match = match
}

// heldSoFar returns how many bytes of datagrams are withheld.
func (p *holdProxy) heldSoFar() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heldBytes
}

// release sends the withheld datagrams on, in order, and stops holding.
func (p *holdProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.held {
		_, _ = d.up.Write(d.b)
	}
	p.held, p.heldBytes, p.match = nil, 0, nil
}

func (p *holdProxy) close() {
	_ = p.pc.Close()
	p.mu.Lock()
	for _, up := range p.ups {
		_ = up.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestLanesNoHeadOfLineBlocking withholds every datagram that carries
// stream A's message on a one-path sctp-udp session, then sends small
// messages on stream B. With lanes, A and B travel on different SCTP
// streams of the association, and B's messages are delivered while A's
// data is still missing. With Lanes=1 (everything on SCTP stream 0, as
// over TCP) B's messages cannot be delivered before A's lost data: they
// wait in the association until the datagrams are released.
func TestLanesNoHeadOfLineBlocking(t *testing.T) {
	for _, lanes := range []int{8, 1} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			holBody(t, lanes)
		})
	}
}

func holBody(t *testing.T, lanes int) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg := testConfig(t)
	cfg.Transport = "sctp-udp"
	cfg.Lanes = lanes
	cfg.Stripe = StripeOff
	// A's withheld data stops everything on a path without lanes,
	// heartbeats included: keep the path up meanwhile.
	cfg.PathTimeout = 20 * time.Second
	// The proxy recognises A's data by its bytes.
	cfg.InsecurePlaintext = true
	ln, err := Listen(ctx, []string{"127.0.0.1:0"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	proxy := newHoldProxy(t, ln.Addrs()[0].String())
	c, err := Dial(ctx, []Path{{Remote: proxy.addr()}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); c.wait() })
	s, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}

	a, _ := c.OpenStream(ctx)
	b, _ := c.OpenStream(ctx)
	if lanes > 1 && laneOf(a.ID(), lanes) == laneOf(b.ID(), lanes) {
		t.Fatalf("streams %d and %d share lane %d", a.ID(), b.ID(), laneOf(a.ID(), lanes))
	}
	// Both streams reach the peer.
	for i := range 2 {
		if err := a.WriteMessage(ctx, randBytes(uint64(i), 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.WriteMessage(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	ra, err := s.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := s.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if m, err := ra.ReadMessage(ctx); err != nil || !bytes.Equal(m, randBytes(uint64(i), 64<<10)) {
			t.Fatalf("warm-up message %d: %v", i, err)
		}
	}
	if m, err := rb.ReadMessage(ctx); err != nil || string(m) != "hello" {
		t.Fatalf("warm-up on B: %q %v", m, err)
	}
	if st := c.Stats()[0]; lanes > 1 && st.Lanes != 3 {
		t.Fatalf("client uses %d lanes, want 3 (lane 0 and one per stream)", st.Lanes)
	}

	// A's message is one byte value throughout; withhold every datagram
	// carrying a long run of it. The message takes two SCTP packets: the
	// association's congestion window, 4 packets at least after a fast
	// retransmission, keeps room for B's while A's are missing. (A message
	// that fills the window would hold B back in any case: the window is
	// the association's, shared by its streams.)
	const fill = 0xA5
	run := bytes.Repeat([]byte{fill}, 64)
	proxy.hold(func(d []byte) bool { return bytes.Contains(d, run) })
	msgA := bytes.Repeat([]byte{fill}, 2000)
	if err := a.WriteMessage(ctx, msgA); err != nil {
		t.Fatal(err)
	}
	gotA := make(chan error, 1)
	go func() {
		m, err := ra.ReadMessage(ctx)
		if err == nil && !bytes.Equal(m, msgA) {
			err = fmt.Errorf("A's message: %d bytes, content differs", len(m))
		}
		gotA <- err
	}()
	// Wait until A's data went out (and was withheld) before B writes.
	testwait.For(t, "A's data to be withheld", 10*time.Second, func() bool { return proxy.heldSoFar() >= len(msgA) })
	const nB = 5
	for i := range nB {
		if err := b.WriteMessage(ctx, fmt.Appendf(nil, "b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	gotB := make(chan string, nB)
	go func() {
		for range nB {
			m, err := rb.ReadMessage(ctx)
			if err != nil {
				gotB <- "error: " + err.Error()
				return
			}
			gotB <- string(m)
		}
	}()
	if lanes > 1 {
		// Every B message arrives while A's data is still withheld.
		for i := range nB {
			select {
			case m := <-gotB:
				if want := fmt.Sprintf("b%d", i); m != want {
					t.Fatalf("B read %q, want %q", m, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("B's message %d blocked behind A's lost data (lanes=%d)", i, lanes)
			}
		}
		select {
		case err := <-gotA:
			t.Fatalf("A's message complete while its data was withheld: %v", err)
		default:
		}
		proxy.release()
	} else {
		// Nothing of B can arrive while A's data is missing: B's
		// messages sit behind it on SCTP stream 0.
		select {
		case m := <-gotB:
			t.Fatalf("B read %q before A's withheld data was released, without lanes", m)
		case <-time.After(300 * time.Millisecond):
		}
		proxy.release()
		for i := range nB {
			select {
			case m := <-gotB:
				if want := fmt.Sprintf("b%d", i); m != want {
					t.Fatalf("B read %q, want %q", m, want)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("B's message %d never arrived after the release", i)
			}
		}
	}
	select {
	case err := <-gotA:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A's message never arrived after the release")
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMalformedLaneClosesChannel sends frames on lanes where they do not
// belong over a raw sctp-udp channel: the listener must close the channel
// (the association), not panic or hang, and keep serving good peers.
func TestMalformedLaneClosesChannel(t *testing.T) {
	cfg := testConfig(t)
	cfg.Transport = "sctp-udp"
	cfg, err := cfg.populate()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ln, err := Listen(ctx, []string{"127.0.0.1:0"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addrs()[0].String()
	for _, tc := range []struct {
		name  string
		lane  uint16
		frame []byte
	}{
		{"ack on a data lane", 1, wire.AppendU64(nil, wire.TypeAck, 0)},
		{"window on a data lane", 3, wire.Window{Stream: 1, Limit: 1 << 20}.Append(nil)},
		{"ping on a data lane", 2, wire.AppendU64(nil, wire.TypePing, 1)},
		{"lane beyond MaxLanes", MaxLanes, append(wire.AppendMsgHeader(nil, wire.SegmentRef{Stream: 1, Len: 1, Flags: wire.FlagFin}), 'x')},
		{"ack of a lane never sent on", 0, wire.AckLane{Lane: 5, Count: 1}.Append(nil)},
		{"unknown type on a lane", 4, []byte{200, 0, 0, 0, 1, 0}},
		{"frag without start on a lane", 5, append(wire.AppendFragHeader(nil, 3), 1, 2, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := cfg.Channel.Dial(ctx, "", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			conn, _, err := clientHandshake(raw, cfg, newSessionID(), 0, false)
			if err != nil {
				t.Fatal(err)
			}
			w := conn
			if tc.lane != 0 {
				lanes := conn.(channel.Lanes)
				if tc.lane >= MaxLanes {
					// Past the lanes the secured channel opens: write raw.
					lanes = raw.(channel.Lanes)
				}
				if w, err = lanes.OpenLane(tc.lane); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.Write(tc.frame); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			// The server answers nothing but heartbeats, then closes.
			buf := make([]byte, 4096)
			for {
				_, err := conn.Read(buf)
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						t.Fatal("server kept the channel open after a misplaced frame")
					}
					break
				}
			}
		})
	}
	c, err := Dial(ctx, []Path{{Remote: addr}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestLanesBothDirections echoes messages on many streams over two
// sctp-udp paths with 4 lanes each, so that streams share lanes, both
// sides send on the same lane ids, and one side's OpenLane races the
// other's first data on a lane.
func TestLanesBothDirections(t *testing.T) {
	c, s := pair(t, 2, func(c *Config) {
		c.Transport = "sctp-udp"
		c.Lanes = 4
		c.FragmentSize = 4 << 10
		c.SegmentSize = 64 << 10
		c.StreamWindow = 256 << 10
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const streams, msgs = 8, 10
	go func() { // echo server
		for {
			rs, err := s.AcceptStream(ctx)
			if err != nil {
				return
			}
			go func() {
				for {
					m, err := rs.ReadMessage(ctx)
					if err != nil || rs.WriteMessage(ctx, m) != nil {
						rs.Close()
						return
					}
				}
			}()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
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
				want := randBytes(uint64(i*1000+j), (i*7919+j*104729)%(200<<10))
				if err := st.WriteMessage(ctx, want); err != nil {
					errs <- err
					return
				}
				got, err := st.ReadMessage(ctx)
				if err != nil {
					errs <- fmt.Errorf("stream %d msg %d: %w", st.ID(), j, err)
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("stream %d msg %d: echo differs", st.ID(), j)
					return
				}
			}
			st.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for name, sess := range map[string]*Session{"client": c, "server": s} {
		for _, p := range sess.Stats() {
			// Lane 0 and the three data lanes, on both sides: each side
			// sent on every data lane, since 8 streams cover them.
			if p.Lanes != 4 {
				t.Errorf("%s path %d: %d lanes in use, want 4", name, p.ID, p.Lanes)
			}
		}
	}
}
