package transport

import (
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

	// hdrs holds the headers of the batch the path's writer is building;
	// nextBatch empties it, once the batch before has been written.
	hdrs   []byte
	ctrl   [][]byte // control frames for this channel
	goAway bool     // GoAway queued: write it, then stop sending

	// Lanes of conn (see lane.go): lanes[0] is conn itself. nlanes is how
	// many this side sends on: Config.Lanes if conn has lanes, else 1.
	lanes        []*lane
	nlanes       int
	ackDue       bool  // some lane has an acknowledgement to send
	inflight     int   // data frames sent on conn, on any lane, not yet acknowledged
	unackedBytes int64 // their bytes
	lastRx       time.Time

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
	integrity              atomic.Int64 // channels failed by ErrIntegrity
	retransmitted          atomic.Int64
	duplicated             atomic.Int64
	dupRecv                atomic.Int64
	dupping                bool // the writer is duplicating a slower path's tail

	// Delivery rate from acknowledgements (bytes/s), and its window.
	drate     float64
	dwinStart time.Time
	dwinBytes int64
	// Rate of short bursts (sampleBurst), for paths never busy long enough
	// for drate.
	brate float64
	// Smallest round trip of the last minRTTWindow (sampleMinRTT).
	minRTT   time.Duration
	minRTTAt time.Time
}

// sent records data frame r as written on the current channel, on its
// stream's lane. Caller holds s.mu.
func (p *path) sent(r txRef) {
	if p.inflight == 0 {
		p.dwinStart, p.dwinBytes = time.Now(), 0
	}
	l := p.dataLane(r.seg.ref.Stream)
	r.at = time.Now()
	l.unacked = append(l.unacked, r)
	p.inflight++
	p.unackedBytes += r.size()
}

// speed is the path's best rate estimate in bytes/s, 0 if unknown.
func (p *path) speed() float64 {
	if p.drate > 0 {
		return p.drate
	}
	return p.rate
}

// planRate is the rate plan uses to decide whether to stripe a segment:
// speed, or while that is unknown, the rate of short bursts. The burst
// rate is left out of the other decisions (which frames an idle path
// copies, where a whole segment goes): a loaded host can make it low.
func (p *path) planRate() float64 {
	if r := p.speed(); r > 0 {
		return r
	}
	return p.brate
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
	if p.inflight == len(acked) {
		// Nothing left in flight: the next window starts with the next send.
		p.sampleBurst(now)
		p.dwinStart = time.Time{}
	}
}

// minRTTWindow is how long a path's minimum round trip is kept before a
// larger sample replaces it.
const minRTTWindow = 10 * time.Second

// sampleMinRTT records a round-trip sample in the path's minimum round
// trip: the path's delay without the queue that data in flight builds in
// front of a heartbeat. Caller holds s.mu.
func (p *path) sampleMinRTT(rtt time.Duration, now time.Time) {
	if p.minRTT == 0 || rtt <= p.minRTT || now.Sub(p.minRTTAt) > minRTTWindow {
		p.minRTT, p.minRTTAt = rtt, now
	}
}

// burstMin is the least a burst must carry for its rate to count.
const burstMin = 16 << 10

// sampleBurst estimates the rate of a path that never stays busy for a
// full delivery window (messages of tens of KB, sent one at a time): when
// everything in flight has been acknowledged within less than a window,
// the bytes of that burst over its duration less one round trip. Caller
// holds s.mu.
func (p *path) sampleBurst(now time.Time) {
	dt := now.Sub(p.dwinStart)
	if p.dwinBytes < burstMin || dt >= 20*time.Millisecond {
		return
	}
	busy := dt - p.minRTT
	if busy < dt/4 {
		return // mostly the round trip: no rate in it
	}
	// Rise at once, fall slowly: a burst delayed by the scheduler looks
	// slower than the path is.
	sample := float64(p.dwinBytes) / busy.Seconds()
	if sample > p.brate {
		p.brate = sample
	} else {
		p.brate = 0.9*p.brate + 0.1*sample
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

// onAck releases the frames the peer acknowledged on lane id of channel
// gen: n is how many it received there so far.
func (s *Session) onAck(p *path, gen int, id uint16, n uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.gen != gen {
		return nil
	}
	if int(id) >= len(p.lanes) || p.lanes[id] == nil {
		return protoErrorf("ACK of %d frames on lane %d, which this side never sent on", n, id)
	}
	l := p.lanes[id]
	if n < l.ackedFrames || n-l.ackedFrames > uint64(len(l.unacked)) {
		return protoErrorf("ACK of %d frames on lane %d, but %d sent and %d acknowledged", n, id, l.ackedFrames+uint64(len(l.unacked)), l.ackedFrames)
	}
	k := int(n - l.ackedFrames)
	p.sampleDelivery(l.unacked[:k], time.Now())
	for _, r := range l.unacked[:k] {
		p.unackedBytes -= r.size()
		s.segAcked(r.seg)
	}
	if k > 0 {
		s.work.Broadcast()
	}
	p.inflight -= k
	l.unacked = l.unacked[k:]
	l.ackedFrames = n
	return nil
}

// writeLoop puts frames on channel gen of p until it fails or is replaced.
// Frames go on the lane of their stream (control frames on lane 0, the
// channel itself); a batch is written one run of same-lane frames at a
// time.
func (s *Session) writeLoop(p *path, conn net.Conn, gen, nlanes int) {
	defer s.wg.Done()
	var (
		frames []frame
		bufs   net.Buffers
		hdrs   []byte
	)
	lc := laneConns{s: s, p: p, gen: gen, conns: []net.Conn{conn}}
	lc.lanes, _ = conn.(channel.Lanes)
	for {
		var ok bool
		frames, ok = s.nextBatch(p, gen, frames[:0])
		if !ok && len(frames) == 0 {
			return
		}
		for run := frames; len(run) > 0; {
			id := laneOf(run[0].stream, nlanes)
			n := 1
			for n < len(run) && laneOf(run[n].stream, nlanes) == id {
				n++
			}
			w, err := lc.get(id)
			var total int64
			if err == nil {
				total, err = writeFrames(w, run[:n], &bufs, &hdrs)
			}
			if err != nil {
				s.pathDown(p, gen, &PathError{Path: p.id, Local: p.local, Remote: p.remote, Op: "write", Err: err})
				return
			}
			p.bytesSent.Add(total)
			p.framesSent.Add(int64(n))
			run = run[n:]
		}
		if !ok {
			return
		}
		for i := range frames {
			frames[i] = frame{}
		}
	}
}

// writeFrames writes frames to w: headers go into one buffer, payloads are
// written in place. bufs and hdrs are the caller's scratch space.
func writeFrames(w net.Conn, frames []frame, bufs *net.Buffers, hdrs *[]byte) (int64, error) {
	need := 0
	for _, f := range frames {
		need += len(f.hdr)
	}
	if cap(*hdrs) < need {
		*hdrs = make([]byte, 0, need)
	}
	h := (*hdrs)[:0]
	b := (*bufs)[:0]
	lo := 0
	for _, f := range frames {
		h = append(h, f.hdr...)
		if len(f.payload) > 0 {
			if len(h) > lo {
				b = append(b, h[lo:len(h):len(h)])
			}
			b = append(b, f.payload)
			lo = len(h)
		}
	}
	if len(h) > lo {
		b = append(b, h[lo:len(h):len(h)])
	}
	var total int64
	for _, x := range b {
		total += int64(len(x))
	}
	*hdrs, *bufs = h, b
	if sc, ok := w.(interface{ writeBuffers([][]byte) error }); ok {
		return total, sc.writeBuffers(b)
	}
	_, err := b.WriteTo(w)
	return total, err
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
		for _, l := range p.lanes {
			if l != nil && l.rxFrames != l.rxAcked {
				l.ackDue, l.rxAcked, p.ackDue = true, l.rxFrames, true
			}
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
		p.integrity.Add(1)
		n := s.integrityFailures.Add(1)
		s.log.Error("channel failed its integrity check; dropping it and sending its unacknowledged data on the other paths",
			"path", p.id, "remote", p.remote, "lane", id, "failures", n, "err", err)
		if n >= maxIntegrityFailures {
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
		err = fmt.Errorf("nothing received for %v", s.cfg.PathTimeout)
	}
	s.pathDown(p, gen, &PathError{Path: p.id, Local: p.local, Remote: p.remote, Op: op, Err: err})
}

var errGoAway = errors.New("peer sent GOAWAY")

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
		// Heartbeats arrive on lane 0 only: the others may stay idle for
		// as long as their streams have nothing to send.
		if r.lane == 0 && now.Sub(r.lastDeadline) > s.cfg.PathTimeout/8 {
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
		return s.onAck(r.p, r.gen, 0, n)
	case wire.TypeAckLane:
		a, err := wire.ParseAckLane(body)
		if err != nil {
			return &ProtocolError{Msg: err.Error()}
		}
		return s.onAck(r.p, r.gen, a.Lane, a.Count)
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
	} else if pr, ok := r.br.(*plainReader); ok {
		err = pr.readFull(dst)
	} else {
		_, err = io.ReadFull(r.br, dst)
	}
	s.rxEnd(st, seg, idx, mode, dst, err == nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if l := r.l; r.p.gen == r.gen {
		l.rxFrames++
		if l.rxFrames-l.rxAcked >= 8 || r.br.Buffered() == 0 {
			l.ackDue, l.rxAcked, r.p.ackDue = true, l.rxFrames, true
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

// header returns h, a frame header just appended to p.hdrs[len(p.hdrs):],
// and keeps its bytes in the arena. A header that did not fit was
// allocated by the append; the arena then starts over, bigger, for the
// next ones, and what earlier frames point to stays as it is. Caller
// holds s.mu.
func (p *path) header(h []byte) []byte {
	n := len(p.hdrs)
	if len(h) > 0 && n < cap(p.hdrs) && &p.hdrs[:n+1][n] == &h[0] {
		p.hdrs = p.hdrs[:n+len(h)]
	} else if len(h) > 0 {
		p.hdrs = make([]byte, 0, max(2*cap(p.hdrs), 4<<10))
	}
	return h[:len(h):len(h)]
}

// tail is where the next header is appended: the arena's free end.
func (p *path) tail() []byte { return p.hdrs[len(p.hdrs):] }
