package transport

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/transport/channel/ksctp"
)

// sctpRelay forwards kernel SCTP associations to a target, stream by
// stream (lane by lane), and can flip one bit of the next chunk it reads
// from the dialer: what an on-path attacker who also fixes SCTP's CRC32c
// can do. testbed/relay has no SCTP relay, as SCTP is neither TCP nor UDP.
type sctpRelay struct {
	t        *testing.T
	ln       net.Listener
	target   string
	armed    atomic.Bool
	tampered atomic.Int64
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newSCTPRelay(t *testing.T, listen, target string) *sctpRelay {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := ksctp.Kind{}.Listen(ctx, listen)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &sctpRelay{t: t, ln: ln, target: target, ctx: ctx, cancel: cancel}
	r.wg.Go(r.accept)
	t.Cleanup(r.close)
	return r
}

func (r *sctpRelay) addr() string { return r.ln.Addr().String() }

func (r *sctpRelay) close() {
	r.cancel()
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *sctpRelay) track(c net.Conn) {
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
}

func (r *sctpRelay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		d, err := ksctp.Kind{}.Dial(r.ctx, "", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.track(c)
		r.track(d)
		r.wg.Go(func() { r.serve(c.(*ksctp.Conn), d.(*ksctp.Conn)) })
	}
}

// serve pipes lane 0 and every lane either side opens, until one side
// ends; then it closes both associations.
func (r *sctpRelay) serve(c, d *ksctp.Conn) {
	ctx, cancel := context.WithCancel(r.ctx)
	defer func() {
		cancel()
		c.Close()
		d.Close()
	}()
	var mu sync.Mutex
	started := map[uint16]bool{0: true}
	var wg sync.WaitGroup
	pipe := func(src, dst net.Conn, toTarget bool) {
		defer cancel()
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if toTarget && r.armed.CompareAndSwap(true, false) {
					buf[n/2] ^= 0x10
					r.tampered.Add(1)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	lanes := func(from, to *ksctp.Conn, fromDialer bool) {
		for {
			id, l, err := from.AcceptLane(ctx)
			if err != nil {
				cancel()
				return
			}
			mu.Lock()
			if started[id] {
				mu.Unlock()
				continue
			}
			started[id] = true
			mu.Unlock()
			m, err := to.OpenLane(id)
			if err != nil {
				cancel()
				return
			}
			if !fromDialer {
				l, m = m, l // l is the dialer's side
			}
			wg.Go(func() { pipe(l, m, true) })
			wg.Go(func() { pipe(m, l, false) })
		}
	}
	wg.Go(func() { pipe(c, d, true) })
	wg.Go(func() { pipe(d, c, false) })
	wg.Go(func() { lanes(c, d, true) })
	wg.Go(func() { lanes(d, c, false) })
	<-ctx.Done()
	c.Close()
	d.Close()
	wg.Wait()
}

// TestKernelSCTPTamper: a relay in front of one of two kernel-SCTP paths
// flips one bit on the way to the listener from the middle of a transfer
// on (in the first chunk that passes it then).
// The listener's check fails for that channel, the path reconnects, and
// every byte still arrives intact and in order (the rest of the relay
// tests, for TCP, MPTCP and SCTP over UDP, are TestTamper's).
func TestKernelSCTPTamper(t *testing.T) {
	requireKernelSCTP(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	scfg, ccfg := testConfig(t), testConfig(t)
	for _, c := range []*Config{scfg, ccfg} {
		sctpConfig(StripeEnhanced)(c)
		c.ReconnectInterval = 50 * time.Millisecond
	}
	ln, err := Listen(ctx, []string{"127.0.0.1:0", "127.0.0.2:0"}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addrs := ln.Addrs()
	r := newSCTPRelay(t, "127.0.0.3:0", addrs[0].String())
	c, s := dialAccept(t, ctx, ln, []Path{{Remote: r.addr()}, {Remote: addrs[1].String()}}, ccfg)
	transfer(t, c, s, 8<<20, 128<<10, 2<<20, func() { r.armed.Store(true) })
	// The relayed path is the slow one: the transfer may end without it
	// carrying more, and then the next probe of the idle path is what
	// the relay alters.
	testwait.Until(20*time.Second, func() bool { return r.tampered.Load() > 0 })
	if n := r.tampered.Load(); n != 1 {
		t.Fatalf("the relay altered %d chunks, want 1", n)
	}
	// The altered chunk may be a probe or an acknowledgement sent as the
	// transfer ended, not needed to finish it: wait for the listener to
	// read it.
	integrity := func() int64 {
		var n int64
		for _, p := range s.Stats() {
			n += p.Integrity
		}
		return n
	}
	testwait.Until(20*time.Second, func() bool { return integrity() > 0 })
	if n := integrity(); n != 1 {
		t.Fatalf("the listener counts %d integrity failures, want 1 (%+v)", n, s.Stats())
	}
	testwait.For(t, "the tampered path back up", 20*time.Second, func() bool {
		for _, p := range s.Stats() {
			if p.State != "up" {
				return false
			}
		}
		return len(s.Stats()) == 2
	})
}
