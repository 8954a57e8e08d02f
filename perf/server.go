package perf

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// Server serves perf tests, each on its own session, as braid perf -s.
type Server struct {
	cfg *transport.Config
	// PortOffset places the plain TCP listeners of a baseline test on
	// each listen port plus PortOffset; 0: ephemeral ports.
	PortOffset int
	// Interval is the period of the intervals of each test's
	// IperfReport; 0: none.
	Interval time.Duration
	// Done, if not nil, is called after each test, also one that failed
	// or was interrupted, from the test's goroutine: tests run
	// concurrently.
	Done func(*Test)
	// Text, if not nil, is the server's text output of a test that ended
	// well; a client that asks for the server's output
	// (--get-server-output) gets it. Nil: the client gets the server's
	// IperfReport, as from a server that prints JSON.
	Text func(*Test) string

	// pending holds the tests waiting for their data session, by the
	// join cookie of their Ready (string -> chan *transport.Session).
	pending sync.Map
	metrics *serverMetrics
}

// Test is one test a Server ran.
type Test struct {
	Peer  string // the client, by the remote address of its lowest path
	Hello Hello  // what the client asked for
	// Result is the server's count; Summary the client's figures, nil
	// when the test failed.
	Result  *Result
	Summary *Summary
	// Iperf is the server's iperf3-shaped report of the test; nil when
	// the request was refused before the test began.
	Iperf *IperfReport
	Err   error // why the test failed; nil if it did not
}

// NewServer returns a server whose sessions use cfg (its Stripe, Policy
// and FragmentSize shape what the server sends).
func NewServer(cfg *transport.Config) *Server {
	return &Server{cfg: cfg, metrics: newServerMetrics()}
}

// MetricsHandler serves the server's Prometheus metrics: the tests served
// and their payload, and the paths of the sessions of the tests running.
func (s *Server) MetricsHandler() http.Handler { return s.metrics.handler() }

// ErrTestFailed is wrapped by Serve's error when, with once, the test
// failed; Done has seen the test.
var ErrTestFailed = errors.New("perf: the test failed")

// Serve accepts sessions on ln and serves tests until ctx ends (it then
// returns nil), or with once after the first test. It returns the
// listener's error, or with once ErrTestFailed if the test failed. It
// closes ln, which ends the sessions still running, and waits for the
// tests it began.
func (s *Server) Serve(ctx context.Context, ln *transport.Listener, once bool) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close() // closes the sessions still running, before wg.Wait
	// With once, accepting stops after the first test, whose data session
	// arrives while it runs.
	actx, stop := context.WithCancel(ctx)
	defer stop()
	first := make(chan error, 1)
	for {
		sess, err := ln.Accept(actx)
		if err != nil {
			select {
			case err := <-first:
				if err != nil && ctx.Err() == nil {
					return fmt.Errorf("%w: %w", ErrTestFailed, err)
				}
				return nil
			default:
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.metrics.track(sess, true)
		wg.Go(func() {
			<-sess.Done()
			s.metrics.track(sess, false)
		})
		wg.Go(func() {
			test, err := s.serve(ctx, sess)
			if once && test {
				select {
				case first <- err:
					stop()
				default:
				}
			}
		})
	}
}

// ready is the answer to an accepted braid test.
func (s *Server) ready() Ready {
	return Ready{Stripe: s.cfg.Stripe.String(), Policy: s.cfg.Policy.String(), Frag: s.cfg.FragmentSize}
}

// serve runs one test on sess and prints its line; test reports whether
// sess was a test's control session. The data session of a test, whose
// first message joins it to its test, is handed to the test's goroutine.
func (s *Server) serve(ctx context.Context, sess *transport.Session) (test bool, err error) {
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	ctrl, err := sess.AcceptStream(actx)
	cancel()
	if err != nil {
		ctl.CloseSession(ctx, sess, false, 0)
		return false, fmt.Errorf("no control stream: %w", err)
	}
	var h Hello
	if err := ctl.ReadJSON(ctx, ctrl, 15*time.Second, &h); err != nil {
		ctl.CloseSession(ctx, sess, false, 0)
		return false, fmt.Errorf("no test request: %w", err)
	}
	if h.Join != nil {
		if ch, ok := s.pending.LoadAndDelete(string(h.Join)); ok {
			ch.(chan *transport.Session) <- sess
			return false, nil
		}
		ctl.CloseSession(ctx, sess, false, 0)
		return false, errors.New("a data session for no test")
	}
	return true, s.test(ctx, sess, ctrl, &h)
}

// test runs the test h on the control session sess and hands it to Done.
func (s *Server) test(ctx context.Context, sess *transport.Session, ctrl *transport.Stream, hp *Hello) (err error) {
	h := *hp
	defer ctl.CloseSession(ctx, sess, false, 0)
	t := &Test{Peer: ctl.PeerOf(sess), Hello: h}
	defer func() {
		t.Err = err
		if s.Done != nil {
			s.Done(t)
		}
	}()
	if err := h.validate(); err != nil {
		_ = ctl.WriteJSON(ctx, ctrl, Ready{Error: err.Error()})
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = sess.Flush(fctx)
		cancel()
		return fmt.Errorf("refused: %w", err)
	}

	before := sess.Stats()
	stripe0 := sess.StripeStats()
	u0, s0 := ctl.CPUTimes()
	began := time.Now()
	ctr := &streamCounter{}
	sampler := startSampler(ctr, h.Reverse, s.Interval, h.omit(), nil, nil)
	var res *Result
	if h.Baseline {
		res, err = s.baseline(ctx, sess, ctrl, &h)
	} else {
		res, err = s.braid(ctx, ctrl, &h, ctr, sampler.useTCP)
	}
	intervals := sampler.stop()
	if err != nil {
		res = &Result{Error: err.Error()}
	}
	u1, s1 := ctl.CPUTimes()
	res.CPUUser, res.CPUSys = (u1 - u0).Seconds(), (s1 - s0).Seconds()
	if ids, counts := ctr.since(); len(ids) > 0 {
		for i, id := range ids {
			res.StreamBytes = append(res.StreamBytes, StreamBytes{ID: id, Bytes: counts[i]})
		}
	}
	if h.Baseline {
		res.Paths = serverPaths(before, sess.Stats())
		res.Stripe = stripeDelta(stripe0, sess.StripeStats())
	}
	s.metrics.test(&h, res)
	if werr := ctl.WriteJSON(ctx, ctrl, res); werr != nil && err == nil {
		err = werr
	}
	t.Result = res
	if err != nil {
		t.Iperf = s.iperf(sess, began, &h, res, nil, intervals)
		return err
	}
	var sum Summary
	if rerr := ctl.ReadJSON(ctx, ctrl, 30*time.Second, &sum); rerr != nil {
		t.Iperf = s.iperf(sess, began, &h, &Result{Error: "no summary from the client: " + rerr.Error()}, nil, intervals)
		return fmt.Errorf("no summary from the client: %w", rerr)
	}
	t.Summary = &sum
	t.Iperf = s.iperf(sess, began, &h, res, &sum, intervals)
	if h.ServerOutput {
		so := ServerOutput{JSON: t.Iperf}
		if s.Text != nil {
			so = ServerOutput{Text: s.Text(t)}
		}
		if err := ctl.WriteJSON(ctx, ctrl, so); err != nil {
			return fmt.Errorf("send the server output: %w", err)
		}
	}
	// The client closes the session; give it a moment before closing ours.
	select {
	case <-sess.Done():
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	return nil
}

// serverPaths is the server's view of each path between two snapshots.
func serverPaths(before, after []transport.PathStats) []ServerPath {
	b := ctl.StatsByID(before)
	var out []ServerPath
	for _, p := range after {
		q := b[p.ID]
		out = append(out, ServerPath{ID: p.ID, Remote: p.Remote, Local: p.Local,
			Received: p.BytesReceived - q.BytesReceived, Sent: p.BytesSent - q.BytesSent,
			DupReceived: p.DupReceived - q.DupReceived})
	}
	return out
}

// braid runs a braid test: it waits for the client's data session, runs
// the data phase on it and closes it. useTCP hands the data session's
// TCP figures to the server's intervals (used when it sends).
func (s *Server) braid(ctx context.Context, ctrl *transport.Stream, h *Hello, ctr *streamCounter, useTCP func(tcpSource)) (*Result, error) {
	cookie := make([]byte, 16)
	if _, err := rand.Read(cookie); err != nil {
		return nil, err
	}
	ch := make(chan *transport.Session, 1)
	s.pending.Store(string(cookie), ch)
	defer s.pending.Delete(string(cookie))
	ready := s.ready()
	ready.Join = cookie
	if err := ctl.WriteJSON(ctx, ctrl, ready); err != nil {
		return nil, err
	}
	var sess *transport.Session
	select {
	case sess = <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(15 * time.Second):
		return nil, errors.New("the client's data session did not arrive within 15s")
	}
	defer ctl.CloseSession(ctx, sess, false, 0)
	if err := sess.SetSocketOptions(h.Socket); err != nil {
		return nil, fmt.Errorf("socket options: %w", err)
	}
	congestion := sess.SocketInfo().Congestion
	useTCP(sessionTCP(sess))
	var warm sync.Mutex
	before, stripe0 := sess.Stats(), sess.StripeStats()
	if h.Omit > 0 {
		// The per-path figures count from the end of the warm-up.
		t := time.AfterFunc(h.omit(), func() {
			b, s := sess.Stats(), sess.StripeStats()
			warm.Lock()
			before, stripe0 = b, s
			warm.Unlock()
		})
		defer t.Stop()
	}
	res, err := s.data(ctx, sess, h, ctr)
	if err != nil {
		return nil, err
	}
	warm.Lock()
	defer warm.Unlock()
	if res.at == nil {
		res.at = sess.Stats()
	}
	res.Paths = serverPaths(before, res.at)
	res.Congestion = congestion
	res.Stripe = stripeDelta(stripe0, sess.StripeStats())
	return res, nil
}

// data runs the data phase of a braid test on the data session sess.
func (s *Server) data(ctx context.Context, sess *transport.Session, h *Hello, ctr *streamCounter) (*Result, error) {
	start := time.Now()
	// Whatever the client does, the test ends.
	hctx, cancel := context.WithDeadline(ctx, start.Add(h.omit()+h.duration()+2*time.Minute))
	defer cancel()
	switch {
	case h.Mode == "bulk" && h.Reverse:
		r, err := bulkSend(hctx, sess, h.Streams, h.Size, h.omit(), h.duration(), h.Bitrate, h.Bytes, ctr)
		if err != nil {
			return nil, err
		}
		return &Result{Bytes: r.bytes, Messages: r.msgs, Seconds: r.seconds, at: sess.Stats(), TCP: r.tcp}, nil
	case h.Mode == "bulk" && h.Bidir:
		rctr := &streamCounter{}
		var (
			sent bulkSendResult
			serr error
		)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sent, serr = bulkSend(hctx, sess, h.Streams, h.Size, h.omit(), h.duration(), h.Bitrate, 0, rctr)
		}()
		r, err := bulkReceive(hctx, sess, h.Streams, h.omit(), h.duration(), ctr)
		<-done
		if err := errors.Join(err, serr); err != nil {
			return nil, err
		}
		rev := &Sent{Bytes: sent.bytes, Messages: sent.msgs, Seconds: sent.seconds, TCP: sent.tcp}
		for _, p := range sent.paths { // the data session is the test's own
			rev.Retransmits += p.Retransmitted
		}
		ids, counts := rctr.since()
		for i, id := range ids {
			rev.StreamBytes = append(rev.StreamBytes, StreamBytes{ID: id, Bytes: counts[i]})
		}
		return &Result{Bytes: r.bytes, Messages: r.msgs, Seconds: r.seconds, at: r.paths, Rev: rev}, nil
	case h.Mode == "bulk":
		r, err := bulkReceive(hctx, sess, h.Streams, h.omit(), h.duration(), ctr)
		if err != nil {
			return nil, err
		}
		return &Result{Bytes: r.bytes, Messages: r.msgs, Seconds: r.seconds, at: r.paths}, nil
	}
	var (
		bytes, msgs atomic.Int64
		last        latest
		wg          sync.WaitGroup
		first       sync.Once
		measured    atomic.Int64 // unix ns when the warm-up (h.Omit) ends: omit after the first message
	)
	errs := make([]error, h.Streams)
	for i := range h.Streams {
		st, err := sess.AcceptStream(hctx)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("accept stream %d of %d: %w", i+1, h.Streams, err)
		}
		n := ctr.stream(int(st.ID()))
		wg.Go(func() {
			for {
				b, err := st.ReadMessage(hctx)
				if errors.Is(err, io.EOF) {
					last.mark()
					_ = st.Close()
					return
				}
				if err != nil {
					errs[i] = err
					return
				}
				first.Do(func() { measured.Store(time.Now().Add(h.omit()).UnixNano()) })
				if time.Now().UnixNano() >= measured.Load() {
					bytes.Add(int64(len(b)))
					msgs.Add(1)
					n.Add(int64(len(b)))
				}
				if h.Mode == "pingpong" {
					if err := st.WriteMessage(hctx, b); err != nil {
						errs[i] = err
						return
					}
				}
				st.Release(b)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Result{Bytes: bytes.Load(), Messages: msgs.Load(), Seconds: last.get().Sub(start).Seconds()}, nil
}

// iperf builds the server's iperf3-shaped report of one test. sum, the
// client's figures, is nil when the test failed.
func (s *Server) iperf(sess *transport.Session, began time.Time, h *Hello, res *Result, sum *Summary, intervals []IperfInterval) *IperfReport {
	ts := IperfTestStart{Protocol: "braid/" + s.cfg.Transport, NumStreams: h.Streams, BlkSize: h.Size, Duration: h.Seconds, Mode: h.Mode,
		Omit: h.Omit, TargetBitrate: h.Bitrate, Bytes: h.Bytes}
	if s.cfg.Transport == "" {
		ts.Protocol = "braid/tcp"
	}
	if h.Baseline {
		ts.Protocol, ts.NumStreams = "TCP", h.baselineConns()
	}
	if h.Reverse {
		ts.Reverse = 1
	}
	if h.Mode == "pingpong" {
		ts.Blocks = int64(h.Count)
	}
	r := &IperfReport{Start: newIperfStart(began, sess.ID(), sessionConnected(sess), ts), Intervals: intervals, End: IperfEnd{Streams: []IperfEndStream{}}}
	ids := make([]int, len(res.StreamBytes))
	for i, st := range res.StreamBytes {
		ids[i] = st.ID
	}
	r.Start.Connected = streamsConnected(r.Start.Connected, ids, h.Baseline)
	if res.Error != "" || sum == nil {
		r.Error = res.Error
		if r.Error == "" {
			r.Error = "the test did not finish"
		}
		return r
	}
	local := h.Reverse // this side sent the data
	var ss, sr IperfSpan
	switch {
	case h.Mode == "pingpong":
		ss, sr = span(0, res.Seconds, res.Bytes, true), span(0, res.Seconds, res.Bytes, true)
	case h.Reverse:
		ss, sr = span(0, res.Seconds, res.Bytes, local), span(0, sum.Seconds, sum.Bytes, local)
	default:
		ss, sr = span(0, sum.SentSeconds, sum.SentBytes, local), span(0, res.Seconds, res.Bytes, local)
	}
	theirs := map[int]int64{}
	for _, st := range sum.StreamBytes {
		theirs[st.ID] = st.Bytes
	}
	for _, st := range res.StreamBytes {
		mine := streamSpan(st.ID, res.Seconds, st.Bytes, local)
		e := IperfEndStream{Sender: mine, Receiver: mine}
		switch {
		case h.Mode == "pingpong":
		case h.Reverse:
			e.Receiver = streamSpan(st.ID, sum.Seconds, theirs[st.ID], local)
		default:
			e.Sender = streamSpan(st.ID, sum.SentSeconds, theirs[st.ID], local)
		}
		r.End.Streams = append(r.End.Streams, e)
	}
	r.End.SumSent, r.End.SumReceived = &ss, &sr
	var c IperfCPU
	c.HostTotal, c.HostUser, c.HostSystem = cpuPercent(res.CPUUser, res.CPUSys, max(res.Seconds, sum.Seconds))
	c.RemoteTotal, c.RemoteUser, c.RemoteSystem = cpuPercent(sum.CPUUser, sum.CPUSys, max(res.Seconds, sum.Seconds))
	r.End.CPU = &c
	return r
}
