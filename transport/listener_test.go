package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/syncbuf"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/transport/channel"
)

// failingKind is TCP whose listeners fail their first accepts with
// EMFILE, as a process out of file descriptors does.
type failingKind struct {
	channel.TCP
	fails int
}

func (k failingKind) Listen(ctx context.Context, addr string) (net.Listener, error) {
	ln, err := k.TCP.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &failingListener{Listener: ln, fails: k.fails}, nil
}

type failingListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer

// TestListenerSurvivesEMFILE: a listener whose accepts fail with EMFILE
// keeps accepting once they pass, logging one Warn for the episode.
func TestListenerSurvivesEMFILE(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var logs syncBuffer
	scfg := testConfig(t)
	scfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	scfg.Channel = failingKind{fails: 8}
	ln, err := Listen(ctx, []string{"127.0.0.1:0"}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for i := range 3 {
		if i == 2 {
			// The episode ends at the first accept a second after the
			// last failure.
			time.Sleep(1100 * time.Millisecond)
		}
		c, err := Dial(ctx, []Path{{Remote: ln.Addrs()[0].String()}}, testConfig(t))
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		s, err := ln.Accept(ctx)
		if err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
		roundTrip(t, ctx, c, s)
		c.Close()
		c.wait()
	}
	out := logs.String()
	if n := strings.Count(out, "accept failed; retrying"); n != 1 || !strings.Contains(out, "accept works again") {
		t.Errorf("%d Warn lines for one episode of EMFILE, want 1, and its end:\n%s", n, out)
	}
	if !strings.Contains(out, "too many open files") || !strings.Contains(out, "failures=8") {
		t.Errorf("the log does not name EMFILE and count 8 failures:\n%s", out)
	}
}

// roundTrip sends a message from c to s on a new stream.
func roundTrip(t *testing.T, ctx context.Context, c, s *Session) {
	t.Helper()
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteMessage(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	rs, err := s.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rs.ReadMessage(ctx)
	if err != nil || string(m) != "hello" {
		t.Fatalf("read %q, %v; want hello", m, err)
	}
}

// closedWithin reports whether the peer closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 64))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestListenerBoundsHandshakes: channels that do not handshake hold at
// most MaxHandshakes slots for at most HandshakeTimeout from the accept,
// however they trickle bytes; channels beyond the cap are closed at once;
// once the slots free, sessions are accepted again.
func TestListenerBoundsHandshakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const timeout = 600 * time.Millisecond
	scfg := testConfig(t)
	scfg.MaxHandshakes = 3
	scfg.HandshakeTimeout = timeout
	ln, err := Listen(ctx, []string{"127.0.0.1:0"}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addrs()[0].String()

	start := time.Now()
	var idle []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	// One of them trickles a byte of its Hello every 50ms.
	trickle := make(chan struct{})
	go func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-trickle:
				return
			case <-tk.C:
				if _, err := idle[0].Write([]byte{0}); err != nil {
					return
				}
			}
		}
	}()
	defer close(trickle)
	testwait.For(t, "3 channels handshaking", timeout/2, func() bool { return pendingOf(ln) == 3 })
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if !closedWithin(over, timeout/3) {
		t.Error("a channel beyond MaxHandshakes was not closed at once")
	}
	for i, c := range idle {
		if !closedWithin(c, 2*timeout) {
			t.Fatalf("idle channel %d still open %v after its accept", i, time.Since(start))
		}
	}
	if d := time.Since(start); d < timeout*3/4 {
		t.Errorf("idle channels closed after %v, before HandshakeTimeout %v", d, timeout)
	}
	c, err := Dial(ctx, []Path{{Remote: addr}}, testConfig(t))
	if err != nil {
		t.Fatalf("dial after the idle channels timed out: %v", err)
	}
	defer func() { c.Close(); c.wait() }()
	s, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, ctx, c, s)
}

// TestListenerCloseEndsHandshakes: Close does not wait for channels that
// never handshake.
func TestListenerCloseEndsHandshakes(t *testing.T) {
	scfg := testConfig(t)
	scfg.HandshakeTimeout = time.Minute
	ln, err := Listen(t.Context(), []string{"127.0.0.1:0"}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testwait.For(t, "the channel to start its handshake", 5*time.Second, func() bool { return pendingOf(ln) == 1 })
	start := time.Now()
	ln.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a channel handshaking", d)
	}
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after Close: %v", err)
	}
}

// pendingOf returns how many channels ln holds in their handshake.
func pendingOf(ln *Listener) int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.pending)
}
