package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

func init() {
	register(&command{
		name:    "perf",
		summary: "measure throughput and round-trip time over every path (like iperf3)",
		run:     runPerf,
	})
}

const perfSynopsis = `-s [--listen A1,A2,...] | -c B1,B2,... [-B A1,A2,...] [flags]`

const perfDescription = `
Measures a braid session between two hosts, like iperf3, with iperf3's
flags: -s, -c, -p, -t, -P, -R, -J, -i, -l, -B, -1. Start a server on one
host with one address per network (or, without --listen, on every address),
then a client on the other with the server's address on each network (the
i-th -B/--from address is the local source of the i-th path). Addresses
without a port use --port, 7201 by default.

  server:  braid perf -s --listen 10.1.0.2,10.2.0.2
  client:  braid perf -c 10.1.0.2,10.2.0.2 -t 10 -P 4
           braid perf -c 10.1.0.2,10.2.0.2 -R -J > result.json
           braid perf -c 10.1.0.2,10.2.0.2 --mode pingpong -l 1M --count 100

Modes:
  bulk      the client writes messages of --length on --parallel streams;
            the server counts what arrives for --time seconds from the
            first byte, then ends the test, dropping what is still queued,
            so the test lasts --time however fast the link, and throughput
            is receiver bytes over that interval (-R: the server sends, the
            client counts).
  pingpong  the client writes a message of --length, the server echoes it;
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

--stripe, --path-policy and --frag shape what each side sends: the server's
own flags apply to its echoes and to -R data, so start it with the same ones
(the client warns when they differ).

Output: a header, interval lines every --interval seconds for runs longer
than two of them, and a summary with per-path bytes and Mbit/s (bytes the
client sent in bulk, received with -R, both in pingpong). -J/--json prints
one JSON object shaped like iperf3's -J output (start, intervals, end with
sum_sent and sum_received, error on failure) plus a "braid" section with
the per-path figures. The server prints one line per finished test (with
-J, one JSON object per test) and serves clients concurrently until
interrupted (or after one test with -1/--once).`

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
	live     bool    // print interval lines
	interval float64 // seconds between interval reports; 0: none
}

func runPerf(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "perf", perfSynopsis, perfDescription)
	sf := addSessionFlags(fs)
	server := fs.BoolP("server", "s", false, "run the server")
	listen := fs.String("listen", "", "server: comma-separated `addresses` to listen on, one per network (default: every address, on --port)")
	once := fs.BoolP("once", "1", false, "server: exit after one test")
	alias(fs, "one-off", "once", "")
	portOffset := fs.Int("baseline-port-offset", 0, "server: plain TCP listeners of --tcp-baseline use each listen port plus this `offset` (default: ephemeral ports)")
	client := fs.StringP("client", "c", "", "client: comma-separated server `addresses`, one per path")
	port := fs.IntP("port", "p", perfPort, "`port` of the addresses given without one")
	from := fs.StringP("from", "B", "", "client: comma-separated local source `addresses`, the i-th for the i-th path")
	mode := fs.String("mode", "bulk", "`mode`: bulk or pingpong")
	size := fs.StringP("length", "l", "1M", "message `size` in bytes, K/M/G suffixes (powers of 1024)")
	alias(fs, "size", "length", "use -l/--length, as in iperf3 (--size is an image size in braid local and sample)")
	seconds := fs.Float64P("time", "t", 10, "test duration in `seconds` (pingpong: upper bound)")
	streams := fs.IntP("parallel", "P", 1, "number of parallel `streams`")
	alias(fs, "streams", "parallel", "use -P/--parallel, as in iperf3 and braid send")
	interval := fs.Float64P("interval", "i", 1, "`seconds` between interval reports (0: none)")
	count := fs.Int("count", 100, "pingpong: round trips per stream (0: as many as --time allows)")
	reverse := fs.BoolP("reverse", "R", false, "bulk: the server sends, the client receives")
	baseline := fs.Bool("tcp-baseline", false, "measure k plain TCP connections striped by hand instead of braid")
	asJSON := fs.BoolP("json", "J", false, "print one JSON object shaped like iperf3's -J output instead of text")
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
	if *port < 1 || *port > 65535 {
		env.Errorf("perf: --port %d out of range 1..65535", *port)
		return 2
	}
	if !(*interval >= 0 && *interval <= perfMaxSeconds) {
		env.Errorf("perf: --interval %v: want seconds, 0 for none", *interval)
		return 2
	}
	cfg, err := sf.config(env)
	if err != nil {
		env.Errorf("perf: %v", err)
		return exitCode(err)
	}
	if *server {
		if !fs.Changed("listen") {
			*listen = ":" + strconv.Itoa(*port)
		}
		addrs, err := addrList(*listen, *port)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address given")
		}
		if err != nil {
			env.Errorf("perf: --listen needs one host:port per network: %v", err)
			return 2
		}
		if *portOffset < 0 || *portOffset > 65535 {
			env.Errorf("perf: --baseline-port-offset %d out of range", *portOffset)
			return 2
		}
		srv := &perfServer{portOffset: *portOffset, json: *asJSON, interval: time.Duration(*interval * float64(time.Second))}
		return perfServe(ctx, env, addrs, cfg, *once, srv, obs)
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
	if o.paths, err = dialPaths(*client, *from, *port); err != nil {
		env.Errorf("perf: %v", err)
		return 2
	}
	if o.size, err = parseSize(*size); err != nil {
		env.Errorf("perf: --length: %v", err)
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
	o.interval = *interval
	o.live = !o.json && o.interval > 0 && o.seconds > 2*o.interval
	ip := &iperfReport{Intervals: []iperfInterval{}}
	rep, err := perfRun(ctx, env, o, ip)
	if o.json {
		// Like iperf3 -J, a failure is a JSON object too, with "error".
		if err != nil {
			if ip.Start.Version == "" {
				ip.Start = newIperfStart(time.Now(), "", nil, o.testStart())
			}
			ip.Error = err.Error()
		} else {
			ip.Braid = rep
		}
		if perr := printJSON(env.Stdout, ip); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		env.Errorf("perf: %v", err)
		return 1
	}
	if !o.json {
		rep.printSummary(env.Stdout)
	}
	return 0
}

// testStart is the test_start section of the iperf3-shaped report.
func (o *perfOptions) testStart() iperfTestStart {
	t := iperfTestStart{Protocol: "braid/" + o.cfg.Transport, NumStreams: o.streams, BlkSize: o.size,
		Duration: o.seconds, Mode: o.mode}
	if o.cfg.Transport == "" {
		t.Protocol = "braid/tcp"
	}
	if o.baseline {
		t.Protocol, t.NumStreams = "TCP", len(o.paths)
	}
	if o.reverse {
		t.Reverse = 1
	}
	if o.mode == "pingpong" {
		t.Blocks = int64(o.count)
	}
	return t
}

func (o *perfOptions) hello() perfHello {
	h := perfHello{Version: perfVersion, Mode: o.mode, Size: o.size, Seconds: o.seconds, Streams: o.streams,
		Count: o.count, Reverse: o.reverse, Baseline: o.baseline, Paths: len(o.paths)}
	if o.mode == "bulk" {
		h.Count = 0
	}
	return h
}

// perfRun runs one test as the client. It fills ip, the iperf3-shaped
// report, as far as the test got.
func perfRun(ctx context.Context, env *Env, o *perfOptions, ip *iperfReport) (*perfReport, error) {
	rep := newPerfReport(o)
	if !o.json {
		rep.printHeader(env.Stdout, o)
	}
	sess, err := transport.Dial(ctx, o.paths, o.cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer ctl.CloseSession(ctx, sess, false, 0)
	ip.Start = newIperfStart(time.Now(), sess.ID(), sessionConnected(sess), o.testStart())
	host, port := hostPort(o.paths[0].Remote)
	ip.Start.ConnectingTo = &iperfHostPort{Host: host, Port: port}
	ctrl, err := sess.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	// Counters start before the request: in reverse mode data may arrive
	// right after the server's answer.
	before := perfSnapshot(sess)
	hello := o.hello()
	if err := ctl.WriteJSON(ctx, ctrl, hello); err != nil {
		return nil, err
	}
	var ready perfReady
	if err := ctl.ReadJSON(ctx, ctrl, 15*time.Second, &ready); err != nil {
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
		if err == nil {
			ip.Intervals, ip.End = baselineIperf(o, rep, res)
		}
	} else {
		res, err = braidData(ctx, env, o, ctrl, &ready, rep, ip)
	}
	if err != nil {
		return nil, err
	}
	if res.Error != "" {
		return nil, fmt.Errorf("server: %s", res.Error)
	}
	sum := perfSummary{ThroughputMbps: rep.ThroughputMbps, Seconds: rep.Seconds, Bytes: rep.Bytes,
		CPUUser: rep.CPUUser, CPUSys: rep.CPUSys}
	if ip.End.SumSent != nil {
		sum.SentBytes, sum.SentSeconds = ip.End.SumSent.Bytes, ip.End.SumSent.Seconds
	}
	for _, st := range ip.End.Streams {
		mine := st.Sender
		if o.reverse {
			mine = st.Receiver
		}
		if mine.Socket != nil {
			sum.StreamBytes = append(sum.StreamBytes, perfStreamBytes{ID: *mine.Socket, Bytes: mine.Bytes})
		}
	}
	if rep.PingPong != nil {
		sum.RTTus, sum.EffectiveMbps = rep.RTTus, rep.EffectiveMbps
	}
	if err := ctl.WriteJSON(ctx, ctrl, sum); err == nil {
		_ = ctrl.Close()
	}
	_ = ctl.CloseSession(ctx, sess, true, 5*time.Second)
	return rep, nil
}

// braidData dials the data session of a braid test, joins it to the test
// and runs the data phase on it.
func braidData(ctx context.Context, env *Env, o *perfOptions, ctrl *transport.Stream, ready *perfReady, rep *perfReport, ip *iperfReport) (*perfResult, error) {
	if ready.Join == nil {
		return nil, errors.New("the server sent no join cookie: use the same braid version on both hosts")
	}
	sess, err := transport.Dial(ctx, o.paths, o.cfg)
	if err != nil {
		return nil, fmt.Errorf("connect the data session: %w", err)
	}
	defer ctl.CloseSession(ctx, sess, false, 0)
	js, err := sess.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	if err := ctl.WriteJSON(ctx, js, perfHello{Version: perfVersion, Join: ready.Join}); err != nil {
		return nil, err
	}
	return braidClient(ctx, env, o, sess, ctrl, rep, perfSnapshot(sess), ip)
}

// braidClient runs the data phase over the braid data session sess.
func braidClient(ctx context.Context, env *Env, o *perfOptions, sess *transport.Session, ctrl *transport.Stream, rep *perfReport, before *snapshot, ip *iperfReport) (*perfResult, error) {

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
	ctr := &streamCounter{}
	sampler := startSampler(ctr, !o.reverse, time.Duration(o.interval*float64(time.Second)))
	var (
		res     perfResult
		err     error
		elapsed time.Duration
		rtts    []time.Duration
		bytes   int64
		msgs    int64
		sent    bulkSendResult
		atEnd   []transport.PathStats
	)
	switch {
	case o.mode == "pingpong":
		rtts, elapsed, err = braidPingPong(ctx, o, sess, iv, ctr)
	case o.reverse:
		var r bulkRecvResult
		r, err = bulkReceive(ctx, sess, o.streams, o.duration(), ctr)
		bytes, msgs, elapsed = r.bytes, r.msgs, time.Duration(r.seconds*float64(time.Second))
		// The per-path figures are what arrived by the end of the test.
		atEnd = r.paths
	default:
		sent, err = bulkSend(ctx, sess, o.streams, o.size, o.duration(), ctr)
		atEnd = sent.paths
	}
	ip.Intervals = sampler.stop()
	if err == nil {
		err = ctl.ReadJSONWhileBusy(ctx, ctrl, ctl.SessionMoving(sess), 30*time.Second, &res)
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
	rep.ThroughputMbps = ctl.Mbps(rep.Bytes, rep.Seconds)
	if o.mode == "pingpong" {
		rep.ThroughputMbps = ctl.Mbps(2*rep.Bytes, rep.Seconds)
	}
	paths := after.paths
	if atEnd != nil {
		paths = atEnd
	}
	rep.setBraidPaths(o, before.paths, paths, &res)
	ids, counts := ctr.snapshot()
	ip.End = o.iperfEnd(rep, &res, sent, ids, counts)
	return &res, nil
}

// duration is --time.
func (o *perfOptions) duration() time.Duration {
	return time.Duration(o.seconds * float64(time.Second))
}

// iperfEnd builds the end section of a braid test from the client's
// report rep, the server's result res and the client's per-stream counts
// (bytes it sent in bulk and pingpong, received in reverse).
func (o *perfOptions) iperfEnd(rep *perfReport, res *perfResult, sent bulkSendResult, ids []int, counts []int64) iperfEnd {
	var retrans int64
	for _, p := range rep.PerPath {
		retrans += p.Retransmitted
	}
	local := !o.reverse // this side sent the data
	e := iperfEnd{Streams: []iperfEndStream{}}
	var sumSent, sumRecv iperfSpan
	theirs := map[int]int64{}
	for _, s := range res.StreamBytes {
		theirs[s.ID] = s.Bytes
	}
	switch {
	case o.mode == "pingpong":
		sumSent = span(0, rep.Seconds, rep.Bytes, true)
		sumRecv = span(0, rep.Seconds, rep.Bytes, true)
		for i, id := range ids {
			e.Streams = append(e.Streams, iperfEndStream{Sender: streamSpan(id, rep.Seconds, counts[i], true),
				Receiver: streamSpan(id, rep.Seconds, counts[i], true)})
		}
	case o.reverse:
		sumSent = span(0, res.Seconds, res.Bytes, local)
		sumRecv = span(0, rep.Seconds, rep.Bytes, local)
		for i, id := range ids {
			e.Streams = append(e.Streams, iperfEndStream{Sender: streamSpan(id, res.Seconds, theirs[id], local),
				Receiver: streamSpan(id, rep.Seconds, counts[i], local)})
		}
	default:
		sumSent = span(0, sent.seconds, sent.bytes, local)
		sumRecv = span(0, res.Seconds, res.Bytes, local)
		for i, id := range ids {
			e.Streams = append(e.Streams, iperfEndStream{Sender: streamSpan(id, sent.seconds, counts[i], local),
				Receiver: streamSpan(id, res.Seconds, theirs[id], local)})
		}
	}
	sumSent.Retransmits = &retrans
	e.SumSent, e.SumReceived = &sumSent, &sumRecv
	var c iperfCPU
	c.HostTotal, c.HostUser, c.HostSystem = cpuPercent(rep.CPUUser, rep.CPUSys, max(rep.Seconds, sent.seconds))
	c.RemoteTotal, c.RemoteUser, c.RemoteSystem = cpuPercent(res.CPUUser, res.CPUSys, max(rep.Seconds, res.Seconds))
	e.CPU = &c
	return e
}

// streamSpan is one stream's figures over [0, seconds].
func streamSpan(id int, seconds float64, n int64, sender bool) iperfSpan {
	s := span(0, seconds, n, sender)
	s.Socket = &id
	return s
}

// sessionConnected lists sess's paths for the start section.
func sessionConnected(sess *transport.Session) []iperfConnected {
	var out []iperfConnected
	for _, p := range sess.Stats() {
		out = append(out, connected(p.ID, p.Local, p.Remote))
	}
	return out
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

// braidPingPong runs the round trips on o.streams streams in parallel and
// returns the round-trip times and the longest stream's measured time.
func braidPingPong(ctx context.Context, o *perfOptions, sess *transport.Session, iv *intervals, ctr *streamCounter) ([]time.Duration, time.Duration, error) {
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
		sent := ctr.stream(int(st.ID()))
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
				sent.Add(o.size)
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
