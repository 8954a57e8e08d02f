package transport

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/braid-hpc/braid/transport/internal/wire"
)

// deadlineConn is the part of net.Conn the reader needs.
type deadlineConn interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// readLoop reads frames from lane id of channel gen of p until it fails.
func (s *Session) readLoop(p *path, conn net.Conn, gen int, id uint16, l *lane) {
	defer s.wg.Done()
	r := &reader{s: s, p: p, gen: gen, lane: id, l: l, conn: conn}
	if sc, ok := conn.(*secureConn); ok {
		r.br = sc
	} else if sl, ok := conn.(*secureLanes); ok {
		r.br = sl.secureConn
	} else {
		r.br = newPlainReader(conn)
	}
	err := r.run()
	var pe *ProtocolError
	if errors.As(err, &pe) {
		s.log.Error("closing channel after protocol violation", "path", p.id, "remote", p.remote, "err", err)
	}
	if errors.Is(err, errGoAway) {
		s.closeWith(ErrPeerClosed)
		return
	}
	if errors.Is(err, ErrIntegrity) {
		n, last := s.integrityFailed(p)
		s.log.Error("channel failed its integrity check; dropping it and sending its unacknowledged data on the other paths",
			"path", p.id, "remote", p.remote, "lane", id, "failures", n, "err", err)
		if last {
			s.pathDown(p, gen, &PathError{Path: p.id, Local: p.local, Remote: p.remote, Op: "read", Err: err})
			s.closeWith(fmt.Errorf("%w: %d channels of this session failed it; closing the session", err, n))
			return
		}
	}
	op := "read"
	if id != 0 {
		op = fmt.Sprintf("read lane %d", id)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		op = "heartbeat"
		// The read deadline was set PathTimeout ahead at most PathTimeout/8
		// before the last frame was read (run): the silence is what the
		// transport's clock said when the deadline fell due, whatever the
		// scheduler's delay in waking this goroutine after it.
		err = &silenceError{timeout: s.cfg.PathTimeout, silent: r.lastDeadline.Add(s.cfg.PathTimeout).Sub(r.lastFrame)}
		if id == 0 {
			p.noteGap(time.Since(r.lastFrame))
		}
	}
	s.pathDown(p, gen, &PathError{Path: p.id, Local: p.local, Remote: p.remote, Op: op, Err: err})
}

var errGoAway = errors.New("peer sent GOAWAY")

// silenceError is why a path went down when nothing arrived on it for
// PathTimeout: silent is the time from the last frame read to the moment
// the read's deadline fell due (PathStats.SilentFor).
type silenceError struct {
	timeout, silent time.Duration
}

func (e *silenceError) Error() string {
	return fmt.Sprintf("nothing received for %v", e.timeout)
}

// integrityFailed books a channel of p that failed authentication; last
// reports that the session's count reached maxIntegrityFailures, so the
// session must close.
func (s *Session) integrityFailed(p *path) (n int64, last bool) {
	p.integrity.Add(1)
	n = s.integrityFailures.Add(1)
	return n, n >= maxIntegrityFailures
}

// maxIntegrityFailures closes a session once this many of its channels
// failed an integrity check: a path that keeps delivering altered bytes is
// under attack or broken, and redialing it forever would hide that.
const maxIntegrityFailures = 3

// reader decodes the frames of one lane of a channel (lane 0: the channel
// itself, and the only one on channels without lanes). Several readers of
// one path run at once when it has lanes; they share state only under
// s.mu, as the readers of different paths do.
type reader struct {
	s    *Session
	p    *path
	gen  int
	lane uint16
	l    *lane // the lane's state, for acknowledgements; guarded by s.mu
	conn deadlineConn
	br   frameSource
	body [4096]byte

	lastDeadline time.Time
	lastFrame    time.Time // when the last frame was read (the channel's start before the first)
	ackOwed      bool      // data frames received since the last acknowledgement queued
	// Enhanced striping counter of this channel (the paper's per-pair
	// counter): where the next Frag goes.
	cur    *rxSeg
	curSt  *Stream
	curPos int
	curDir uint8
}

func (r *reader) run() error {
	s := r.s
	var hdr [wire.HeaderLen]byte
	var maxGap time.Duration // of this channel, as stored in p.maxGap
	for {
		now := time.Now()
		gap := now.Sub(r.lastFrame)
		// Heartbeats arrive on lane 0 only: the others may stay idle for
		// as long as their streams have nothing to send.
		if r.lane == 0 {
			r.p.rx0.Store(now.UnixNano())
			if gap > maxGap && !r.lastFrame.IsZero() {
				maxGap = gap
				r.p.noteGap(gap)
			}
		}
		r.lastFrame = now
		if r.lane == 0 && now.Sub(r.lastDeadline) > s.cfg.PathTimeout/8 {
			_ = r.conn.SetReadDeadline(now.Add(s.cfg.PathTimeout))
			r.lastDeadline = now
		}
		if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
			return err
		}
		h, err := wire.ParseHeader(hdr[:])
		if err != nil {
			return protoErr(err)
		}
		r.p.bytesRecv.Add(int64(wire.HeaderLen + h.Len))
		r.p.framesRecv.Add(1)
		switch h.Type {
		case wire.TypeMsg:
			err = r.readMsg(h)
		case wire.TypeFrag:
			err = r.readFrag(h)
		case wire.TypeFragX:
			err = r.readFragX(h)
		default:
			err = r.readControl(h)
		}
		if err != nil {
			return err
		}
		// Data frames are acknowledged once nothing more has arrived: a
		// control frame (the End after a segment's last fragment) must
		// not hold the acknowledgement back until the next heartbeat,
		// which the sender's estimate of its backlog would wait for.
		if r.ackOwed && r.br.Buffered() == 0 {
			s.mu.Lock()
			d := r.ackLocked(false)
			s.mu.Unlock()
			if d != nil {
				d.write(s)
			}
		}
	}
}

func (r *reader) fixed(n int) ([]byte, error) {
	b := r.body[:n]
	_, err := io.ReadFull(r.br, b)
	return b, err
}

func (r *reader) readControl(h wire.Header) error {
	s := r.s
	if r.lane != 0 && h.Type != wire.TypeStart && h.Type != wire.TypeEnd {
		return protoErrorf("%v frame on data lane %d; control frames go on lane 0", h.Type, r.lane)
	}
	body, err := r.fixed(int(h.Len))
	if err != nil {
		return err
	}
	switch h.Type {
	case wire.TypeStart:
		st, err := wire.ParseStart(body)
		if err != nil {
			return protoErr(err)
		}
		stream, seg, err := s.rxSegment(st.Ref)
		if err != nil {
			return err
		}
		r.cur, r.curSt, r.curPos, r.curDir = seg, stream, int(st.First), st.Dir
		if seg == nil {
			// A stale segment: keep counting so its fragments are skipped.
			r.cur = &rxSeg{ref: st.Ref, stale: true}
		}
	case wire.TypeEnd:
		if _, err := wire.ParseEnd(body); err != nil {
			return protoErr(err)
		}
		r.cur, r.curSt = nil, nil
	case wire.TypeAck:
		n, err := wire.ParseU64(h.Type, body)
		if err != nil {
			return protoErr(err)
		}
		return s.onAck(r.p, r.gen, 0, n)
	case wire.TypeAckLane:
		a, err := wire.ParseAckLane(body)
		if err != nil {
			return protoErr(err)
		}
		return s.onAck(r.p, r.gen, a.Lane, a.Count)
	case wire.TypeWindow:
		w, err := wire.ParseWindow(body)
		if err != nil {
			return protoErr(err)
		}
		s.onWindow(w)
	case wire.TypePing:
		v, err := wire.ParseU64(h.Type, body)
		if err != nil {
			return protoErr(err)
		}
		s.mu.Lock()
		if r.p.gen == r.gen {
			r.p.ctrl = append(r.p.ctrl, wire.AppendU64(nil, wire.TypePong, v))
			s.work.Broadcast()
		}
		s.mu.Unlock()
	case wire.TypePong:
		v, err := wire.ParseU64(h.Type, body)
		if err != nil {
			return protoErr(err)
		}
		rtt := time.Duration(time.Now().UnixNano() - int64(v))
		if rtt > 0 && rtt < time.Minute {
			s.mu.Lock()
			if r.p.rtt == 0 {
				r.p.rtt = rtt
			} else {
				r.p.rtt = (7*r.p.rtt + rtt) / 8
			}
			r.p.sampleMinRTT(rtt, time.Now())

			s.mu.Unlock()
		}
	case wire.TypeGoAway:
		return errGoAway
	}
	return nil
}

func (r *reader) readMsg(h wire.Header) error {
	body, err := r.fixed(wire.MsgHeaderLen)
	if err != nil {
		return err
	}
	ref, err := wire.ParseMsg(body, h.Len)
	if err != nil {
		return protoErr(err)
	}
	st, seg, err := r.s.rxSegment(ref)
	if err != nil {
		return err
	}
	return r.readPayload(st, seg, 0, int(ref.Len))
}

func (r *reader) readFrag(h wire.Header) error {
	if r.cur == nil {
		return protoErrorf("FRAG without a preceding START on lane %d", r.lane)
	}
	ref := r.cur.ref
	if r.curPos < 0 || r.curPos >= ref.Fragments() {
		return protoErrorf("FRAG past the end of segment %d of stream %d", ref.Seq, ref.Stream)
	}
	if int(h.Len) != ref.FragLen(r.curPos) {
		return protoErrorf("FRAG of %d bytes at fragment %d, want %d", h.Len, r.curPos, ref.FragLen(r.curPos))
	}
	idx := r.curPos
	if r.curDir == wire.DirInc {
		r.curPos++
	} else {
		r.curPos--
	}
	if r.cur.stale {
		return r.readPayload(nil, nil, idx, int(h.Len))
	}
	return r.readPayload(r.curSt, r.cur, idx, int(h.Len))
}

func (r *reader) readFragX(h wire.Header) error {
	body, err := r.fixed(wire.FragXHeaderLen)
	if err != nil {
		return err
	}
	ref, idx, err := wire.ParseFragX(body, h.Len)
	if err != nil {
		return protoErr(err)
	}
	st, seg, err := r.s.rxSegment(ref)
	if err != nil {
		return err
	}
	return r.readPayload(st, seg, idx, ref.FragLen(idx))
}

// readPayload reads n payload bytes of fragment idx of seg (nil: discard)
// and counts the data frame for acknowledgement.
func (r *reader) readPayload(st *Stream, seg *rxSeg, idx, n int) error {
	s := r.s
	dst, mode := s.rxBegin(seg, idx)
	var err error
	if mode == rxDiscard {
		_, err = r.br.Discard(n)
		r.p.dupRecv.Add(int64(n))
	} else if pr, ok := r.br.(*plainReader); ok {
		err = pr.readFull(dst)
	} else {
		_, err = io.ReadFull(r.br, dst)
	}
	s.rxEnd(st, seg, idx, mode, dst, err == nil)
	if err != nil {
		return err
	}
	var d *directBatch
	s.mu.Lock()
	if l := r.l; r.p.gen == r.gen {
		l.rxFrames++
		r.ackOwed = true
		if l.rxFrames-l.rxAcked >= 8 || r.br.Buffered() == 0 {
			d = r.ackLocked(n >= directMax)
		}
	}
	s.mu.Unlock()
	if d != nil {
		d.write(s)
	}
	return nil
}

// ackLocked queues an acknowledgement of the lane's data frames received
// so far. With direct, when the path's writer is idle, it returns the
// acknowledgement (with any other control frames due) for the reader to
// write itself after releasing s.mu, which saves waking the writer: for
// large frames, which come in bulk. After a small one, a reply is likely
// on its way: the acknowledgement waits for it (holdAck). Caller holds
// s.mu.
func (r *reader) ackLocked(direct bool) *directBatch {
	l := r.l
	r.ackOwed = false
	if r.p.gen != r.gen || l.rxFrames == l.rxAcked {
		return nil
	}
	l.ackDue, l.rxAcked, r.p.ackDue = true, l.rxFrames, true
	if !direct {
		r.s.holdAck(r.p)
		return nil
	}
	if d := r.s.sendDirect(r.p, false); d != nil {
		return d
	}
	r.s.work.Broadcast()
	return nil
}

// rxSeg is a segment being received.
type rxSeg struct {
	ref      wire.SegmentRef
	buf      []byte
	state    []uint8 // per fragment: rxNone, rxBusy, rxDone
	alt      map[int][]byte
	got      int
	complete bool
	stale    bool // placeholder for a segment already delivered
}

const (
	rxNone uint8 = iota
	rxBusy
	rxDone
)

// Modes of rxBegin.
const (
	rxDiscard = iota // duplicate: drop the bytes
	rxDirect         // read into the segment buffer
	rxAlt            // another channel is reading this fragment: read aside
)

// rxSegment finds or creates the receive state of a segment. A nil
// segment with a nil error means the frame is stale and its payload is
// dropped.
func (s *Session) rxSegment(ref wire.SegmentRef) (*Stream, *rxSeg, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.rxStreamLocked(ref.Stream)
	if err != nil || st == nil {
		return nil, nil, err
	}
	if ref.Seq < st.rxNext {
		return st, nil, nil
	}
	if seg := st.rxSegs[ref.Seq]; seg != nil {
		if seg.ref != ref {
			return nil, nil, protoErrorf("segment %d of stream %d announced as %+v and as %+v", ref.Seq, ref.Stream, seg.ref, ref)
		}
		return st, seg, nil
	}
	if ref.Flags&wire.FlagClose != 0 && ref.Len != 0 {
		return nil, nil, protoErrorf("close marker with %d bytes", ref.Len)
	}
	if st.rxBuffered+int64(ref.Len) > int64(s.cfg.StreamWindow) {
		return nil, nil, protoErrorf("stream %d: peer sent beyond its flow-control window (%d buffered + %d > %d)",
			st.id, st.rxBuffered, ref.Len, s.cfg.StreamWindow)
	}
	if ref.Seq-st.rxNext > uint64(s.cfg.StreamWindow) {
		return nil, nil, protoErrorf("stream %d: segment %d far ahead of %d", st.id, ref.Seq, st.rxNext)
	}
	seg := &rxSeg{ref: ref, buf: getBuf(int(ref.Len)), state: make([]uint8, ref.Fragments())}
	st.rxSegs[ref.Seq] = seg
	st.rxBuffered += int64(ref.Len)
	return st, seg, nil
}

// rxStreamLocked returns the stream a frame belongs to, opening it if the
// peer is opening it; nil means it was closed and forgotten.
func (s *Session) rxStreamLocked(id uint32) (*Stream, error) {
	if st := s.streams[id]; st != nil {
		return st, nil
	}
	if s.closed {
		return nil, s.closeErr
	}
	peerOpened := (id%2 == 1) != s.isClient
	if !peerOpened {
		if id >= s.nextStream {
			return nil, protoErrorf("frame for stream %d that this side never opened", id)
		}
		return nil, nil
	}
	if id <= s.peerHighest {
		return nil, nil
	}
	next := s.peerHighest + 2
	if s.peerHighest == 0 {
		next = 2
		if !s.isClient {
			next = 1
		}
	}
	for ; next <= id; next += 2 {
		if len(s.streams) >= s.cfg.MaxStreams {
			return nil, fmt.Errorf("%w: the peer opened more than %d", ErrTooManyStreams, s.cfg.MaxStreams)
		}
		st := newStream(s, next)
		s.streams[next] = st
		s.acceptQ = append(s.acceptQ, st)
		s.peerHighest = next
	}
	select {
	case s.acceptCh <- struct{}{}:
	default:
	}
	return s.streams[id], nil
}

// rxBegin decides where fragment idx of seg is read to.
func (s *Session) rxBegin(seg *rxSeg, idx int) ([]byte, int) {
	if seg == nil {
		return nil, rxDiscard
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if seg.complete || seg.state[idx] == rxDone {
		return nil, rxDiscard
	}
	off, n := s.fragSpan(seg, idx)
	if seg.state[idx] == rxBusy {
		return make([]byte, n), rxAlt
	}
	seg.state[idx] = rxBusy
	return seg.buf[off : off+n], rxDirect
}

func (s *Session) fragSpan(seg *rxSeg, idx int) (off, n int) {
	if seg.ref.FragSize == 0 {
		return 0, int(seg.ref.Len)
	}
	return idx * int(seg.ref.FragSize), seg.ref.FragLen(idx)
}

// rxEnd records the outcome of reading fragment idx of seg.
func (s *Session) rxEnd(st *Stream, seg *rxSeg, idx, mode int, buf []byte, ok bool) {
	if mode == rxDiscard {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if seg.complete {
		return // another copy completed the segment meanwhile
	}
	switch mode {
	case rxDirect:
		if !ok {
			if alt, have := seg.alt[idx]; have {
				off, _ := s.fragSpan(seg, idx)
				copy(seg.buf[off:], alt)
				delete(seg.alt, idx)
				s.fragDone(st, seg, idx)
				return
			}
			seg.state[idx] = rxNone
			return
		}
		delete(seg.alt, idx)
		s.fragDone(st, seg, idx)
	case rxAlt:
		if !ok || seg.state[idx] == rxDone {
			return
		}
		if seg.state[idx] == rxNone {
			// The channel that was reading it failed meanwhile.
			off, _ := s.fragSpan(seg, idx)
			copy(seg.buf[off:], buf)
			s.fragDone(st, seg, idx)
			return
		}
		if seg.alt == nil {
			seg.alt = map[int][]byte{}
		}
		seg.alt[idx] = buf
	}
}

// fragDone marks a fragment received. Caller holds s.mu.
func (s *Session) fragDone(st *Stream, seg *rxSeg, idx int) {
	if seg.state[idx] == rxDone {
		return
	}
	seg.state[idx] = rxDone
	seg.got++
	if seg.got == len(seg.state) {
		seg.complete = true
		seg.state, seg.alt = nil, nil
		if seg.ref.Seq == st.rxNext {
			st.notify()
		}
	}
}
