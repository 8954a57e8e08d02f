package ksctp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
)

var _ channel.Lanes = (*Conn)(nil)

// numStreams is how many SCTP streams each way an association asks for
// (SCTP_INITMSG): stream 0, the channel, and one per lane braid may use
// (transport.MaxLanes is 64, lanes 0..63), plus one spare.
const numStreams = 64 + 1

// laneBuffer bounds the bytes received on one lane and not yet read,
// while nobody waits on another lane. When a lane's reader falls that far
// behind, the demultiplexer stops reading the socket until it catches up;
// the kernel's receive window then holds the peer back.
//
// SCTP has one receive window per association, not one per stream, and
// recvmsg returns messages in arrival order whatever their stream: the
// data another lane's reader waits for may sit in the socket behind the
// full lane's. So while a reader waits on another lane (or AcceptLane
// waits for a new one), the demultiplexer reads on, letting the full lane
// hold more, up to maxBuffered over all lanes: one full lane never blocks
// the others unless that much is waiting to be read.
const laneBuffer = 1 << 20

// maxBuffered bounds the bytes received and not yet read over all lanes of
// an association, even while readers wait (see laneBuffer).
const maxBuffered = 16 * laneBuffer

// errNoLanes is returned by OpenLane and AcceptLane on a Conn that does
// not demultiplex streams (off Linux, or the tests' TCP stand-in).
var errNoLanes = errors.New("ksctp: this channel has no lanes (needs kernel SCTP)")

// aLongTimeAgo is a deadline in the past, to wake a waiting poll.
var aLongTimeAgo = time.Unix(1, 0)

// piece is what one recvmsg call returned: part or all of one SCTP
// message, its stream id, and whether it ends the message (MSG_EOR).
type piece struct {
	n   int
	sid uint16
	eor bool
}

// recvFunc reads the next piece of a message into b. It returns n == 0 and
// a nil error when the peer has shut the association down.
type recvFunc func(b []byte) (piece, error)

// sendFunc sends p as one SCTP message on stream sid.
type sendFunc func(sid uint16, p []byte) (int, error)

// mux demultiplexes one association's SCTP streams into lanes: a single
// goroutine (run) reads every message with recvmsg and appends it to the
// buffer of its stream's lane, which that lane's Read drains. Lane 0 is
// the channel itself (Conn.Read). All fields below mu are guarded by it.
type mux struct {
	recv   recvFunc
	send   sendFunc
	nin    int             // inbound streams the association has: stream ids below nin are valid
	nout   int             // outbound streams: OpenLane ids below nout
	limit  int             // laneBuffer, smaller in tests
	total  int             // maxBuffered, smaller in tests
	onFail func(err error) // closes the socket after a protocol error

	// setWriteDeadline sets the socket's write deadline, which every
	// lane's writes wait under (see lane.setWriteDeadline).
	setWriteDeadline func(time.Time) error

	mu       sync.Mutex
	resume   sync.Cond // on mu: run, paused in deliver, rechecks (a lane drained or closed, a reader waits, the end)
	buffered int       // bytes in every lane's buf
	waiting  int       // lane Reads and AcceptLanes waiting for data
	lanes    map[uint16]*lane
	acceptQ  []*lane       // lanes the peer sent on first, not yet accepted
	acceptCh chan struct{} // signalled when acceptQ grows
	err      error         // why the association ended; nil while up
	closed   bool          // Close was called
	done     chan struct{} // closed with err set
	sockWD   time.Time     // the socket's write deadline as last set
}

func newMux(recv recvFunc, send sendFunc, nin, nout int) *mux {
	m := &mux{
		recv: recv, send: send, nin: nin, nout: nout, limit: laneBuffer, total: maxBuffered,
		lanes:    map[uint16]*lane{},
		acceptCh: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	m.resume.L = &m.mu
	return m
}

// lane0 returns lane 0, the channel's own.
func (m *mux) lane0() *lane {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.laneLocked(0)
	l.handed = true
	return l
}

// lane is one SCTP stream of the association as seen by the mux.
type lane struct {
	m       *mux
	id      uint16
	handed  bool // returned by OpenLane or AcceptLane
	closed  bool // closed locally: incoming data is dropped
	buf     []byte
	wake    chan struct{} // signalled when buf grows or the lane ends
	rdl     time.Time
	rtimer  *time.Timer
	wdl     time.Time
	writing bool       // a Write is in send
	wmu     sync.Mutex // one Write at a time on the lane keeps its bytes in order
}

// laneLocked returns lane id, creating it. Caller holds m.mu.
func (m *mux) laneLocked(id uint16) *lane {
	l := m.lanes[id]
	if l == nil {
		l = &lane{m: m, id: id, wake: make(chan struct{}, 1)}
		m.lanes[id] = l
	}
	return l
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run reads the socket until it fails, delivering each piece to its lane.
func (m *mux) run() {
	b := make([]byte, maxMessage)
	var (
		mid bool   // inside a message: the last piece lacked MSG_EOR
		sid uint16 // the stream of that message
	)
	for m.hold() {
		p, err := m.recv(b)
		if err != nil {
			m.fail(err)
			return
		}
		if p.n == 0 {
			if mid {
				m.fail(fmt.Errorf("ksctp: association ended inside a message on stream %d: %w", sid, io.ErrUnexpectedEOF))
			} else {
				m.fail(io.EOF)
			}
			return
		}
		if mid && p.sid != sid {
			m.fail(fmt.Errorf("ksctp: message on stream %d began before the one on stream %d ended", p.sid, sid))
			return
		}
		if int(p.sid) >= m.nin {
			m.fail(fmt.Errorf("ksctp: message on SCTP stream %d, but the association has streams 0 to %d", p.sid, m.nin-1))
			return
		}
		mid, sid = !p.eor, p.sid
		if !m.deliver(p.sid, b[:p.n]) {
			return
		}
	}
}

// deliver appends b to lane id's buffer. It reports false once the mux
// has ended.
func (m *mux) deliver(id uint16, b []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return false
	}
	l := m.lanes[id]
	if l == nil {
		l = m.laneLocked(id)
		if id != 0 {
			m.acceptQ = append(m.acceptQ, l)
			signal(m.acceptCh)
		}
	}
	if l.closed || len(b) == 0 {
		return true
	}
	l.buf = append(l.buf, b...)
	m.buffered += len(b)
	signal(l.wake)
	return true
}

// hold waits, before run reads the socket again, while a lane is full and
// nobody waits for data, or while all lanes together hold m.total (see
// laneBuffer). It reports false once the mux has ended.
func (m *mux) hold() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.err == nil && m.fullLocked() {
		m.resume.Wait()
	}
	return m.err == nil
}

// fullLocked reports whether run should stop reading the socket for now.
// Caller holds m.mu.
func (m *mux) fullLocked() bool {
	if m.buffered >= m.total {
		return true
	}
	if m.waiting > 0 {
		return false
	}
	for _, l := range m.lanes {
		if len(l.buf) >= m.limit {
			return true
		}
	}
	return false
}

// waitLocked waits for wake or the mux's end, counted in m.waiting so that
// run does not stop reading the socket for a full lane meanwhile. Caller
// holds m.mu; it is released while waiting.
func (m *mux) waitLocked(wake <-chan struct{}, ctx <-chan struct{}) {
	m.waiting++
	m.resume.Broadcast()
	m.mu.Unlock()
	select {
	case <-wake:
	case <-m.done:
	case <-ctx:
	}
	m.mu.Lock()
	m.waiting--
}

// fail ends the mux with err, waking every reader, writer and AcceptLane;
// a protocol error also closes the association (onFail).
func (m *mux) fail(err error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	m.err = err
	close(m.done)
	m.resume.Broadcast()
	closed := m.closed
	m.mu.Unlock()
	if !closed && err != io.EOF && m.onFail != nil {
		m.onFail(err)
	}
}

// close ends the mux because the channel was closed.
func (m *mux) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.fail(net.ErrClosed)
}

// open returns lane id for OpenLane.
func (m *mux) open(id uint16) (*lane, error) {
	if id == 0 {
		return nil, errors.New("ksctp: lane 0 is the channel itself; lanes are 1 and up")
	}
	if int(id) >= m.nout {
		return nil, fmt.Errorf("ksctp: lane %d: the association has outbound SCTP streams 0 to %d only", id, m.nout-1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, net.ErrClosed
	}
	l := m.laneLocked(id)
	l.handed = true
	return l, nil
}

// accept returns the next lane the peer sent on first that OpenLane has
// not returned.
func (m *mux) accept(ctx context.Context) (*lane, error) {
	for {
		m.mu.Lock()
		for len(m.acceptQ) > 0 {
			l := m.acceptQ[0]
			m.acceptQ = m.acceptQ[1:]
			if !l.handed {
				l.handed = true
				m.mu.Unlock()
				return l, nil
			}
		}
		if err := m.err; err != nil {
			m.mu.Unlock()
			return nil, err
		}
		m.waitLocked(m.acceptCh, ctx.Done())
		m.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// read drains l's buffer into p, waiting for data, the deadline or the end.
func (l *lane) read(p []byte) (int, error) {
	m := l.m
	for {
		m.mu.Lock()
		if l.closed || m.closed {
			m.mu.Unlock()
			return 0, net.ErrClosed
		}
		if len(l.buf) > 0 {
			n := copy(p, l.buf)
			l.buf = l.buf[n:]
			if len(l.buf) == 0 {
				l.buf = nil
			}
			m.buffered -= n
			m.resume.Broadcast()
			m.mu.Unlock()
			return n, nil
		}
		if len(p) == 0 {
			m.mu.Unlock()
			return 0, nil
		}
		if m.err != nil {
			err := m.err
			m.mu.Unlock()
			return 0, err
		}
		if !l.rdl.IsZero() && !time.Now().Before(l.rdl) {
			m.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		m.waitLocked(l.wake, nil)
		m.mu.Unlock()
	}
}

// setReadDeadline sets l's read deadline; a Read waiting wakes at it.
func (l *lane) setReadDeadline(t time.Time) {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	l.rdl = t
	if l.rtimer != nil {
		l.rtimer.Stop()
		l.rtimer = nil
	}
	signal(l.wake) // a waiting Read rechecks
	if !t.IsZero() {
		if d := time.Until(t); d > 0 {
			l.rtimer = time.AfterFunc(d, func() { signal(l.wake) })
		}
	}
}

// Write deadlines. Lanes share one socket, and the poller has one write
// deadline per socket. While a writer whose lane's deadline has passed is
// waiting, the socket's deadline is in the past, which wakes every writer
// waiting (and while a Write waits on a lane closed under it); otherwise it
// is the earliest lane deadline still ahead, or none.
// A writer woken by another lane's deadline sets the socket's anew and
// waits again.

// setWriteDeadline sets l's write deadline.
func (l *lane) setWriteDeadline(t time.Time) error {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	l.wdl = t
	return m.syncWriteDeadlineLocked()
}

// syncWriteDeadlineLocked sets the socket's write deadline as above.
// Caller holds m.mu.
func (m *mux) syncWriteDeadlineLocked() error {
	now := time.Now()
	var next time.Time
	for _, l := range m.lanes {
		switch {
		case l.closed && l.writing:
			next = aLongTimeAgo // wake it to return
		case l.wdl.IsZero():
		case !now.Before(l.wdl):
			if l.writing {
				next = aLongTimeAgo
			}
		case next.IsZero() || l.wdl.Before(next):
			next = l.wdl
		}
	}
	if next.Equal(m.sockWD) {
		return nil
	}
	m.sockWD = next
	if m.setWriteDeadline == nil {
		return nil
	}
	return m.setWriteDeadline(next)
}

// writeExpired reports whether l's write deadline has passed.
func (l *lane) writeExpired() bool {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return !l.wdl.IsZero() && !time.Now().Before(l.wdl)
}

// write sends p on l as SCTP messages of at most maxMessage bytes, in
// order, through send.
func (l *lane) write(p []byte, send func([]byte) (int, error)) (int, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	m := l.m
	n := 0
	for n < len(p) || len(p) == 0 {
		m.mu.Lock()
		closed, err := l.closed || m.closed, m.err
		m.mu.Unlock()
		if closed {
			return n, net.ErrClosed
		}
		if err != nil && err != io.EOF {
			return n, err
		}
		if l.writeExpired() {
			return n, os.ErrDeadlineExceeded
		}
		if len(p) == 0 {
			return 0, nil
		}
		m.mu.Lock()
		l.writing = true
		m.mu.Unlock()
		k, err := send(p[n:min(len(p), n+maxMessage)])
		n += max(k, 0)
		m.mu.Lock()
		l.writing = false
		expired := !l.wdl.IsZero() && !time.Now().Before(l.wdl)
		var serr error
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			serr = m.syncWriteDeadlineLocked()
		}
		m.mu.Unlock()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !expired {
				// Another lane's deadline woke the socket's writers:
				// let its writer return, then wait again.
				if serr != nil {
					return n, serr
				}
				runtime.Gosched()
				continue
			}
			return n, err
		}
	}
	return n, nil
}

// closeLane closes l locally: its Read and Write fail (a Write waiting
// too, through the socket's write deadline), and data the peer
// sends on it from now on is dropped. The association and the peer's side
// of the lane are untouched.
func (l *lane) closeLane() {
	m := l.m
	m.mu.Lock()
	l.closed = true
	m.buffered -= len(l.buf)
	l.buf = nil
	if l.rtimer != nil {
		l.rtimer.Stop()
	}
	signal(l.wake)
	m.resume.Broadcast()
	_ = m.syncWriteDeadlineLocked() // wakes a Write waiting on the lane
	m.mu.Unlock()
}

// laneError names the lane an error happened on. It keeps the error's
// Timeout, so a net.OpError around it still reports a timeout.
type laneError struct {
	Lane uint16
	Err  error
}

func (e *laneError) Error() string { return fmt.Sprintf("lane %d: %v", e.Lane, e.Err) }
func (e *laneError) Unwrap() error { return e.Err }

// Timeout reports whether the error is a deadline passing.
func (e *laneError) Timeout() bool { return errors.Is(e.Err, os.ErrDeadlineExceeded) }

// Temporary is Timeout, for net.Error.
func (e *laneError) Temporary() bool { return e.Timeout() }

// Lane is lane id (1 and up) of a kernel SCTP channel: SCTP stream id of
// the association, as a net.Conn. Close closes this side's lane only.
type Lane struct {
	c *Conn
	l *lane
}

// ID returns the lane's id, its SCTP stream id.
func (ln *Lane) ID() uint16 { return ln.l.id }

func (ln *Lane) opError(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: "sctp", Source: ln.c.laddr, Addr: ln.c.raddr, Err: &laneError{Lane: ln.l.id, Err: err}}
}

// Read implements net.Conn: the bytes the peer wrote on this lane, in
// order. It returns io.EOF after the peer shut the association down.
func (ln *Lane) Read(p []byte) (int, error) {
	n, err := ln.l.read(p)
	return n, ln.opError("read", err)
}

// Write implements net.Conn: p goes out as SCTP messages of at most 64 KiB
// on the lane's stream.
func (ln *Lane) Write(p []byte) (int, error) {
	m := ln.l.m
	n, err := ln.l.write(p, func(b []byte) (int, error) { return m.send(ln.l.id, b) })
	return n, ln.opError("write", err)
}

// Close implements net.Conn: it closes this side's lane only.
func (ln *Lane) Close() error {
	ln.l.closeLane()
	return nil
}

// LocalAddr implements net.Conn: the channel's.
func (ln *Lane) LocalAddr() net.Addr { return ln.c.LocalAddr() }

// RemoteAddr implements net.Conn: the channel's.
func (ln *Lane) RemoteAddr() net.Addr { return ln.c.RemoteAddr() }

// SetDeadline implements net.Conn.
func (ln *Lane) SetDeadline(t time.Time) error {
	ln.l.setReadDeadline(t)
	return ln.l.setWriteDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (ln *Lane) SetReadDeadline(t time.Time) error {
	ln.l.setReadDeadline(t)
	return nil
}

// SetWriteDeadline implements net.Conn.
func (ln *Lane) SetWriteDeadline(t time.Time) error { return ln.l.setWriteDeadline(t) }

// OpenLane implements channel.Lanes: lane id is SCTP stream id of the
// association. It returns the same Lane each time for one id, whether this
// side or the peer sent on it first; nothing is sent until its first
// Write. An id at or above the association's outbound streams (65 asked
// for at setup) is an error.
func (c *Conn) OpenLane(id uint16) (net.Conn, error) {
	if c.mux == nil {
		return nil, errNoLanes
	}
	l, err := c.mux.open(id)
	if err != nil {
		return nil, &net.OpError{Op: "open", Net: "sctp", Source: c.laddr, Addr: c.raddr, Err: &laneError{Lane: id, Err: err}}
	}
	return c.laneConn(l), nil
}

// AcceptLane implements channel.Lanes: it waits for the peer to send on a
// stream OpenLane has not returned, and returns that lane, once. It
// returns io.EOF once the peer has shut the association down, and an
// error wrapping net.ErrClosed once the channel is closed.
func (c *Conn) AcceptLane(ctx context.Context) (uint16, net.Conn, error) {
	if c.mux == nil {
		return 0, nil, errNoLanes
	}
	l, err := c.mux.accept(ctx)
	if err != nil {
		if err == io.EOF || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return 0, nil, err
		}
		return 0, nil, &net.OpError{Op: "accept lane", Net: "sctp", Source: c.laddr, Addr: c.raddr, Err: err}
	}
	return l.id, c.laneConn(l), nil
}

// laneConn returns the one Lane value of l.
func (c *Conn) laneConn(l *lane) *Lane {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if c.lanes == nil {
		c.lanes = map[uint16]*Lane{}
	}
	ln := c.lanes[l.id]
	if ln == nil {
		ln = &Lane{c: c, l: l}
		c.lanes[l.id] = ln
	}
	return ln
}
