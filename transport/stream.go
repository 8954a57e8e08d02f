package transport

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/braid-hpc/braid/transport/internal/wire"
)

// Stream is one ordered, message-oriented stream of a session. Messages
// keep their boundaries and order; streams do not wait for each other.
//
// One goroutine may write and another read at the same time; concurrent
// writers are serialized per message.
type Stream struct {
	s  *Session
	id uint32

	writeMu sync.Mutex
	readMu  sync.Mutex
	rxSig   chan struct{}
	txSig   chan struct{}

	// Guarded by s.mu.
	txSeq      uint64
	txStarted  uint64 // segment bytes queued so far
	txLimit    uint64 // flow-control limit granted by the peer
	txClosed   bool
	txWhole    []*txSeg // whole segments waiting for a path, in order
	txTurn     int      // bytes of txWhole sent in the stream's current turn
	rxSegs     map[uint64]*rxSeg
	rxNext     uint64 // next segment to deliver
	rxBuffered int64  // bytes of segments received or arriving, not yet read
	rxConsumed uint64
	rxLimit    uint64 // limit the peer was last told
	rxEOF      bool
	rxPartial  [][]byte // segments of the message being assembled
	rxPartLen  int64
	rxSkipping bool // discarding the rest of an oversized message
	// rxLimitSent is the limit last announced in a WINDOW frame.
	rxLimitSent uint64
	rxReader    *MessageReader // open reader of NextMessage
}

func newStream(s *Session, id uint32) *Stream {
	return &Stream{
		s:       s,
		id:      id,
		rxSig:   make(chan struct{}, 1),
		txSig:   make(chan struct{}, 1),
		txLimit: uint64(s.peerWindow),
		rxLimit: uint64(s.cfg.StreamWindow),
		rxSegs:  map[uint64]*rxSeg{},
	}
}

// ID returns the stream id: odd for streams the dialer opened, even for the
// listener's.
func (st *Stream) ID() uint32 { return st.id }

func (st *Stream) notify() {
	select {
	case st.rxSig <- struct{}{}:
	default:
	}
	select {
	case st.txSig <- struct{}{}:
	default:
	}
}

// WriteMessage sends b as one message. It returns once b is queued (b may
// be reused then); it blocks while the peer's receive window for this
// stream is full. Delivery survives the failure of any path as long as one
// path remains or comes back within Config.SessionTimeout.
func (st *Stream) WriteMessage(ctx context.Context, b []byte) error {
	return st.write(ctx, b, false)
}

// WriteMessageNoCopy sends b as one message, like WriteMessage, but keeps
// b instead of copying it: the frames are written from b itself, and sent
// again from b if a path fails before the peer acknowledged them. b must
// not be modified until the peer has acknowledged all of it (Session.Flush
// returns); the transport only reads it and never recycles it. It suits
// data that does not change while it is sent, such as a buffer sent many
// times over or a read-only mapping of a file, and saves the copy, which
// on fast paths is a large part of the sender's CPU.
func (st *Stream) WriteMessageNoCopy(ctx context.Context, b []byte) error {
	return st.write(ctx, b, true)
}

// write queues b as one message, copied into pooled buffers or, with
// borrow, referenced in place.
func (st *Stream) write(ctx context.Context, b []byte, borrow bool) error {
	st.writeMu.Lock()
	defer st.writeMu.Unlock()
	s := st.s
	segSize := s.segmentSize
	for off := 0; ; {
		n := min(segSize, len(b)-off)
		// Wait for window.
		for {
			s.mu.Lock()
			if s.closed {
				err := s.closeErr
				s.mu.Unlock()
				return err
			}
			if st.txClosed {
				s.mu.Unlock()
				return ErrStreamClosed
			}
			if st.txStarted+uint64(n) <= st.txLimit {
				s.mu.Unlock()
				break
			}
			s.mu.Unlock()
			select {
			case <-st.txSig:
			case <-s.done:
			case <-ctx.Done():
				if off > 0 {
					// Part of the message is queued: finish it empty-handed
					// would corrupt it, so the stream must end.
					st.abortWrite()
				}
				return ctx.Err()
			}
		}
		var data []byte
		switch {
		case borrow && n > 0:
			data = b[off : off+n : off+n]
		case borrow:
			data = []byte{} // not nil: nil data means acknowledged
		default:
			data = getBuf(n)
			copy(data, b[off:off+n])
		}
		off += n
		flags := uint8(0)
		if off == len(b) {
			flags = wire.FlagFin
		}
		s.mu.Lock()
		if s.closed {
			err := s.closeErr
			s.mu.Unlock()
			return err
		}
		seg := &txSeg{st: st, data: data, borrowed: borrow, ref: wire.SegmentRef{Stream: st.id, Seq: st.txSeq, Len: uint32(n), Flags: flags}}
		st.txSeq++
		st.txStarted += uint64(n)
		s.enqueue(seg)
		s.mu.Unlock()
		if off == len(b) {
			return nil
		}
	}
}

// abortWrite closes the stream for writing after a message was cut short.
func (st *Stream) abortWrite() {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.txClosed || s.closed {
		return
	}
	st.txClosed = true
	s.enqueue(&txSeg{st: st, data: []byte{}, ref: wire.SegmentRef{Stream: st.id, Seq: st.txSeq, Flags: wire.FlagClose}})
	st.txSeq++
}

// Close ends the stream for writing: the peer reads io.EOF after the
// messages already written. Reading remains possible.
func (st *Stream) Close() error {
	st.writeMu.Lock()
	defer st.writeMu.Unlock()
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.txClosed {
		return nil
	}
	if s.closed {
		return s.closeErr
	}
	st.txClosed = true
	s.enqueue(&txSeg{st: st, data: []byte{}, ref: wire.SegmentRef{Stream: st.id, Seq: st.txSeq, Flags: wire.FlagClose}})
	st.txSeq++
	st.maybeForget()
	return nil
}

// ReadMessage returns the next message, or io.EOF after the peer closed
// the stream. Messages larger than Config.MaxMessageSize are skipped with
// ErrMessageTooLarge: NextMessage reads messages of any size.
func (st *Stream) ReadMessage(ctx context.Context) ([]byte, error) {
	st.readMu.Lock()
	defer st.readMu.Unlock()
	s := st.s
	for {
		s.mu.Lock()
		if st.rxReader != nil {
			s.mu.Unlock()
			return nil, errReaderOpen
		}
		seg := st.rxSegs[st.rxNext]
		if seg != nil && seg.complete {
			msg, parts, done, err := st.popLocked(seg)
			s.mu.Unlock()
			if parts != nil {
				// Assembled outside the session lock: copying a large
				// message must not hold up the other streams and paths.
				msg = joinParts(parts)
			}
			if done || err != nil {
				return msg, err
			}
			continue
		}
		if st.rxEOF {
			s.mu.Unlock()
			return nil, io.EOF
		}
		if s.closed {
			err := s.closeErr
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-st.rxSig:
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Release gives back a buffer that ReadMessage returned, once the caller
// is done with it: later messages of the session may reuse its memory,
// which saves allocating and zeroing a buffer per message. Calling it is
// optional; b must not be used afterwards.
func (st *Stream) Release(b []byte) { putBuf(b) }

// consumeLocked removes the next segment, complete, from the receive
// state and opens the window by its size. Caller holds s.mu.
func (st *Stream) consumeLocked(seg *rxSeg) {
	s := st.s
	delete(st.rxSegs, st.rxNext)
	st.rxNext++
	n := int64(seg.ref.Len)
	st.rxBuffered -= n
	st.rxConsumed += uint64(n)
	st.rxLimit = st.rxConsumed + uint64(s.cfg.StreamWindow)
	if st.rxLimit-st.rxLimitSent >= uint64(s.cfg.StreamWindow)/4 && !st.rxEOF {
		st.rxLimitSent = st.rxLimit
		s.ctrlAny = append(s.ctrlAny, wire.Window{Stream: st.id, Limit: st.rxLimit}.Append(nil))
		s.work.Broadcast()
	}
}

// popLocked consumes the next complete segment. done reports that a whole
// message (or EOF) is ready: msg, or for a message of several segments,
// parts for the caller to join. Caller holds s.mu.
func (st *Stream) popLocked(seg *rxSeg) (msg []byte, parts [][]byte, done bool, err error) {
	st.consumeLocked(seg)
	s := st.s
	n := int64(seg.ref.Len)
	if seg.ref.Flags&wire.FlagClose != 0 {
		st.rxEOF = true
		st.maybeForget()
		if len(st.rxPartial) > 0 {
			st.rxPartial, st.rxPartLen = nil, 0
			return nil, nil, true, fmt.Errorf("transport: stream %d closed in the middle of a message", st.id)
		}
		return nil, nil, true, io.EOF
	}
	fin := seg.ref.Flags&wire.FlagFin != 0
	if st.rxSkipping {
		if fin {
			st.rxSkipping = false
		}
		return nil, nil, false, nil
	}
	if fin && len(st.rxPartial) == 0 {
		return seg.buf, nil, true, nil
	}
	st.rxPartLen += n
	if st.rxPartLen > s.cfg.MaxMessageSize {
		st.rxPartial, st.rxPartLen = nil, 0
		st.rxSkipping = !fin
		return nil, nil, true, fmt.Errorf("%w (%d bytes); read it with NextMessage or raise the limit", ErrMessageTooLarge, s.cfg.MaxMessageSize)
	}
	st.rxPartial = append(st.rxPartial, seg.buf)
	if !fin {
		return nil, nil, false, nil
	}
	parts = st.rxPartial
	st.rxPartial, st.rxPartLen = nil, 0
	return nil, parts, true, nil
}

// maybeForget drops a stream closed in both directions. Caller holds s.mu.
func (st *Stream) maybeForget() {
	if st.txClosed && st.rxEOF {
		delete(st.s.streams, st.id)
	}
}

// onWindow raises a stream's send limit.
func (s *Session) onWindow(w wire.Window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[w.Stream]
	if st == nil || w.Limit <= st.txLimit {
		return
	}
	st.txLimit = w.Limit
	st.notify()
}
