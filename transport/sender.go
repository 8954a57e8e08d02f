package transport

import (
	"net"
	"time"

	"github.com/braid-hpc/braid/stripe"
	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

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
	s.enqueueSeg(seg)
	s.work.Broadcast()
}

// enqueueSeg queues seg, striped or whole, and reports whether it is
// whole. Caller holds s.mu and wakes the writers.
func (s *Session) enqueueSeg(seg *txSeg) (whole bool) {
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
		return true
	}
	return false
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
		var goAway bool
		buf, goAway = s.collect(p, buf, budget, true)
		if goAway || len(buf) > 0 {
			return buf, true
		}
		p.dupping = false
		p.idle = true
		p.waiting = true
		s.work.Wait()
		p.waiting = false
	}
}

// ackHold is the longest an acknowledgement of small frames waits for a
// frame to carry it, and maxAcksHeld how many acknowledgements may wait.
// A small message is usually a request whose reply follows within
// microseconds (a unit and its result, a heartbeat and its answer): the
// reply carries the acknowledgement, where sending it at once costs each
// side a write of its own. ackHold is far below the 30 ms a sender waits
// before sending a small frame again on another path (rescueSlack).
const (
	ackHold     = 2 * time.Millisecond
	maxAcksHeld = 8
)

// holdAck lets the acknowledgement just queued on p wait up to ackHold
// for other frames to go with, unless maxAcksHeld are waiting: then it
// wakes the writer. Caller holds s.mu.
func (s *Session) holdAck(p *path) {
	if p.acksHeld++; p.acksHeld >= maxAcksHeld {
		s.work.Broadcast()
		return
	}
	if p.ackArmed {
		return
	}
	p.ackArmed = true
	if p.ackTimer == nil {
		p.ackTimer = time.AfterFunc(ackHold, func() {
			s.mu.Lock()
			p.ackArmed = false
			if p.ackDue {
				s.work.Broadcast()
			}
			s.mu.Unlock()
		})
	} else {
		p.ackTimer.Reset(ackHold)
	}
}

// collect appends to buf the frames path p sends next: control frames,
// acknowledgements, and with data, up to about budget bytes of data
// frames. goAway reports that a GoAway is among them (nothing may follow
// it). Caller holds s.mu.
func (s *Session) collect(p *path, buf []frame, budget int64, data bool) (_ []frame, goAway bool) {
	for _, c := range p.ctrl {
		buf = append(buf, frame{hdr: c})
	}
	p.ctrl = p.ctrl[:0]
	if p.goAway {
		p.goAway = false
		return buf, true
	}
	if p.ackDue {
		p.ackDue, p.acksHeld = false, 0
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
	if !data {
		return buf, false
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
	return buf, false
}

// directMax is the smallest data frame whose channel reader writes the
// frame's acknowledgement itself (sendDirect): frames this large come in
// bulk, with no reply to carry the acknowledgement.
const directMax = 64 << 10

// directBacklog is the most data a path may hold unacknowledged for
// another goroutine than its writer to write on it. The kernel holds at
// most that much of it unsent, far below TCP_NOTSENT_LOWAT and the send
// buffer, so a control frame written then never waits for the peer to
// read: a channel's reader that waited in a write while the peer's
// reader did the same would wait forever.
const directBacklog = 16 << 10

// directBatch is a batch of frames that the goroutine which queued them
// (a channel's reader, for an acknowledgement) writes itself, instead of
// waking the path's writer: a hand-off between goroutines costs a
// wake-up, which on a fast path is a large part of the cost. Only a path whose writer is
// waiting for work, and that no one else is writing, is written this
// way; the writer (p.wmu) holds the channel until the batch is written,
// so frames go out in the order they were recorded.
type directBatch struct {
	p      *path
	gen    int
	conn   net.Conn
	frames []frame
}

// sendDirect collects the next batch of path p for the calling goroutine
// to write (directBatch.write, after releasing s.mu), or returns nil when
// p's writer must do it: it is busy, someone writes p, or p has lanes.
// With data false (the goroutine reads a channel, and must never block
// in a write, or two peers could each wait for the other to read) the
// batch holds control frames only; data frames stay for the writer,
// which a Broadcast earlier told about them. Caller holds s.mu.
func (s *Session) sendDirect(p *path, data bool) *directBatch {
	if p == nil || !p.waiting || p.conn == nil || p.nlanes != 1 || s.closed || p.unackedBytes > directBacklog || !p.wmu.TryLock() {
		return nil
	}
	// p's writer waits, so its last batch is written, and no one else
	// writes (p.wmu): the headers of earlier batches are done with.
	p.hdrs = p.hdrs[:0]
	frames, _ := s.collect(p, p.direct[:0], directMax, data)
	if len(frames) == 0 {
		p.wmu.Unlock()
		return nil
	}
	return &directBatch{p: p, gen: p.gen, conn: p.conn, frames: frames}
}

// write writes the batch and releases the path. Called without s.mu.
func (b *directBatch) write(s *Session) {
	p := b.p
	n := len(b.frames)
	total, err := writeFrames(b.conn, b.frames, &p.dbufs, &p.dhdrs)
	clear(b.frames)
	clear(p.dbufs)
	p.direct, p.dbufs = b.frames[:0], p.dbufs[:0]
	p.wmu.Unlock()
	if err != nil {
		s.pathDown(p, b.gen, &PathError{Path: p.id, Local: p.local, Remote: p.remote, Op: "write", Err: err})
		return
	}
	p.bytesSent.Add(total)
	p.framesSent.Add(int64(n))
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
		p.fragments.Add(1)
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
	sp := p.planRate()
	if sp <= 0 {
		return true
	}
	var others, backlog float64
	for _, q := range s.livePaths() {
		if q == p {
			continue
		}
		if q.planRate() <= 0 {
			return true
		}
		others += q.planRate()
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
				p.wmu.Lock()
				total, err = writeFrames(w, run[:n], &bufs, &hdrs)
				p.wmu.Unlock()
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
