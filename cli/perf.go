package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/transport"
)

func init() {
	register(&command{
		name:    "perf",
		summary: "measure throughput and round-trip time over every path (like iperf3)",
		run:     runPerf,
	})
}

const perfSynopsis = `-s --listen A1,A2,... | -c B1,B2,... [--from A1,A2,...] [flags]`

const perfDescription = `
Measures a braid session between two hosts, like iperf3. Start a server on
one host with one address per network, then a client on the other with the
server's address on each network (the i-th --from address is the local
source of the i-th path). Addresses without a port use port 7201.

  server:  braid perf -s --listen 10.1.0.2,10.2.0.2
  client:  braid perf -c 10.1.0.2,10.2.0.2 --time 10 --streams 4
           braid perf -c 10.1.0.2,10.2.0.2 --mode pingpong --size 1M --count 100

Modes:
  bulk      the client writes messages of --size on --streams streams for
            --time seconds; the server counts what arrives and reports it
            back, so throughput is receiver bytes over the receiver's
            interval (--reverse: the server sends, the client counts).
  pingpong  the client writes a message of --size, the server echoes it;
            --count round trips per stream or --time, whichever ends first,
            after one warm-up round trip. Effective bandwidth is the paper's
            eq. 1: (8*size/1e6) / (RTT/2) Mbit/s with RTT the mean round trip;
            throughput is payload in both directions over the elapsed time.

--tcp-baseline measures k plain TCP connections striped by hand instead of
braid, one per path, with the same size and time: in bulk each connection
sends its own bytes; in pingpong each message is split into k equal parts,
sent in parallel and echoed. The server needs no extra flag: the braid
control session asks it to open plain TCP listeners, on an ephemeral port of
each address the paths arrived on (or on that port plus
--baseline-port-offset, for firewalls), which it closes after the test. The
connections prove themselves with a token sent over the braid session.

--stripe, --policy and --frag shape what each side sends: the server's own
flags apply to its echoes and to --reverse data, so start it with the same
ones (the client warns when they differ).

Output: a header, interval lines each second for runs longer than 2 s, and
a summary with per-path bytes and Mbit/s (bytes the client sent in bulk,
received with --reverse, both in pingpong). --json prints one JSON object
instead. The server prints one line per finished test and serves clients
concurrently until interrupted (or after one test with --once).`

// perfOptions is a parsed perf client command line.
type perfOptions struct {
	paths    []transport.Path
	cfg      *transport.Config
	mode     string
	size     int64
	seconds  float64
	streams  int
	count    int
	reverse  bool
	baseline bool
	json     bool
	frag     int
	live     bool // print interval lines
}

func runPerf(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "perf", perfSynopsis, perfDescription)
	sf := addSessionFlags(fs)
	server := fs.Bool("s", false, "run the server")
	listen := fs.String("listen", "", "server: comma-separated `addresses` to listen on, one per network")
	once := fs.Bool("once", false, "server: exit after one test")
	portOffset := fs.Int("baseline-port-offset", 0, "server: plain TCP listeners of --tcp-baseline use each listen port plus this `offset` (default: ephemeral ports)")
	client := fs.String("c", "", "client: comma-separated server `addresses`, one per path")
	from := fs.String("from", "", "client: comma-separated local source `addresses`, the i-th for the i-th path")
	mode := fs.String("mode", "bulk", "`mode`: bulk or pingpong")
	size := fs.String("size", "1M", "message `size` in bytes, K/M/G suffixes (powers of 1024)")
	seconds := fs.Float64("time", 10, "test duration in `seconds` (pingpong: upper bound)")
	streams := fs.Int("streams", 1, "number of parallel `streams`")
	count := fs.Int("count", 100, "pingpong: round trips per stream (0: as many as --time allows)")
	reverse := fs.Bool("reverse", false, "bulk: the server sends, the client receives")
	baseline := fs.Bool("tcp-baseline", false, "measure k plain TCP connections striped by hand instead of braid")
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	obs := addObsFlags(fs, "perf server (-s)")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		env.Errorf("perf: unexpected arguments %q", fs.Args())
		return 2
	}
	if *server == (*client != "") {
		env.Errorf("perf: give either -s (server) or -c ADDRESSES (client)")
		helpHint(env, fs.Name())
		return 2
	}
	cfg, err := sf.config(env)
	if err != nil {
		env.Errorf("perf: %v", err)
		return exitCode(err)
	}
	if *server {
		addrs, err := addrList(*listen, perfPort)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address given")
		}
		if err != nil {
			env.Errorf("perf: -s needs --listen with one host:port per network: %v", err)
			return 2
		}
		if *portOffset < 0 || *portOffset > 65535 {
			env.Errorf("perf: --baseline-port-offset %d out of range", *portOffset)
			return 2
		}
		return perfServe(ctx, env, addrs, cfg, *once, *portOffset, obs)
	}

	if *obs.metrics != "" {
		env.Errorf("perf: --metrics goes with -s: the server's side of the tests keeps the metrics")
		helpHint(env, fs.Name())
		return 2
	}
	stopObs, err := obs.start(cfg.Logger, nil)
	if err != nil {
		env.Errorf("perf: %v", err)
		return 1
	}
	defer stopObs()
	o := &perfOptions{cfg: cfg, mode: *mode, seconds: *seconds, streams: *streams, count: *count,
		reverse: *reverse, baseline: *baseline, json: *asJSON, frag: cfg.FragmentSize}
	if o.paths, err = dialPaths(*client, *from, perfPort); err != nil {
		env.Errorf("perf: %v", err)
		return 2
	}
	if o.size, err = parseSize(*size); err != nil {
		env.Errorf("perf: --size: %v", err)
		return 2
	}
	h := o.hello()
	if err := h.validate(); err != nil {
		env.Errorf("perf: %v", err)
		return 2
	}
	if o.reverse && o.mode != "bulk" {
		env.Errorf("perf: --reverse applies to bulk mode only")
		return 2
	}
	o.live = !o.json && o.seconds > 2
	rep, err := perfRun(ctx, env, o)
	if err != nil {
		env.Errorf("perf: %v", err)
		return 1
	}
	if o.json {
		if err := printJSON(env.Stdout, rep); err != nil {
			env.Errorf("perf: %v", err)
			return 1
		}
		return 0
	}
	rep.printSummary(env.Stdout)
	return 0
}

func (o *perfOptions) hello() perfHello {
	h := perfHello{Version: perfVersion, Mode: o.mode, Size: o.size, Seconds: o.seconds, Streams: o.streams,
		Count: o.count, Reverse: o.reverse, Baseline: o.baseline, Paths: len(o.paths)}
	if o.mode == "bulk" {
		h.Count = 0
	}
	return h
}

// perfRun runs one test as the client.
func perfRun(ctx context.Context, env *Env, o *perfOptions) (*perfReport, error) {
	rep := newPerfReport(o)
	if !o.json {
		rep.printHeader(env.Stdout, o)
	}
	sess, err := transport.Dial(ctx, o.paths, o.cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer closeSession(ctx, sess, false, 0)
	ctrl, err := sess.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	// Counters start before the request: in reverse mode data may arrive
	// right after the server's answer.
	before := perfSnapshot(sess)
	hello := o.hello()
	if err := writeJSON(ctx, ctrl, hello); err != nil {
		return nil, err
	}
	var ready perfReady
	if err := readJSON(ctx, ctrl, 15*time.Second, &ready); err != nil {
		return nil, fmt.Errorf("server did not accept the test: %w", err)
	}
	if ready.Error != "" {
		return nil, fmt.Errorf("server refused the test: %s", ready.Error)
	}
	if !o.baseline {
		rep.ServerStripe, rep.ServerPolicy, rep.ServerFrag = ready.Stripe, ready.Policy, ready.Frag
		serverSends := o.mode == "pingpong" || o.reverse
		if serverSends && (ready.Stripe != rep.Stripe || ready.Policy != rep.Policy || ready.Frag != rep.Frag) {
			env.Errorf("perf: warning: the server sends with stripe %s, policy %s, frag %d, this client with stripe %s, policy %s, frag %d; start the server with the same flags to measure one setting",
				ready.Stripe, ready.Policy, ready.Frag, rep.Stripe, rep.Policy, rep.Frag)
		}
	}

	var res *perfResult
	if o.baseline {
		res, err = baselineClient(ctx, env, o, sess, ctrl, &ready, rep, before)
	} else {
		res, err = braidClient(ctx, env, o, sess, ctrl, rep, before)
	}
	if err != nil {
		return nil, err
	}
	if res.Error != "" {
		return nil, fmt.Errorf("server: %s", res.Error)
	}
	sum := perfSummary{ThroughputMbps: rep.ThroughputMbps, Seconds: rep.Seconds, Bytes: rep.Bytes}
	if rep.PingPong != nil {
		sum.RTTus, sum.EffectiveMbps = rep.RTTus, rep.EffectiveMbps
	}
	if err := writeJSON(ctx, ctrl, sum); err == nil {
		_ = ctrl.Close()
	}
	_ = closeSession(ctx, sess, true, 5*time.Second)
	return rep, nil
}

// braidClient runs the data phase over the braid session.
func braidClient(ctx context.Context, env *Env, o *perfOptions, sess *transport.Session, ctrl *transport.Stream, rep *perfReport, before *snapshot) (*perfResult, error) {

	// The meter shows the client's wire bytes per path in the direction
	// that carries the data.
	meter := func() []int64 {
		var out []int64
		for _, p := range sess.Stats() {
			switch {
			case o.mode == "pingpong":
				out = append(out, p.BytesSent+p.BytesReceived)
			case o.reverse:
				out = append(out, p.BytesReceived)
			default:
				out = append(out, p.BytesSent)
			}
		}
		return out
	}
	iv := startIntervals(env, o, rep, meter)
	start := time.Now()
	var (
		res     perfResult
		err     error
		elapsed time.Duration
		rtts    []time.Duration
		bytes   int64
		msgs    int64
	)
	switch {
	case o.mode == "pingpong":
		rtts, elapsed, err = braidPingPong(ctx, o, sess, iv)
	case o.reverse:
		bytes, msgs, elapsed, err = braidBulkRecv(ctx, o, sess, start)
	default:
		err = braidBulkSend(ctx, o, sess)
	}
	if err == nil {
		err = readJSONWhileBusy(ctx, ctrl, sessionMoving(sess), 30*time.Second, &res)
	}
	iv.stop()
	if err != nil {
		return nil, err
	}
	after := perfSnapshot(sess)
	rep.CPUUser, rep.CPUSys = (after.user - before.user).Seconds(), (after.sys - before.sys).Seconds()
	rep.Control = stripeDelta(before.stripe, after.stripe)
	switch {
	case o.mode == "pingpong":
		rep.setPingPong(o, rtts, elapsed)
		rep.Control = addStripe(rep.Control, res.Stripe)
	case o.reverse:
		rep.Bytes, rep.Messages, rep.Seconds = bytes, msgs, elapsed.Seconds()
		rep.Control = res.Stripe
	default:
		rep.Bytes, rep.Messages, rep.Seconds = res.Bytes, res.Messages, res.Seconds
	}
	rep.ThroughputMbps = mbps(rep.Bytes, rep.Seconds)
	if o.mode == "pingpong" {
		rep.ThroughputMbps = mbps(2*rep.Bytes, rep.Seconds)
	}
	rep.setBraidPaths(o, before.paths, after.paths, &res)
	return &res, nil
}

// snapshot holds a session's counters and the process's CPU time at one
// moment.
type snapshot struct {
	paths     []transport.PathStats
	stripe    transport.StripeStats
	user, sys time.Duration
}

func perfSnapshot(sess *transport.Session) *snapshot {
	s := &snapshot{paths: sess.Stats(), stripe: sess.StripeStats()}
	s.user, s.sys = cpuTimes()
	return s
}

func addStripe(a, b transport.StripeStats) transport.StripeStats {
	return transport.StripeStats{Segments: a.Segments + b.Segments, Starts: a.Starts + b.Starts, Ends: a.Ends + b.Ends}
}

// braidBulkSend writes messages on o.streams streams until the time is up,
// then closes them.
func braidBulkSend(ctx context.Context, o *perfOptions, sess *transport.Session) error {
	buf := make([]byte, o.size)
	fillPattern(buf)
	deadline := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	errs := make([]error, o.streams)
	var wg sync.WaitGroup
	for i := range o.streams {
		st, err := sess.OpenStream(ctx)
		if err != nil {
			return err
		}
		wg.Go(func() {
			// A message is never cut short: the last one may end after
			// the deadline.
			for time.Now().Before(deadline) {
				if err := st.WriteMessage(ctx, buf); err != nil {
					errs[i] = err
					return
				}
			}
			errs[i] = st.Close()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// braidBulkRecv accepts the server's o.streams streams and counts what
// arrives until each ends. The interval runs from start to the last end.
func braidBulkRecv(ctx context.Context, o *perfOptions, sess *transport.Session, start time.Time) (bytes, msgs int64, elapsed time.Duration, err error) {
	// The server sends for o.seconds; allow generous time for the tail.
	hard := time.Duration(o.seconds*float64(time.Second)) + 2*time.Minute
	rctx, cancel := context.WithTimeout(ctx, hard)
	defer cancel()
	var (
		nb, nm atomic.Int64
		last   latest
		wg     sync.WaitGroup
	)
	errs := make([]error, o.streams)
	for i := range o.streams {
		st, err := sess.AcceptStream(rctx)
		if err != nil {
			cancel()
			wg.Wait()
			return 0, 0, 0, fmt.Errorf("accept the server's stream %d: %w", i+1, err)
		}
		wg.Go(func() {
			for {
				b, err := st.ReadMessage(rctx)
				if errors.Is(err, io.EOF) {
					last.mark()
					return
				}
				if err != nil {
					errs[i] = err
					return
				}
				nb.Add(int64(len(b)))
				nm.Add(1)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, 0, err
	}
	return nb.Load(), nm.Load(), last.get().Sub(start), nil
}

// braidPingPong runs the round trips on o.streams streams in parallel and
// returns the round-trip times and the longest stream's measured time.
func braidPingPong(ctx context.Context, o *perfOptions, sess *transport.Session, iv *intervals) ([]time.Duration, time.Duration, error) {
	deadline := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	hard, cancel := context.WithDeadline(ctx, deadline.Add(time.Minute))
	defer cancel()
	results := make([][]time.Duration, o.streams)
	spans := make([]time.Duration, o.streams)
	errs := make([]error, o.streams)
	var wg sync.WaitGroup
	for i := range o.streams {
		st, err := sess.OpenStream(ctx)
		if err != nil {
			return nil, 0, err
		}
		wg.Go(func() {
			defer st.Close()
			buf := make([]byte, o.size)
			fillPattern(buf)
			round := func(seq uint64) (time.Duration, error) {
				stamp(buf, seq)
				t0 := time.Now()
				if err := st.WriteMessage(hard, buf); err != nil {
					return 0, err
				}
				echo, err := st.ReadMessage(hard)
				if err != nil {
					return 0, err
				}
				d := time.Since(t0)
				if int64(len(echo)) != o.size || !checkStamp(echo, seq) {
					return 0, fmt.Errorf("stream %d: echo %d of %d bytes does not match what was sent", st.ID(), seq, len(echo))
				}
				return d, nil
			}
			if _, err := round(0); err != nil { // warm-up
				errs[i] = err
				return
			}
			t0 := time.Now()
			for n := 1; (o.count == 0 || n <= o.count) && time.Now().Before(deadline); n++ {
				d, err := round(uint64(n))
				if err != nil {
					errs[i] = err
					return
				}
				results[i] = append(results[i], d)
				iv.addRTT(d)
			}
			spans[i] = time.Since(t0)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	return slices.Concat(results...), slices.Max(spans), nil
}

// stamp writes seq into the first bytes of b.
func stamp(b []byte, seq uint64) {
	for i := 0; i < 8 && i < len(b); i++ {
		b[i] = byte(seq >> (8 * i))
	}
}

func checkStamp(b []byte, seq uint64) bool {
	for i := 0; i < 8 && i < len(b); i++ {
		if b[i] != byte(seq>>(8*i)) {
			return false
		}
	}
	return true
}

// rttStats summarizes round-trip times.
type rttStats struct {
	n                        int
	mean, min, p50, p99, max time.Duration
}

func summarizeRTT(rtts []time.Duration) rttStats {
	if len(rtts) == 0 {
		return rttStats{}
	}
	s := slices.Clone(rtts)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	pct := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rttStats{n: len(s), mean: sum / time.Duration(len(s)), min: s[0], p50: pct(0.5), p99: pct(0.99), max: s[len(s)-1]}
}
