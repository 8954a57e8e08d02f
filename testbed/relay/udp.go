package relay

import (
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of a UDP relay: queued bytes per direction (a datagram costs its
// length plus chunkOverhead; past the bound datagrams are dropped like at
// a full router queue) and clients.
const (
	maxUDPQueued   = 8 << 20
	maxUDPSessions = 1024
	maxDatagram    = 64 << 10
)

// UDP relays datagrams between clients and a target with per-direction
// loss, added delay and blackholes. Each client address gets its own
// socket towards the target, so replies find their way back. Methods are
// safe for concurrent use.
type UDP struct {
	pc     *net.UDPConn
	target *net.UDPAddr

	delay  atomic.Int64 // time.Duration per direction
	black  atomic.Bool
	loss   [2]atomic.Uint64 // math.Float64bits of the drop probability
	rngMu  [2]sync.Mutex
	rng    [2]*rand.Rand
	line   [2]*delayLine
	stats  [2]struct{ forwarded, dropped atomic.Int64 }
	tamper tampering

	mu       sync.Mutex
	sessions map[netip.AddrPort]*net.UDPConn
	closed   bool
	done     chan struct{}
	wg       sync.WaitGroup
}

// ListenUDP starts a relay that forwards datagrams to target (host:port)
// and the target's replies back to each client.
func ListenUDP(target string, cfg *Config) (*UDP, error) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, err
	}
	la, err := net.ResolveUDPAddr("udp", cfg.addr())
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, err
	}
	var seed uint64
	if cfg != nil {
		seed = cfg.Seed
	}
	if seed == 0 {
		seed = rand.Uint64()
	}
	r := &UDP{pc: pc, target: ta, sessions: map[netip.AddrPort]*net.UDPConn{}, done: make(chan struct{})}
	for d := range 2 {
		r.rng[d] = rand.New(rand.NewPCG(seed, uint64(d)))
		r.line[d] = &delayLine{wake: make(chan struct{}, 1)}
		r.wg.Add(1)
		go r.drain(d)
	}
	r.wg.Add(1)
	go r.fromClients()
	return r, nil
}

// Addr returns the address clients send to.
func (r *UDP) Addr() string { return r.pc.LocalAddr().String() }

// SetLoss makes the relay drop each datagram in direction dir with
// probability p (0 to 1).
func (r *UDP) SetLoss(dir Dir, p float64) {
	p = min(max(p, 0), 1)
	for _, d := range dir.dirs() {
		r.loss[d].Store(math.Float64bits(p))
	}
}

// SetDelay adds d of one-way latency to each direction. Datagrams keep
// their order.
func (r *UDP) SetDelay(d time.Duration) { r.delay.Store(int64(max(d, 0))) }

// Blackhole starts (on) or ends a silent outage: every datagram in either
// direction is dropped, including those already delayed.
func (r *UDP) Blackhole(on bool) { r.black.Store(on) }

// UDPStats counts datagrams of one direction.
type UDPStats struct {
	Forwarded int64 // sent on
	Dropped   int64 // lost to SetLoss, a blackhole or a full queue
}

// Stats returns the counts of direction dir; Both adds them up.
func (r *UDP) Stats(dir Dir) UDPStats {
	var s UDPStats
	for _, d := range dir.dirs() {
		s.Forwarded += r.stats[d].forwarded.Load()
		s.Dropped += r.stats[d].dropped.Load()
	}
	return s
}

// Close stops the relay and waits for its goroutines to end.
func (r *UDP) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	err := r.pc.Close()
	for _, s := range r.sessions {
		s.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

func (r *UDP) fromClients() {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := r.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ICMP errors reported on the socket
		}
		s := r.session(from)
		if s == nil {
			r.stats[0].dropped.Add(1)
			continue
		}
		r.admit(0, buf[:n], func(b []byte) { s.Write(b) })
	}
}

// session returns the socket towards the target for client from, making
// it on first use; nil if the relay is closed or full.
func (r *UDP) session(from netip.AddrPort) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sessions[from]; ok || r.closed {
		return s
	}
	if len(r.sessions) >= maxUDPSessions {
		return nil
	}
	s, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil
	}
	r.sessions[from] = s
	r.wg.Add(1)
	go r.fromTarget(s, from)
	return s
}

func (r *UDP) fromTarget(s *net.UDPConn, client netip.AddrPort) {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, err := s.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. connection refused: the target is not up yet
		}
		r.admit(1, buf[:n], func(b []byte) { r.pc.WriteToUDPAddrPort(b, client) })
	}
}

// admit applies the faults of direction d to datagram b and sends it now
// or later.
func (r *UDP) admit(d int, b []byte, send func([]byte)) {
	if r.black.Load() || r.lose(d) {
		r.stats[d].dropped.Add(1)
		return
	}
	r.tamper.observe(d, b)
	switch Tamper(r.tamper.armed[d].Load()) {
	case TamperFlip:
		c := append([]byte(nil), b...)
		if flipSCTP(c) && r.tamper.armed[d].CompareAndSwap(int32(TamperFlip), 0) {
			r.tamper.done.Add(1)
			b = c
		}
	case TamperReplay:
		if r.tamper.armed[d].CompareAndSwap(int32(TamperReplay), 0) {
			r.tamper.done.Add(1)
			r.admitOne(d, b, send)
		}
	}
	r.admitOne(d, b, send)
}

func (r *UDP) admitOne(d int, b []byte, send func([]byte)) {
	delay := time.Duration(r.delay.Load())
	if delay == 0 && r.line[d].empty() {
		r.stats[d].forwarded.Add(1)
		send(b)
		return
	}
	if !r.line[d].push(datagram{due: time.Now().Add(delay), b: append([]byte(nil), b...), send: send}) {
		r.stats[d].dropped.Add(1)
	}
}

func (r *UDP) lose(d int) bool {
	p := math.Float64frombits(r.loss[d].Load())
	if p == 0 {
		return false
	}
	r.rngMu[d].Lock()
	defer r.rngMu[d].Unlock()
	return r.rng[d].Float64() < p
}

// drain sends the delayed datagrams of direction d when they are due.
func (r *UDP) drain(d int) {
	defer r.wg.Done()
	l := r.line[d]
	for {
		dg, ok := l.pop(r.done)
		if !ok {
			return
		}
		if !sleepUntil(dg.due, r.done) {
			return
		}
		if r.black.Load() {
			r.stats[d].dropped.Add(1)
		} else {
			r.stats[d].forwarded.Add(1)
			dg.send(dg.b)
		}
		l.sent()
	}
}

type datagram struct {
	due  time.Time
	b    []byte
	send func([]byte)
}

// delayLine is a bounded FIFO of datagrams with non-decreasing due times.
type delayLine struct {
	mu     sync.Mutex
	q      []datagram
	queued int
	last   time.Time
	busy   bool // a popped datagram is not sent yet
	wake   chan struct{}
}

// empty reports whether nothing is queued or being sent, so a datagram
// may skip the line without overtaking another.
func (l *delayLine) empty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.q) == 0 && !l.busy
}

// sent marks the datagram pop returned as sent.
func (l *delayLine) sent() {
	l.mu.Lock()
	l.busy = false
	l.mu.Unlock()
}

// push queues dg; false if the line is full.
func (l *delayLine) push(dg datagram) bool {
	l.mu.Lock()
	cost := len(dg.b) + chunkOverhead
	if l.queued+cost > maxUDPQueued {
		l.mu.Unlock()
		return false
	}
	if dg.due.Before(l.last) {
		dg.due = l.last
	}
	l.last = dg.due
	l.q = append(l.q, dg)
	l.queued += cost
	l.mu.Unlock()
	signal(l.wake)
	return true
}

// pop returns the oldest datagram, waiting for one until done is closed.
func (l *delayLine) pop(done <-chan struct{}) (datagram, bool) {
	for {
		l.mu.Lock()
		if len(l.q) > 0 {
			dg := l.q[0]
			l.q[0] = datagram{}
			l.q = l.q[1:]
			l.queued -= len(dg.b) + chunkOverhead
			l.busy = true
			l.mu.Unlock()
			return dg, true
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-done:
			return datagram{}, false
		}
	}
}
