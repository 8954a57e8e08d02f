package cli

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// perfServer serves perf tests, each on its own session.
type perfServer struct {
	env        *Env
	cfg        *transport.Config
	portOffset int
	json       bool          // print an iperf3-shaped JSON object per test
	interval   time.Duration // of the JSON intervals; 0: none
	mu         sync.Mutex    // serializes output lines
	// pending holds the tests waiting for their data session, by the
	// join cookie of their perfReady (string -> chan *transport.Session).
	pending sync.Map
	metrics *perfMetrics
}

// perfServe listens on addrs and serves tests until ctx ends, or after the
// first test with once.
func perfServe(ctx context.Context, env *Env, addrs []string, cfg *transport.Config, once bool, srv *perfServer, obs *obsFlags) int {
	srv.metrics = newPerfMetrics()
	stopObs, err := obs.start(cfg.Logger, srv.metrics.handler())
	if err != nil {
		env.Errorf("perf: %v", err)
		return 1
	}
	defer stopObs()
	ln, err := transport.Listen(ctx, addrs, cfg)
	if err != nil {
		env.Errorf("perf: %v", err)
		return 1
	}
	defer ln.Close()
	var bound []string
	for _, a := range ln.Addrs() {
		bound = append(bound, a.String())
	}
	// With --json stdout holds only the tests' JSON objects.
	out := env.Stdout
	if srv.json {
		out = env.Stderr
	}
	fmt.Fprintf(out, "braid perf: listening on %s\n", strings.Join(bound, ","))
	srv.env, srv.cfg = env, cfg
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
					return 1
				}
				return 0
			default:
			}
			if ctx.Err() != nil {
				return 0
			}
			env.Errorf("perf: %v", err)
			return 1
		}
		srv.metrics.track(sess, true)
		wg.Go(func() {
			<-sess.Done()
			srv.metrics.track(sess, false)
		})
		wg.Go(func() {
			test, err := srv.serve(ctx, sess)
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
func (s *perfServer) ready() perfReady {
	return perfReady{Stripe: s.cfg.Stripe.String(), Policy: s.cfg.Policy.String(), Frag: s.cfg.FragmentSize}
}

func (s *perfServer) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.env.Stdout, time.Now().Format("15:04:05")+" "+format+"\n", args...)
}

// serve runs one test on sess and prints its line; test reports whether
// sess was a test's control session. The data session of a test, whose
// first message joins it to its test, is handed to the test's goroutine.
func (s *perfServer) serve(ctx context.Context, sess *transport.Session) (test bool, err error) {
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	ctrl, err := sess.AcceptStream(actx)
	cancel()
	if err != nil {
		ctl.CloseSession(ctx, sess, false, 0)
		return false, fmt.Errorf("no control stream: %w", err)
	}
	var h perfHello
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

// test runs the test h on the control session sess.
func (s *perfServer) test(ctx context.Context, sess *transport.Session, ctrl *transport.Stream, hp *perfHello) (err error) {
	h := *hp
	defer ctl.CloseSession(ctx, sess, false, 0)
	defer func() {
		if err != nil && ctx.Err() == nil {
			if s.json {
				s.env.Errorf("perf: test from %s failed: %v", ctl.PeerOf(sess), err)
			} else {
				s.printf("test from %s failed: %v", ctl.PeerOf(sess), err)
			}
		}
	}()
	if err := h.validate(); err != nil {
		_ = ctl.WriteJSON(ctx, ctrl, perfReady{Error: err.Error()})
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = sess.Flush(fctx)
		cancel()
		return fmt.Errorf("refused: %w", err)
	}

	before := sess.Stats()
	stripe0 := sess.StripeStats()
	u0, s0 := cpuTimes()
	began := time.Now()
	ctr := &streamCounter{}
	sampler := startSampler(ctr, h.Reverse, s.interval)
	var res *perfResult
	if h.Baseline {
		res, err = s.baseline(ctx, sess, ctrl, &h)
	} else {
		res, err = s.braid(ctx, ctrl, &h, ctr)
	}
	intervals := sampler.stop()
	if err != nil {
		res = &perfResult{Error: err.Error()}
	}
	u1, s1 := cpuTimes()
	res.CPUUser, res.CPUSys = (u1 - u0).Seconds(), (s1 - s0).Seconds()
	if ids, counts := ctr.snapshot(); len(ids) > 0 {
		for i, id := range ids {
			res.StreamBytes = append(res.StreamBytes, perfStreamBytes{ID: id, Bytes: counts[i]})
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
	if err != nil {
		if s.json {
			s.printJSON(s.iperf(sess, began, &h, res, nil, intervals))
		}
		return err
	}
	var sum perfSummary
	if rerr := ctl.ReadJSON(ctx, ctrl, 30*time.Second, &sum); rerr != nil {
		if s.json {
			s.printJSON(s.iperf(sess, began, &h, &perfResult{Error: "no summary from the client: " + rerr.Error()}, nil, intervals))
		}
		return fmt.Errorf("no summary from the client: %w", rerr)
	}
	if s.json {
		s.printJSON(s.iperf(sess, began, &h, res, &sum, intervals))
	} else {
		s.printLine(ctl.PeerOf(sess), &h, res, &sum)
	}
	// The client closes the session; give it a moment before closing ours.
	select {
	case <-sess.Done():
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	return nil
}

func (s *perfServer) printLine(peer string, h *perfHello, res *perfResult, sum *perfSummary) {
	kind := h.Mode
	if h.Reverse {
		kind += " reverse"
	}
	if h.Baseline {
		kind += " tcp-baseline"
	}
	what := fmt.Sprintf("%s from %s: %s, %s, %s", kind, peer, plural(h.Paths, "path", "paths"),
		plural(h.Streams, "stream", "streams"), formatBytes(h.Size))
	if h.Mode == "pingpong" {
		s.printf("%s: echoed %d messages, rtt %s, effective %.1f Mbit/s", what, res.Messages, fmtUs(sum.RTTus), sum.EffectiveMbps)
		return
	}
	s.printf("%s: %.1f Mbit/s (%s in %.2f s at the receiver)", what, sum.ThroughputMbps, formatBytes(sum.Bytes), sum.Seconds)
}

// serverPaths is the server's view of each path between two snapshots.
func serverPaths(before, after []transport.PathStats) []perfServerPath {
	b := ctl.StatsByID(before)
	var out []perfServerPath
	for _, p := range after {
		q := b[p.ID]
		out = append(out, perfServerPath{ID: p.ID, Remote: p.Remote, Local: p.Local,
			Received: p.BytesReceived - q.BytesReceived, Sent: p.BytesSent - q.BytesSent,
			DupReceived: p.DupReceived - q.DupReceived})
	}
	return out
}

// braid runs a braid test: it waits for the client's data session, runs
// the data phase on it and closes it.
func (s *perfServer) braid(ctx context.Context, ctrl *transport.Stream, h *perfHello, ctr *streamCounter) (*perfResult, error) {
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
	before, stripe0 := sess.Stats(), sess.StripeStats()
	res, err := s.data(ctx, sess, h, ctr)
	if err != nil {
		return nil, err
	}
	if res.at == nil {
		res.at = sess.Stats()
	}
	res.Paths = serverPaths(before, res.at)
	res.Stripe = stripeDelta(stripe0, sess.StripeStats())
	return res, nil
}

// data runs the data phase of a braid test on the data session sess.
func (s *perfServer) data(ctx context.Context, sess *transport.Session, h *perfHello, ctr *streamCounter) (*perfResult, error) {
	start := time.Now()
	// Whatever the client does, the test ends.
	hctx, cancel := context.WithDeadline(ctx, start.Add(h.duration()+2*time.Minute))
	defer cancel()
	switch {
	case h.Mode == "bulk" && h.Reverse:
		r, err := bulkSend(hctx, sess, h.Streams, h.Size, h.duration(), ctr)
		if err != nil {
			return nil, err
		}
		return &perfResult{Bytes: r.bytes, Messages: r.msgs, Seconds: r.seconds, at: sess.Stats()}, nil
	case h.Mode == "bulk":
		r, err := bulkReceive(hctx, sess, h.Streams, h.duration(), ctr)
		if err != nil {
			return nil, err
		}
		return &perfResult{Bytes: r.bytes, Messages: r.msgs, Seconds: r.seconds, at: r.paths}, nil
	}
	var (
		bytes, msgs atomic.Int64
		last        latest
		wg          sync.WaitGroup
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
				bytes.Add(int64(len(b)))
				msgs.Add(1)
				n.Add(int64(len(b)))
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
	return &perfResult{Bytes: bytes.Load(), Messages: msgs.Load(), Seconds: last.get().Sub(start).Seconds()}, nil
}

// printJSON prints one test's JSON object on stdout.
func (s *perfServer) printJSON(r *iperfReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := printJSON(s.env.Stdout, r); err != nil {
		s.env.Errorf("perf: %v", err)
	}
}

// iperf builds the server's iperf3-shaped report of one test. sum, the
// client's figures, is nil when the test failed.
func (s *perfServer) iperf(sess *transport.Session, began time.Time, h *perfHello, res *perfResult, sum *perfSummary, intervals []iperfInterval) *iperfReport {
	ts := iperfTestStart{Protocol: "braid/" + s.cfg.Transport, NumStreams: h.Streams, BlkSize: h.Size, Duration: h.Seconds, Mode: h.Mode}
	if s.cfg.Transport == "" {
		ts.Protocol = "braid/tcp"
	}
	if h.Baseline {
		ts.Protocol, ts.NumStreams = "TCP", h.Paths
	}
	if h.Reverse {
		ts.Reverse = 1
	}
	if h.Mode == "pingpong" {
		ts.Blocks = int64(h.Count)
	}
	r := &iperfReport{Start: newIperfStart(began, sess.ID(), sessionConnected(sess), ts), Intervals: intervals, End: iperfEnd{Streams: []iperfEndStream{}}}
	if res.Error != "" || sum == nil {
		r.Error = res.Error
		if r.Error == "" {
			r.Error = "the test did not finish"
		}
		return r
	}
	local := h.Reverse // this side sent the data
	var ss, sr iperfSpan
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
		e := iperfEndStream{Sender: mine, Receiver: mine}
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
	var c iperfCPU
	c.HostTotal, c.HostUser, c.HostSystem = cpuPercent(res.CPUUser, res.CPUSys, max(res.Seconds, sum.Seconds))
	c.RemoteTotal, c.RemoteUser, c.RemoteSystem = cpuPercent(sum.CPUUser, sum.CPUSys, max(res.Seconds, sum.Seconds))
	r.End.CPU = &c
	return r
}
