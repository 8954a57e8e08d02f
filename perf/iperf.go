package perf

import (
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/transport"
)

// IperfReport is a test as iperf3 -J prints one.
//
// The JSON of 'braid perf -J' has the shape of iperf3's -J output, so that
// scripts and plotting tools written for iperf3 read it unchanged: start
// (connected, version, system_info, timestamp, connecting_to, cookie,
// test_start), intervals (streams and their sum, every --interval), end
// (streams, sum_sent, sum_received, cpu_utilization_percent) and error on
// failure. Each stream's sender figures carry the TCP_INFO of the
// sender's channels over the test (max_snd_cwnd, max_rtt, min_rtt,
// mean_rtt, retransmits: TCPFigures): a braid stream has no socket of
// its own, its messages go over all the session's channels, so these are
// the figures of the channels the stream used, the same for every
// stream; end.sum_sent.retransmits counts each channel once, and
// braid.per_path[].tcp has each channel's figures (braid.stream_tcp says
// so in the JSON). The sender's intervals carry the same per interval
// (retransmits in the interval, snd_cwnd and rtt at its end: IperfSpan).
// braid's own figures, per path, and whether the
// data plane was encrypted, are in the "braid" section.
//
// A braid "stream" (iperf3's socket) is one transport stream, or one
// plain TCP connection of --tcp-baseline; "socket" holds its id.
type IperfReport struct {
	Start     IperfStart      `json:"start"`
	Intervals []IperfInterval `json:"intervals"`
	End       IperfEnd        `json:"end"`
	Error     string          `json:"error,omitempty"`
	// Title is the client's -T/--title, as iperf3 writes it.
	Title string `json:"title,omitempty"`
	// ExtraData is the client's --extra-data, as iperf3 writes it.
	ExtraData string `json:"extra_data,omitempty"`
	// The server's own report of the test, with --get-server-output: its
	// JSON when the server prints JSON (-J), else its text, as iperf3.
	ServerOutputJSON *IperfReport `json:"server_output_json,omitempty"`
	ServerOutputText string       `json:"server_output_text,omitempty"`

	congestion string // this side's, for End
	// Braid is braid's own report: per-path bytes and rates, striping,
	// round trips; nil on failure.
	Braid *Report `json:"braid,omitempty"`
}

// IperfStart is the start section: the session, the host and the test.
type IperfStart struct {
	Connected    []IperfConnected `json:"connected"`
	Version      string           `json:"version"`
	SystemInfo   string           `json:"system_info"`
	Timestamp    IperfTimestamp   `json:"timestamp"`
	ConnectingTo *IperfHostPort   `json:"connecting_to,omitempty"` // the client's only
	Cookie       string           `json:"cookie"`                  // the session id
	// The data session's first TCP channel, as iperf3 reports its
	// socket: MSS, the -w asked for and the buffers the kernel gave.
	// Absent for channels that are not TCP.
	TCPMSSDefault int            `json:"tcp_mss_default,omitempty"`
	TCPMSS        int            `json:"tcp_mss,omitempty"` // -M, instead of tcp_mss_default
	SockBufsize   int            `json:"sock_bufsize"`
	SndbufActual  int            `json:"sndbuf_actual,omitempty"`
	RcvbufActual  int            `json:"rcvbuf_actual,omitempty"`
	TestStart     IperfTestStart `json:"test_start"`
}

// IperfConnected is one stream of the test, as iperf3 lists one socket
// per -P stream, so that len(start.connected) is -P. A braid stream is
// not a socket: its messages go over every channel (path) of the
// session, so an entry gives the stream's id (socket, as in the
// intervals and end.streams) with the addresses of the session's first
// path, and braid_paths lists the ids of every path the stream rides.
// A plain TCP connection of --tcp-baseline rides one path. Until the
// streams are open (a test that failed early) the entries are the
// session's paths, with socket the path id and no braid_paths.
type IperfConnected struct {
	Socket     int    `json:"socket"` // the stream id (the path id before streams open)
	LocalHost  string `json:"local_host"`
	LocalPort  int    `json:"local_port"`
	RemoteHost string `json:"remote_host"`
	RemotePort int    `json:"remote_port"`
	// Paths are the ids of the paths (braid.per_path[].id) the stream
	// rides; braid's own field.
	Paths []int `json:"braid_paths,omitempty"`
}

// streamsConnected turns the session's paths into one entry per stream
// of ids (see IperfConnected); with no ids it returns paths. With
// baseline, stream i is the plain TCP connection over path i.
func streamsConnected(paths []IperfConnected, ids []int, baseline bool) []IperfConnected {
	if len(ids) == 0 || len(paths) == 0 {
		return paths
	}
	all := make([]int, len(paths))
	for i, p := range paths {
		all[i] = p.Socket
	}
	out := make([]IperfConnected, len(ids))
	for i, id := range ids {
		p, rides := paths[0], all
		if baseline {
			p = paths[i%len(paths)]
			rides = []int{p.Socket}
		}
		p.Socket, p.Paths = id, rides
		out[i] = p
	}
	return out
}

// IperfTimestamp is when the test began.
type IperfTimestamp struct {
	Time     string `json:"time"` // RFC 1123 in GMT, as iperf3 writes it
	TimeSecs int64  `json:"timesecs"`
}

// IperfHostPort is the server the client connected to.
type IperfHostPort struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// IperfTestStart is the test asked for.
type IperfTestStart struct {
	Protocol   string  `json:"protocol"` // "braid/tcp", "braid/sctp-udp", ..., "TCP" for --tcp-baseline
	NumStreams int     `json:"num_streams"`
	BlkSize    int64   `json:"blksize"` // the message size
	Omit       float64 `json:"omit"`    // seconds of warm-up left out (-O)
	Duration   float64 `json:"duration"`
	Bytes      int64   `json:"bytes"`
	Blocks     int64   `json:"blocks"` // pingpong: round trips per stream
	Reverse    int     `json:"reverse"`
	Bidir      int     `json:"bidir"`
	Tos        int     `json:"tos"`
	// TargetBitrate is -b: the bulk sender's pace in bits per second,
	// 0 for unlimited.
	TargetBitrate int64 `json:"target_bitrate"`
	// Mode is braid's: bulk or pingpong.
	Mode string `json:"mode"`
}

// IperfSpan is a byte count over a span of the test, as iperf3 reports
// one stream or a sum.
type IperfSpan struct {
	Socket        *int    `json:"socket,omitempty"` // streams only
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	Seconds       float64 `json:"seconds"`
	Bytes         int64   `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	// Retransmits counts the TCP segments the sender's channels
	// retransmitted, as iperf3's: in end.streams' sender and in the
	// sender's sums, for TCP channels only. The streams share the
	// channels, so each stream's figure is that of all the channels, and
	// a sum counts each channel once (TCPFigures). Bytes braid sent again
	// on another path after a path failed are in braid.per_path.
	Retransmits *int64 `json:"retransmits,omitempty"`
	// What the kernel measured of the sender's TCP channels over the
	// test (end.streams' sender only; TCP channels only): see TCPFigures.
	MaxSendCwnd *int64 `json:"max_snd_cwnd,omitempty"`
	MaxRTT      *int64 `json:"max_rtt,omitempty"`
	MinRTT      *int64 `json:"min_rtt,omitempty"`
	MeanRTT     *int64 `json:"mean_rtt,omitempty"`
	// An interval's sender streams (TCP only), as iperf3 reports each
	// socket at the end of the interval: SendCwnd its congestion window
	// in bytes, RTT its smoothed round trip in µs; Retransmits above are
	// those of the interval. A braid stream has no socket of its own: its
	// figures are those of all the session's channels (retransmits
	// summed, windows summed, round trips averaged), the same for every
	// stream; the interval's sum counts each channel's retransmits once.
	// A --tcp-baseline stream is one TCP connection: its own figures.
	SendCwnd *int64 `json:"snd_cwnd,omitempty"`
	RTT      *int64 `json:"rtt,omitempty"`
	Omitted  *bool  `json:"omitted,omitempty"` // intervals only
	Sender   bool   `json:"sender"`            // whether this side sent the bytes counted
}

// IperfInterval is one interval: each stream's and their sum.
type IperfInterval struct {
	Streams []IperfSpan `json:"streams"`
	Sum     IperfSpan   `json:"sum"`
	// SumBidirReverse is the server-to-client direction of a --bidir
	// test, whose streams are in Streams too (sender false).
	SumBidirReverse *IperfSpan `json:"sum_bidir_reverse,omitempty"`
}

// mergeBidir joins the intervals of a --bidir test's two directions, as
// iperf3 reports them: every stream in Streams, the reverse direction's
// sum in SumBidirReverse.
func mergeBidir(fwd, rev []IperfInterval) []IperfInterval {
	n := min(len(fwd), len(rev))
	out := make([]IperfInterval, n)
	for i := range n {
		r := rev[i].Sum
		out[i] = IperfInterval{Streams: append(fwd[i].Streams, rev[i].Streams...), Sum: fwd[i].Sum, SumBidirReverse: &r}
	}
	return out
}

// IperfEndStream is one stream's totals, as sent and as received.
type IperfEndStream struct {
	Sender   IperfSpan `json:"sender"`
	Receiver IperfSpan `json:"receiver"`
}

// IperfEnd is the end section: per stream, the sums and the CPU use.
type IperfEnd struct {
	Streams     []IperfEndStream `json:"streams,omitempty"`
	SumSent     *IperfSpan       `json:"sum_sent,omitempty"`
	SumReceived *IperfSpan       `json:"sum_received,omitempty"`
	CPU         *IperfCPU        `json:"cpu_utilization_percent,omitempty"`
	// The server-to-client direction of a --bidir test.
	SumSentBidirReverse     *IperfSpan `json:"sum_sent_bidir_reverse,omitempty"`
	SumReceivedBidirReverse *IperfSpan `json:"sum_received_bidir_reverse,omitempty"`
	// The congestion control of the sender's and the receiver's data
	// channels (iperf3 -C), for TCP channels.
	SenderCongestion   string `json:"sender_tcp_congestion,omitempty"`
	ReceiverCongestion string `json:"receiver_tcp_congestion,omitempty"`
}

// IperfCPU is the CPU use of both hosts, in percent of the test's time.
type IperfCPU struct {
	HostTotal    float64 `json:"host_total"`
	HostUser     float64 `json:"host_user"`
	HostSystem   float64 `json:"host_system"`
	RemoteTotal  float64 `json:"remote_total"`
	RemoteUser   float64 `json:"remote_user"`
	RemoteSystem float64 `json:"remote_system"`
}

// span makes an IperfSpan of n bytes over [start, end] seconds.
func span(start, end float64, n int64, sender bool) IperfSpan {
	s := IperfSpan{Start: start, End: end, Seconds: end - start, Bytes: n, Sender: sender}
	if s.Seconds > 0 {
		s.BitsPerSecond = float64(n) * 8 / s.Seconds
	}
	return s
}

// newIperfStart fills the start section; cookie is the session id.
func newIperfStart(t time.Time, cookie string, paths []IperfConnected, ts IperfTestStart) IperfStart {
	version, goVersion := "(devel)", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
	}
	host, _ := os.Hostname()
	if paths == nil {
		paths = []IperfConnected{}
	}
	return IperfStart{
		Connected:  paths,
		Version:    "braid " + version,
		SystemInfo: runtime.GOOS + " " + host + " " + runtime.GOARCH + " " + goVersion,
		Timestamp:  IperfTimestamp{Time: t.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), TimeSecs: t.Unix()},
		Cookie:     cookie,
		TestStart:  ts,
	}
}

// hostPort splits "host:port"; a missing or bad port is 0.
func hostPort(addr string) (string, int) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func connected(id int, local, remote string) IperfConnected {
	lh, lp := hostPort(local)
	rh, rp := hostPort(remote)
	return IperfConnected{Socket: id, LocalHost: lh, LocalPort: lp, RemoteHost: rh, RemotePort: rp}
}

// cpuPercent is the share of wall time the process spent in user and
// system mode.
func cpuPercent(user, sys, seconds float64) (total, u, s float64) {
	if seconds <= 0 {
		return 0, 0, 0
	}
	u, s = 100*user/seconds, 100*sys/seconds
	return u + s, u, s
}

// streamCounter counts payload bytes per stream, as this side writes or
// reads them, for the per-stream figures of the iperf3-shaped report.
type streamCounter struct {
	mu   sync.Mutex
	ids  []int
	n    []*atomic.Int64
	base map[int]int64 // each stream's count at the end of an omitted warm-up
}

// stream returns the counter of stream id, adding it on first use.
func (c *streamCounter) stream(id int) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.ids {
		if x == id {
			return c.n[i]
		}
	}
	n := new(atomic.Int64)
	c.ids = append(c.ids, id)
	c.n = append(c.n, n)
	return n
}

// markBase takes the counts so far as the omitted warm-up's (iperf3 -O),
// which since leaves out.
func (c *streamCounter) markBase() {
	ids, counts := c.snapshot()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = make(map[int]int64, len(ids))
	for i, id := range ids {
		c.base[id] = counts[i]
	}
}

// since returns the stream ids and their counts after the warm-up.
func (c *streamCounter) since() ([]int, []int64) {
	ids, counts := c.snapshot()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, id := range ids {
		counts[i] -= c.base[id]
	}
	return ids, counts
}

// snapshot returns the stream ids and their counts.
func (c *streamCounter) snapshot() ([]int, []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := append([]int(nil), c.ids...)
	out := make([]int64, len(c.n))
	for i, n := range c.n {
		out[i] = n.Load()
	}
	return ids, out
}

// streamSampler records an IperfInterval of a streamCounter every period
// until stopped.
type streamSampler struct {
	c       *streamCounter
	sender  bool
	period  time.Duration
	omit    time.Duration
	start   time.Time
	stopCh  chan struct{}
	done    chan struct{}
	stopped sync.Once
	out     []IperfInterval
	// each, if not nil, is called with each interval as it is
	// recorded.
	each func(int, IperfInterval)
	// tcp, if set, gives the sender's TCP figures at each interval's
	// end (sender only); set at the start or later (useTCP), once the
	// data session is there.
	tcp atomic.Pointer[tcpSource]
}

// useTCP gives the sampler of a sender the source of its TCP figures,
// from the next interval on; nothing for a receiver's.
func (s *streamSampler) useTCP(src tcpSource) {
	if s.sender && src != nil {
		s.tcp.Store(&src)
	}
}

// tcpNow is what TCP_INFO says of one or more sockets at one moment:
// retransmitted segments since they opened, the sum of their congestion
// windows in bytes and the mean of their smoothed round trips.
type tcpNow struct {
	retr, cwnd int64
	rtt        time.Duration
}

// tcpSource reads the TCP figures of a sender's sockets now: those of
// each stream that has a socket of its own (by stream id; nil when the
// streams share the sockets) and those of all the sockets, each counted
// once; ok is false when none is TCP.
type tcpSource func() (streams map[int]tcpNow, all tcpNow, ok bool)

// sumTCP adds up the figures of sockets: retransmits and windows summed,
// round trips averaged over those that have one.
func sumTCP(infos []tcpNow) tcpNow {
	var t tcpNow
	n := 0
	for _, i := range infos {
		t.retr += i.retr
		t.cwnd += i.cwnd
		if i.rtt > 0 {
			t.rtt += i.rtt
			n++
		}
	}
	if n > 0 {
		t.rtt /= time.Duration(n)
	}
	return t
}

// sessionTCP is the tcpSource of a braid session's channels, which its
// streams share.
func sessionTCP(sess *transport.Session) tcpSource {
	return func() (map[int]tcpNow, tcpNow, bool) {
		st := sess.TCPStats()
		infos := make([]tcpNow, 0, len(st))
		for _, i := range st {
			infos = append(infos, tcpNow{retr: i.Retransmits, cwnd: i.SendCwnd, rtt: i.RTT})
		}
		return nil, sumTCP(infos), len(infos) > 0
	}
}

// tcpBase is the retransmit counters at the start of an interval: of all
// the sockets, and of each stream's own.
type tcpBase struct {
	all     int64
	streams map[int]int64
}

// withInterval fills an interval's stream span with its socket's figures
// now (or all the sockets' when it has none of its own), retransmits
// counted from base.
func (s *IperfSpan) withInterval(id int, streams map[int]tcpNow, all tcpNow, base tcpBase) {
	now, prev := all, base.all
	if t, own := streams[id]; own {
		now, prev = t, base.streams[id]
	}
	retr, cwnd, rtt := max(0, now.retr-prev), now.cwnd, now.rtt.Microseconds()
	s.Retransmits, s.SendCwnd, s.RTT = &retr, &cwnd, &rtt
}

// startSampler starts sampling c every period from now; a period of 0
// records nothing. The intervals of the first omit are marked omitted, and
// the times of those after start again from 0, as iperf3 -O reports them.
// each, if not nil, is called with each interval as it is recorded.
// tcp, if not nil and sender, gives each interval the sockets' figures.
func startSampler(c *streamCounter, sender bool, period, omit time.Duration, each func(int, IperfInterval), tcp tcpSource) *streamSampler {
	s := &streamSampler{c: c, sender: sender, period: period, omit: omit, start: time.Now(), stopCh: make(chan struct{}), done: make(chan struct{}), each: each}
	s.useTCP(tcp)
	if period <= 0 {
		close(s.done)
		return s
	}
	go s.run()
	return s
}

func (s *streamSampler) run() {
	defer close(s.done)
	t := time.NewTicker(s.period)
	defer t.Stop()
	warmup, stop := warmupTimer(s.omit)
	defer stop()
	omitting := warmup != nil
	prev := map[int]int64{}
	start, last := s.start, s.start
	var (
		base tcpBase
		// The last reading that found TCP sockets: the one that ends
		// the interval when the sockets are gone by then (the peer
		// closed them as the test ended). The first is the base of the
		// retransmits.
		lastStreams map[int]tcpNow
		lastAll     tcpNow
		lastOK      bool
	)
	readTCP := func() {
		src := s.tcp.Load()
		if src == nil {
			return
		}
		if st, a, ok := (*src)(); ok {
			if !lastOK {
				base = newTCPBase(st, a)
			}
			lastStreams, lastAll, lastOK = st, a, true
		}
	}
	readTCP() // the counters before the first interval
	// Between the intervals' ends, a sender's sockets are read every
	// tcpSamplePeriod, so that the last reading is recent however the
	// test ends.
	var tcpTick <-chan time.Time
	if s.sender {
		tt := time.NewTicker(tcpSamplePeriod)
		defer tt.Stop()
		tcpTick = tt.C
	}
	record := func(now time.Time) {
		ids, counts := s.c.snapshot()
		readTCP()
		streams, all, tcpOK := lastStreams, lastAll, lastOK
		a, b := last.Sub(start).Seconds(), now.Sub(start).Seconds()
		iv := IperfInterval{Streams: []IperfSpan{}}
		omitted := omitting // each interval its own: omitting changes
		var sum int64
		for i, id := range ids {
			d := counts[i] - prev[id]
			prev[id] = counts[i]
			sp := span(a, b, d, s.sender)
			sp.Socket, sp.Omitted = &ids[i], &omitted
			if tcpOK {
				sp.withInterval(id, streams, all, base)
			}
			iv.Streams = append(iv.Streams, sp)
			sum += d
		}
		iv.Sum = span(a, b, sum, s.sender)
		iv.Sum.Omitted = &omitted
		if tcpOK {
			// Each socket once, however many streams share it.
			r := max(0, all.retr-base.all)
			iv.Sum.Retransmits = &r
			base = newTCPBase(streams, all)
		}
		s.out = append(s.out, iv)
		if s.each != nil {
			s.each(len(s.out)-1, iv)
		}
		last = now
	}
	for {
		select {
		case <-s.stopCh:
			// The test's last interval, when the stop came before its
			// tick, or a partial one of at least half a period (a
			// shorter rest is the start's slack: the sampler starts
			// before the data); a test shorter than one period (a small
			// -n) still has its interval.
			if now := time.Now(); len(s.out) == 0 || now.Sub(last) >= s.period/2 {
				record(now)
			}
			return
		case now := <-warmup:
			// The warm-up's last, partial interval; the measured
			// intervals count from 0 again.
			if now.Sub(last) > s.period/100 {
				record(now)
			}
			omitting = false
			start, last = now, now
			t.Reset(s.period)
		case now := <-t.C:
			record(now)
		case <-tcpTick:
			readTCP()
		}
	}
}

// newTCPBase keeps the retransmit counters of a reading.
func newTCPBase(streams map[int]tcpNow, all tcpNow) tcpBase {
	b := tcpBase{all: all.retr, streams: make(map[int]int64, len(streams))}
	for id, t := range streams {
		b.streams[id] = t.retr
	}
	return b
}

// warmupTimer returns a channel that fires when an omitted warm-up of
// omit ends (iperf3 -O), nil for none, and the func that stops it.
func warmupTimer(omit time.Duration) (<-chan time.Time, func()) {
	if omit <= 0 {
		return nil, func() {}
	}
	w := time.NewTimer(omit)
	return w.C, func() { w.Stop() }
}

// stop ends sampling and returns the intervals.
func (s *streamSampler) stop() []IperfInterval {
	s.stopped.Do(func() { close(s.stopCh) })
	<-s.done
	if s.out == nil {
		return []IperfInterval{}
	}
	return s.out
}
