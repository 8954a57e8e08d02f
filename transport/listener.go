package transport

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/braid-hpc/braid/internal/accept"
	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

// Listener accepts sessions on one address per network. Channels of one
// session may arrive on any of the addresses.
//
// Its accept loops never stop before Close: a failed accept (out of file
// descriptors, say) is retried with a backoff. At most
// Config.MaxHandshakes channels may be handshaking at once, each for at
// most Config.HandshakeTimeout from its accept; channels beyond the cap
// are closed as soon as they are accepted.
type Listener struct {
	cfg  *Config
	lns  []net.Listener
	mu   sync.Mutex
	sess map[[wire.SessionIDLen]byte]*Session
	// pending holds the channels still handshaking, for Close; slots
	// has one token per entry.
	pending map[net.Conn]struct{}
	slots   chan struct{}
	// overflow and refusals log channels closed for the cap and failed
	// handshakes, at most once a second each.
	overflow, refusals rateLog
	// acceptQ holds new sessions until Accept takes them.
	acceptQ chan *Session
	done    chan struct{}
	closed  bool
	wg      sync.WaitGroup
}

// Listen listens on every address in addrs (host:port, port 0 picks one).
func Listen(ctx context.Context, addrs []string, cfg *Config) (*Listener, error) {
	c, err := cfg.populate()
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, errors.New("transport: Listen needs at least one address")
	}
	kind := c.Channel
	l := &Listener{cfg: c, sess: map[[wire.SessionIDLen]byte]*Session{}, acceptQ: make(chan *Session, 64), done: make(chan struct{}),
		pending: map[net.Conn]struct{}{}, slots: make(chan struct{}, c.MaxHandshakes)}
	for _, a := range addrs {
		ln, err := kind.Listen(ctx, a)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("transport: listen on %s: %w", a, err)
		}
		l.lns = append(l.lns, ln)
	}
	for _, ln := range l.lns {
		l.wg.Add(1)
		go l.serve(ln)
	}
	return l, nil
}

// Addrs returns the addresses actually listened on.
func (l *Listener) Addrs() []net.Addr {
	var out []net.Addr
	for _, ln := range l.lns {
		out = append(out, ln.Addr())
	}
	return out
}

// Accept waits for a new session.
func (l *Listener) Accept(ctx context.Context) (*Session, error) {
	select {
	case s := <-l.acceptQ:
		return s, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening and closes every session it accepted.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	var ss []*Session
	for _, s := range l.sess {
		ss = append(ss, s)
	}
	for c := range l.pending {
		_ = c.Close()
	}
	l.mu.Unlock()
	for _, ln := range l.lns {
		_ = ln.Close()
	}
	for _, s := range ss {
		s.Close()
	}
	l.wg.Wait()
	for _, s := range ss {
		s.wait()
	}
	return nil
}

func (l *Listener) serve(ln net.Listener) {
	defer l.wg.Done()
	b := accept.Backoff{Logger: l.cfg.Logger, Name: "transport", Addr: ln.Addr().String()}
	for {
		c, err := ln.Accept()
		if err != nil {
			if b.Wait(err, l.done) {
				continue
			}
			return
		}
		b.Reset()
		accepted := time.Now()
		select {
		case l.slots <- struct{}{}:
		default:
			_ = c.Close()
			l.overflow.log(l.cfg.Logger, "too many channels handshaking; closed new ones at once",
				"addr", ln.Addr().String(), "max_handshakes", l.cfg.MaxHandshakes)
			continue
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = c.Close()
			<-l.slots
			continue
		}
		l.pending[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.admit(c, accepted)
		}()
	}
}

// admit runs the handshake on a new channel, accepted at accepted, and
// joins it to its session.
func (l *Listener) admit(raw net.Conn, accepted time.Time) {
	deadline := accepted.Add(l.cfg.HandshakeTimeout)
	_ = raw.SetDeadline(deadline)
	// The deadline holds whatever the handshake does with the conn's own.
	timer := time.AfterFunc(time.Until(deadline), func() { _ = raw.Close() })
	c, j, err := serverHandshake(raw, l.cfg, l.checkJoin)
	if c == nil {
		c = raw
	}
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("handshake not done within HandshakeTimeout (%v) of the accept", l.cfg.HandshakeTimeout)
	}
	l.mu.Lock()
	delete(l.pending, raw)
	l.mu.Unlock()
	<-l.slots
	if err != nil {
		select {
		case <-l.done: // Close ended the handshake
			_ = c.Close()
			return
		default:
		}
		l.refusals.log(l.cfg.Logger, "refused channel", "remote", c.RemoteAddr().String(), "err", err)
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = c.Close()
		return
	}
	s := l.sess[j.Session]
	fresh := s == nil
	if fresh {
		s = newSession(l.cfg, j.Session, false, j.Window, j.Segment)
		s.listener = l
		l.sess[j.Session] = s
	}
	l.mu.Unlock()
	if err := s.attach(int(j.Path), c.LocalAddr().String(), c.RemoteAddr().String(), c); err != nil {
		l.cfg.Logger.Warn("channel refused", "session", hex.EncodeToString(j.Session[:4]), "path", j.Path, "err", err)
		if fresh {
			_ = s.Close() // nothing attached: no session to hand out
		}
		return
	}
	if fresh {
		select {
		case l.acceptQ <- s:
		case <-l.done:
		}
	}
}

// checkJoin refuses a channel that would rejoin a session this listener
// does not know. Starting a new session under that ID would leave the
// dialer's session resending into one that never saw its streams.
func (l *Listener) checkJoin(j wire.Join) error {
	if j.Flags&wire.JoinRejoin == 0 {
		return nil
	}
	l.mu.Lock()
	_, ok := l.sess[j.Session]
	l.mu.Unlock()
	if !ok {
		return errSessionGone
	}
	return nil
}

// rateLog writes a Warn line at most once a second, counting the lines it
// held back.
type rateLog struct {
	mu      sync.Mutex
	next    time.Time
	skipped int
}

func (r *rateLog) log(lg *slog.Logger, msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if now.Before(r.next) {
		r.skipped++
		r.mu.Unlock()
		return
	}
	skipped := r.skipped
	r.next, r.skipped = now.Add(time.Second), 0
	r.mu.Unlock()
	if skipped > 0 {
		args = append(args, "suppressed", skipped)
	}
	lg.Warn(msg, args...)
}

func (l *Listener) forget(s *Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess[s.id] == s {
		delete(l.sess, s.id)
	}
}

// Path names one path to dial: a remote address and optionally the local
// address (host or host:port) the traffic must leave from.
type Path struct {
	Local  string
	Remote string
}

// Dial opens a session over paths, one channel per path. It returns once
// every path has connected or failed; it fails if none connected or if any
// peer refused our key. Paths that failed to connect are retried in the
// background.
func Dial(ctx context.Context, paths []Path, cfg *Config) (*Session, error) {
	c, err := cfg.populate()
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, errors.New("transport: Dial needs at least one path")
	}
	if len(paths) > 1<<15 {
		return nil, errors.New("transport: too many paths")
	}
	id := newSessionID()
	type result struct {
		conn    net.Conn
		verdict wire.Verdict
		err     error
	}
	results := make([]result, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, v, err := dialPathVerdict(ctx, c, id, i, p.Local, p.Remote, false)
			results[i] = result{conn, v, err}
		}()
	}
	wg.Wait()
	var errs []error
	var first *result
	for i := range results {
		r := &results[i]
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		if first == nil {
			first = r
		}
	}
	authFailed := false
	for _, e := range errs {
		if errors.Is(e, ErrAuth) {
			authFailed = true
		}
	}
	if first == nil || authFailed {
		for _, r := range results {
			if r.conn != nil {
				_ = r.conn.Close()
			}
		}
		return nil, errors.Join(errs...)
	}
	s := newSession(c, id, true, first.verdict.Window, first.verdict.Segment)
	for i, r := range results {
		p := paths[i]
		if r.err != nil {
			s.log.Warn("path failed to connect; retrying in the background", "path", i, "remote", p.Remote, "err", r.err)
			s.mu.Lock()
			for len(s.paths) <= i {
				s.paths = append(s.paths, nil)
			}
			s.paths[i] = &path{id: i, local: p.Local, remote: p.Remote, s: s, lastErr: r.err}
			s.mu.Unlock()
			s.wg.Add(1)
			go s.redial(s.paths[i])
			continue
		}
		if err := s.attach(i, p.Local, p.Remote, r.conn); err != nil {
			for _, rest := range results[i+1:] {
				if rest.conn != nil {
					_ = rest.conn.Close()
				}
			}
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

func dialPathVerdict(ctx context.Context, cfg *Config, id [wire.SessionIDLen]byte, pathID int, local, remote string, rejoin bool) (net.Conn, wire.Verdict, error) {
	conn, err := cfg.Channel.Dial(channel.WithSocketOptions(ctx, cfg.Socket), local, remote)
	if err != nil {
		return nil, wire.Verdict{}, &PathError{Path: pathID, Local: local, Remote: remote, Op: "dial", Err: err}
	}
	sc, v, err := clientHandshake(conn, cfg, id, pathID, rejoin)
	if err != nil {
		_ = conn.Close()
		return nil, v, &PathError{Path: pathID, Local: local, Remote: remote, Op: "handshake", Err: err}
	}
	return sc, v, nil
}

// dialPath re-dials one path of an existing session; done aborts it. The
// error wraps errSessionGone if the listener no longer knows the session.
func dialPath(cfg *Config, id [wire.SessionIDLen]byte, pathID int, local, remote string, done <-chan struct{}) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.HandshakeTimeout)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, _, err := dialPathVerdict(ctx, cfg, id, pathID, local, remote, true)
	return conn, err
}
