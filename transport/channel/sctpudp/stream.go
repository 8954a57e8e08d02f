package sctpudp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/sctp"
)

// ppid is the payload protocol identifier of every message braid sends:
// 0, "unspecified" (RFC 9260 section 3.3.1).
const ppid = sctp.PayloadTypeUnknown

// Reliability says what happens to a message the network keeps losing.
type Reliability uint8

const (
	// Reliable retransmits until acknowledged (the SCTP default).
	Reliable Reliability = iota
	// LimitRetransmits abandons a message after StreamOptions.MaxRetransmits
	// retransmissions (RFC 7496 "rtx" policy).
	LimitRetransmits
	// LimitLifetime abandons a message not acknowledged within
	// StreamOptions.Lifetime (RFC 3758 timed reliability).
	LimitLifetime
)

// StreamOptions says how a stream sends. The zero value is an ordered,
// reliable byte stream like the channel's own.
type StreamOptions struct {
	// Unordered delivers each message as soon as it is complete, not in
	// the order sent.
	Unordered bool
	// Reliability selects partial reliability (it needs the peer to support
	// FORWARD-TSN, RFC 3758, which pion and usrsctp do).
	Reliability Reliability
	// MaxRetransmits is the retransmission budget under LimitRetransmits;
	// zero means send once.
	MaxRetransmits uint32
	// Lifetime is the time budget under LimitLifetime, in milliseconds'
	// resolution.
	Lifetime time.Duration
}

// messages reports whether a stream sending with o keeps message boundaries
// (each Write is one message), as opposed to being a byte stream.
func (o StreamOptions) messages() bool {
	return o.Unordered || o.Reliability != Reliable
}

func (o StreamOptions) apply(s *sctp.Stream) error {
	var typ byte
	var val uint32
	switch o.Reliability {
	case Reliable:
		typ = sctp.ReliabilityTypeReliable
	case LimitRetransmits:
		typ, val = sctp.ReliabilityTypeRexmit, o.MaxRetransmits
	case LimitLifetime:
		if o.Lifetime <= 0 {
			return fmt.Errorf("sctpudp: LimitLifetime needs a positive Lifetime, have %v", o.Lifetime)
		}
		typ, val = sctp.ReliabilityTypeTimed, uint32(min(o.Lifetime.Milliseconds(), 1<<32-1))
	default:
		return fmt.Errorf("sctpudp: unknown Reliability %d", o.Reliability)
	}
	s.SetReliabilityParams(o.Unordered, typ, val)
	return nil
}

// Stream is one SCTP stream of an association, as a net.Conn.
//
// On an ordered, reliable stream Write may be any length: it is cut into
// messages of at most Config.MaxMessageSize. On an unordered or partially
// reliable stream each Write is one message and may not exceed that size.
// Read never returns bytes of two messages at once; a message longer than
// the buffer is served over several Reads. So on a message stream, a buffer
// of MaxMessageSize bytes reads one whole message per call.
//
// Read and Write may run concurrently with each other; concurrent Writes are
// serialized, each one's messages kept together.
type Stream struct {
	assoc    *Assoc
	s        *sctp.Stream
	messages bool

	rmu  sync.Mutex
	rbuf []byte // receive buffer, grown to the largest message seen
	left []byte // unread tail of the last message, in rbuf

	wmu    sync.Mutex
	closed atomic.Bool

	// With Config.StreamSendBuffer: the write deadline, and a signal that
	// the stream's unacknowledged bytes fell below half the buffer.
	wdeadline atomic.Pointer[time.Time]
	room      chan struct{}
}

func newStream(a *Assoc, s *sctp.Stream, o StreamOptions) *Stream {
	st := &Stream{assoc: a, s: s, messages: o.messages()}
	if limit := a.cfg.StreamSendBuffer; limit > 0 {
		st.room = make(chan struct{}, 1)
		s.SetBufferedAmountLowThreshold(uint64(limit / 2))
		s.OnBufferedAmountLow(func() {
			select {
			case st.room <- struct{}{}:
			default:
			}
		})
	}
	return st
}

// roomPoll bounds each wait for the room signal, so a missed signal or an
// association that died without a word costs at most this much.
const roomPoll = 50 * time.Millisecond

// waitRoom waits, under Config.StreamSendBuffer, until the stream has fewer
// than that many bytes written and not yet acknowledged, the write
// deadline passes, or the stream closes.
func (s *Stream) waitRoom() error {
	limit := uint64(s.assoc.cfg.StreamSendBuffer)
	for s.s.BufferedAmount() >= limit {
		if s.isClosed() {
			return s.opError("write", net.ErrClosed)
		}
		wait := roomPoll
		if d := s.wdeadline.Load(); d != nil && !d.IsZero() {
			left := time.Until(*d)
			if left <= 0 {
				return s.opError("write", os.ErrDeadlineExceeded)
			}
			wait = min(wait, left)
		}
		t := time.NewTimer(wait)
		select {
		case <-s.room:
		case <-s.assoc.done:
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// ID returns the SCTP stream identifier.
func (s *Stream) ID() uint16 { return s.s.StreamIdentifier() }

// Assoc returns the association the stream belongs to.
func (s *Stream) Assoc() *Assoc { return s.assoc }

// Read implements net.Conn.
func (s *Stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if len(s.left) > 0 {
		n := copy(p, s.left)
		s.left = s.left[n:]
		return n, nil
	}
	if s.isClosed() {
		return 0, s.opError("read", net.ErrClosed)
	}
	// A buffer as large as the biggest message takes it without a copy.
	if len(p) >= s.assoc.cfg.MaxMessageSize {
		n, err := s.s.Read(p)
		if !errors.Is(err, io.ErrShortBuffer) {
			return n, s.readError(err)
		}
	}
	if s.rbuf == nil {
		s.rbuf = make([]byte, min(s.assoc.cfg.MaxMessageSize, 64<<10))
	}
	for {
		n, err := s.s.Read(s.rbuf)
		if errors.Is(err, io.ErrShortBuffer) {
			// The peer sent a longer message than we have room for:
			// pion kept it and told its length.
			s.rbuf = make([]byte, max(n, 2*len(s.rbuf)))
			continue
		}
		if err != nil {
			return 0, s.readError(err)
		}
		c := copy(p, s.rbuf[:n])
		s.left = s.rbuf[c:n]
		return c, nil
	}
}

// Write implements net.Conn.
func (s *Stream) Write(p []byte) (int, error) {
	limit := s.assoc.cfg.MaxMessageSize
	if s.messages && len(p) > limit {
		return 0, s.opError("write", ErrMessageTooLarge)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	n := 0
	for n < len(p) {
		if s.isClosed() {
			return n, s.opError("write", net.ErrClosed)
		}
		m := min(len(p)-n, limit)
		if s.room != nil {
			if err := s.waitRoom(); err != nil {
				return n, err
			}
		}
		if _, err := s.s.WriteSCTP(p[n:n+m], ppid); err != nil {
			return n, s.writeError(err)
		}
		n += m
	}
	return n, nil
}

// Close implements net.Conn. On the channel's stream (id 0) it closes the
// whole association, as Assoc.Close does. On any other stream it resets the
// outgoing direction (RFC 6525), so the peer reads io.EOF once it has read
// everything sent before, and ends local Reads and Writes.
func (s *Stream) Close() error {
	if s.assoc.main == s {
		return s.assoc.Close()
	}
	if s.closed.Swap(true) {
		return nil
	}
	err := s.s.Close()
	// Wake a blocked Read; it sees closed and reports net.ErrClosed. The
	// deadline's goroutine ends at once, so Assoc.Close need not clear it.
	_ = s.s.SetReadDeadline(time.Now())
	s.assoc.untrack(s)
	if err != nil && !errors.Is(err, sctp.ErrResetPacketInStateNotExist) {
		return s.opError("close", err)
	}
	return nil
}

// LocalAddr implements net.Conn: the local UDP address.
func (s *Stream) LocalAddr() net.Addr { return s.assoc.laddr }

// RemoteAddr implements net.Conn: the peer's UDP address.
func (s *Stream) RemoteAddr() net.Addr { return s.assoc.raddr }

// SetDeadline implements net.Conn.
func (s *Stream) SetDeadline(t time.Time) error {
	if err := s.SetReadDeadline(t); err != nil {
		return err
	}
	return s.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn. Once it passes, Read returns an error
// whose Timeout method reports true (and which wraps
// os.ErrDeadlineExceeded) until the deadline is moved.
func (s *Stream) SetReadDeadline(t time.Time) error {
	if s.isClosed() {
		return s.opError("set", net.ErrClosed)
	}
	return s.s.SetReadDeadline(t)
}

// SetWriteDeadline implements net.Conn. A Write waits only while the
// association's send queue is full (the peer's window or the congestion
// window holds it back), or under Config.StreamSendBuffer while the
// stream's own buffer is; the deadline bounds that wait.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	if s.isClosed() {
		return s.opError("set", net.ErrClosed)
	}
	s.wdeadline.Store(&t)
	return s.s.SetWriteDeadline(t)
}

// isClosed reports whether this stream or its whole association was closed
// locally.
func (s *Stream) isClosed() bool { return s.closed.Load() || s.assoc.closing.Load() }

// readError maps pion's read errors to net.Conn's conventions.
func (s *Stream) readError(err error) error {
	switch {
	case err == nil:
		return nil
	case s.isClosed():
		return s.opError("read", net.ErrClosed)
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		return s.opError("read", os.ErrDeadlineExceeded)
	}
	return s.opError("read", err)
}

func (s *Stream) writeError(err error) error {
	switch {
	case s.isClosed():
		return s.opError("write", net.ErrClosed)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return s.opError("write", os.ErrDeadlineExceeded)
	case errors.Is(err, sctp.ErrPayloadDataStateNotExist), errors.Is(err, sctp.ErrStreamClosed):
		// The association is shutting down or gone.
		return s.opError("write", fmt.Errorf("%w: %w", net.ErrClosed, err))
	}
	return s.opError("write", err)
}

func (s *Stream) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "sctp-udp", Source: s.assoc.laddr, Addr: s.assoc.raddr, Err: err}
}
