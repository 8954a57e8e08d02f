package transport

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/braid-hpc/braid/stripe"
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
	hdrs []byte
	ctrl [][]byte // control frames for this channel
	// waiting: the writer waits for work (nextBatch), so a goroutine that
	// queues a frame may write it itself (sendDirect).
	waiting bool

	// wmu is held by whoever writes the channel: the path's writer, or a
	// goroutine writing a directBatch. direct, dbufs and dhdrs are the
	// latter's scratch space, guarded by wmu.
	wmu    sync.Mutex
	direct []frame
	dbufs  net.Buffers
	dhdrs  []byte
	goAway bool // GoAway queued: write it, then stop sending

	// Lanes of conn (see lane.go): lanes[0] is conn itself. nlanes is how
	// many this side sends on: Config.Lanes if conn has lanes, else 1.
	lanes  []*lane
	nlanes int
	ackDue bool // some lane has an acknowledgement to send
	// Acknowledgements of small frames held for a reply to carry them
	// (holdAck): how many were queued since the writer last sent one,
	// and the timer that sends them if no reply does.
	acksHeld     int
	ackTimer     *time.Timer
	ackArmed     bool
	inflight     int   // data frames sent on conn, on any lane, not yet acknowledged
	unackedBytes int64 // their bytes
	// rx0 is when a frame was last read on lane 0 of the channel, or
	// when the channel began (UnixNano): heartbeat probes a path only
	// after it has been silent for a while.
	rx0 atomic.Int64
	// maxGap is the longest wait, in nanoseconds, between two frames
	// read on lane 0 over every channel of the path (PathStats.MaxGap).
	maxGap    atomic.Int64
	downAt    time.Time     // when the path was last declared down
	silentFor time.Duration // of that time, if for silence (silenceError)
	// refused: the path is down and its last redial was refused
	// (ECONNREFUSED): nothing listens at its remote address (redialFailed).
	refused bool

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
	fragments              atomic.Int64 // fragments of striped segments claimed (first copies)
	pings                  atomic.Int64 // probes sent
	dupping                bool         // the writer is duplicating a slower path's tail

	// Delivery rate from acknowledgements (bytes/s), and its window:
	// opened by the first acknowledgement after the path began sending,
	// so the round trip and the queue ahead of that acknowledgement are
	// not in it.
	drate     float64
	dwinStart time.Time
	dwinBytes int64
	// The current burst: since the path last began sending with nothing
	// in flight, and its bytes acknowledged (sampleBurst).
	burstStart time.Time
	burstBytes int64
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
		p.burstStart, p.burstBytes = time.Now(), 0
		p.dwinStart, p.dwinBytes = time.Time{}, 0
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

// planRate is the rate plan and the earliest-completion rule use: speed,
// or while that is unknown, the rate of short bursts (a path that is never
// busy for a whole delivery window, as in a ping-pong of messages of tens
// of KB, has no other). The burst rate never overrides a measured speed:
// a burst that left in one go through a shaper's bucket looks faster than
// the path is. It is left out of the other decisions (which frames an
// idle path copies, where a whole segment goes).
func (p *path) planRate() float64 {
	if r := p.speed(); r > 0 {
		return r
	}
	return p.brate
}

// sampleDelivery updates the delivery rate from acknowledged frames: bytes
// acknowledged per second over windows of at least 20ms during which the
// path always had data in flight. A window opens with an acknowledgement,
// not with the send: from the send to the first acknowledgement the path
// delivers nothing the sender sees, and a window that began at the send
// would count the round trip and the queue in front of the data (on a
// link whose acknowledgements wait behind the sender's own queue, tens of
// milliseconds) as time without delivery. A path given little work then
// reads as slow, is given less, and reads slower still. Caller holds s.mu.
func (p *path) sampleDelivery(acked []txRef, now time.Time) {
	if p.unackedBytes == 0 || p.burstStart.IsZero() {
		return
	}
	var n int64
	for _, r := range acked {
		n += r.size()
	}
	p.burstBytes += n
	switch {
	case p.dwinStart.IsZero():
		// What this acknowledgement releases left before the window.
		p.dwinStart, p.dwinBytes = now, 0
	default:
		p.dwinBytes += n
		if dt := now.Sub(p.dwinStart); dt >= 20*time.Millisecond {
			sample := float64(p.dwinBytes) / dt.Seconds()
			if p.drate == 0 {
				p.drate = sample
			} else {
				p.drate = 0.75*p.drate + 0.25*sample
			}
			p.dwinStart, p.dwinBytes = now, 0
		}
	}
	if p.inflight == len(acked) {
		// Nothing left in flight: the next burst starts with the next send.
		p.sampleBurst(now)
		p.raiseFromBurst(now)
		p.burstStart, p.dwinStart = time.Time{}, time.Time{}
	}
}

// burstProof is the least a burst must carry to raise a path's delivery
// rate: far more than a shaper's bucket lets through at once.
const burstProof = 64 << 10

// raiseFromBurst raises the delivery rate to the rate of the burst that
// just drained, if that is higher: its bytes over the time from its first
// send to its last acknowledgement less one round trip. A path that is
// given a small share of each message (a ping-pong striped over paths
// whose rates are thought unequal) drains it in less than a delivery
// window and would never be measured again: its share, and the rate it
// is thought to have, would stay small. A burst can only read slower
// than the path (the sender may have fed it slowly, the last
// acknowledgement may have waited for company), never faster, so it
// raises the rate and never lowers it; the delivery windows of busy
// paths bring it down. Caller holds s.mu.
func (p *path) raiseFromBurst(now time.Time) {
	if p.burstBytes < burstProof || p.drate == 0 {
		return
	}
	dt := now.Sub(p.burstStart)
	busy := dt - p.minRTT
	if busy < dt/2 {
		return // mostly the round trip
	}
	if r := float64(p.burstBytes) / busy.Seconds(); r > p.drate {
		p.drate = r
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

// burstMin is the least a burst must carry for its rate to count: one
// whole message of 8 KiB (the smallest that striping can speed up), but
// not the 4 KiB halves of one striped over two paths, which on a shaped
// link leave mostly in the shaper's bucket and would read as faster than
// the link, so that the next message goes whole again.
const burstMin = 8 << 10

// sampleBurst estimates the rate of a path that never stays busy for a
// full delivery window (messages of tens of KB, sent one at a time): when
// everything in flight has been acknowledged within less than a window,
// the bytes of that burst over its duration less one round trip. Caller
// holds s.mu.
func (p *path) sampleBurst(now time.Time) {
	dt := now.Sub(p.burstStart)
	if p.burstBytes < burstMin || dt >= 20*time.Millisecond {
		return
	}
	busy := dt - p.minRTT
	if busy < dt/4 {
		return // mostly the round trip: no rate in it
	}
	// Rise at once, fall slowly: a burst delayed by the scheduler looks
	// slower than the path is.
	sample := float64(p.burstBytes) / busy.Seconds()
	if sample > p.brate {
		p.brate = sample
	} else {
		p.brate = 0.9*p.brate + 0.1*sample
	}
}

// tick updates the path's rate estimate. Caller holds s.mu.
func (p *path) tick(now time.Time) {
	b := p.bytesSent.Load()
	sent := b != p.lastBytes || p.lastTick.IsZero()
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
	// The kernel's round trip changes only with traffic: an idle path,
	// as most of a large cluster's sessions are, costs no system call.
	if p.conn != nil && (sent || p.minRTT == 0) {
		if rtt, ok := channel.MinRTT(socketOf(p.conn)); ok {
			p.sampleMinRTT(rtt, now)
		}
	}
	if p.conn != nil && p.rate > 0 {
		want := min(max(int(p.rate/1000), channel.NotSentLowat), 4<<20)
		if want > p.lowat*5/4 || want < p.lowat*3/4 {
			if channel.SetSendBacklog(socketOf(p.conn), want) {
				p.lowat = want
			}
		}
	}
}

// heartbeat looks after channel gen of p every HeartbeatInterval: it
// queues the acknowledgements due and, when the path needs one, a ping.
//
// A ping keeps the path from looking silent to the peer (each side
// declares a path down after PathTimeout without a frame on lane 0) and
// its echo measures the round trip. A path is probed on each of its
// first two ticks, for a first round-trip time, and whenever it has data
// of ours awaiting acknowledgement, whose sending needs a current round
// trip; otherwise only once nothing has arrived on it for probeAfter.
// Then the side that hears nothing pings, its peer answers, and each side
// hears something at least every probeAfter plus a tick and a round trip,
// well inside PathTimeout. An idle session of 1,000 paths, as a server
// of a large cluster holds, thus exchanges a probe every few seconds a
// path instead of two each interval.
func (s *Session) heartbeat(p *path, gen int) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	after := s.cfg.probeAfter()
	for tick := 0; ; tick++ {
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
		now := time.Now()
		if tick < 2 || p.inflight > 0 || now.Sub(time.Unix(0, p.rx0.Load())) >= after {
			p.ctrl = append(p.ctrl, wire.AppendU64(nil, wire.TypePing, uint64(now.UnixNano())))
			p.pings.Add(1)
		}
		for _, l := range p.lanes {
			if l != nil && l.rxFrames != l.rxAcked {
				l.ackDue, l.rxAcked, p.ackDue = true, l.rxFrames, true
			}
		}
		s.work.Broadcast()
		s.mu.Unlock()
	}
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
		if errors.Is(err, errSessionGone) {
			s.log.Warn("the peer no longer knows this session; closing it", "path", p.id, "remote", p.remote)
			s.closeWith(fmt.Errorf("%w: redialing path %d: %v", ErrPeerClosed, p.id, err))
			return
		}
		if s.redialFailed(p, errors.Is(err, syscall.ECONNREFUSED)) {
			s.log.Warn("nothing listens at any of the peer's addresses any more; closing the session", "path", p.id, "remote", p.remote)
			s.closeWith(fmt.Errorf("%w: its process ended: every path is down and refuses a new channel (the last, path %d: %v)",
				ErrPeerClosed, p.id, err))
			return
		}
		if errors.Is(err, ErrIntegrity) || errors.Is(err, ErrAuth) {
			// The peer proved the key when the session began: a
			// handshake that fails now was altered on the way (or the
			// peer restarted with another key). It counts as a failed
			// channel, so that a path whose every redial is tampered
			// with ends the session instead of holding it open.
			n, last := s.integrityFailed(p)
			s.log.Error("redialed channel failed its handshake", "path", p.id, "remote", p.remote, "failures", n, "err", err)
			if last {
				s.closeWith(fmt.Errorf("%w: %d channels of this session failed it, the last while redialing path %d: %v", ErrIntegrity, n, p.id, err))
				return
			}
		}
		s.log.Debug("redial failed", "path", p.id, "remote", p.remote, "err", err)
		delay = min(2*delay, 2*time.Second)
	}
}

// redialFailed notes whether a failed redial of down path p was refused,
// and reports whether every path of the session is now down with its last redial
// refused. A refusal means the peer's host answers but nothing listens at
// the address: the peer's listener is closed, and with it every session
// it knew, so this one can never rejoin (a new process listening there
// would answer errSessionGone). A peer killed outright (kill -9, a crash)
// thus ends the session a ReconnectInterval after its kernel closed the
// channels, where a silent peer (stopped, or a network cut: redials time
// out instead) still gets SessionTimeout to come back.
func (s *Session) redialFailed(p *path, refused bool) (gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.conn != nil {
		return false
	}
	p.refused = refused
	for _, q := range s.paths {
		if q != nil && (q.conn != nil || !q.refused) {
			return false
		}
	}
	return true
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
	closed := s.closed || s.closing
	if closed && p.state == PathUp {
		p.state = PathClosed // up until the session was closed
	} else {
		p.state = PathDown
	}
	p.lastErr = err
	p.downAt, p.silentFor = time.Now(), 0
	if se := (*silenceError)(nil); errors.As(err, &se) {
		p.silentFor = se.silent
	}
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
	opts := s.sockopts
	s.mu.Unlock()
	if err := opts.Apply(socketOf(conn)); err != nil {
		_ = conn.Close()
		return fmt.Errorf("transport: path %d: %w", id, err)
	}
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
	p.refused = false
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
	p.rx0.Store(time.Now().UnixNano())
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

// Path states. A path that was up when its session closed reads "closed",
// so what reads the statistics of a finished session can tell a path that
// carried traffic to the end from one that had failed.
const (
	PathDown PathState = iota
	PathUp
	PathClosed
)

func (st PathState) String() string {
	switch st {
	case PathUp:
		return "up"
	case PathClosed:
		return "closed"
	}
	return "down"
}

// SetSocketOptions sets o on the socket of every channel of the session
// and of every channel that attaches later (a path that is redialed). It
// returns the first error, naming the path; the options stay set for
// later channels either way.
func (s *Session) SetSocketOptions(o channel.SocketOptions) error {
	if err := o.Check(); err != nil {
		return err
	}
	s.mu.Lock()
	s.sockopts = o
	var conns []net.Conn
	var ids []int
	for _, p := range s.live {
		conns, ids = append(conns, p.conn), append(ids, p.id)
	}
	s.mu.Unlock()
	for i, c := range conns {
		if err := o.Apply(socketOf(c)); err != nil {
			return fmt.Errorf("path %d: %w", ids[i], err)
		}
	}
	return nil
}

// SocketInfo reports what the socket of the session's lowest live path
// runs with (congestion control, buffer sizes), as iperf3 reports its
// sockets; the zero value when no path is up or its channel is not TCP.
func (s *Session) SocketInfo() channel.SocketInfo {
	s.mu.Lock()
	var c net.Conn
	low := -1
	for _, p := range s.live {
		if low < 0 || p.id < low {
			c, low = p.conn, p.id
		}
	}
	s.mu.Unlock()
	if c == nil {
		return channel.SocketInfo{}
	}
	return channel.Info(socketOf(c))
}

// TCPStats returns TCP_INFO of the channel of each live path whose
// channel is TCP (or MPTCP), by path id: the kernel's round trip,
// congestion window and retransmitted segments, as iperf3 reports them.
func (s *Session) TCPStats() map[int]channel.TCPInfo {
	s.mu.Lock()
	conns := map[int]net.Conn{}
	for _, p := range s.live {
		conns[p.id] = p.conn
	}
	s.mu.Unlock()
	out := map[int]channel.TCPInfo{}
	for id, c := range conns {
		if st, ok := channel.TCPStats(socketOf(c)); ok {
			out[id] = st
		}
	}
	return out
}

// socketOf returns the connection under a channel's records: what socket
// options apply to.
func socketOf(c net.Conn) net.Conn {
	switch sc := c.(type) {
	case *secureConn:
		return sc.Conn
	case *secureLanes:
		return sc.secureConn.Conn
	}
	return c
}

// noteGap raises p.maxGap to gap if that is longer.
func (p *path) noteGap(gap time.Duration) {
	for range 100 { // bounded: lane-0 readers of two channels rarely race
		old := p.maxGap.Load()
		if int64(gap) <= old || p.maxGap.CompareAndSwap(old, int64(gap)) {
			return
		}
	}
}
