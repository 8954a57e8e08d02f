package perf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/transport/channel"
)

// Options is one test as the client runs it. Paths and Config are
// required; the zero values of the others are those of a Hello's bounds
// (Validate reports what is out of range).
type Options struct {
	Paths    []transport.Path  // the server's address on each network, with the local source address if pinned
	Config   *transport.Config // of the sessions; its FragmentSize, Stripe and Policy are reported
	Mode     string            // "bulk" or "pingpong"
	Size     int64             // message size in bytes
	Seconds  float64           // bulk: the test's duration; pingpong: an upper bound
	Streams  int               // parallel streams
	Count    int               // pingpong: round trips per stream (0: as many as Seconds allows)
	Reverse  bool              // bulk: the server sends, the client counts
	Baseline bool              // k plain TCP connections striped by hand instead of braid
	Interval float64           // seconds between Report.Intervals; 0: none
	// ConnectTimeout bounds the session's dial (iperf3's
	// --connect-timeout); 0: the transport's own bound.
	ConnectTimeout time.Duration
	// Bitrate paces bulk senders (the client's, or with Reverse the
	// server's) to this many bits per second in all, as iperf3 -b;
	// 0: unlimited.
	Bitrate int64
	// Bytes, if not 0, ends a bulk test when the sender has sent this
	// many bytes, rounded up to whole messages, as iperf3 -n; Seconds
	// is then not a bound.
	Bytes int64
	// Omit is a warm-up of this many seconds before the measured Seconds,
	// as iperf3 -O: its intervals are marked omitted and its bytes and
	// round trips are left out of the totals.
	Omit float64
	// ServerOutput asks the server for its own report of the test, as
	// iperf3 --get-server-output: the IperfReport's ServerOutputJSON or
	// ServerOutputText.
	ServerOutput bool
	// Bidir runs a bulk test both ways at once, Streams streams each way,
	// as iperf3 --bidir: Report.Bidir and the IperfReport's *_bidir_reverse
	// sums hold the server-to-client direction.
	Bidir bool
	// Socket is set on the data session's channel sockets at both ends,
	// as iperf3 -C (congestion control) and -w (socket buffers) set them.
	Socket channel.SocketOptions
	// OnInterval, if not nil, is called with each interval as it ends
	// (i counts from 0), for live output.
	OnInterval func(i int, e Interval)
	// OnStreamInterval, if not nil, is called with each interval of the
	// streams as it ends (i counts from 0): the bytes of every stream and
	// their sum, as iperf3 prints its interval lines and as -J's
	// intervals hold them. A --tcp-baseline stream is one of its plain
	// TCP connections.
	OnStreamInterval func(i int, iv IperfInterval)
	// Warn, if not nil, receives warnings that do not stop the test: a
	// server that sends with other striping settings than the client.
	Warn func(msg string)
}

// testStart is the test_start section of the iperf3-shaped report.
func (o *Options) testStart() IperfTestStart {
	t := IperfTestStart{Protocol: "braid/" + o.Config.Transport, NumStreams: o.Streams, BlkSize: o.Size,
		Duration: o.Seconds, Mode: o.Mode}
	if o.Config.Transport == "" {
		t.Protocol = "braid/tcp"
	}
	if o.Baseline {
		t.Protocol, t.NumStreams = "TCP", o.hello().baselineConns()
	}
	if o.Reverse {
		t.Reverse = 1
	}
	if o.Bidir {
		t.Bidir = 1
	}
	t.TargetBitrate, t.Bytes, t.Omit, t.Tos = o.Bitrate, o.Bytes, o.Omit, o.Socket.TOS
	if o.Mode == "pingpong" {
		t.Blocks = int64(o.Count)
	}
	return t
}

func (o *Options) hello() Hello {
	h := Hello{Version: Version, Mode: o.Mode, Size: o.Size, Seconds: o.Seconds, Streams: o.Streams,
		Count: o.Count, Reverse: o.Reverse, Baseline: o.Baseline, Paths: len(o.Paths), Bitrate: o.Bitrate, Bytes: o.Bytes,
		Omit: o.Omit, ServerOutput: o.ServerOutput, Socket: o.Socket, Bidir: o.Bidir}
	if o.Mode == "bulk" {
		h.Count = 0
	}
	return h
}

// Validate reports the first setting of o that a server would refuse.
func (o *Options) Validate() error {
	h := o.hello()
	return h.validate()
}

// Report returns the settings part of the test's Report, before it runs:
// what a header line shows.
func (o *Options) Report() *Report { return newReport(o) }

// Run runs one test as the client of a braid perf server (Server) and
// returns braid's report and the iperf3-shaped one. The iperf3-shaped
// report is never nil: when the test fails it holds the test as far as it
// got, with Error set, as iperf3 -J prints a failure.
func Run(ctx context.Context, o *Options) (*Report, *IperfReport, error) {
	if len(o.Paths) == 0 || o.Config == nil {
		return nil, &IperfReport{Intervals: []IperfInterval{}, Error: "no paths or no config"}, errors.New("perf: no paths or no config")
	}
	ip := &IperfReport{Intervals: []IperfInterval{}}
	rep, err := run(ctx, o, ip)
	if err != nil {
		if ip.Start.Version == "" {
			ip.Start = newIperfStart(time.Now(), "", nil, o.testStart())
		}
		ip.Error = err.Error()
		return nil, ip, err
	}
	ip.Braid = rep
	return rep, ip, nil
}

// run runs one test as the client. It fills ip, the iperf3-shaped
// report, as far as the test got.
func run(ctx context.Context, o *Options, ip *IperfReport) (*Report, error) {
	rep := newReport(o)
	dctx, cancel := ctx, context.CancelFunc(func() {})
	if o.ConnectTimeout > 0 {
		dctx, cancel = context.WithTimeout(ctx, o.ConnectTimeout)
	}
	sess, err := transport.Dial(dctx, o.Paths, o.Config)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer ctl.CloseSession(ctx, sess, false, 0)
	ip.Start = newIperfStart(time.Now(), sess.ID(), sessionConnected(sess), o.testStart())
	host, port := hostPort(o.Paths[0].Remote)
	ip.Start.ConnectingTo = &IperfHostPort{Host: host, Port: port}
	ctrl, err := sess.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	// Counters start before the request: in reverse mode data may arrive
	// right after the server's answer.
	before := takeSnapshot(sess)
	hello := o.hello()
	if err := ctl.WriteJSON(ctx, ctrl, hello); err != nil {
		return nil, err
	}
	var ready Ready
	if err := ctl.ReadJSON(ctx, ctrl, 15*time.Second, &ready); err != nil {
		return nil, fmt.Errorf("server did not accept the test: %w", err)
	}
	if ready.Error != "" {
		return nil, fmt.Errorf("server refused the test: %s", ready.Error)
	}
	if !o.Baseline {
		rep.ServerStripe, rep.ServerPolicy, rep.ServerFrag = ready.Stripe, ready.Policy, ready.Frag
		serverSends := o.Mode == "pingpong" || o.Reverse
		if serverSends && (ready.Stripe != rep.Stripe || ready.Policy != rep.Policy || ready.Frag != rep.Frag) {
			if o.Warn != nil {
				o.Warn(fmt.Sprintf("the server sends with stripe %s, policy %s, frag %d, this client with stripe %s, policy %s, frag %d; start the server with the same flags to measure one setting",
					ready.Stripe, ready.Policy, ready.Frag, rep.Stripe, rep.Policy, rep.Frag))
			}
		}
	}

	var res *Result
	if o.Baseline {
		res, err = baselineClient(ctx, o, sess, ctrl, &ready, rep, before, ip)
		if err == nil {
			ip.End = baselineIperf(o, rep, res)
		}
	} else {
		res, err = braidData(ctx, o, ctrl, &ready, rep, ip)
	}
	if err != nil {
		return nil, err
	}
	if res.Error != "" {
		return nil, fmt.Errorf("server: %s", res.Error)
	}
	sum := Summary{ThroughputMbps: rep.ThroughputMbps, Seconds: rep.Seconds, Bytes: rep.Bytes,
		CPUUser: rep.CPUUser, CPUSys: rep.CPUSys}
	if ip.End.SumSent != nil {
		sum.SentBytes, sum.SentSeconds = ip.End.SumSent.Bytes, ip.End.SumSent.Seconds
	}
	for _, st := range ip.End.Streams {
		mine := st.Sender
		if o.Reverse {
			mine = st.Receiver
		}
		if mine.Socket != nil {
			sum.StreamBytes = append(sum.StreamBytes, StreamBytes{ID: *mine.Socket, Bytes: mine.Bytes})
		}
	}
	if rep.PingPong != nil {
		sum.RTTus, sum.EffectiveMbps = rep.RTTus, rep.EffectiveMbps
	}
	if err := ctl.WriteJSON(ctx, ctrl, sum); err == nil {
		if o.ServerOutput {
			var so ServerOutput
			if err := ctl.ReadJSON(ctx, ctrl, 15*time.Second, &so); err != nil {
				return nil, fmt.Errorf("no server output: %w", err)
			}
			ip.ServerOutputJSON, ip.ServerOutputText = so.JSON, so.Text
		}
		_ = ctrl.Close()
	}
	_ = ctl.CloseSession(ctx, sess, true, 5*time.Second)
	return rep, nil
}

// braidData dials the data session of a braid test, joins it to the test
// and runs the data phase on it.
func braidData(ctx context.Context, o *Options, ctrl *transport.Stream, ready *Ready, rep *Report, ip *IperfReport) (*Result, error) {
	if ready.Join == nil {
		return nil, errors.New("the server sent no join cookie: use the same braid version on both hosts")
	}
	cfg := *o.Config
	cfg.Socket = o.Socket
	if cfg.InsecurePlaintext {
		// The control session's dial has warned of it: once is enough.
		cfg.Logger = slog.New(dropInsecureWarning{handlerOf(cfg.Logger)})
	}
	sess, err := transport.Dial(ctx, o.Paths, &cfg)
	if err != nil {
		return nil, fmt.Errorf("connect the data session: %w", err)
	}
	if si := sess.SocketInfo(); si.IsTCPOrMultipath {
		ip.Start.TCPMSSDefault, ip.Start.SockBufsize = si.MaxSegmentSize, o.Socket.Buffer
		if o.Socket.MSS > 0 {
			ip.Start.TCPMSSDefault, ip.Start.TCPMSS = 0, o.Socket.MSS
		}
		ip.Start.SndbufActual, ip.Start.RcvbufActual = si.SendBuffer, si.ReceiveBuffer
		ip.congestion = si.Congestion
	}
	defer ctl.CloseSession(ctx, sess, false, 0)
	js, err := sess.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	if err := ctl.WriteJSON(ctx, js, Hello{Version: Version, Join: ready.Join}); err != nil {
		return nil, err
	}
	return braidClient(ctx, o, sess, ctrl, rep, takeSnapshot(sess), ip)
}

// braidClient runs the data phase over the braid data session sess.
func braidClient(ctx context.Context, o *Options, sess *transport.Session, ctrl *transport.Stream, rep *Report, before *snapshot, ip *IperfReport) (*Result, error) {

	// The meter shows the client's wire bytes per path in the direction
	// that carries the data.
	meter := func() []int64 {
		var out []int64
		for _, p := range sess.Stats() {
			switch {
			case o.Mode == "pingpong" || o.Bidir:
				out = append(out, p.BytesSent+p.BytesReceived)
			case o.Reverse:
				out = append(out, p.BytesReceived)
			default:
				out = append(out, p.BytesSent)
			}
		}
		return out
	}
	iv := startIntervals(o, rep, meter)
	// The per-path and CPU figures count from the end of the warm-up.
	var warm sync.Mutex
	if o.Omit > 0 {
		t := time.AfterFunc(o.omit(), func() {
			s := takeSnapshot(sess)
			warm.Lock()
			before = s
			warm.Unlock()
		})
		defer t.Stop()
	}
	ctr, rctr := &streamCounter{}, &streamCounter{}
	period := time.Duration(o.Interval * float64(time.Second))
	sampler := startSampler(ctr, !o.Reverse, period, o.omit(), o.OnStreamInterval, sessionTCP(sess))
	var rsampler *streamSampler
	if o.Bidir {
		rsampler = startSampler(rctr, false, period, o.omit(), nil, nil)
	}
	var (
		rev     bulkRecvResult
		res     Result
		err     error
		elapsed time.Duration
		rtts    []time.Duration
		bytes   int64
		msgs    int64
		sent    bulkSendResult
		atEnd   []transport.PathStats
	)
	switch {
	case o.Mode == "pingpong":
		rtts, elapsed, err = braidPingPong(ctx, o, sess, iv, ctr)
	case o.Reverse:
		var r bulkRecvResult
		r, err = bulkReceive(ctx, sess, o.Streams, o.omit(), o.duration(), ctr)
		bytes, msgs, elapsed = r.bytes, r.msgs, time.Duration(r.seconds*float64(time.Second))
		// The per-path figures are what arrived by the end of the test.
		atEnd = r.paths
	case o.Bidir:
		// Both ways at once: the server's streams arrive as this side
		// opens its own; whichever receiver's clock ends first closes
		// the data session, which ends the other direction too.
		var rerr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			rev, rerr = bulkReceive(ctx, sess, o.Streams, o.omit(), o.duration(), rctr)
		}()
		sent, err = bulkSend(ctx, sess, o.Streams, o.Size, o.omit(), o.duration(), o.Bitrate, o.Bytes, ctr)
		<-done
		err = errors.Join(err, rerr)
		atEnd = sent.paths
	default:
		sent, err = bulkSend(ctx, sess, o.Streams, o.Size, o.omit(), o.duration(), o.Bitrate, o.Bytes, ctr)
		atEnd = sent.paths
	}
	ip.Intervals = sampler.stop()
	if rsampler != nil {
		ip.Intervals = mergeBidir(ip.Intervals, rsampler.stop())
	}
	iv.stop() // the data is over: the last interval ends here
	if err == nil {
		err = ctl.ReadJSONWhileBusy(ctx, ctrl, ctl.SessionMoving(sess), 30*time.Second, &res)
	}
	if err != nil {
		return nil, err
	}
	after := takeSnapshot(sess)
	warm.Lock()
	defer warm.Unlock()
	rep.CPUUser, rep.CPUSys = (after.user - before.user).Seconds(), (after.sys - before.sys).Seconds()
	rep.Control = stripeDelta(before.stripe, after.stripe)
	switch {
	case o.Mode == "pingpong":
		rep.setPingPong(o, rtts, elapsed)
		rep.Control = addStripe(rep.Control, res.Stripe)
	case o.Reverse:
		rep.Bytes, rep.Messages, rep.Seconds = bytes, msgs, elapsed.Seconds()
		rep.Control = res.Stripe
	default:
		rep.Bytes, rep.Messages, rep.Seconds = res.Bytes, res.Messages, res.Seconds
	}
	rep.ThroughputMbps = ctl.Mbps(rep.Bytes, rep.Seconds)
	if o.Bidir {
		rep.Bidir = &Bidir{Bytes: rev.bytes, Messages: rev.msgs, Seconds: rev.seconds, ThroughputMbps: ctl.Mbps(rev.bytes, rev.seconds)}
	}
	if o.Mode == "pingpong" {
		rep.ThroughputMbps = ctl.Mbps(2*rep.Bytes, rep.Seconds)
	}
	paths := after.paths
	if atEnd != nil {
		paths = atEnd
	}
	rep.setBraidPaths(o, before.paths, paths, &res)
	ids, counts := ctr.since()
	ip.End = o.IperfEnd(rep, &res, sent, ids, counts)
	ip.Start.Connected = streamsConnected(ip.Start.Connected, ids, o.Baseline)
	if o.Bidir && res.Rev != nil {
		// The server-to-client direction: its sender is the server.
		theirs := map[int]int64{}
		for _, s := range res.Rev.StreamBytes {
			theirs[s.ID] = s.Bytes
		}
		rids, rcounts := rctr.since()
		for i, id := range rids {
			es := IperfEndStream{Sender: streamSpan(id, res.Rev.Seconds, theirs[id], false),
				Receiver: streamSpan(id, rev.seconds, rcounts[i], false)}
			es.Sender.withTCP(res.Rev.TCP)
			ip.End.Streams = append(ip.End.Streams, es)
		}
		ss, sr := span(0, res.Rev.Seconds, res.Rev.Bytes, false), span(0, rev.seconds, rev.bytes, false)
		ss.sumTCP(res.Rev.TCP)
		ip.End.SumSentBidirReverse, ip.End.SumReceivedBidirReverse = &ss, &sr
	}
	if ip.congestion != "" {
		// As iperf3: the sender's and the receiver's algorithm.
		ip.End.SenderCongestion, ip.End.ReceiverCongestion = ip.congestion, res.Congestion
		if o.Reverse {
			ip.End.SenderCongestion, ip.End.ReceiverCongestion = res.Congestion, ip.congestion
		}
	}
	return &res, nil
}

// duration is --time.
func (o *Options) duration() time.Duration {
	h := o.hello()
	return h.duration()
}

// omit is the warm-up before the measured duration.
func (o *Options) omit() time.Duration { return time.Duration(o.Omit * float64(time.Second)) }

// IperfEnd builds the end section of a braid test from the client's
// report rep, the server's result res and the client's per-stream counts
// (bytes it sent in bulk and pingpong, received in reverse). It gives
// rep's paths the TCP figures of their channels at the sender.
func (o *Options) IperfEnd(rep *Report, res *Result, sent bulkSendResult, ids []int, counts []int64) IperfEnd {
	local := !o.Reverse // this side sent the data
	e := IperfEnd{Streams: []IperfEndStream{}}
	var sumSent, sumRecv IperfSpan
	theirs := map[int]int64{}
	for _, s := range res.StreamBytes {
		theirs[s.ID] = s.Bytes
	}
	switch {
	case o.Mode == "pingpong":
		sumSent = span(0, rep.Seconds, rep.Bytes, true)
		sumRecv = span(0, rep.Seconds, rep.Bytes, true)
		for i, id := range ids {
			e.Streams = append(e.Streams, IperfEndStream{Sender: streamSpan(id, rep.Seconds, counts[i], true),
				Receiver: streamSpan(id, rep.Seconds, counts[i], true)})
		}
	case o.Reverse:
		sumSent = span(0, res.Seconds, res.Bytes, local)
		sumRecv = span(0, rep.Seconds, rep.Bytes, local)
		for i, id := range ids {
			e.Streams = append(e.Streams, IperfEndStream{Sender: streamSpan(id, res.Seconds, theirs[id], local),
				Receiver: streamSpan(id, rep.Seconds, counts[i], local)})
		}
	default:
		sumSent = span(0, sent.seconds, sent.bytes, local)
		sumRecv = span(0, res.Seconds, res.Bytes, local)
		for i, id := range ids {
			e.Streams = append(e.Streams, IperfEndStream{Sender: streamSpan(id, sent.seconds, counts[i], local),
				Receiver: streamSpan(id, res.Seconds, theirs[id], local)})
		}
	}
	tcp := sent.tcp
	if o.Reverse {
		tcp = res.TCP
	}
	sumSent.sumTCP(tcp)
	e.SumSent, e.SumReceived = &sumSent, &sumRecv
	for i := range e.Streams {
		e.Streams[i].Sender.withTCP(tcp)
	}
	rep.setPathTCP(tcp)
	var c IperfCPU
	c.HostTotal, c.HostUser, c.HostSystem = cpuPercent(rep.CPUUser, rep.CPUSys, max(rep.Seconds, sent.seconds))
	c.RemoteTotal, c.RemoteUser, c.RemoteSystem = cpuPercent(res.CPUUser, res.CPUSys, max(rep.Seconds, res.Seconds))
	e.CPU = &c
	return e
}

// streamSpan is one stream's figures over [0, seconds].
func streamSpan(id int, seconds float64, n int64, sender bool) IperfSpan {
	s := span(0, seconds, n, sender)
	s.Socket = &id
	return s
}

// sessionConnected lists sess's paths for the start section.
func sessionConnected(sess *transport.Session) []IperfConnected {
	var out []IperfConnected
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

func takeSnapshot(sess *transport.Session) *snapshot {
	s := &snapshot{paths: sess.Stats(), stripe: sess.StripeStats()}
	s.user, s.sys = ctl.CPUTimes()
	return s
}

func addStripe(a, b transport.StripeStats) transport.StripeStats {
	return transport.StripeStats{Segments: a.Segments + b.Segments, Starts: a.Starts + b.Starts, Ends: a.Ends + b.Ends}
}

// braidPingPong runs the round trips on o.Streams streams in parallel and
// returns the round-trip times and the longest stream's measured time.
// Round trips that begin in the warm-up (o.Omit) are left out.
func braidPingPong(ctx context.Context, o *Options, sess *transport.Session, iv *intervals, ctr *streamCounter) ([]time.Duration, time.Duration, error) {
	measured := time.Now().Add(o.omit())
	deadline := measured.Add(time.Duration(o.Seconds * float64(time.Second)))
	hard, cancel := context.WithDeadline(ctx, deadline.Add(time.Minute))
	defer cancel()
	results := make([][]time.Duration, o.Streams)
	spans := make([]time.Duration, o.Streams)
	errs := make([]error, o.Streams)
	var wg sync.WaitGroup
	for i := range o.Streams {
		st, err := sess.OpenStream(ctx)
		if err != nil {
			return nil, 0, err
		}
		sent := ctr.stream(int(st.ID()))
		wg.Go(func() {
			defer st.Close()
			buf := make([]byte, o.Size)
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
				if int64(len(echo)) != o.Size || !checkStamp(echo, seq) {
					return 0, fmt.Errorf("stream %d: echo %d of %d bytes does not match what was sent", st.ID(), seq, len(echo))
				}
				return d, nil
			}
			if _, err := round(0); err != nil { // warm-up
				errs[i] = err
				return
			}
			var t0 time.Time
			for n := 1; (o.Count == 0 || len(results[i]) < o.Count) && time.Now().Before(deadline); n++ {
				began := time.Now()
				d, err := round(uint64(n))
				if err != nil {
					errs[i] = err
					return
				}
				if began.Before(measured) {
					continue // the warm-up's
				}
				if t0.IsZero() {
					t0 = began
				}
				results[i] = append(results[i], d)
				iv.addRTT(d)
				sent.Add(o.Size)
			}
			if !t0.IsZero() {
				spans[i] = time.Since(t0)
			}
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

// dropInsecureWarning passes on every record but the transport's warning
// that the data plane is in plaintext: the perf client dials two sessions
// with the same settings, and the user needs the warning once.
type dropInsecureWarning struct{ slog.Handler }

func (h dropInsecureWarning) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "INSECURE:") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h dropInsecureWarning) WithAttrs(as []slog.Attr) slog.Handler {
	return dropInsecureWarning{h.Handler.WithAttrs(as)}
}

func (h dropInsecureWarning) WithGroup(name string) slog.Handler {
	return dropInsecureWarning{h.Handler.WithGroup(name)}
}

// handlerOf is l's handler; slog.Default's for nil.
func handlerOf(l *slog.Logger) slog.Handler {
	if l == nil {
		l = slog.Default()
	}
	return l.Handler()
}
