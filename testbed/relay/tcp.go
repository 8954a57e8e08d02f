package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Queue bounds per connection and direction. A chunk costs its length plus
// chunkOverhead, so many tiny chunks are bounded too.
const (
	maxQueued     = 8 << 20
	chunkOverhead = 64
	readSize      = 64 << 10
)

// TCP relays TCP connections to a target with added delay, a rate limit,
// blackholes and resets. Methods are safe for concurrent use.
type TCP struct {
	ln     *net.TCPListener
	target string

	delay  atomic.Int64 // time.Duration per direction
	rate   atomic.Int64 // bit/s per direction, 0 = unlimited
	black  atomic.Bool
	pace   [2]pacer
	queue  int // bytes per connection and direction
	tamper tampering

	mu     sync.Mutex
	open   chan struct{} // closed while not blackholed
	conns  map[*tcpConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// ListenTCP starts a relay that forwards every connection it accepts to
// target (host:port).
func ListenTCP(target string, cfg *Config) (*TCP, error) {
	ln, err := net.Listen("tcp", cfg.addr())
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	r := &TCP{ln: ln.(*net.TCPListener), target: target, open: open, conns: map[*tcpConn]struct{}{}, queue: maxQueued}
	if cfg != nil && cfg.Queue > 0 {
		r.queue = cfg.Queue
	}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr returns the address clients connect to.
func (r *TCP) Addr() string { return r.ln.Addr().String() }

// SetDelay adds d of one-way latency to each direction of every
// connection, current and future. Data keeps its order; a change applies
// to data read after it.
func (r *TCP) SetDelay(d time.Duration) { r.delay.Store(int64(max(d, 0))) }

// SetRate limits each direction to bps bit/s of payload, shared by all
// connections; 0 removes the limit.
func (r *TCP) SetRate(bps int64) { r.rate.Store(max(bps, 0)) }

// Blackhole starts (on) or ends a silent outage: while it lasts, data in
// either direction is discarded, including data already queued, and
// connections stay open. Connections accepted meanwhile reach the target
// only when it ends. Unlike a network blackhole, each end's kernel sees its
// data acknowledged (by the relay), so no TCP timeout fires: only the
// application's own liveness checks notice, and data sent meanwhile is
// gone for good. A half-close (FIN) still passes.
func (r *TCP) Blackhole(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.black.Load() == on {
		return
	}
	r.black.Store(on)
	if on {
		r.open = make(chan struct{})
	} else {
		close(r.open)
	}
}

// Cut resets every current connection on both sides (RST, not FIN). New
// connections are still accepted.
func (r *TCP) Cut() {
	r.mu.Lock()
	conns := make([]*tcpConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
}

// Conns returns the number of connections being relayed.
func (r *TCP) Conns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// Close stops listening, resets every connection and waits for the
// relay's goroutines to end.
func (r *TCP) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	err := r.ln.Close()
	r.Cut()
	r.wg.Wait()
	return err
}

func (r *TCP) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		tc := &tcpConn{client: c.(*net.TCPConn), done: make(chan struct{})}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			tc.kill()
			return
		}
		r.conns[tc] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go r.serve(tc)
	}
}

// tcpConn is one relayed connection.
type tcpConn struct {
	client *net.TCPConn
	mu     sync.Mutex
	server *net.TCPConn // nil until dialed
	done   chan struct{}
	once   sync.Once
}

// kill resets both sides and stops the connection's goroutines.
func (c *tcpConn) kill() {
	c.once.Do(func() {
		close(c.done)
		reset(c.client)
		c.mu.Lock()
		if c.server != nil {
			reset(c.server)
		}
		c.mu.Unlock()
	})
}

// close ends a connection whose both directions were half-closed: a
// plain close lets the last data reach the peers.
func (c *tcpConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.mu.Lock()
		c.server.Close()
		c.mu.Unlock()
	})
}

func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

func (r *TCP) serve(c *tcpConn) {
	defer r.wg.Done()
	defer func() {
		c.kill()
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	if !r.waitOpen(c) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := (&net.Dialer{}).DialContext(ctx, "tcp", r.target)
	cancel()
	if err != nil {
		return // the client sees a reset, as from a refusing server
	}
	c.mu.Lock()
	c.server = s.(*net.TCPConn)
	c.mu.Unlock()
	select {
	case <-c.done: // Cut raced with the dial
		reset(c.server)
		return
	default:
	}

	if r.queue != maxQueued {
		// A bounded queue means the kernel must not hide a larger one
		// behind it.
		for _, tc := range []*net.TCPConn{c.client, c.server} {
			_ = tc.SetReadBuffer(r.queue)
			_ = tc.SetWriteBuffer(r.queue)
		}
	}
	var wg sync.WaitGroup
	for _, p := range []*tcpPipe{
		newPipe(r, c, c.client, c.server, 0),
		newPipe(r, c, c.server, c.client, 1),
	} {
		wg.Add(2)
		go func() { defer wg.Done(); p.read() }()
		go func() { defer wg.Done(); p.write() }()
	}
	wg.Wait()
	c.close()
}

// waitOpen holds a connection accepted during a blackhole, discarding what
// the client sends, until the blackhole ends. It reports false if the
// connection ended meanwhile.
func (r *TCP) waitOpen(c *tcpConn) bool {
	r.mu.Lock()
	open := r.open
	r.mu.Unlock()
	select {
	case <-open:
		return true
	default:
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		buf := make([]byte, readSize)
		for {
			if _, err := c.client.Read(buf); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					c.kill() // the client left or was cut
				}
				return
			}
		}
	}()
	select {
	case <-open:
	case <-c.done:
	}
	c.client.SetReadDeadline(time.Unix(1, 0))
	<-ended
	c.client.SetReadDeadline(time.Time{})
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// chunk is data read at one time, to be written at due.
type chunk struct {
	due time.Time
	b   []byte
	cut bool // reset the connection once b is written (TamperTruncate)
}

// tcpPipe carries one direction of a connection: read stamps chunks and
// queues them, write sends each when it is due.
type tcpPipe struct {
	r        *TCP
	c        *tcpConn
	src, dst *net.TCPConn
	dir      int

	mu     sync.Mutex
	q      []chunk
	queued int
	end    error // why read stopped; io.EOF for a clean half-close
	ready  chan struct{}
	space  chan struct{}
}

func newPipe(r *TCP, c *tcpConn, src, dst *net.TCPConn, dir int) *tcpPipe {
	return &tcpPipe{r: r, c: c, src: src, dst: dst, dir: dir,
		ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (p *tcpPipe) read() {
	buf := make([]byte, readSize)
	var last time.Time
	for {
		n, err := p.src.Read(buf)
		if n > 0 && !p.r.black.Load() {
			due := time.Now().Add(time.Duration(p.r.delay.Load()))
			if due.Before(last) {
				due = last
			}
			last = due
			b := append([]byte(nil), buf[:n]...)
			p.r.tamper.observe(p.dir, b)
			ch := chunk{due: due, b: b}
			copies := 1
			t := p.r.tamper.take(p.dir)
			switch t {
			case TamperFlip:
				b[len(b)/2] ^= 0x01
			case TamperDrop:
				copies = 0
			case TamperReplay:
				copies = 2
			case TamperTruncate:
				ch.b, ch.cut = b[:len(b)/2], true
			}
			if t != TamperNone {
				p.r.tamper.done.Add(1)
			}
			for range copies {
				if !p.push(ch) {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.c.kill() // reset by the peer or by Cut: pass the reset on
			}
			p.mu.Lock()
			p.end = err
			p.mu.Unlock()
			signal(p.ready)
			return
		}
	}
}

// push queues ch, waiting while the queue is full; false if the
// connection ended.
func (p *tcpPipe) push(ch chunk) bool {
	cost := len(ch.b) + chunkOverhead
	for {
		p.mu.Lock()
		if p.queued+cost <= p.r.queue || p.queued == 0 {
			p.q = append(p.q, ch)
			p.queued += cost
			p.mu.Unlock()
			signal(p.ready)
			return true
		}
		p.mu.Unlock()
		select {
		case <-p.space:
		case <-p.c.done:
			return false
		}
	}
}

// pop returns the next chunk, waiting for one; ok is false when read has
// ended and the queue is empty, or the connection ended.
func (p *tcpPipe) pop() (ch chunk, ok bool) {
	for {
		p.mu.Lock()
		if len(p.q) > 0 {
			ch = p.q[0]
			p.q[0] = chunk{}
			p.q = p.q[1:]
			p.queued -= len(ch.b) + chunkOverhead
			p.mu.Unlock()
			signal(p.space)
			return ch, true
		}
		end := p.end
		p.mu.Unlock()
		if end != nil {
			return chunk{}, false
		}
		select {
		case <-p.ready:
		case <-p.c.done:
			return chunk{}, false
		}
	}
}

func (p *tcpPipe) write() {
	for {
		ch, ok := p.pop()
		if !ok {
			p.mu.Lock()
			end := p.end
			p.mu.Unlock()
			if errors.Is(end, io.EOF) {
				p.dst.CloseWrite() // pass the half-close on
			}
			return
		}
		if !sleepUntil(ch.due, p.c.done) {
			return
		}
		for b := ch.b; len(b) > 0; {
			if p.r.black.Load() {
				break // discard, including what was queued before
			}
			n := len(b)
			if bps := p.r.rate.Load(); bps > 0 {
				n = min(n, max(1500, int(bps/8/100))) // 10 ms of the rate
				if !sleepUntil(p.r.pace[p.dir].reserve(n, bps), p.c.done) {
					return
				}
			}
			if _, err := p.dst.Write(b[:n]); err != nil {
				p.c.kill()
				return
			}
			b = b[n:]
		}
		if ch.cut {
			p.c.kill()
			return
		}
	}
}
