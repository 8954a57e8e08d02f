package ksctp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
)

// step is one scripted recvmsg result.
type step struct {
	data []byte
	sid  uint16
	eor  bool
	err  error
	eof  bool // n == 0: the peer shut down
}

// fakeSock stands in for the socket under a mux: recv returns the steps
// fed to in, send records messages (or blocks while hold is set, until the
// socket's write deadline passes), Close ends both.
type fakeSock struct {
	net.Conn // nil: only Close is called
	in       chan step
	stop     chan struct{}
	once     sync.Once
	recvs    chan struct{} // one token per recv call that took a step

	mu      sync.Mutex
	sent    []step
	hold    bool
	wd      time.Time
	changed chan struct{}
}

func (f *fakeSock) Close() error {
	f.once.Do(func() { close(f.stop) })
	return nil
}

func (f *fakeSock) recv(b []byte) (piece, error) {
	select {
	case s := <-f.in:
		f.recvs <- struct{}{}
		if s.err != nil {
			return piece{}, s.err
		}
		if s.eof {
			return piece{}, nil
		}
		return piece{n: copy(b, s.data), sid: s.sid, eor: s.eor}, nil
	case <-f.stop:
		return piece{}, net.ErrClosed
	}
}

func (f *fakeSock) send(sid uint16, p []byte) (int, error) {
	for {
		f.mu.Lock()
		if !f.hold {
			f.sent = append(f.sent, step{data: bytes.Clone(p), sid: sid, eor: true})
			f.mu.Unlock()
			return len(p), nil
		}
		wd, ch := f.wd, f.changed
		f.mu.Unlock()
		var tc <-chan time.Time
		if !wd.IsZero() {
			d := time.Until(wd)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			tm := time.NewTimer(d)
			defer tm.Stop()
			tc = tm.C
		}
		select {
		case <-ch:
		case <-tc:
			// Woken by the deadline: the poller reports it.
			return 0, os.ErrDeadlineExceeded
		case <-f.stop:
			return 0, net.ErrClosed
		}
	}
}

func (f *fakeSock) setWriteDeadline(t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wd = t
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

func (f *fakeSock) setHold(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = on
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeSock) messages() []step {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]step(nil), f.sent...)
}

// feed hands s to the demultiplexer and waits until it has taken it.
func (f *fakeSock) feed(t testing.TB, steps ...step) {
	t.Helper()
	for _, s := range steps {
		select {
		case f.in <- s:
		case <-time.After(5 * time.Second):
			t.Fatalf("the demultiplexer did not take %+v", s)
		}
		<-f.recvs
	}
}

// newTestConn returns a Conn whose mux runs over a fakeSock with nin
// inbound and nout outbound streams, the given lane buffer bound, and four
// times that over all lanes.
func newTestConn(t testing.TB, nin, nout, limit int) (*Conn, *fakeSock) {
	t.Helper()
	f := &fakeSock{in: make(chan step), stop: make(chan struct{}), recvs: make(chan struct{}, 1), changed: make(chan struct{})}
	m := newMux(f.recv, f.send, nin, nout)
	m.limit, m.total = limit, 4*limit
	m.setWriteDeadline = f.setWriteDeadline
	failed := make(chan error, 1)
	m.onFail = func(err error) { failed <- err; _ = f.Close() }
	c := &Conn{Conn: f, laddr: &Addr{}, raddr: &Addr{}, mux: m, lane: m.lane0()}
	done := make(chan struct{})
	go func() { m.run(); close(done) }()
	t.Cleanup(func() {
		_ = c.Close()
		<-done
	})
	return c, f
}

func readN(t testing.TB, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func TestMuxLanesInterleaved(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, laneBuffer)
	l1, err := c.OpenLane(1)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.OpenLane(2)
	if err != nil {
		t.Fatal(err)
	}
	f.feed(t,
		step{data: []byte("a1"), sid: 1, eor: true},
		step{data: []byte("b1"), sid: 2, eor: true},
		step{data: []byte("zero"), sid: 0, eor: true},
		step{data: []byte("a2"), sid: 1, eor: true},
		step{data: []byte("b2"), sid: 2, eor: true},
		step{data: []byte("a3"), sid: 1, eor: true},
	)
	if got := string(readN(t, l1, 6)); got != "a1a2a3" {
		t.Errorf("lane 1 read %q", got)
	}
	if got := string(readN(t, l2, 4)); got != "b1b2" {
		t.Errorf("lane 2 read %q", got)
	}
	if got := string(readN(t, c, 4)); got != "zero" {
		t.Errorf("lane 0 read %q", got)
	}
	if again, _ := c.OpenLane(1); again != l1 {
		t.Error("OpenLane(1) twice returned two conns")
	}
}

func TestMuxPartialDelivery(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, laneBuffer)
	l3, _ := c.OpenLane(3)
	f.feed(t,
		step{data: []byte("he"), sid: 3},
		step{data: []byte("ll"), sid: 3},
		step{data: []byte("o"), sid: 3, eor: true},
		step{data: []byte("!"), sid: 0, eor: true},
	)
	if got := string(readN(t, l3, 5)); got != "hello" {
		t.Errorf("lane 3 read %q", got)
	}
	if got := string(readN(t, c, 1)); got != "!" {
		t.Errorf("lane 0 read %q", got)
	}
	// A piece of another stream inside a message is a protocol error.
	f.feed(t, step{data: []byte("x"), sid: 3}, step{data: []byte("y"), sid: 4, eor: true})
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "stream 4 began before the one on stream 3 ended") {
		t.Fatalf("Read after interleaved pieces: %v", err)
	}
}

func TestMuxUnknownStream(t *testing.T) {
	c, f := newTestConn(t, 10, 10, laneBuffer)
	f.feed(t, step{data: []byte("x"), sid: 10, eor: true})
	want := "message on SCTP stream 10, but the association has streams 0 to 9"
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Read: %v, want %q", err, want)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Errorf("Read error %T is not a read net.OpError", err)
	}
	if _, _, err := c.AcceptLane(t.Context()); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("AcceptLane: %v", err)
	}
	select {
	case <-f.stop: // the association was closed
	case <-time.After(5 * time.Second):
		t.Error("the socket was not closed after the protocol error")
	}
	if _, err := c.OpenLane(10); err == nil || !strings.Contains(err.Error(), "lane 10") {
		t.Errorf("OpenLane(10) with 10 outbound streams: %v", err)
	}
	if _, err := c.OpenLane(0); err == nil {
		t.Error("OpenLane(0) succeeded")
	}
}

func TestMuxReceiveError(t *testing.T) {
	c, f := newTestConn(t, 10, 10, laneBuffer)
	bad := errors.New("ksctp: SCTP_RCVINFO control message of 4 bytes, want 28")
	f.feed(t, step{err: bad})
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, bad) {
		t.Fatalf("Read: %v, want %v", err, bad)
	}
}

func TestMuxBackpressure(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, 10)
	l1, _ := c.OpenLane(1)
	piece8 := bytes.Repeat([]byte{1}, 8)
	f.feed(t, step{data: piece8, sid: 1, eor: true}, step{data: piece8, sid: 1, eor: true})
	// 16 bytes buffered, at the bound of 10: the demultiplexer stops
	// reading the socket, even for another lane.
	select {
	case f.in <- step{data: []byte("z"), sid: 0, eor: true}:
		t.Fatal("the demultiplexer read on with lane 1 full")
	case <-time.After(50 * time.Millisecond):
	}
	readN(t, l1, 16)
	f.feed(t, step{data: []byte("z"), sid: 0, eor: true})
	if got := string(readN(t, c, 1)); got != "z" {
		t.Errorf("lane 0 read %q", got)
	}
	// A lane closed here drops what arrives for it instead of blocking.
	_ = l1.Close()
	f.feed(t, step{data: piece8, sid: 1, eor: true}, step{data: piece8, sid: 1, eor: true}, step{data: piece8, sid: 1, eor: true})
	if _, err := l1.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read of a closed lane: %v", err)
	}
}

// blocked reports whether the demultiplexer does not take s within 50ms.
// If it does take it, it has been fed.
func (f *fakeSock) blocked(s step) bool {
	select {
	case f.in <- s:
		<-f.recvs
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}

// TestMuxFullLaneDoesNotBlockOthers: lane 1 is full and nobody reads it;
// data for lane 2 (new: AcceptLane waits) and for lane 0 (its Read waits)
// is behind more of lane 1's in the socket. The demultiplexer reads on
// while someone waits, up to the bound over all lanes.
func TestMuxFullLaneDoesNotBlockOthers(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, 10) // 10 per lane, 40 in all
	l1, _ := c.OpenLane(1)
	piece8 := bytes.Repeat([]byte{1}, 8)
	f.feed(t, step{data: piece8, sid: 1, eor: true}, step{data: piece8, sid: 1, eor: true})
	if !f.blocked(step{data: piece8, sid: 1, eor: true}) {
		t.Fatal("the demultiplexer read on with lane 1 full and nobody waiting")
	}
	type accepted struct {
		id  uint16
		c   net.Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		id, l, err := c.AcceptLane(ctx)
		acc <- accepted{id, l, err}
	}()
	// Lane 1's data the test tried to feed above, then lane 2's.
	f.feed(t, step{data: piece8, sid: 1, eor: true}, step{data: []byte("two"), sid: 2, eor: true})
	a := <-acc
	if a.err != nil || a.id != 2 {
		t.Fatalf("AcceptLane = %d, %v; want lane 2", a.id, a.err)
	}
	if got := string(readN(t, a.c, 3)); got != "two" {
		t.Errorf("lane 2 read %q", got)
	}
	// Nobody waits again: lane 1 (24 bytes) holds the socket. The
	// demultiplexer may be in recvmsg already, having looked while
	// AcceptLane still waited: then it takes one more message.
	n1 := 24
	if !f.blocked(step{data: piece8, sid: 1, eor: true}) {
		n1 += 8
	}
	if !f.blocked(step{data: []byte("zero"), sid: 0, eor: true}) {
		t.Fatal("the demultiplexer read on with lane 1 full and nobody waiting")
	}
	// A Read waiting on lane 0 lets it read on, up to 40 bytes in all.
	got0 := make(chan string, 1)
	go func() {
		b := make([]byte, 4)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := io.ReadFull(c, b)
		got0 <- string(b[:n])
	}()
	for n1 < 40 {
		f.feed(t, step{data: piece8, sid: 1, eor: true})
		n1 += 8
	}
	if !f.blocked(step{data: []byte("zero"), sid: 0, eor: true}) {
		t.Fatal("the demultiplexer read past the bound over all lanes")
	}
	readN(t, l1, n1)
	f.feed(t, step{data: []byte("zero"), sid: 0, eor: true})
	if s := <-got0; s != "zero" {
		t.Errorf("lane 0 read %q", s)
	}
}

func TestMuxAcceptOnce(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, laneBuffer)
	l7, _ := c.OpenLane(7) // opened here before the peer sends on it
	f.feed(t,
		step{data: []byte("5a"), sid: 5, eor: true},
		step{data: []byte("7a"), sid: 7, eor: true},
		step{data: []byte("5b"), sid: 5, eor: true},
		step{data: []byte("9a"), sid: 9, eor: true},
	)
	id, l5, err := c.AcceptLane(t.Context())
	if err != nil || id != 5 {
		t.Fatalf("AcceptLane = %d, %v; want 5", id, err)
	}
	if got := string(readN(t, l5, 4)); got != "5a5b" {
		t.Errorf("lane 5 read %q", got)
	}
	if got := string(readN(t, l7, 2)); got != "7a" {
		t.Errorf("lane 7 read %q", got)
	}
	// 9 is handed out by OpenLane first: AcceptLane skips it.
	l9, _ := c.OpenLane(9)
	if got := string(readN(t, l9, 2)); got != "9a" {
		t.Errorf("lane 9 read %q", got)
	}
	if again, _ := c.OpenLane(5); again != l5 {
		t.Error("OpenLane(5) after AcceptLane returned another conn")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if id, _, err := c.AcceptLane(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second AcceptLane = %d, %v; want nothing more", id, err)
	}
	if id := l5.(*Lane).ID(); id != 5 {
		t.Errorf("ID = %d", id)
	}
}

func TestMuxEOF(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, laneBuffer)
	f.feed(t, step{data: []byte("last"), sid: 2, eor: true}, step{eof: true})
	id, l2, err := c.AcceptLane(t.Context())
	if err != nil || id != 2 {
		t.Fatalf("AcceptLane = %d, %v", id, err)
	}
	if got, err := io.ReadAll(l2); err != nil || string(got) != "last" {
		t.Errorf("lane 2: %q, %v; want last, EOF", got, err)
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("lane 0 Read: %v, want EOF", err)
	}
	if _, _, err := c.AcceptLane(t.Context()); err != io.EOF {
		t.Errorf("AcceptLane: %v, want EOF", err)
	}
}

func TestMuxDeadline(t *testing.T) {
	c, _ := newTestConn(t, numStreams, numStreams, laneBuffer)
	l1, _ := c.OpenLane(1)
	_ = l1.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := l1.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "lane 1") {
		t.Fatalf("Read past deadline: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("lane 0 Read past deadline: %v", err)
	}
}

func TestMuxWrite(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, laneBuffer)
	l2, _ := c.OpenLane(2)
	msg := make([]byte, 150<<10)
	for i := range msg {
		msg[i] = byte(i / 1000)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if n, err := l2.Write(msg); err != nil || n != len(msg) {
			t.Errorf("Write = %d, %v", n, err)
		}
	}()
	go func() {
		defer wg.Done()
		if _, err := c.OpenLane(3); err != nil {
			t.Error(err)
		}
		l3, _ := c.OpenLane(3)
		if _, err := l3.Write([]byte("three")); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	var got []byte
	var sizes []int
	for _, m := range f.messages() {
		switch m.sid {
		case 2:
			got = append(got, m.data...)
			sizes = append(sizes, len(m.data))
		case 3:
			if string(m.data) != "three" {
				t.Errorf("lane 3 sent %q", m.data)
			}
		default:
			t.Errorf("message on stream %d", m.sid)
		}
	}
	if !bytes.Equal(got, msg) {
		t.Error("lane 2's messages do not add up to what was written, in order")
	}
	if len(sizes) != 3 || sizes[0] != maxMessage || sizes[1] != maxMessage {
		t.Errorf("message sizes %v, want 64 KiB, 64 KiB, rest", sizes)
	}
}

func TestMuxWriteDeadlines(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, laneBuffer)
	l1, _ := c.OpenLane(1)
	l2, _ := c.OpenLane(2)
	f.setHold(true) // the socket is full
	_ = l1.SetWriteDeadline(time.Now().Add(30 * time.Millisecond))
	done2 := make(chan error, 1)
	go func() {
		_, err := l2.Write([]byte("patient"))
		done2 <- err
	}()
	_, err := l1.Write([]byte("hurried"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "lane 1") {
		t.Fatalf("lane 1 Write past its deadline: %v", err)
	}
	// Lane 2 has no deadline: it still waits.
	select {
	case err := <-done2:
		t.Fatalf("lane 2 Write returned with lane 1's deadline: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.setHold(false)
	select {
	case err := <-done2:
		if err != nil {
			t.Fatalf("lane 2 Write: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("lane 2 Write did not finish")
	}
	if ms := f.messages(); len(ms) != 1 || string(ms[0].data) != "patient" || ms[0].sid != 2 {
		t.Errorf("sent %+v", ms)
	}
	if _, err := l1.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Write after the deadline: %v", err)
	}
}

func TestMuxCloseWakesAll(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, laneBuffer)
	l1, _ := c.OpenLane(1)
	f.setHold(true)
	errs := make(chan error, 4)
	go func() { errs <- testwait.ParkedRead(c, make([]byte, 1)) }()
	go func() { errs <- testwait.ParkedRead(l1, make([]byte, 1)) }()
	go func() { errs <- testwait.ParkedWrite(l1, []byte("x")) }()
	go func() { _, _, err := c.AcceptLane(context.Background()); errs <- err }()
	// Close once all four are seen waiting, so that it wakes them rather
	// than meets them after.
	testwait.For(t, "two Reads, a Write and an AcceptLane to wait", 10*time.Second, func() bool {
		return testwait.Parked("testwait.ParkedRead") == 2 && testwait.Blocked("testwait.ParkedWrite") &&
			testwait.Blocked("ksctp.(*Conn).AcceptLane")
	})
	_ = c.Close()
	for range 4 {
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake everyone")
		}
	}
	if _, err := c.OpenLane(2); !errors.Is(err, net.ErrClosed) {
		t.Errorf("OpenLane after Close: %v", err)
	}
	if _, err := l1.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("lane Write after Close: %v", err)
	}
}

func TestMuxReadAfterClose(t *testing.T) {
	c, f := newTestConn(t, numStreams, numStreams, laneBuffer)
	l1, _ := c.OpenLane(1)
	f.feed(t, step{data: []byte("unread"), sid: 1, eor: true}, step{data: []byte("unread"), sid: 0, eor: true})
	_ = c.Close()
	for _, conn := range []net.Conn{c, l1} {
		if _, err := conn.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after Close with data buffered: %v, want net.ErrClosed", err)
		}
	}
}

func TestNoLanes(t *testing.T) {
	c := &Conn{}
	if _, err := c.OpenLane(1); !errors.Is(err, errNoLanes) {
		t.Errorf("OpenLane: %v", err)
	}
	if _, _, err := c.AcceptLane(t.Context()); !errors.Is(err, errNoLanes) {
		t.Errorf("AcceptLane: %v", err)
	}
}
