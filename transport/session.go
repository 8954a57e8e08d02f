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

	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

// Session is a connection between two hosts over k paths, one channel per
// path, carrying any number of independent streams. Large segments are
// striped over every live path; small ones travel whole on the path chosen
// by Config.Policy. Data sent on a path that fails before the peer
// acknowledged it is sent again on the others.
//
// Lock order: see "Locks" in doc.go. Stream fields marked "guarded by
// s.mu" use the session's lock.
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
	acceptCh    chan struct{}         // signalled when acceptQ grows
	striped     []*txSeg              // segments with fragments left to claim, oldest first
	wholeQ      []*Stream             // streams with whole segments to send, in turn order
	retx        []txRef               // frames to send again on any path
	ctrlAny     [][]byte              // control frames for any path
	rr          int                   // round-robin cursor
	unackedSegs int                   // segments not yet fully acknowledged
	flushCh     chan struct{}         // closed and replaced when unackedSegs drops to 0
	downSince   time.Time             // when the last live path failed; zero while one is up
	sockopts    channel.SocketOptions // set on each channel as it attaches
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
		sockopts:   cfg.Socket,
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
			if p.state == PathUp {
				p.state = PathClosed
			}
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

// PathStats describes one path of a session. Counters are cumulative over
// the session's life and survive reconnects of the path.
type PathStats struct {
	ID            int           `json:"id"`
	Local         string        `json:"local"`
	Remote        string        `json:"remote"`
	State         string        `json:"state"` // "up", "down", or "closed": up until the session closed
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
	Fragments     int64         `json:"fragments_sent"`           // fragments of striped segments this path took and sent first (not retransmissions or copies); 0 if nothing was striped
	Probes        int64         `json:"probes_sent"`              // pings sent to keep the path from looking silent and to measure its round trip (see Config.HeartbeatInterval)
	Lanes         int           `json:"lanes"`                    // lanes of the current channel in use, counting lane 0 (see Config.Lanes); 0 while down
	Integrity     int64         `json:"integrity_failures"`       // channels of this path dropped because received bytes failed authentication (ErrIntegrity)
	Encrypted     bool          `json:"encrypted"`                // the current channel encrypts (false: Config.InsecurePlaintext)
	LastError     string        `json:"last_error,omitempty"`
	// DownAt is when the path was last declared down (zero: never), and
	// SilentFor, if that was because nothing arrived on it, the time
	// from the last frame received to the moment its read timeout fell
	// due: Config.PathTimeout at most, PathTimeout/8 less at least, by the
	// transport's clock (the goroutine that declares it down may wake
	// later on a loaded host).
	DownAt    time.Time     `json:"down_at,omitzero"`
	SilentFor time.Duration `json:"silent_for_ns,omitempty"`
	// MaxGap is the longest time between two frames read on the path's
	// first lane (where its heartbeats travel), over all its channels:
	// how close the path came to its PathTimeout. A peer that keeps
	// beating on time holds it near the probe interval; a stalled peer
	// (a process not scheduled, a long pause) shows here before it
	// passes PathTimeout and the path goes down.
	MaxGap time.Duration `json:"max_gap_ns,omitempty"`
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
			Fragments:     p.fragments.Load(),
			Probes:        p.pings.Load(),
			Integrity:     p.integrity.Load(),
			MaxGap:        time.Duration(p.maxGap.Load()),
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
		ps.DownAt, ps.SilentFor = p.downAt, p.silentFor
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
