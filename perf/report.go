package perf

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// Report is the result of one perf test; --json prints it as is.
type Report struct {
	Mode      string `json:"mode"`    // bulk or pingpong
	Reverse   bool   `json:"reverse"` // bulk: the server sent
	Baseline  bool   `json:"baseline"`
	Size      int64  `json:"size"` // message size in bytes
	Paths     int    `json:"paths"`
	Streams   int    `json:"streams"`   // streams, or TCP connections with baseline
	Stripe    string `json:"stripe"`    // enhanced, basic, off; "manual" with baseline
	Policy    string `json:"policy"`    // soonest or round-robin
	Transport string `json:"transport"` // channel kind
	// Encrypted is whether the data plane was encrypted and
	// authenticated (AES-GCM): false with --insecure-plaintext and for
	// --tcp-baseline's plain connections.
	Encrypted bool `json:"encrypted"`
	// StreamTCP says what the TCP figures of end.streams are: "channels"
	// when the streams share the session's channels (each stream shows
	// the figures of all of them, and end.sum_sent.retransmits counts each
	// channel once; per_path[].tcp has each channel's), empty when the
	// channels are not TCP.
	StreamTCP string `json:"stream_tcp,omitempty"`
	Frag      int    `json:"frag,omitempty"` // 0: the transport's default
	// The server's settings, which shape what it sends: the echoes of
	// pingpong and the data of --reverse.
	ServerStripe string `json:"server_stripe,omitempty"`
	ServerPolicy string `json:"server_policy,omitempty"`
	ServerFrag   int    `json:"server_frag,omitempty"`

	// Seconds is the measured interval: the receiver's in bulk, the
	// longest stream's in pingpong.
	Seconds  float64 `json:"seconds"`
	Bytes    int64   `json:"bytes"`    // payload received (bulk); sent one way (pingpong)
	Messages int64   `json:"messages"` // messages received (bulk); round trips (pingpong)
	// ThroughputMbps is Bytes over Seconds in bulk, and the payload in both
	// directions over Seconds in pingpong.
	ThroughputMbps float64 `json:"throughput_mbps"`
	PerPath        []Path  `json:"per_path"`

	// Round trips, in pingpong mode only.
	*PingPong
	// Bidir is the server-to-client direction of a --bidir test; the
	// figures above are the client-to-server one.
	Bidir *Bidir `json:"bidir,omitempty"`

	CPUUser float64 `json:"cpu_user_s"` // the client process over the test
	CPUSys  float64 `json:"cpu_sys_s"`
	// Control counts striping control messages of the sending side(s).
	Control   transport.StripeStats `json:"control_messages"`
	Intervals []Interval            `json:"intervals"`

	// sent and received are the payload sent and received per plain TCP
	// connection of a baseline test.
	sent, received []int64
	// connTCP has the TCP figures of a baseline test's connections, when
	// this side sent.
	connTCP *connsTCP
}

// Bidir is what the client received in a --bidir test.
type Bidir struct {
	Bytes          int64   `json:"bytes"`
	Messages       int64   `json:"messages"`
	Seconds        float64 `json:"seconds"`
	ThroughputMbps float64 `json:"throughput_mbps"`
}

// PingPong holds the round-trip figures of a pingpong test. It is
// exported only so that encoding/json can fill it inside Report.
type PingPong struct {
	RoundTrips    int     `json:"round_trips"`
	RTTus         float64 `json:"rtt_us"` // mean
	RTTMinUs      float64 `json:"rtt_min_us"`
	RTTP50us      float64 `json:"rtt_p50_us"`
	RTTP99us      float64 `json:"rtt_p99_us"`
	RTTMaxUs      float64 `json:"rtt_max_us"`
	EffectiveMbps float64 `json:"effective_mbps"` // eq. 1: (8*size/1e6)/(RTT/2)
}

// Path is one path's share of a test.
type Path struct {
	ID     int     `json:"id"`
	Local  string  `json:"local"`
	Remote string  `json:"remote"`
	Bytes  int64   `json:"bytes"` // wire bytes less duplicates (braid) or payload bytes (baseline)
	Mbps   float64 `json:"mbps"`  // Bytes over the test's Seconds
	State  string  `json:"state"`
	// Failovers and bytes sent again elsewhere during the test.
	Failovers     int64 `json:"failovers"`
	Retransmitted int64 `json:"retransmitted_bytes"`
	// Duplicated counts bytes this path sent a second time on behalf of a
	// slower path near the end of a message (not included in Bytes).
	Duplicated int64 `json:"duplicated_bytes"`
	// TCP is what the kernel measured of this path's channel at the
	// sender (TCP channels only).
	TCP *ChannelTCP `json:"tcp,omitempty"`
}

// Interval is one second of the test as the client saw it.
type Interval struct {
	Start   float64   `json:"start"`
	End     float64   `json:"end"`
	Mbps    float64   `json:"mbps"`
	PerPath []float64 `json:"per_path_mbps"`
	RTTus   float64   `json:"rtt_us,omitempty"`
	// Omitted marks an interval of the warm-up (-O), left out of the
	// totals; the measured intervals' times count from its end.
	Omitted bool `json:"omitted,omitempty"`
}

func newReport(o *Options) *Report {
	r := &Report{Mode: o.Mode, Reverse: o.Reverse, Baseline: o.Baseline, Size: o.Size, Paths: len(o.Paths),
		Streams: o.Streams, Stripe: o.Config.Stripe.String(), Policy: o.Config.Policy.String(), Transport: o.Config.Transport, Frag: o.Config.FragmentSize,
		PerPath: []Path{}, Intervals: []Interval{}}
	if r.Transport == "" {
		r.Transport = "tcp"
	}
	r.Encrypted = !o.Config.InsecurePlaintext
	if o.Baseline {
		r.Stripe, r.Policy, r.Transport, r.Frag = "manual", "", "tcp", 0
		r.Streams = o.hello().baselineConns()
		r.Encrypted = false
	}
	return r
}

// setPathTCP gives each path the TCP figures of its channel at the
// sender, and says what the streams' TCP figures are.
func (r *Report) setPathTCP(f *TCPFigures) {
	if f == nil {
		return
	}
	r.StreamTCP = "channels"
	for i := range r.PerPath {
		r.PerPath[i].TCP = f.channel(r.PerPath[i].ID)
	}
}

func (r *Report) setPingPong(o *Options, rtts []time.Duration, elapsed time.Duration) {
	st := summarizeRTT(rtts)
	r.PingPong = &PingPong{}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	r.RoundTrips, r.Messages = st.n, int64(st.n)
	r.Bytes = int64(st.n) * o.Size
	r.Seconds = elapsed.Seconds()
	r.RTTus, r.RTTMinUs, r.RTTP50us, r.RTTP99us, r.RTTMaxUs = us(st.mean), us(st.min), us(st.p50), us(st.p99), us(st.max)
	r.EffectiveMbps = EffectiveMbps(o.Size, st.mean)
}

// setBraidPaths fills PerPath from the client's path statistics before and
// after the test; the server's view supplies local addresses the client
// did not pin.
func (r *Report) setBraidPaths(o *Options, before, after []transport.PathStats, res *Result) {
	b := ctl.StatsByID(before)
	srv := map[int]ServerPath{}
	for _, p := range res.Paths {
		srv[p.ID] = p
	}
	r.PerPath = r.PerPath[:0]
	for _, p := range after {
		q := b[p.ID]
		var n int64
		switch {
		case o.Mode == "pingpong" || o.Bidir:
			n = p.BytesSent - q.BytesSent + p.BytesReceived - q.BytesReceived
		case o.Reverse:
			n = p.BytesReceived - q.BytesReceived
		default:
			n = p.BytesSent - q.BytesSent
		}
		dup := p.Duplicated - q.Duplicated
		switch {
		case o.Mode == "pingpong" || o.Bidir:
			n -= dup + p.DupReceived - q.DupReceived
		case o.Reverse:
			dup = p.DupReceived - q.DupReceived
			n -= dup
		default:
			n -= dup
			if sp, ok := srv[p.ID]; ok && sp.Received > 0 {
				// What reached the server by the end of the test, not
				// what this client had sent when it got the result.
				n = sp.Received - sp.DupReceived
			}
		}
		local := p.Local
		if sp, ok := srv[p.ID]; ok && sp.Remote != "" && (local == "" || !strings.Contains(local, ":")) {
			local = sp.Remote
		}
		// The data session is closed by design at the end of a test: a
		// path that was up when it closed reads "closed" (transport), and
		// was up at the end of the test.
		state := p.State
		if state == "closed" {
			state = "up"
		}
		r.PerPath = append(r.PerPath, Path{
			ID: p.ID, Local: local, Remote: p.Remote, Bytes: n, Mbps: ctl.Mbps(n, r.Seconds), State: state,
			Failovers: p.Failovers - q.Failovers, Retransmitted: p.Retransmitted - q.Retransmitted,
			Duplicated: dup,
		})
	}
}

// intervals samples a per-path byte meter every second: it records
// Interval entries and hands each to OnInterval, for live output.
type intervals struct {
	each   func(int, Interval) // called with each interval, if not nil
	rep    *Report
	meter  func() []int64
	rounds atomic.Int64
	rttSum atomic.Int64 // ns
	period time.Duration
	omit   time.Duration
	stopCh chan struct{}
	done   chan struct{}
	once   sync.Once
}

func startIntervals(o *Options, rep *Report, meter func() []int64) *intervals {
	iv := &intervals{each: o.OnInterval, rep: rep, meter: meter, stopCh: make(chan struct{}), done: make(chan struct{})}
	if o.Interval <= 0 {
		close(iv.done)
		return iv
	}
	iv.period = time.Duration(o.Interval * float64(time.Second))
	iv.omit = time.Duration(o.Omit * float64(time.Second))
	go iv.run()
	return iv
}

func (iv *intervals) addRTT(d time.Duration) {
	iv.rounds.Add(1)
	iv.rttSum.Add(int64(d))
}

// stop ends sampling; the report's Intervals are complete when it returns.
func (iv *intervals) stop() {
	iv.once.Do(func() { close(iv.stopCh) })
	<-iv.done
}

func (iv *intervals) run() {
	defer close(iv.done)
	t := time.NewTicker(iv.period)
	defer t.Stop()
	warmup, stopWarmup := warmupTimer(iv.omit)
	defer stopWarmup()
	omitting := warmup != nil
	prev := iv.meter()
	var prevRounds, prevSum int64
	start := time.Now()
	last := start
	i := 0
	for {
		var now time.Time
		final := false
		select {
		case <-iv.stopCh:
			// The test's last, partial interval, as iperf3 prints one;
			// or the only one of a test shorter than a period.
			now, final = time.Now(), true
			if d := now.Sub(last); d < iv.period/10 && (i > 0 || d <= 0) {
				return
			}
		case now = <-warmup:
		case now = <-t.C:
		}
		cur := iv.meter()
		dt := now.Sub(last).Seconds()
		e := Interval{Start: last.Sub(start).Seconds(), End: now.Sub(start).Seconds(), Omitted: omitting}
		var total int64
		for j, c := range cur {
			var p int64
			if j < len(prev) {
				p = prev[j]
			}
			e.PerPath = append(e.PerPath, ctl.Mbps(c-p, dt))
			total += c - p
		}
		e.Mbps = ctl.Mbps(total, dt)
		rounds, sum := iv.rounds.Load(), iv.rttSum.Load()
		if rounds > prevRounds {
			e.RTTus = float64(sum-prevSum) / float64(rounds-prevRounds) / 1e3
		}
		prev, prevRounds, prevSum, last = cur, rounds, sum, now
		if omitting && warmup != nil && now.Sub(start) >= iv.omit-iv.period/100 {
			// The warm-up is over (its timer or a tick at its end):
			// the measured intervals count from 0 again.
			omitting, warmup = false, nil
			start = now
			t.Reset(iv.period)
		}
		if dt >= iv.period.Seconds()/100 { // else nothing left of the warm-up's last interval
			iv.rep.Intervals = append(iv.rep.Intervals, e)
			if iv.each != nil {
				iv.each(i, e)
			}
			i++
		}
		if final {
			return
		}
	}
}

// EffectiveMbps is the effective bandwidth of a ping-pong of size-byte
// messages with mean round trip rtt, eq. 1 of the message striping paper:
// (8*size/1e6) / (rtt/2) Mbit/s; 0 for a zero rtt.
func EffectiveMbps(size int64, rtt time.Duration) float64 {
	if rtt <= 0 {
		return 0
	}
	return (8 * float64(size) / 1e6) / (rtt.Seconds() / 2)
}

// Mbps is bytes over seconds in Mbit/s (10^6 bits per second); 0 when
// seconds is not positive.
func Mbps(bytes int64, seconds float64) float64 { return ctl.Mbps(bytes, seconds) }
