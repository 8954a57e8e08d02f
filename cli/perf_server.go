package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/transport"
)

// perfServer serves perf tests, each on its own session.
type perfServer struct {
	env        *Env
	cfg        *transport.Config
	portOffset int
	mu         sync.Mutex // serializes output lines
	metrics    *perfMetrics
}

// perfServe listens on addrs and serves tests until ctx ends, or after the
// first test with once.
func perfServe(ctx context.Context, env *Env, addrs []string, cfg *transport.Config, once bool, portOffset int, obs *obsFlags) int {
	pm := newPerfMetrics()
	stop, err := obs.start(cfg.Logger, pm.handler())
	if err != nil {
		env.Errorf("perf: %v", err)
		return 1
	}
	defer stop()
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
	fmt.Fprintf(env.Stdout, "braid perf: listening on %s\n", strings.Join(bound, ","))
	srv := &perfServer{env: env, cfg: cfg, portOffset: portOffset, metrics: pm}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close() // closes the sessions still running, before wg.Wait
	for {
		sess, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			env.Errorf("perf: %v", err)
			return 1
		}
		if once {
			if err := srv.serve(ctx, sess); err != nil && ctx.Err() == nil {
				return 1
			}
			return 0
		}
		wg.Go(func() { _ = srv.serve(ctx, sess) })
	}
}

// peerOf names the peer of a session by the address of its lowest path.
func peerOf(sess *transport.Session) string {
	if st := sess.Stats(); len(st) > 0 {
		return st[0].Remote
	}
	return "?"
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

// serve runs one test on sess and prints its line.
func (s *perfServer) serve(ctx context.Context, sess *transport.Session) (err error) {
	defer closeSession(ctx, sess, false, 0)
	s.metrics.track(sess, true)
	defer s.metrics.track(sess, false)
	defer func() {
		if err != nil && ctx.Err() == nil {
			s.printf("test from %s failed: %v", peerOf(sess), err)
		}
	}()
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	ctrl, err := sess.AcceptStream(actx)
	cancel()
	if err != nil {
		return fmt.Errorf("no control stream: %w", err)
	}
	var h perfHello
	if err := readJSON(ctx, ctrl, 15*time.Second, &h); err != nil {
		return fmt.Errorf("no test request: %w", err)
	}
	if err := h.validate(); err != nil {
		_ = writeJSON(ctx, ctrl, perfReady{Error: err.Error()})
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = sess.Flush(fctx)
		cancel()
		return fmt.Errorf("refused: %w", err)
	}

	before := sess.Stats()
	stripe0 := sess.StripeStats()
	var res *perfResult
	if h.Baseline {
		res, err = s.baseline(ctx, sess, ctrl, &h)
	} else {
		res, err = s.braid(ctx, sess, ctrl, &h)
	}
	if err != nil {
		res = &perfResult{Error: err.Error()}
	}
	b := statsByID(before)
	for _, p := range sess.Stats() {
		q := b[p.ID]
		res.Paths = append(res.Paths, perfServerPath{ID: p.ID, Remote: p.Remote, Local: p.Local,
			Received: p.BytesReceived - q.BytesReceived, Sent: p.BytesSent - q.BytesSent})
	}
	res.Stripe = stripeDelta(stripe0, sess.StripeStats())
	s.metrics.test(&h, res)
	if werr := writeJSON(ctx, ctrl, res); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	var sum perfSummary
	if rerr := readJSON(ctx, ctrl, 30*time.Second, &sum); rerr != nil {
		return fmt.Errorf("no summary from the client: %w", rerr)
	}
	s.printLine(peerOf(sess), &h, res, &sum)
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

// braid runs the data phase of a braid test.
func (s *perfServer) braid(ctx context.Context, sess *transport.Session, ctrl *transport.Stream, h *perfHello) (*perfResult, error) {
	if err := writeJSON(ctx, ctrl, s.ready()); err != nil {
		return nil, err
	}
	start := time.Now()
	// Whatever the client does, the test ends.
	hctx, cancel := context.WithDeadline(ctx, start.Add(h.duration()+2*time.Minute))
	defer cancel()
	if h.Mode == "bulk" && h.Reverse {
		return s.bulkSend(hctx, sess, h, start)
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

// bulkSend is the server's side of a reverse bulk test.
func (s *perfServer) bulkSend(ctx context.Context, sess *transport.Session, h *perfHello, start time.Time) (*perfResult, error) {
	buf := make([]byte, h.Size)
	fillPattern(buf)
	deadline := start.Add(h.duration())
	var bytes, msgs atomic.Int64
	errs := make([]error, h.Streams)
	var wg sync.WaitGroup
	for i := range h.Streams {
		st, err := sess.OpenStream(ctx)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if err := st.WriteMessage(ctx, buf); err != nil {
					errs[i] = err
					return
				}
				bytes.Add(h.Size)
				msgs.Add(1)
			}
			errs[i] = st.Close()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := sess.Flush(ctx); err != nil {
		return nil, err
	}
	return &perfResult{Bytes: bytes.Load(), Messages: msgs.Load(), Seconds: time.Since(start).Seconds()}, nil
}
