// Package accept keeps accept loops alive through failures that pass,
// such as running out of file descriptors (EMFILE, ENFILE), kernel
// buffers (ENOBUFS, ENOMEM) or a connection aborted before it was taken
// (ECONNABORTED): the loop backs off, 5ms doubling to 1s as
// net/http.Server.Serve does, and tries again. Only closing the listener
// ends it.
//
//	var b accept.Backoff
//	for {
//		c, err := ln.Accept()
//		if err != nil {
//			if b.Wait(err, done) {
//				continue
//			}
//			return
//		}
//		b.Reset()
//		...
//	}
package accept

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Delays between retries: the first, and the cap of its doubling.
const (
	MinDelay = 5 * time.Millisecond
	MaxDelay = time.Second
)

// Backoff paces one accept loop. Its zero value works; it is not safe
// for concurrent use.
type Backoff struct {
	// Logger receives one Warn when an episode of failures starts and one
	// Info when it ends. Nil means slog.Default().
	Logger *slog.Logger
	// Name says what accepts, as in "transport" or "control API", and
	// Addr where; both go into the log lines.
	Name, Addr string

	delay    time.Duration // the last sleep; 0 after a success
	fails    int           // failures in this episode; 0 outside one
	since    time.Time     // the episode's first failure
	lastFail time.Time     // when the last wait ended
	last     error
}

// Wait handles one failed Accept. It returns false if the loop must end:
// err says the listener is closed (net.ErrClosed), or done is closed.
// Otherwise it sleeps (5ms doubling to 1s, cut short by done) and returns
// true. The first failure of an episode is logged at Warn, with whether
// it is one that passes; the others only count. An episode lasts until
// an accept succeeds a whole MaxDelay after the last failure, so a
// listener that fails and succeeds in turn, as it does while a flood
// holds the descriptors, logs once.
func (b *Backoff) Wait(err error, done <-chan struct{}) bool {
	if closed(done) || errors.Is(err, net.ErrClosed) {
		return false
	}
	now := time.Now()
	if b.fails == 0 {
		b.since = now
		b.logger().Warn("accept failed; retrying with backoff until it passes", "listener", b.Name, "addr", b.Addr,
			"err", err, "temporary", Temporary(err))
	}
	if b.delay == 0 {
		b.delay = MinDelay
	} else {
		b.delay = min(2*b.delay, MaxDelay)
	}
	b.fails++
	b.last = err
	t := time.NewTimer(b.delay)
	defer t.Stop()
	select {
	case <-t.C:
		b.lastFail = time.Now() // the episode goes on through the wait
		return true
	case <-done:
		return false
	}
}

// Reset notes a successful Accept: the next failure waits MinDelay
// again, and an episode whose last failure is MaxDelay old ends, logged
// at Info with how long it lasted.
func (b *Backoff) Reset() {
	if b.fails == 0 {
		return
	}
	b.delay = 0
	if time.Since(b.lastFail) < MaxDelay {
		return
	}
	b.logger().Info("accept works again", "listener", b.Name, "addr", b.Addr, "failures", b.fails,
		"lasted", b.lastFail.Sub(b.since).Round(time.Millisecond), "last_err", b.last)
	b.fails, b.last = 0, nil
}

// Failing reports whether the loop is in an episode of failures.
func (b *Backoff) Failing() bool { return b.fails > 0 }

func (b *Backoff) logger() *slog.Logger {
	if b.Logger == nil {
		return slog.Default()
	}
	return b.Logger
}

func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Temporary reports whether err is a failure that passes by itself: a
// timeout, or a lack of descriptors, buffers or memory, or a connection
// that went away before it was accepted. Wait retries the others too, as
// only closing ends a listener, but says which it saw.
func Temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range temporaryErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// Listener is a net.Listener whose Accept retries failed accepts with a
// Backoff and returns an error only once the listener is closed, for
// servers (such as net/http's) whose own loop would log every failure or
// give up on some.
type Listener struct {
	net.Listener

	mu   sync.Mutex // serializes Accept, which owns b
	b    Backoff
	done chan struct{}
	once sync.Once
}

// Retrying wraps ln. name says what it serves, for the log; logger nil
// means slog.Default().
func Retrying(ln net.Listener, name string, logger *slog.Logger) *Listener {
	return &Listener{Listener: ln, b: Backoff{Logger: logger, Name: name, Addr: ln.Addr().String()}, done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			l.b.Reset()
			return c, nil
		}
		if !l.b.Wait(err, l.done) {
			if closed(l.done) {
				return nil, &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: net.ErrClosed}
			}
			return nil, err
		}
	}
}

// Close implements net.Listener; it also ends a backoff in progress.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// LimitListener is a net.Listener that keeps at most a fixed number of
// its connections open: Accept waits (connections queue in the kernel's
// backlog, holding no descriptor of ours) until one closes. A flood of
// idle connections then takes its slots, not the descriptors the rest of
// the process needs; the server's timeouts close idle ones.
type LimitListener struct {
	net.Listener
	name   string
	logger *slog.Logger
	sem    chan struct{}
	done   chan struct{}
	once   sync.Once
}

// Limit wraps ln so that at most n of its connections are open at once.
// name says what it serves, for the log; logger nil means slog.Default().
func Limit(ln net.Listener, n int, name string, logger *slog.Logger) *LimitListener {
	if logger == nil {
		logger = slog.Default()
	}
	return &LimitListener{Listener: ln, name: name, logger: logger, sem: make(chan struct{}, max(n, 1)), done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *LimitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	default:
		l.logger.Warn("connection cap reached; new connections wait until one closes",
			"listener", l.name, "addr", l.Addr().String(), "cap", cap(l.sem))
		select {
		case l.sem <- struct{}{}:
			l.logger.Info("below the connection cap again", "listener", l.name, "addr", l.Addr().String())
		case <-l.done:
			return nil, &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: net.ErrClosed}
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, sem: l.sem}, nil
}

// Close implements net.Listener; it also ends an Accept waiting for a slot.
func (l *LimitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	sem  chan struct{}
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.sem })
	return err
}
