package relay_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/testbed/relay"
)

// TestMain fails the run if a relay goroutine outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leak := relayGoroutines(5 * time.Second); leak != "" {
			fmt.Fprintf(os.Stderr, "leaked relay goroutines:\n%s\n", leak)
			code = 1
		}
	}
	os.Exit(code)
}

// relayGoroutines waits up to d for the relay's goroutines to end and
// returns the stacks of those left.
func relayGoroutines(d time.Duration) string {
	var left []string
	testwait.Until(d, func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		left = nil
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "braid/testbed/relay.") {
				left = append(left, g)
			}
		}
		return len(left) == 0
	})
	return strings.Join(left, "\n\n")
}

// echoTCP starts a TCP echo server on loopback; accepted counts its
// connections.
func echoTCP(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), accepted
}

func newTCP(t *testing.T, target string) *relay.TCP {
	t.Helper()
	r, err := relay.ListenTCP(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func dialTCP(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func roundTrip(t *testing.T, c net.Conn, msg string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo of %q: %v", msg, err)
	}
	if string(got) != msg {
		t.Fatalf("echo %q, want %q", got, msg)
	}
	return time.Since(start)
}

func TestTCPDelayKeepsOrderAndThroughput(t *testing.T) {
	t.Parallel()
	target, _ := echoTCP(t)
	r := newTCP(t, target)
	r.SetDelay(50 * time.Millisecond)
	c := dialTCP(t, r.Addr())

	if rtt := roundTrip(t, c, "ping", 5*time.Second); rtt < 100*time.Millisecond || rtt > 600*time.Millisecond {
		t.Errorf("round trip %v through 2x50ms of delay", rtt)
	}

	// 16 MiB both ways under 50 ms each way: a sleep per read would take
	// minutes; queued chunks take about a bandwidth-delay product's worth.
	const size = 16 << 20
	data := make([]byte, size)
	for i := range size / 8 {
		binary.LittleEndian.PutUint64(data[i*8:], uint64(i))
	}
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		c.CloseWrite()
		errc <- err
	}()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echo of %d bytes differs (got %d bytes)", size, len(got))
	}
	el := time.Since(start)
	t.Logf("16 MiB echoed through 2x50ms in %v (%.0f Mbit/s)", el, float64(size*8)/el.Seconds()/1e6)
	if el > 10*time.Second {
		t.Errorf("16 MiB took %v", el)
	}
}

func TestTCPRate(t *testing.T) {
	t.Parallel()
	target, _ := echoTCP(t)
	r := newTCP(t, target)
	r.SetRate(4e6) // 0.5 MB/s each way
	c := dialTCP(t, r.Addr())
	msg := strings.Repeat("x", 256<<10)
	el := roundTrip(t, c, msg, 10*time.Second)
	// 256 KiB at 4 Mbit/s takes 0.52 s; both directions pipeline.
	if el < 400*time.Millisecond || el > 5*time.Second {
		t.Errorf("256 KiB at 4 Mbit/s took %v", el)
	}
	// SetRate(0) lifts the limit: 4 MiB, which at 4 Mbit/s would take
	// 8.4 s, echo in less than half that (loopback: tens of ms), so only
	// a relay still limited, not a loaded machine, fails this.
	r.SetRate(0)
	big := bytes.Repeat([]byte("y"), 4<<20)
	floor := time.Duration(float64(len(big)*8) / 4e6 * float64(time.Second))
	start := time.Now()
	werr := make(chan error, 1)
	go func() { _, err := c.Write(big); werr <- err }() // the echo comes back meanwhile
	c.SetReadDeadline(start.Add(floor))
	got := make([]byte, len(big))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("unlimited: echo of 4 MiB: %v (intact %v)", err, bytes.Equal(got, big))
	}
	if el := time.Since(start); el > floor/2 {
		t.Errorf("unlimited: 4 MiB took %v, at least half of the %v it takes at 4 Mbit/s", el, floor)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}

func TestTCPBlackhole(t *testing.T) {
	t.Parallel()
	target, accepted := echoTCP(t)
	r := newTCP(t, target)
	c := dialTCP(t, r.Addr())
	roundTrip(t, c, "before", 5*time.Second)

	r.Blackhole(true)
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var buf [16]byte
	if n, err := c.Read(buf[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read in a blackhole: %q, %v; want a timeout", buf[:n], err)
	}
	// A connection made meanwhile does not reach the target yet.
	c2 := dialTCP(t, r.Addr())
	c2.Write([]byte("early"))
	time.Sleep(100 * time.Millisecond)
	if n := accepted.Load(); n != 1 {
		t.Errorf("target accepted %d connections during the blackhole, want 1", n)
	}

	r.Blackhole(false)
	roundTrip(t, c, "after", 5*time.Second) // "lost" is gone for good
	roundTrip(t, c2, "second", 5*time.Second)
	if n := accepted.Load(); n != 2 {
		t.Errorf("target accepted %d connections, want 2", n)
	}
}

func TestTCPCut(t *testing.T) {
	t.Parallel()
	target, _ := echoTCP(t)
	r := newTCP(t, target)
	c := dialTCP(t, r.Addr())
	roundTrip(t, c, "hello", 5*time.Second)
	if n := r.Conns(); n != 1 {
		t.Errorf("Conns = %d, want 1", n)
	}
	r.Cut()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf [8]byte
	if _, err := c.Read(buf[:]); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after Cut: %v, want a connection reset", err)
	}
	// The relay keeps accepting.
	roundTrip(t, dialTCP(t, r.Addr()), "again", 5*time.Second)
}

func TestTCPHalfCloseAndClose(t *testing.T) {
	t.Parallel()
	target, _ := echoTCP(t)
	r := newTCP(t, target)
	c := dialTCP(t, r.Addr())
	c.Write([]byte("last words"))
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last words" {
		t.Fatalf("after half-close: %q, %v", got, err)
	}
	testwait.Until(5*time.Second, func() bool { return r.Conns() == 0 })
	if n := r.Conns(); n != 0 {
		t.Errorf("Conns = %d after both sides closed", n)
	}

	c2 := dialTCP(t, r.Addr())
	roundTrip(t, c2, "x", 5*time.Second)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Error("connection survived Close")
	}
	if _, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		t.Error("relay accepts after Close")
	}
}

func TestTCPTargetDown(t *testing.T) {
	t.Parallel()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	r := newTCP(t, addr)
	// The relay resets the client, during or right after its connect.
	c, err := net.DialTimeout("tcp", r.Addr(), 5*time.Second)
	if err == nil {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Errorf("with the target down: %v, want a reset", err)
	}
}

// echoUDP starts a UDP echo server on loopback; got records the first
// 8 bytes (a sequence number) of every datagram it receives.
func echoUDP(t *testing.T) (addr string, got chan uint64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got = make(chan uint64, 1<<16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n >= 8 {
				select {
				case got <- binary.LittleEndian.Uint64(buf):
				default:
				}
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String(), got
}

func newUDP(t *testing.T, target string, seed uint64) *relay.UDP {
	t.Helper()
	r, err := relay.ListenUDP(target, &relay.Config{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func dialUDP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func seq(i uint64) []byte { return binary.LittleEndian.AppendUint64(make([]byte, 0, 64), i) }

// udpEcho sends datagram i and waits up to d for its echo.
func udpEcho(c net.Conn, i uint64, d time.Duration) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Write(seq(i)); err != nil {
		return 0, err
	}
	buf := make([]byte, 64)
	c.SetReadDeadline(start.Add(d))
	for {
		n, err := c.Read(buf)
		if err != nil {
			return 0, err
		}
		if n == 8 && binary.LittleEndian.Uint64(buf) == i {
			return time.Since(start), nil
		}
	}
}

func TestUDPForwardAndDelay(t *testing.T) {
	t.Parallel()
	target, _ := echoUDP(t)
	r := newUDP(t, target, 0)
	c := dialUDP(t, r.Addr())
	if _, err := udpEcho(c, 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r.SetDelay(40 * time.Millisecond)
	rtt, err := udpEcho(c, 2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 80*time.Millisecond || rtt > 500*time.Millisecond {
		t.Errorf("round trip %v through 2x40ms", rtt)
	}

	// A burst keeps its order through the delay line.
	const n = 200
	for i := range uint64(n) {
		c.Write(seq(1000 + i))
	}
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var want uint64 = 1000
	for want < 1000+n {
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after echo %d: %v", want, err)
		}
		if got := binary.LittleEndian.Uint64(buf[:k]); got != want {
			t.Fatalf("echo %d, want %d", got, want)
		}
		want++
	}
	if s := r.Stats(relay.Both); s.Forwarded != 2*(n+2) || s.Dropped != 0 {
		t.Errorf("Stats = %+v, want %d forwarded", s, 2*(n+2))
	}
}

func TestUDPLossIsSeeded(t *testing.T) {
	t.Parallel()
	const n, p = 1000, 0.3
	run := func() []uint64 {
		target, got := echoUDP(t)
		r := newUDP(t, target, 42)
		r.SetLoss(relay.ToTarget, p)
		c := dialUDP(t, r.Addr())
		// Send in small batches so no datagram is lost to a socket buffer
		// before the relay sees it: the drop pattern then depends on the
		// seed alone.
		for i := uint64(0); i < n; i++ {
			c.Write(seq(i))
			if i%50 == 49 {
				deadline := time.Now().Add(5 * time.Second)
				for s := r.Stats(relay.ToTarget); s.Forwarded+s.Dropped < int64(i+1); s = r.Stats(relay.ToTarget) {
					if time.Now().After(deadline) {
						t.Fatalf("relay saw %d of %d datagrams", s.Forwarded+s.Dropped, i+1)
					}
					time.Sleep(time.Millisecond)
				}
			}
		}
		s := r.Stats(relay.ToTarget)
		var recv []uint64
		deadline := time.After(5 * time.Second)
		for int64(len(recv)) < s.Forwarded {
			select {
			case i := <-got:
				recv = append(recv, i)
			case <-deadline:
				t.Fatalf("target got %d of %d forwarded", len(recv), s.Forwarded)
			}
		}
		if s.Forwarded+s.Dropped != n {
			t.Fatalf("Stats %+v do not add up to %d", s, n)
		}
		return recv
	}
	a, b := run(), run()
	loss := 1 - float64(len(a))/n
	t.Logf("loss %.3f at p=%.2f", loss, p)
	if loss < p-0.06 || loss > p+0.06 {
		t.Errorf("loss %.3f, want about %.2f", loss, p)
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("two relays with the same seed dropped different datagrams")
	}
}

func TestUDPLossPerDirectionAndBlackhole(t *testing.T) {
	t.Parallel()
	target, _ := echoUDP(t)
	r := newUDP(t, target, 7)
	c := dialUDP(t, r.Addr())
	r.SetLoss(relay.ToClient, 1)
	if _, err := udpEcho(c, 1, 200*time.Millisecond); err == nil {
		t.Fatal("echo came back with all replies dropped")
	}
	if s := r.Stats(relay.ToTarget); s.Forwarded != 1 {
		t.Errorf("to target: %+v, want the request forwarded", s)
	}
	r.SetLoss(relay.Both, 0)
	if _, err := udpEcho(c, 2, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	// 3 waits in the delay line while the blackhole starts, and leaves it
	// into the blackhole. The delay is long so that a loaded machine
	// cannot let 3 out before the blackhole begins.
	r.SetDelay(2 * time.Second)
	c.Write(seq(3))
	time.Sleep(20 * time.Millisecond)
	r.Blackhole(true)
	if _, err := udpEcho(c, 4, 300*time.Millisecond); err == nil {
		t.Fatal("echo through a blackhole")
	}
	testwait.Until(10*time.Second, func() bool { return r.Stats(relay.ToTarget).Dropped >= 2 })
	r.Blackhole(false)
	r.SetDelay(0)
	if _, err := udpEcho(c, 5, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(relay.ToTarget); s.Dropped != 2 {
		t.Errorf("to target: %+v, want 2 dropped (3 from the line, 4 on arrival)", s)
	}
}
