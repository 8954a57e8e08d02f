package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// perfReport is the result of one perf test; --json prints it as is.
type perfReport struct {
	Mode      string `json:"mode"`    // bulk or pingpong
	Reverse   bool   `json:"reverse"` // bulk: the server sent
	Baseline  bool   `json:"baseline"`
	Size      int64  `json:"size"` // message size in bytes
	Paths     int    `json:"paths"`
	Streams   int    `json:"streams"`        // streams, or TCP connections with baseline
	Stripe    string `json:"stripe"`         // enhanced, basic, off; "manual" with baseline
	Policy    string `json:"policy"`         // soonest or round-robin
	Transport string `json:"transport"`      // channel kind
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
	ThroughputMbps float64    `json:"throughput_mbps"`
	PerPath        []perfPath `json:"per_path"`

	// Round trips, in pingpong mode only.
	*PingPong

	CPUUser float64 `json:"cpu_user_s"` // the client process over the test
	CPUSys  float64 `json:"cpu_sys_s"`
	// Control counts striping control messages of the sending side(s).
	Control   transport.StripeStats `json:"control_messages"`
	Intervals []perfInterval        `json:"intervals"`

	// sent is the payload sent per plain TCP connection of a baseline test.
	sent []int64
}

// PingPong holds the round-trip figures of a pingpong test. It is
// exported only so that encoding/json can fill it inside perfReport.
type PingPong struct {
	RoundTrips    int     `json:"round_trips"`
	RTTus         float64 `json:"rtt_us"` // mean
	RTTMinUs      float64 `json:"rtt_min_us"`
	RTTP50us      float64 `json:"rtt_p50_us"`
	RTTP99us      float64 `json:"rtt_p99_us"`
	RTTMaxUs      float64 `json:"rtt_max_us"`
	EffectiveMbps float64 `json:"effective_mbps"` // eq. 1: (8*size/1e6)/(RTT/2)
}

// perfPath is one path's share of a test.
type perfPath struct {
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
}

// perfInterval is one second of the test as the client saw it.
type perfInterval struct {
	Start   float64   `json:"start"`
	End     float64   `json:"end"`
	Mbps    float64   `json:"mbps"`
	PerPath []float64 `json:"per_path_mbps"`
	RTTus   float64   `json:"rtt_us,omitempty"`
}

func newPerfReport(o *perfOptions) *perfReport {
	r := &perfReport{Mode: o.mode, Reverse: o.reverse, Baseline: o.baseline, Size: o.size, Paths: len(o.paths),
		Streams: o.streams, Stripe: o.cfg.Stripe.String(), Policy: o.cfg.Policy.String(), Transport: o.cfg.Transport, Frag: o.frag,
		PerPath: []perfPath{}, Intervals: []perfInterval{}}
	if r.Transport == "" {
		r.Transport = "tcp"
	}
	if o.baseline {
		r.Stripe, r.Policy, r.Transport, r.Frag = "manual", "", "tcp", 0
		r.Streams = len(o.paths)
	}
	return r
}

func (r *perfReport) setPingPong(o *perfOptions, rtts []time.Duration, elapsed time.Duration) {
	st := summarizeRTT(rtts)
	r.PingPong = &PingPong{}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	r.RoundTrips, r.Messages = st.n, int64(st.n)
	r.Bytes = int64(st.n) * o.size
	r.Seconds = elapsed.Seconds()
	r.RTTus, r.RTTMinUs, r.RTTP50us, r.RTTP99us, r.RTTMaxUs = us(st.mean), us(st.min), us(st.p50), us(st.p99), us(st.max)
	if st.mean > 0 {
		r.EffectiveMbps = (8 * float64(o.size) / 1e6) / (st.mean.Seconds() / 2)
	}
}

// setBraidPaths fills PerPath from the client's path statistics before and
// after the test; the server's view supplies local addresses the client
// did not pin.
func (r *perfReport) setBraidPaths(o *perfOptions, before, after []transport.PathStats, res *perfResult) {
	b := ctl.StatsByID(before)
	srv := map[int]perfServerPath{}
	for _, p := range res.Paths {
		srv[p.ID] = p
	}
	r.PerPath = r.PerPath[:0]
	for _, p := range after {
		q := b[p.ID]
		var n int64
		switch {
		case o.mode == "pingpong":
			n = p.BytesSent - q.BytesSent + p.BytesReceived - q.BytesReceived
		case o.reverse:
			n = p.BytesReceived - q.BytesReceived
		default:
			n = p.BytesSent - q.BytesSent
		}
		dup := p.Duplicated - q.Duplicated
		switch {
		case o.mode == "pingpong":
			n -= dup + p.DupReceived - q.DupReceived
		case o.reverse:
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
		// A bulk test's data session is closed when the receiver's time
		// is up, so its paths end down: a path that was up and neither
		// failed over nor reconnected during the test was up throughout.
		state := p.State
		if o.mode == "bulk" && q.State == "up" && p.Failovers == q.Failovers && p.Reconnects == q.Reconnects {
			state = "up"
		}
		r.PerPath = append(r.PerPath, perfPath{
			ID: p.ID, Local: local, Remote: p.Remote, Bytes: n, Mbps: ctl.Mbps(n, r.Seconds), State: state,
			Failovers: p.Failovers - q.Failovers, Retransmitted: p.Retransmitted - q.Retransmitted,
			Duplicated: dup,
		})
	}
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

func (r *perfReport) printHeader(w io.Writer, o *perfOptions) {
	what := r.Mode
	if r.Reverse {
		what += " (reverse: the server sends)"
	}
	if r.Baseline {
		fmt.Fprintf(w, "braid perf: %s over %s as plain TCP connections striped by hand, %s messages, %gs\n",
			what, plural(r.Paths, "path", "paths"), formatBytes(r.Size), o.seconds)
	} else {
		fmt.Fprintf(w, "braid perf: %s over %s, %s, %s messages, %gs, stripe %s, policy %s, transport %s\n",
			what, plural(r.Paths, "path", "paths"), plural(r.Streams, "stream", "streams"), formatBytes(r.Size), o.seconds,
			r.Stripe, r.Policy, r.Transport)
	}
	for i, p := range o.paths {
		local := p.Local
		if local == "" {
			local = "*"
		}
		fmt.Fprintf(w, "  path %d: %s -> %s\n", i, local, p.Remote)
	}
}

func (r *perfReport) printSummary(w io.Writer) {
	fmt.Fprintln(w, strings.Repeat("- ", 30))
	switch r.Mode {
	case "pingpong":
		fmt.Fprintf(w, "round trips: %d of %s in %.2f s; payload both ways %.1f Mbit/s\n",
			r.RoundTrips, formatBytes(r.Size), r.Seconds, r.ThroughputMbps)
		fmt.Fprintf(w, "rtt: mean %s  min %s  p50 %s  p99 %s  max %s\n",
			fmtUs(r.RTTus), fmtUs(r.RTTMinUs), fmtUs(r.RTTP50us), fmtUs(r.RTTP99us), fmtUs(r.RTTMaxUs))
		fmt.Fprintf(w, "effective bandwidth (8*size/1e6)/(RTT/2): %.1f Mbit/s\n", r.EffectiveMbps)
	default:
		who := "receiver (server)"
		if r.Reverse {
			who = "receiver (client)"
		}
		fmt.Fprintf(w, "throughput: %.1f Mbit/s  (%s in %d messages over %.2f s, %s)\n",
			r.ThroughputMbps, formatBytes(r.Bytes), r.Messages, r.Seconds, who)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PATH\tLOCAL\tREMOTE\tBYTES\tMBIT/S\tSTATE\tFAILOVERS\tRETRANSMITTED\t")
	for _, p := range r.PerPath {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.1f\t%s\t%d\t%s\t\n", p.ID, p.Local, p.Remote, formatBytes(p.Bytes), p.Mbps, p.State, p.Failovers, formatBytes(p.Retransmitted))
	}
	tw.Flush()
	if !r.Baseline {
		fmt.Fprintf(w, "striping control: %d segments striped, %d starts, %d ends\n", r.Control.Segments, r.Control.Starts, r.Control.Ends)
	}
	fmt.Fprintf(w, "client cpu: user %.2f s, sys %.2f s\n", r.CPUUser, r.CPUSys)
}

func fmtUs(us float64) string {
	if us >= 10000 {
		return fmt.Sprintf("%.1fms", us/1000)
	}
	return fmt.Sprintf("%.0fµs", us)
}

// intervals samples a per-path byte meter every second: it records
// perfInterval entries and, when live, prints them like iperf3.
type intervals struct {
	w      io.Writer
	live   bool
	rep    *perfReport
	meter  func() []int64
	rounds atomic.Int64
	rttSum atomic.Int64 // ns
	period time.Duration
	stopCh chan struct{}
	done   chan struct{}
	once   sync.Once
}

func startIntervals(env *Env, o *perfOptions, rep *perfReport, meter func() []int64) *intervals {
	iv := &intervals{w: env.Stdout, live: o.live, rep: rep, meter: meter, stopCh: make(chan struct{}), done: make(chan struct{})}
	if o.interval <= 0 {
		close(iv.done)
		return iv
	}
	iv.period = time.Duration(o.interval * float64(time.Second))
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
	prev := iv.meter()
	var prevRounds, prevSum int64
	start := time.Now()
	last := start
	for i := 0; ; i++ {
		select {
		case <-iv.stopCh:
			return
		case now := <-t.C:
			cur := iv.meter()
			dt := now.Sub(last).Seconds()
			e := perfInterval{Start: last.Sub(start).Seconds(), End: now.Sub(start).Seconds()}
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
			iv.rep.Intervals = append(iv.rep.Intervals, e)
			if iv.live {
				iv.print(i, e)
			}
		}
	}
}

func (iv *intervals) print(i int, e perfInterval) {
	if i == 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%-15s %10s", "[ seconds ]", "Mbit/s")
		for j := range e.PerPath {
			fmt.Fprintf(&b, " %9s", fmt.Sprintf("path%d", j))
		}
		if iv.rep.Mode == "pingpong" {
			fmt.Fprintf(&b, " %10s", "rtt")
		}
		fmt.Fprintln(iv.w, b.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%5.1f-%5.1f ] %10.1f", e.Start, e.End, e.Mbps)
	for _, m := range e.PerPath {
		fmt.Fprintf(&b, " %9.1f", m)
	}
	if iv.rep.Mode == "pingpong" {
		fmt.Fprintf(&b, " %10s", fmtUs(e.RTTus))
	}
	fmt.Fprintln(iv.w, b.String())
}
