package transport

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/stripe"
	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

// Session is a connection between two hosts over k paths, one channel per
// path, carrying any number of independent streams. Large segments are
// striped over every live path; small ones travel whole on the path chosen
// by Config.Policy. Data sent on a path that fails before the peer
// acknowledged it is sent again on the others.
//
// Lock order: Session.mu, then stripe.Segment's own lock (taken inside
// Claim). Stream fields marked "guarded by s.mu" use the session's lock.
type Session struct {
	cfg      *Config
	log      *slog.Logger
	id       [wire.SessionIDLen]byte
	isClient bool
	listener *Listener // server side: to forget the session when it ends

	peerWindow  uint32
	segmentSize int

	mu          sync.Mutex
	work        *sync.Cond // path writers wait here for frames to send
	paths       []*path    // by path id; nil holes on the listening side
	live        []*path    // the paths with a channel up (pathsChanged)
	streams     map[uint32]*Stream
	nextStream  uint32 // next locally opened stream id
	peerHighest uint32 // highest peer-opened stream id seen
	acceptQ     []*Stream
	acceptCh    chan struct{} // signalled when acceptQ grows
	striped     []*txSeg      // segments with fragments left to claim, oldest first
	wholeQ      []*Stream     // streams with whole segments to send, in turn order
	retx        []txRef       // frames to send again on any path
	ctrlAny     [][]byte      // control frames for any path
	rr          int           // round-robin cursor
	unackedSegs int           // segments not yet fully acknowledged
	flushCh     chan struct{} // closed and replaced when unackedSegs drops to 0
	downSince   time.Time     // when the last live path failed; zero while one is up
	closed      bool
	closing     bool // GoAway sent or received: channel failures are expected
	closeErr    error
	done        chan struct{}
	wg          sync.WaitGroup

	starts, ends, stripedSegs atomic.Int64
	integrityFailures         atomic.Int64 // channels that failed an integrity check
}

func newSession(cfg *Config, id [wire.SessionIDLen]byte, isClient bool, peerWindow, peerSegment uint32) *Session {
	s := &Session{
		cfg:        cfg,
		id:         id,
		isClient:   isClient,
		peerWindow: peerWindow,
		streams:    map[uint32]*Stream{},
		acceptCh:   make(chan struct{}, 1),
		flushCh:    make(chan struct{}),
		done:       make(chan struct{}),
	}
	s.segmentSize = min(cfg.SegmentSize, int(peerWindow))
	s.log = cfg.Logger.With("session", hex.EncodeToString(id[:4]))
	s.work = sync.NewCond(&s.mu)
	if isClient {
		s.nextStream = 1
	} else {
		s.nextStream = 2
	}
	s.downSince = time.Now()
	s.wg.Add(1)
	go s.monitor()
	return s
}

func newSessionID() [wire.SessionIDLen]byte {
	var id [wire.SessionIDLen]byte
	_, _ = rand.Read(id[:])
	return id
}

// ID returns the session id in hex.
func (s *Session) ID() string { return hex.EncodeToString(s.id[:]) }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended, or nil while it is open.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeErr
}

// OpenStream opens a new stream. The peer learns of it with the first
// message sent on it.
func (s *Session) OpenStream(ctx context.Context) (*Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.closeErr
	}
	id := s.nextStream
	s.nextStream += 2
	st := newStream(s, id)
	s.streams[id] = st
	return st, nil
}

// AcceptStream waits for a stream opened by the peer.
func (s *Session) AcceptStream(ctx context.Context) (*Stream, error) {
	for {
		s.mu.Lock()
		if len(s.acceptQ) > 0 {
			st := s.acceptQ[0]
			s.acceptQ = s.acceptQ[1:]
			s.mu.Unlock()
			return st, nil
		}
		if s.closed {
			err := s.closeErr
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-s.acceptCh:
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Flush waits until the peer has acknowledged every message written so
// far.
func (s *Session) Flush(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, ch, closed, err := s.unackedSegs, s.flushCh, s.closed, s.closeErr
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		if closed {
			return err
		}
		select {
		case <-ch:
		case <-s.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Shutdown flushes what was written, tells the peer the session ends and
// closes it. If ctx ends first the session is closed anyway and ctx's error
// returned.
func (s *Session) Shutdown(ctx context.Context) error {
	err := s.Flush(ctx)
	s.goAway(200 * time.Millisecond)
	s.closeWith(ErrClosed)
	return err
}

// Close tells the peer the session ends and closes it at once; data not
// yet acknowledged is lost. Use Shutdown to deliver it first.
func (s *Session) Close() error {
	s.goAway(50 * time.Millisecond)
	s.closeWith(ErrClosed)
	return nil
}

// goAway queues GoAway on every live channel and waits up to d for the
// writers to send it.
func (s *Session) goAway(d time.Duration) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closing = true
	for _, p := range s.paths {
		if p != nil && p.conn != nil {
			p.ctrl = append(p.ctrl, wire.AppendGoAway(nil, "shutdown"))
			p.goAway = true
		}
	}
	s.work.Broadcast()
	s.mu.Unlock()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		pending := false
		for _, p := range s.paths {
			if p != nil && p.conn != nil && p.goAway {
				pending = true
			}
		}
		s.mu.Unlock()
		if !pending {
			time.Sleep(2 * time.Millisecond) // let the last write reach the kernel
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (s *Session) closeWith(err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.closeErr = err
	var conns []net.Conn
	for _, p := range s.paths {
		if p != nil && p.conn != nil {
			conns = append(conns, p.conn)
			p.conn = nil
			p.gen++
			p.state = PathDown
		}
	}
	s.pathsChanged()
	for _, st := range s.streams {
		st.notify()
	}
	s.work.Broadcast()
	close(s.done)
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	if s.listener != nil {
		s.listener.forget(s)
	}
	switch {
	case errors.Is(err, ErrClosed):
		s.log.Debug("session closed")
	case errors.Is(err, ErrPeerClosed):
		s.log.Info("session closed by peer")
	default:
		s.log.Warn("session ended", "err", err)
	}
}

// Wait blocks until every goroutine of a closed session has exited.
func (s *Session) wait() { s.wg.Wait() }

// monitor ends the session when no path has been up for SessionTimeout,
// and refreshes path rates.
func (s *Session) monitor() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.mu.Lock()
			timeout := !s.downSince.IsZero() && now.Sub(s.downSince) > s.cfg.SessionTimeout
			for _, p := range s.paths {
				if p != nil {
					p.tick(now)
				}
			}
			s.mu.Unlock()
			if timeout {
				s.closeWith(fmt.Errorf("%w for %v", ErrNoPaths, s.cfg.SessionTimeout))
				return
			}
		}
	}
}

// livePaths returns the paths with a channel up. The slice is shared:
// callers must not change it. Caller holds s.mu.
func (s *Session) livePaths() []*path { return s.live }

// pathsChanged recomputes the live paths after a path's channel came up or
// went down. It builds a new slice, so that ones handed out before stay as
// they were. Caller holds s.mu.
func (s *Session) pathsChanged() {
	var live []*path
	for _, p := range s.paths {
		if p != nil && p.conn != nil {
			live = append(live, p)
		}
	}
	s.live = live
}

func (s *Session) workers() []stripe.Worker {
	var ws []stripe.Worker
	for _, p := range s.livePaths() {
		ws = append(ws, stripe.Worker{ID: p.id, Rate: p.speed()})
	}
	return ws
}

// wholeQuantum is how many bytes of whole segments a stream sends in one
// turn (deficit round robin): a stream of small messages gets as many
// bytes per turn as one of large ones, not as many messages.
const wholeQuantum = 64 << 10

// takeWhole returns the next whole segment that path p should send, or
// nil. Whole segments wait in the session, one queue per stream, until a
// path is ready to write: the streams take turns of wholeQuantum bytes,
// so a small message waits behind about one turn of each busier stream,
// not behind everything they queued. Under the soonest policy a path
// takes a segment only if no other live path would deliver it sooner;
// under round-robin the live paths take segments in turn. Caller holds
// s.mu.
func (s *Session) takeWhole(p *path) *txSeg {
	if len(s.wholeQ) == 0 {
		return nil
	}
	live := s.livePaths()
	for i, st := range s.wholeQ {
		seg := st.txWhole[0]
		if !s.shouldTake(p, live, int(seg.ref.Len)) {
			continue
		}
		st.txWhole[0] = nil
		st.txWhole = st.txWhole[1:]
		st.txTurn += int(seg.ref.Len) + 1 // empty segments count too
		switch {
		case len(st.txWhole) == 0:
			s.wholeQ = append(s.wholeQ[:i], s.wholeQ[i+1:]...)
			st.txWhole, st.txTurn = nil, 0
		case st.txTurn >= wholeQuantum:
			// Turn over: its next segment waits behind the other streams.
			s.wholeQ = append(append(s.wholeQ[:i], s.wholeQ[i+1:]...), st)
			st.txTurn = 0
		}
		return seg
	}
	return nil
}

// shouldTake reports whether path p, one of the live paths, is the one to
// send a whole segment of n bytes now. Caller holds s.mu.
func (s *Session) shouldTake(p *path, live []*path, n int) bool {
	if s.cfg.Policy == PolicyRoundRobin {
		if live[s.rr%len(live)] != p {
			return false
		}
		s.rr++
		return true
	}
	finish := func(q *path) float64 {
		rate := q.speed()
		if rate <= 0 {
			rate = 100e6 / 8
		}
		return float64(q.unackedBytes+int64(n))/rate + q.rtt.Seconds()/2
	}
	tp := finish(p)
	for _, q := range live {
		if q != p && finish(q) < tp {
			return false
		}
	}
	return true
}

// enqueue schedules a segment for sending. Caller holds s.mu.
func (s *Session) enqueue(seg *txSeg) {
	s.unackedSegs++
	if frag := s.plan(int(seg.ref.Len)); frag > 0 {
		seg.ref.FragSize = uint32(frag)
		mode := stripe.Enhanced
		if s.cfg.Stripe == StripeBasic {
			mode = stripe.Basic
		}
		seg.frags = seg.ref.Fragments()
		seg.pending = seg.frags
		seg.plan = stripe.NewSegment(seg.frags, mode, s.workers())
		s.striped = append(s.striped, seg)
		s.stripedSegs.Add(1)
	} else {
		seg.frags, seg.pending = 1, 1
		st := seg.st
		if len(st.txWhole) == 0 {
			s.wholeQ = append(s.wholeQ, st)
		}
		st.txWhole = append(st.txWhole, seg)
	}
	s.work.Broadcast()
}

// segAcked records that one frame of seg reached the peer. Caller holds
// s.mu.
func (s *Session) segAcked(seg *txSeg) {
	seg.pending--
	if seg.pending > 0 {
		return
	}
	if !seg.resent && !seg.borrowed {
		putBuf(seg.data)
	}
	seg.data = nil
	s.unackedSegs--
	if s.unackedSegs == 0 {
		close(s.flushCh)
		s.flushCh = make(chan struct{})
	}
}

// txSeg is one segment being sent.
type txSeg struct {
	st      *Stream
	ref     wire.SegmentRef
	data    []byte
	frags   int
	pending int // frames not yet acknowledged
	plan    *stripe.Segment
	// resent is set once a frame of the segment was queued for
	// retransmission: a copy may still be in a failed channel's writer, so
	// the buffer is left to the garbage collector instead of reused.
	resent bool
	// borrowed: data is the caller's (WriteMessageNoCopy), never recycled.
	borrowed bool
	// dup marks frames (fragment index, -1 for whole) already sent a second
	// time by an idle path.
	dup map[int]bool
	// withdrawn holds the paths that left the rest of the segment to
	// faster ones.
	withdrawn map[int]bool
	// claimed holds the paths that have sent fragments and not yet End.
	claimed map[int]bool
}

// txRef is one data frame: a whole segment (idx -1) or a fragment.
type txRef struct {
	seg *txSeg
	idx int
	at  time.Time // when it was written on its current path
}

func (r txRef) size() int64 {
	if r.idx < 0 {
		return int64(r.seg.ref.Len)
	}
	return int64(r.seg.ref.FragLen(r.idx))
}

// frame is what a path writer puts on the wire next: encoded headers and
// control frames, then an optional payload written in place. Both are
// captured under s.mu so the writer never reads shared state.
type frame struct {
	hdr     []byte
	payload []byte
	stream  uint32 // the stream whose lane carries the frame; 0: lane 0
}

// dataFrame encodes data frame r, preceded by an optional Start. Caller
// holds s.mu.
func (s *Session) dataFrame(p *path, r txRef, start *wire.Start, explicit bool) frame {
	seg := r.seg
	hdr := p.tail()
	if start != nil {
		hdr = start.Append(hdr)
	}
	if r.idx < 0 {
		hdr = wire.AppendMsgHeader(hdr, seg.ref)
		return frame{hdr: p.header(hdr), payload: seg.data, stream: seg.ref.Stream}
	}
	off := r.idx * int(seg.ref.FragSize)
	payload := seg.data[off : off+seg.ref.FragLen(r.idx)]
	if explicit {
		hdr = wire.AppendFragXHeader(hdr, seg.ref, r.idx)
	} else {
		hdr = wire.AppendFragHeader(hdr, len(payload))
	}
	return frame{hdr: p.header(hdr), payload: payload, stream: seg.ref.Stream}
}

// nextBatch returns the frames path p sends next on channel generation gen,
// blocking until there is one. ok is false when the channel is gone. The
// data frames are recorded as unacknowledged before they are written, so a
// failure during the write sends them again elsewhere.
func (s *Session) nextBatch(p *path, gen int, buf []frame) ([]frame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	emptied := false
	for {
		if s.closed || p.gen != gen || p.conn == nil {
			return buf, false
		}
		if !emptied {
			// This channel's writer wrote its batch before: its headers
			// are done with. (A new channel gets an arena of its own, so
			// a writer of the old one may still be reading its last.)
			p.hdrs, emptied = p.hdrs[:0], true
		}
		// Claim about 2ms of the path's rate at a time: enough to keep
		// syscalls few on fast paths, little enough that a small message
		// queued meanwhile waits no longer than about one fragment.
		budget := int64(256 << 10)
		if p.rate > 0 {
			budget = min(max(int64(p.rate*0.002), int64(s.fragBound())), 1<<20)
		}
		for _, c := range p.ctrl {
			buf = append(buf, frame{hdr: c})
		}
		p.ctrl = p.ctrl[:0]
		if p.goAway {
			p.goAway = false
			return buf, true
		}
		if p.ackDue {
			p.ackDue = false
			for id, l := range p.lanes {
				switch {
				case l == nil || !l.ackDue:
				case id == 0:
					buf = append(buf, frame{hdr: p.header(wire.AppendU64(p.tail(), wire.TypeAck, l.rxAcked))})
				default:
					buf = append(buf, frame{hdr: p.header(wire.AckLane{Lane: uint16(id), Count: l.rxAcked}.Append(p.tail()))})
				}
				if l != nil {
					l.ackDue = false
				}
			}
		}
		for len(s.ctrlAny) > 0 {
			buf = append(buf, frame{hdr: s.ctrlAny[0]})
			s.ctrlAny = s.ctrlAny[1:]
		}
		// Small frames stuck on another path (a lost packet waiting for
		// that path's retransmission timeout) go again here, before new
		// data: what they carry is usually a small message that everything
		// else on its stream is waiting for.
		for now := time.Now(); budget > 0; {
			r, ok := s.rescue(p, now)
			if !ok {
				break
			}
			buf = s.sendCopy(p, r, buf)
			budget -= r.size()
		}
		for budget > 0 && len(s.retx) > 0 {
			r := s.retx[0]
			s.retx = s.retx[1:]
			if r.seg.data == nil {
				continue // acknowledged meanwhile
			}
			buf = append(buf, s.dataFrame(p, r, nil, r.idx >= 0))
			p.sent(r)
			budget -= r.size()
		}
		for budget > 0 {
			seg := s.takeWhole(p)
			if seg == nil {
				if len(s.wholeQ) > 0 {
					// Left to another path: make sure its writer looks.
					s.work.Broadcast()
				}
				break
			}
			r := txRef{seg: seg, idx: -1}
			buf = append(buf, s.dataFrame(p, r, nil, false))
			p.sent(r)
			budget -= r.size()
		}
		var taken map[*txSeg]int
		for budget > 0 {
			f, r, ok := s.claim(p, &taken)
			if !ok {
				break
			}
			buf = append(buf, f)
			if r.seg != nil {
				p.sent(r)
				budget -= r.size()
			}
		}
		// Nothing of its own to send: send again, from their tails, the
		// frames that slower paths still hold unacknowledged, so a message
		// completes when its fastest copy arrives rather than when the
		// slowest path drains its backlog. The receiver drops whichever
		// copy comes second.
		for budget > 0 && (len(buf) == 0 || p.dupping) {
			r, ok := s.stealTail(p)
			if !ok {
				break
			}
			p.dupping = true
			buf = s.sendCopy(p, r, buf)
			budget -= r.size()
		}
		if len(buf) > 0 {
			return buf, true
		}
		p.dupping = false
		p.idle = true
		s.work.Wait()
	}
}

// claim takes the next fragment for path p from the oldest striped segment
// that has work for it, or an End frame when p leaves a segment. Caller
// holds s.mu.
func (s *Session) claim(p *path, taken *map[*txSeg]int) (frame, txRef, bool) {
	for i := 0; i < len(s.striped); i++ {
		seg := s.striped[i]
		// One batch takes no more than this path's share of what is left
		// of a segment, so the other paths get to claim their part.
		if n := (*taken)[seg]; n > 0 && n >= s.batchShare(p, seg) {
			continue
		}
		// Only the last queued segment's end decides when the data
		// arrives: earlier ones leave slow paths work further on.
		last := i == len(s.striped)-1
		if last && seg.claimed[p.id] && !seg.withdrawn[p.id] && !s.worthClaiming(p, seg) {
			// Leave the rest of the segment to the faster paths: its
			// fragments go back to the plan for them to sweep. At least
			// one live path always stays.
			stay := 0
			for _, q := range s.livePaths() {
				if q != p && !seg.withdrawn[q.id] {
					stay++
				}
			}
			if stay > 0 {
				if seg.withdrawn == nil {
					seg.withdrawn = map[int]bool{}
				}
				seg.withdrawn[p.id] = true
				seg.plan.Remove(p.id)
			}
		}
		c, ok := seg.plan.Claim(p.id)
		if !ok {
			if seg.claimed[p.id] {
				delete(seg.claimed, p.id)
				if s.cfg.Stripe == StripeEnhanced {
					p.dataLane(seg.st.id).ctrSeg = nil
					s.ends.Add(1)
					return frame{hdr: p.header(wire.End{Stream: seg.st.id, Seq: seg.ref.Seq}.Append(p.tail())), stream: seg.st.id}, txRef{}, true
				}
			}
			if seg.plan.Unsent() == 0 && len(seg.claimed) == 0 {
				s.striped = append(s.striped[:i], s.striped[i+1:]...)
				i--
			}
			continue
		}
		if seg.claimed == nil {
			seg.claimed = map[int]bool{}
		}
		seg.claimed[p.id] = true
		if *taken == nil {
			*taken = map[*txSeg]int{}
		}
		(*taken)[seg]++
		r := txRef{seg: seg, idx: c.Index}
		var start *wire.Start
		if s.cfg.Stripe == StripeEnhanced {
			dir := wire.DirInc
			step := 1
			if c.Dir == stripe.Dec {
				dir, step = wire.DirDec, -1
			}
			// The receiver's counter for this lane must point at
			// c.Index; if it does not (another segment came between, or
			// the plan moved us), say where we are.
			l := p.dataLane(seg.st.id)
			if c.Start || l.ctrSeg != seg || l.ctrNext != c.Index || l.ctrDir != dir {
				start = &wire.Start{Ref: seg.ref, First: uint32(c.Index), Dir: dir}
				s.starts.Add(1)
			}
			l.ctrSeg, l.ctrNext, l.ctrDir = seg, c.Index+step, dir
		}
		return s.dataFrame(p, r, start, s.cfg.Stripe == StripeBasic), r, true
	}
	return frame{}, txRef{}, false
}

// maxDupBacklog bounds how far ahead an idle path may fill its own queue
// with copies of a slower path's frames (and 8 fragments bound it in bytes).
const maxDupBacklog = 10 * time.Millisecond

// Rescue thresholds: a frame of at most maxRescue bytes that another path
// has held unacknowledged for longer than twice its round-trip time plus
// rescueSlack is sent again on a path that would deliver it sooner.
const (
	maxRescue   = 64 << 10
	rescueSlack = 30 * time.Millisecond
)

// rescue returns a small frame that another live path has held
// unacknowledged for too long, for p to send again. Caller holds s.mu.
func (s *Session) rescue(p *path, now time.Time) (txRef, bool) {
	// When p would deliver a copy, as far as its rate is known.
	ahead := p.rtt / 2
	if r := p.speed(); r > 0 {
		ahead += time.Duration(float64(p.unackedBytes) / r * float64(time.Second))
	}
	for _, q := range s.paths {
		if q == nil || q == p || q.conn == nil || q.inflight == 0 {
			continue
		}
		late := 2*q.rtt + rescueSlack
		if ahead > late {
			continue // p would not deliver a copy soon enough
		}
		for _, l := range q.lanes {
			if l == nil {
				continue
			}
			// Oldest first; the first frame young enough ends the lane.
			for _, r := range l.unacked {
				if now.Sub(r.at) <= late {
					break
				}
				if r.seg.data == nil || r.size() > maxRescue || r.seg.dup[r.idx] {
					continue
				}
				r.seg.markDup(r.idx)
				return r, true
			}
		}
	}
	return txRef{}, false
}

// markDup records that frame idx of seg has been sent a second time, on
// another path, so that it is not copied again. Caller holds s.mu.
func (seg *txSeg) markDup(idx int) {
	if seg.dup == nil {
		seg.dup = map[int]bool{}
	}
	seg.dup[idx] = true
}

// sendCopy appends to buf a second copy of frame r, sent on p while r's
// first path still holds it unacknowledged; the receiver drops whichever
// copy arrives second. Caller holds s.mu.
func (s *Session) sendCopy(p *path, r txRef, buf []frame) []frame {
	r.seg.pending++
	r.seg.resent = true
	buf = append(buf, s.dataFrame(p, r, nil, r.idx >= 0))
	p.sent(r)
	p.duplicated.Add(r.size())
	return buf
}

// stealTail picks a frame for idle path p to duplicate: the most recently
// sent, not yet duplicated frame of the live path with the largest
// unacknowledged backlog, if that backlog is worth it. Caller holds s.mu.
func (s *Session) stealTail(p *path) (txRef, bool) {
	var q *path
	for _, c := range s.livePaths() {
		if c == p || c.inflight == 0 {
			continue
		}
		if q == nil || c.unackedBytes > q.unackedBytes {
			q = c
		}
	}
	if q == nil || p.speed() <= 0 || q.speed() <= 0 {
		return txRef{}, false
	}
	// q delivers its last frame after about tq; p would deliver a copy
	// after tp. Duplicate only frames p delivers clearly sooner.
	tq := float64(q.unackedBytes) / q.speed()
	// Lane by lane when q has lanes: each lane's tail is its most recent.
	for _, l := range q.lanes {
		if l == nil {
			continue
		}
		for i := len(l.unacked) - 1; i >= 0; i-- {
			r := l.unacked[i]
			if r.seg.data == nil || r.seg.dup[r.idx] {
				continue
			}
			// Copies add to p's own backlog, which small messages queued
			// on p wait behind: keep it under maxDupBacklog.
			tp := float64(p.unackedBytes+r.size()) / p.speed()
			if tp+0.002 >= tq || tp > maxDupBacklog.Seconds() || p.unackedBytes+r.size() > int64(8*min(s.fragBound(), defaultFragment)) {
				return txRef{}, false
			}
			r.seg.markDup(r.idx)
			return r, true
		}
	}
	return txRef{}, false
}

// worthClaiming reports whether path p should take another fragment of
// seg: whether p would deliver it no later than the other live paths
// together would deliver all that is left of seg (the earliest-completion
// rule). A slow path stops claiming near the end of a segment, and the
// faster paths sweep the rest. With unknown rates it always claims.
// Caller holds s.mu.
func (s *Session) worthClaiming(p *path, seg *txSeg) bool {
	sp := p.speed()
	if sp <= 0 {
		return true
	}
	var others, backlog float64
	for _, q := range s.livePaths() {
		if q == p {
			continue
		}
		if q.speed() <= 0 {
			return true
		}
		others += q.speed()
		backlog += float64(q.unackedBytes)
	}
	if others == 0 {
		return true
	}
	frag := float64(seg.ref.FragSize)
	left := float64(seg.plan.Unsent()) * frag
	mine := (float64(p.unackedBytes) + frag) / sp
	theirs := (backlog + left) / others
	return mine <= theirs
}

// batchShare is how many fragments of seg path p may claim in one batch:
// its rate's share of the fragments still unclaimed, at least one. Caller
// holds s.mu.
func (s *Session) batchShare(p *path, seg *txSeg) int {
	live := s.livePaths()
	if len(live) <= 1 {
		return 1 << 30
	}
	var sum float64
	for _, q := range live {
		sum += max(q.speed(), 1)
	}
	share := max(p.speed(), 1) / sum
	return max(1, int(float64(seg.plan.Unsent())*share+0.999))
}

// pathDown retires channel generation gen of p after err. Frames it had
// not had acknowledged go to the other paths.
func (s *Session) pathDown(p *path, gen int, err error) {
	s.mu.Lock()
	if p.gen != gen || p.conn == nil {
		s.mu.Unlock()
		return
	}
	conn := p.conn
	p.conn = nil
	s.pathsChanged()
	p.gen++
	p.state = PathDown
	p.lastErr = err
	closed := s.closed || s.closing
	if !closed {
		p.failovers.Add(1)
	}
	var retxBytes int64
	for _, l := range p.lanes {
		if l == nil {
			continue
		}
		for _, r := range l.unacked {
			if r.seg.data != nil {
				r.seg.resent = true
				s.retx = append(s.retx, r)
				retxBytes += r.size()
			}
		}
	}
	p.retransmitted.Add(retxBytes)
	p.lanes = nil
	p.inflight = 0
	p.unackedBytes = 0
	p.ctrl = p.ctrl[:0]
	p.ackDue = false
	live := s.livePaths()
	for _, seg := range s.striped {
		seg.plan.Remove(p.id)
		delete(seg.claimed, p.id)
		// Paths that left the segment to the faster ones come back.
		for _, q := range live {
			seg.plan.Join(stripe.Worker{ID: q.id, Rate: q.speed()})
		}
		seg.withdrawn = nil
	}
	// Window updates sent on the failed channel may be lost: send the
	// current limits again.
	for _, st := range s.streams {
		if st.rxLimitSent > 0 {
			s.ctrlAny = append(s.ctrlAny, wire.Window{Stream: st.id, Limit: st.rxLimitSent}.Append(nil))
		}
	}
	if len(s.livePaths()) == 0 && s.downSince.IsZero() {
		s.downSince = time.Now()
	}
	s.work.Broadcast()
	s.mu.Unlock()
	_ = conn.Close()
	if closed {
		return
	}
	s.log.Warn("path down, failing over", "path", p.id, "local", p.local, "remote", p.remote,
		"err", err, "retransmit_bytes", retxBytes)
	if s.isClient {
		s.wg.Add(1)
		go s.redial(p)
	}
}

// attach makes conn the channel of path id and starts its goroutines.
func (s *Session) attach(id int, local, remote string, conn net.Conn) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return s.closeErr
	}
	for len(s.paths) <= id {
		s.paths = append(s.paths, nil)
	}
	p := s.paths[id]
	if p == nil {
		p = &path{id: id, local: local, remote: remote, s: s}
		s.paths[id] = p
	}
	old := p.conn
	oldGen := p.gen
	s.mu.Unlock()
	if old != nil {
		// The peer rejoined before we noticed the old channel fail.
		s.pathDown(p, oldGen, errors.New("replaced by a new channel"))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return s.closeErr
	}
	if p.everUp {
		p.reconnects.Add(1)
	}
	p.everUp = true
	p.conn = conn
	p.hdrs = nil // see nextBatch
	s.pathsChanged()
	p.bound = conn.LocalAddr().String()
	p.gen++
	gen := p.gen
	p.state = PathUp
	p.lastErr = nil
	// Lane 0 is the channel; the other lanes open as either side first
	// sends on them.
	p.lanes = []*lane{{conn: conn, reading: true}}
	p.nlanes = 1
	lanes, hasLanes := conn.(channel.Lanes)
	if hasLanes {
		p.nlanes = s.cfg.Lanes
	}
	nlanes, lane0 := p.nlanes, p.lanes[0]
	p.lowat = channel.NotSentLowat
	p.lastRx = time.Now()
	s.downSince = time.Time{}
	for _, seg := range s.striped {
		seg.plan.Join(stripe.Worker{ID: p.id, Rate: p.speed()})
	}
	s.work.Broadcast()
	s.wg.Add(3)
	if hasLanes {
		s.wg.Add(1)
		go s.acceptLanes(p, lanes, gen)
	}
	s.mu.Unlock()
	go s.readLoop(p, conn, gen, 0, lane0)
	go s.writeLoop(p, conn, gen, nlanes)
	go s.heartbeat(p, gen)
	s.log.Info("path up", "path", id, "local", local, "remote", remote)
	return nil
}

// PathState is the state of one path.
type PathState uint8

// Path states.
const (
	PathDown PathState = iota
	PathUp
)

func (st PathState) String() string {
	if st == PathUp {
		return "up"
	}
	return "down"
}

// PathStats describes one path of a session. Counters are cumulative over
// the session's life and survive reconnects of the path.
type PathStats struct {
	ID            int           `json:"id"`
	Local         string        `json:"local"`
	Remote        string        `json:"remote"`
	State         string        `json:"state"`
	BytesSent     int64         `json:"bytes_sent"`
	BytesReceived int64         `json:"bytes_received"`
	FramesSent    int64         `json:"frames_sent"`
	FramesRecv    int64         `json:"frames_received"`
	RateBps       float64       `json:"rate_bps"` // measured send rate while busy, bit/s
	RTT           time.Duration `json:"rtt_ns"`
	Failovers     int64         `json:"failovers"`
	Reconnects    int64         `json:"reconnects"`
	Retransmitted int64         `json:"retransmitted_bytes"`      // bytes sent again elsewhere after this path failed
	Duplicated    int64         `json:"duplicated_bytes"`         // bytes this idle path sent again on behalf of a slower one
	DupReceived   int64         `json:"duplicate_bytes_received"` // payload bytes received that were already there, and dropped
	Lanes         int           `json:"lanes"`                    // lanes of the current channel in use, counting lane 0 (see Config.Lanes); 0 while down
	Integrity     int64         `json:"integrity_failures"`       // channels of this path dropped because received bytes failed authentication (ErrIntegrity)
	Encrypted     bool          `json:"encrypted"`                // the current channel encrypts (false: Config.InsecurePlaintext)
	LastError     string        `json:"last_error,omitempty"`
}

// Stats returns per-path statistics ordered by path id.
func (s *Session) Stats() []PathStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PathStats
	for _, p := range s.paths {
		if p == nil {
			continue
		}
		ps := PathStats{
			ID: p.id, Local: cmp.Or(p.bound, p.local), Remote: p.remote, State: p.state.String(),
			BytesSent: p.bytesSent.Load(), BytesReceived: p.bytesRecv.Load(),
			FramesSent: p.framesSent.Load(), FramesRecv: p.framesRecv.Load(),
			RateBps: p.rate * 8, RTT: p.rtt,
			Failovers: p.failovers.Load(), Reconnects: p.reconnects.Load(),
			Retransmitted: p.retransmitted.Load(),
			Duplicated:    p.duplicated.Load(),
			DupReceived:   p.dupRecv.Load(),
			Integrity:     p.integrity.Load(),
		}
		switch p.conn.(type) {
		case *secureConn, *secureLanes:
			ps.Encrypted = true
		}
		for _, l := range p.lanes {
			if l != nil && l.conn != nil {
				ps.Lanes++
			}
		}
		if p.lastErr != nil {
			ps.LastError = p.lastErr.Error()
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// StripeStats counts striping control traffic sent by this side.
type StripeStats struct {
	Segments int64 `json:"segments"` // segments striped
	Starts   int64 `json:"starts"`   // Start control messages
	Ends     int64 `json:"ends"`     // End control messages
}

// StripeStats returns striping counters.
func (s *Session) StripeStats() StripeStats {
	return StripeStats{Segments: s.stripedSegs.Load(), Starts: s.starts.Load(), Ends: s.ends.Load()}
}
