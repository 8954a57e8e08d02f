package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

// path is one network path of a session: a (local, remote) address pair
// and its current channel, if any. Fields without a note are guarded by
// the session's mu.
type path struct {
	id            int
	local, remote string // as dialed or accepted; local may be empty
	bound         string // local address of the current or last channel
	s             *Session

	conn    net.Conn // nil while down
	gen     int      // bumped whenever conn changes; stale goroutines exit
	state   PathState
	everUp  bool
	lastErr error

	ctrl   [][]byte // control frames for this channel
	goAway bool     // GoAway queued: write it, then stop sending
	ackDue bool     // send an Ack of rxFrames

	unacked      []txRef // data frames sent on conn, in order, not yet acknowledged
	unackedBytes int64
	ackedFrames  uint64 // data frames of this channel acknowledged by the peer
	rxFrames     uint64 // data frames received on this channel
	rxAcked      uint64 // rxFrames value in the last Ack we queued
	lastRx       time.Time

	// The peer's striping counter for this channel, as last set by a
	// Start we sent: the segment, next fragment and direction.
	ctrSeg  *txSeg
	ctrNext int
	ctrDir  uint8

	// Rate estimation, updated by the session monitor.
	idle      bool // the writer waited for work during the current sample
	rate      float64
	lastTick  time.Time
	lastBytes int64
	rtt       time.Duration
	lowat     int // TCP_NOTSENT_LOWAT in force on conn

	bytesSent, bytesRecv   atomic.Int64
	framesSent, framesRecv atomic.Int64
	failovers, reconnects  atomic.Int64
	retransmitted          atomic.Int64
	duplicated             atomic.Int64
	dupRecv                atomic.Int64
	dupping                bool // the writer is duplicating a slower path's tail

	// Delivery rate from acknowledgements (bytes/s), and its window.
	drate     float64
	dwinStart time.Time
	dwinBytes int64
}

// sent records data frame r as written on the current channel. Caller
// holds s.mu.
func (p *path) sent(r txRef) {
	if len(p.unacked) == 0 {
		p.dwinStart, p.dwinBytes = time.Now(), 0
	}
	p.unacked = append(p.unacked, r)
	p.unackedBytes += r.size()
}

// speed is the path's best rate estimate in bytes/s, 0 if unknown.
func (p *path) speed() float64 {
	if p.drate > 0 {
		return p.drate
	}
	return p.rate
}

// sampleDelivery updates the delivery rate from acknowledged frames: bytes
// acknowledged per second over windows of at least 20ms during which the
// path always had data in flight. Caller holds s.mu.
func (p *path) sampleDelivery(acked []txRef, now time.Time) {
	if p.unackedBytes == 0 || p.dwinStart.IsZero() {
		p.dwinStart, p.dwinBytes = now, 0
		return
	}
	for _, r := range acked {
		p.dwinBytes += r.size()
	}
	if dt := now.Sub(p.dwinStart); dt >= 20*time.Millisecond {
		sample := float64(p.dwinBytes) / dt.Seconds()
		if p.drate == 0 {
			p.drate = sample
		} else {
			p.drate = 0.75*p.drate + 0.25*sample
		}
		p.dwinStart, p.dwinBytes = now, 0
	}
	if len(p.unacked) == len(acked) {
		// Nothing left in flight: the next window starts with the next send.
		p.dwinStart = time.Time{}
	}
}

// tick updates the path's rate estimate. Caller holds s.mu.
func (p *path) tick(now time.Time) {
	b := p.bytesSent.Load()
	if !p.lastTick.IsZero() && p.conn != nil {
		dt := now.Sub(p.lastTick).Seconds()
		delta := b - p.lastBytes
		if !p.idle && delta > 0 && dt > 0 {
			r := float64(delta) / dt
			if p.rate == 0 {
				p.rate = r
			} else {
				p.rate = 0.7*p.rate + 0.3*r
			}
		}
	}
	p.idle = false
	p.lastTick, p.lastBytes = now, b
	// Let the kernel hold about 1ms of the path's rate unsent: enough to
	// keep a fast path busy between writes, little enough that a slow
	// path does not claim fragments it cannot deliver soon.
	if p.conn != nil && p.rate > 0 {
		want := min(max(int(p.rate/1000), channel.NotSentLowat), 4<<20)
		if want > p.lowat*5/4 || want < p.lowat*3/4 {
			if channel.SetSendBacklog(p.conn, want) {
				p.lowat = want
			}
		}
	}
}

// onAck releases the frames the peer acknowledged on channel gen.
func (s *Session) onAck(p *path, gen int, n uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.gen != gen {
		return nil
	}
	if n < p.ackedFrames || n-p.ackedFrames > uint64(len(p.unacked)) {
		return protoErrorf("ACK of %d frames, but %d sent and %d acknowledged", n, p.ackedFrames+uint64(len(p.unacked)), p.ackedFrames)
	}
	k := int(n - p.ackedFrames)
	p.sampleDelivery(p.unacked[:k], time.Now())
	for _, r := range p.unacked[:k] {
		p.unackedBytes -= r.size()
		s.segAcked(r.seg)
	}
	if k > 0 {
		s.work.Broadcast()
	}
	p.unacked = p.unacked[k:]
	p.ackedFrames = n
	return nil
}

// writeLoop puts frames on channel gen of p until it fails or is replaced.
func (s *Session) writeLoop(p *path, conn net.Conn, gen int) {
	defer s.wg.Done()
	var (
		frames []frame
		bufs   net.Buffers
		hdrs   []byte
	)
	for {
		var ok bool
		frames, ok = s.nextBatch(p, gen, frames[:0])
		if !ok && len(frames) == 0 {
			return
		}
		// Headers go into one buffer; payloads are written in place.
		need := 0
		for _, f := range frames {
			need += len(f.hdr)
		}
		if cap(hdrs) < need {
			hdrs = make([]byte, 0, need)
		}
		hdrs = hdrs[:0]
		bufs = bufs[:0]
		lo := 0
		for _, f := range frames {
			hdrs = append(hdrs, f.hdr...)
			if len(f.payload) > 0 {
				if len(hdrs) > lo {
					bufs = append(bufs, hdrs[lo:len(hdrs):len(hdrs)])
				}
				bufs = append(bufs, f.payload)
				lo = len(hdrs)
			}
		}
		if len(hdrs) > lo {
			bufs = append(bufs, hdrs[lo:len(hdrs):len(hdrs)])
		}
		var total int64
		for _, b := range bufs {
			total += int64(len(b))
		}
		w := bufs
		if _, err := w.WriteTo(conn); err != nil {
			s.pathDown(p, gen, &PathError{Path: p.id, Local: p.local, Remote: p.remote, Op: "write", Err: err})
			return
		}
		p.bytesSent.Add(total)
		p.framesSent.Add(int64(len(frames)))
		if !ok {
			return
		}
		for i := range frames {
			frames[i] = frame{}
		}
	}
}

// heartbeat pings channel gen of p every HeartbeatInterval.
func (s *Session) heartbeat(p *path, gen int) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		if p.gen != gen || p.conn == nil {
			s.mu.Unlock()
			return
		}
		p.ctrl = append(p.ctrl, wire.AppendU64(nil, wire.TypePing, uint64(time.Now().UnixNano())))
		if p.rxFrames != p.rxAcked {
			p.ackDue, p.rxAcked = true, p.rxFrames
		}
		s.work.Broadcast()
		s.mu.Unlock()
	}
}

// deadlineConn is the part of net.Conn the reader needs.
type deadlineConn interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// readLoop reads frames from channel gen of p until it fails.
func (s *Session) readLoop(p *path, conn net.Conn, gen int) {
	defer s.wg.Done()
	r := &reader{s: s, p: p, gen: gen, conn: conn, br: bufio.NewReaderSize(conn, 64<<10)}
	err := r.run()
	var pe *ProtocolError
	if errors.As(err, &pe) {
		s.log.Error("closing channel after protocol violation", "path", p.id, "remote", p.remote, "err", err)
	}
	if errors.Is(err, errGoAway) {
		s.closeWith(ErrPeerClosed)
		return
	}
	op := "read"
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		op = "heartbeat"
		err = fmt.Errorf("nothing received for %v", s.cfg.PathTimeout)
	}
	s.pathDown(p, gen, &PathError{Path: p.id, Local: p.local, Remote: p.remote, Op: op, Err: err})
}

var errGoAway = errors.New("peer sent GOAWAY")

// reader decodes the frames of one channel.
type reader struct {
	s    *Session
	p    *path
	gen  int
	conn deadlineConn
	br   *bufio.Reader
	body [4096]byte

	lastDeadline time.Time
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
	for {
		now := time.Now()
		if now.Sub(r.lastDeadline) > s.cfg.PathTimeout/8 {
			_ = r.conn.SetReadDeadline(now.Add(s.cfg.PathTimeout))
			r.lastDeadline = now
		}
		if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
			return err
		}
		h, err := wire.ParseHeader(hdr[:])
		if err != nil {
			return &ProtocolError{Msg: err.Error()}
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
	}
}

func (r *reader) fixed(n int) ([]byte, error) {
	b := r.body[:n]
	_, err := io.ReadFull(r.br, b)
	return b, err
}

func (r *reader) readControl(h wire.Header) error {
	s := r.s
	body, err := r.fixed(int(h.Len))
	if err != nil {
		return err
	}
	switch h.Type {
	case wire.TypeStart:
		st, err := wire.ParseStart(body)
		if err != nil {
			return &ProtocolError{Msg: err.Error()}
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
			return &ProtocolError{Msg: err.Error()}
		}
		r.cur, r.curSt = nil, nil
	case wire.TypeAck:
		n, err := wire.ParseU64(h.Type, body)
		if err != nil {
			return &ProtocolError{Msg: err.Error()}
		}
		return s.onAck(r.p, r.gen, n)
	case wire.TypeWindow:
		w, err := wire.ParseWindow(body)
		if err != nil {
			return &ProtocolError{Msg: err.Error()}
		}
		s.onWindow(w)
	case wire.TypePing:
		v, err := wire.ParseU64(h.Type, body)
		if err != nil {
			return &ProtocolError{Msg: err.Error()}
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
			return &ProtocolError{Msg: err.Error()}
		}
		rtt := time.Duration(time.Now().UnixNano() - int64(v))
		if rtt > 0 && rtt < time.Minute {
			s.mu.Lock()
			if r.p.rtt == 0 {
				r.p.rtt = rtt
			} else {
				r.p.rtt = (7*r.p.rtt + rtt) / 8
			}

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
		return &ProtocolError{Msg: err.Error()}
	}
	st, seg, err := r.s.rxSegment(ref)
	if err != nil {
		return err
	}
	return r.readPayload(st, seg, 0, int(ref.Len))
}

func (r *reader) readFrag(h wire.Header) error {
	if r.cur == nil {
		return protoErrorf("FRAG without a preceding START on this channel")
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
		return &ProtocolError{Msg: err.Error()}
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
	} else {
		_, err = io.ReadFull(r.br, dst)
	}
	s.rxEnd(st, seg, idx, mode, dst, err == nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if r.p.gen == r.gen {
		r.p.rxFrames++
		if r.p.rxFrames-r.p.rxAcked >= 8 || r.br.Buffered() == 0 {
			r.p.ackDue, r.p.rxAcked = true, r.p.rxFrames
			s.work.Broadcast()
		}
	}
	s.mu.Unlock()
	return nil
}

// redial re-establishes a failed path of a dialing session, with backoff,
// until it succeeds or the session ends.
func (s *Session) redial(p *path) {
	defer s.wg.Done()
	delay := s.cfg.ReconnectInterval
	for {
		select {
		case <-s.done:
			return
		case <-time.After(delay):
		}
		conn, err := dialPath(s.cfg, s.id, p.id, p.local, p.remote, s.done)
		if err == nil {
			if s.attach(p.id, p.local, p.remote, conn) == nil {
				s.log.Info("path rejoined", "path", p.id, "remote", p.remote)
			}
			return
		}
		s.log.Debug("redial failed", "path", p.id, "remote", p.remote, "err", err)
		delay = min(2*delay, 2*time.Second)
	}
}
