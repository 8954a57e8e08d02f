package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport"
	_ "github.com/braid-hpc/braid/transport/channel/sctpudp" // the sctp-udp channel kind
)

// Suite runs the transport experiments. Each experiment adds Sections of
// typed results to Results, from which Run writes the Markdown report;
// braid bench --json prints Results.
type Suite struct {
	Out      io.Writer // Markdown report
	Log      io.Writer // progress lines
	Duration time.Duration
	Only     string // run the experiment of this name, or else those whose name contains it
	// Braid is the braid binary that the job-system experiments start as
	// server, worker and client processes; empty means this executable.
	Braid string
	// Results holds the sections of the experiments run so far; Run
	// writes each experiment's sections as Markdown to Out (if not nil)
	// when the experiment ends, failed or not.
	Results []*Section

	running string // the experiment running now
}

func (s *Suite) logf(format string, args ...any) {
	if s.Log != nil {
		fmt.Fprintf(s.Log, format+"\n", args...)
	}
}

// Experiment is one named measurement group.
type Experiment struct {
	Name string
	Run  func(s *Suite, ctx context.Context) error
}

// Experiments lists the suite.
func Experiments() []Experiment {
	return []Experiment{
		{"equal", (*Suite).equal},
		{"hetero", (*Suite).hetero},
		{"gigabit", (*Suite).gigabit},
		{"gigabit4", (*Suite).gigabit4},
		{"links4", (*Suite).links4},
		{"sweep", (*Suite).sweep},
		{"basic", (*Suite).basicVsEnhanced},
		{"failover", (*Suite).failover},
		{"hol", (*Suite).hol},
		{"holloss", (*Suite).holLoss},
		{"transports", (*Suite).transports},
		{"assoc", (*Suite).assoc},
		{"cluster", (*Suite).cluster},
		{"slowworker", (*Suite).slowWorker},
		{"fraction", (*Suite).fraction},
		{"scale", (*Suite).scale},
	}
}

// Run runs every selected experiment.
func (s *Suite) Run(ctx context.Context) error {
	if s.Duration == 0 {
		s.Duration = 5 * time.Second
	}
	for _, e := range selected(s.Only) {
		s.logf("== %s", e.Name)
		s.running = e.Name
		first := len(s.Results)
		err := e.Run(s, ctx)
		if s.Out != nil {
			for _, sec := range s.Results[first:] {
				if werr := sec.Markdown(s.Out); werr != nil && err == nil {
					err = werr
				}
			}
		}
		if err != nil {
			return fmt.Errorf("bench %s: %w", e.Name, err)
		}
	}
	return nil
}

// Known reports whether only selects at least one experiment (Suite.Only).
func Known(only string) bool { return len(selected(only)) > 0 }

// selected returns the experiment named only, or else those whose name
// contains it (all for "").
func selected(only string) []Experiment {
	var out []Experiment
	for _, e := range Experiments() {
		if e.Name == only {
			return []Experiment{e}
		}
		if strings.Contains(e.Name, only) {
			out = append(out, e)
		}
	}
	return out
}

func withBed(ctx context.Context, rates []int64, f func(*testbed.Bed) error) error {
	return onBed(ctx, NewBed, rates, f)
}

// withHalfDuplexBed is withBed on half-duplex networks.
func withHalfDuplexBed(ctx context.Context, rates []int64, f func(*testbed.Bed) error) error {
	return onBed(ctx, NewHalfDuplexBed, rates, f)
}

func onBed(ctx context.Context, up func(context.Context, []int64) (*testbed.Bed, error), rates []int64, f func(*testbed.Bed) error) error {
	bed, err := up(ctx, rates)
	if err != nil {
		return err
	}
	defer bed.Down()
	return f(bed)
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rateName(rates []int64) string {
	var parts []string
	for _, r := range rates {
		parts = append(parts, testbed.FormatRate(r))
	}
	return strings.Join(parts, " + ")
}

// ideal measures one plain TCP connection alone on each network and
// returns the sum (bulk) and the parts.
func (s *Suite) ideal(ctx context.Context, bed *testbed.Bed, nets []int) (float64, []float64, error) {
	var sum float64
	var parts []float64
	for _, n := range nets {
		r, err := (&TCP{Bed: bed, Nets: []int{n}}).Bulk(ctx, s.Duration/2)
		if err != nil {
			return 0, nil, err
		}
		sum += r.Mbps
		parts = append(parts, r.Mbps)
	}
	return sum, parts, nil
}

func (s *Suite) equal(ctx context.Context) error {
	t := s.section("Bulk over k equal paths at 100 Mbit/s").table(integer("k", "k", "paths"),
		numCol("ideal_mbps", "ideal (Σ single TCP) Mbit/s", "Mbit/s", "%.1f"), numCol("braid_mbps", "braid Mbit/s", "Mbit/s", "%.1f"),
		numCol("braid_ratio", "braid / ideal", "", "%.3f"), numCol("mptcp_mbps", "MPTCP Mbit/s", "Mbit/s", "%.1f"),
		numCol("mptcp_ratio", "MPTCP / ideal", "", "%.3f"), Column{Key: "braid_path_mbps", Head: "braid per path Mbit/s", Type: Numbers, Unit: "Mbit/s", Format: "%.1f"})
	for k := 1; k <= 4; k++ {
		rates := make([]int64, k)
		for i := range rates {
			rates[i] = 100e6
		}
		err := withBed(ctx, rates, func(bed *testbed.Bed) error {
			ideal, _, err := s.ideal(ctx, bed, seq(k))
			if err != nil {
				return err
			}
			br, err := (&Braid{Bed: bed, Nets: seq(k)}).Bulk(ctx, 1<<20, 1, s.Duration)
			if err != nil {
				return err
			}
			mp := s.mptcpBulk(ctx, bed)
			s.logf("k=%d ideal=%.1f braid=%.1f mptcp=%.1f", k, ideal, br.Mbps, mp)
			t.add(k, ideal, br.Mbps, br.Mbps/ideal, mp, mp/ideal, br.PerPath)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Suite) mptcpBulk(ctx context.Context, bed *testbed.Bed) float64 {
	if err := bed.EnableMPTCP(ctx, Server, Client); err != nil {
		s.logf("mptcp unavailable: %v", err)
		return 0
	}
	r, err := (&TCP{Bed: bed, Nets: seq(bed.Networks()), Multipath: true}).Bulk(ctx, s.Duration)
	if err != nil {
		s.logf("mptcp: %v", err)
		return 0
	}
	return r.Mbps
}

func floats(xs []float64) string { return formatAll(xs, "%.1f", " / ") }

// formatAll formats each of xs with format and joins them with sep.
func formatAll(xs []float64, format, sep string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, sep)
}

func (s *Suite) hetero(ctx context.Context) error {
	t := s.section("Heterogeneous paths",
		"Ideal for ping-pong is the sum of the effective bandwidths of one TCP connection alone on each path at the same size.").
		table(text("links", "links"), text("test", "test"), numCol("ideal_mbps", "ideal Mbit/s", "Mbit/s", "%.1f"),
			numCol("braid_mbps", "braid Mbit/s", "Mbit/s", "%.1f"), numCol("braid_ratio", "braid / ideal", "", "%.3f"),
			numCol("mptcp_mbps", "MPTCP Mbit/s", "Mbit/s", "%.1f"), numCol("mptcp_ratio", "MPTCP / ideal", "", "%.3f"))
	for _, rates := range [][]int64{{100e6, 25e6}, {100e6, 50e6, 10e6}} {
		err := withBed(ctx, rates, func(bed *testbed.Bed) error {
			k := len(rates)
			ideal, _, err := s.ideal(ctx, bed, seq(k))
			if err != nil {
				return err
			}
			br, err := (&Braid{Bed: bed, Nets: seq(k)}).Bulk(ctx, 1<<20, 1, s.Duration)
			if err != nil {
				return err
			}
			mp := s.mptcpBulk(ctx, bed)
			t.add(rateName(rates), "bulk", ideal, br.Mbps, br.Mbps/ideal, mp, mp/ideal)
			s.logf("%s bulk ideal=%.1f braid=%.1f mptcp=%.1f", rateName(rates), ideal, br.Mbps, mp)
			for _, size := range []int{1 << 20, 8 << 20} {
				count := 30
				if size > 1<<20 {
					count = 8
				}
				var pideal float64
				for _, n := range seq(k) {
					r, err := (&TCP{Bed: bed, Nets: []int{n}}).PingPong(ctx, size, count)
					if err != nil {
						return err
					}
					pideal += r.Mbps
				}
				pb, err := (&Braid{Bed: bed, Nets: seq(k)}).PingPong(ctx, size, count)
				if err != nil {
					return err
				}
				var pm float64
				if r, err := (&TCP{Bed: bed, Nets: seq(k), Multipath: true}).PingPong(ctx, size, count); err == nil {
					pm = r.Mbps
				}
				t.add(rateName(rates), "ping-pong "+sizeName(size), pideal, pb.Mbps, pb.Mbps/pideal, pm, pm/pideal)
				s.logf("%s pingpong %s ideal=%.1f braid=%.1f mptcp=%.1f", rateName(rates), sizeName(size), pideal, pb.Mbps, pm)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func (s *Suite) gigabit(ctx context.Context) error  { return s.stripedK(ctx, "gigabit", 2, 1000e6) }
func (s *Suite) gigabit4(ctx context.Context) error { return s.stripedK(ctx, "gigabit4", 4, 1000e6) }

// links4 is gigabit4 on links slow enough for the links, not the CPU that
// emulates them, to set the pace: 4 x 250 Mbit/s.
func (s *Suite) links4(ctx context.Context) error { return s.stripedK(ctx, "links4", 4, 250e6) }

// stripedK measures bulk over k paths of rate bit/s each: k plain TCP
// connections striped by hand against braid, encrypted and plaintext.
func (s *Suite) stripedK(ctx context.Context, name string, k int, rate int64) error {
	title := fmt.Sprintf("%d x %d Mbit/s", k, rate/1e6)
	if rate >= 1000e6 {
		title += " (CPU-bound on 2 cores)"
	} else {
		title += " (link-bound)"
	}
	sec := s.section(title, "CPU time is the whole process (sender and receiver) per GB delivered.")
	t := sec.table(text("run", "run"), numCol("mbps", "Mbit/s", "Mbit/s", "%.1f"), numCol("ratio", fmt.Sprintf("ratio to %d TCP by hand", k), "", "%.3f"),
		numCol("cpu_s_per_gb", "CPU s per GB", "s/GB", "%.2f"))
	links := make([]int64, k)
	for i := range links {
		links[i] = rate
	}
	return withBed(ctx, links, func(bed *testbed.Bed) error {
		c0 := cpuTime()
		tr, err := (&TCP{Bed: bed, Nets: seq(k)}).Bulk(ctx, s.Duration)
		if err != nil {
			return err
		}
		tcpCPU := (cpuTime() - c0).Seconds() / (tr.Mbps * tr.Elapsed.Seconds() / 8 / 1e3)
		c0 = cpuTime()
		br, err := (&Braid{Bed: bed, Nets: seq(k)}).Bulk(ctx, 1<<20, 1, s.Duration)
		if err != nil {
			return err
		}
		braidCPU := (cpuTime() - c0).Seconds() / (br.Mbps * br.Elapsed.Seconds() / 8 / 1e3)
		c0 = cpuTime()
		pl, err := (&Braid{Bed: bed, Nets: seq(k), Config: transport.Config{InsecurePlaintext: true}}).Bulk(ctx, 1<<20, 1, s.Duration)
		if err != nil {
			return err
		}
		plainCPU := (cpuTime() - c0).Seconds() / (pl.Mbps * pl.Elapsed.Seconds() / 8 / 1e3)
		t.add(fmt.Sprintf("%d plain TCP connections, striped by hand", k), tr.Mbps, 1.0, tcpCPU)
		t.add(fmt.Sprintf("braid, %d paths (encrypted)", k), br.Mbps, br.Mbps/tr.Mbps, braidCPU)
		t.add(fmt.Sprintf("braid, %d paths, --insecure-plaintext", k), pl.Mbps, pl.Mbps/tr.Mbps, plainCPU)
		sec.finding("Encrypted / plaintext: %.3f of the throughput, %.2fx the CPU per byte.", br.Mbps/pl.Mbps, braidCPU/plainCPU)
		s.logf("%s tcp=%.1f braid=%.1f plaintext=%.1f", name, tr.Mbps, br.Mbps, pl.Mbps)
		return nil
	})
}

func (s *Suite) sweep(ctx context.Context) error {
	sec := s.section("Ping-pong on 2 x 100 Mbit/s: effective bandwidth (eq. 1)",
		"Paper 003 (Enhanced MuniSocket over 2 x Fast Ethernet, Fig. 5 and Section 5) beside braid, where the paper gives a figure.",
		twoLinkEcho)
	t := sec.table(text("size", "size"), integer("size_bytes", "bytes", "bytes"), numCol("tcp_mbps", "single TCP Mbit/s", "Mbit/s", "%.1f"),
		numCol("braid_mbps", "braid 2 paths Mbit/s", "Mbit/s", "%.1f"), numCol("speedup", "speed-up", "x", "%.2fx"),
		numCol("paper_tcp_mbps", "paper 003 TCP100 Mbit/s", "Mbit/s", "%.2f"), numCol("paper_enhanced_mbps", "paper 003 Enhanced Mbit/s", "Mbit/s", "%.2f"),
		numCol("paper_speedup", "paper speed-up", "x", "%.2fx"))
	// Half duplex, as paper 003's: on full-duplex links a ping-pong of
	// small messages passes the links' rate (testbed.Network.FullDuplex).
	return withHalfDuplexBed(ctx, []int64{100e6, 100e6}, func(bed *testbed.Bed) error {
		first := 0
		for _, size := range []int{1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20} {
			count := max(6, min(200, int(64<<20/size)))
			tr, err := (&TCP{Bed: bed, Nets: []int{0}}).PingPong(ctx, size, count)
			if err != nil {
				return err
			}
			br, err := (&Braid{Bed: bed, Nets: seq(2)}).PingPong(ctx, size, count)
			if err != nil {
				return err
			}
			// "From which": braid must win at this size and every larger
			// one, so a lucky small size does not count.
			switch {
			case br.Mbps <= tr.Mbps:
				first = 0
			case first == 0:
				first = size
			}
			var paperTCP, paperEnh, paperUp any // empty where the paper gives no figure
			if p, ok := sweep003[size]; ok {
				paperEnh = p[1]
				if p[0] > 0 {
					paperTCP, paperUp = p[0], p[1]/p[0]
				} else {
					paperUp = p[2]
				}
			}
			t.add(sizeName(size), size, tr.Mbps, br.Mbps, br.Mbps/tr.Mbps, paperTCP, paperEnh, paperUp)
			s.logf("sweep %s tcp=%.1f braid=%.1f striped=%d", sizeName(size), tr.Mbps, br.Mbps, br.Transport.Segments)
		}
		sec.finding("Smallest size from which braid over 2 paths beats one TCP connection at every larger size: %s.", sizeName(first))
		return nil
	})
}

// twoLinkEcho is the note beside every ping-pong over two half-duplex
// links whose messages may travel whole: what the testbed's token buckets
// cannot emulate.
const twoLinkEcho = "The links are half duplex (the testbed's default, not testbed.Network.FullDuplex: one token bucket per host and network for both directions), so no ping-pong over one link measures above its rate. " +
	"What a token bucket cannot emulate is a message's transmission time: a lone message passes its link at once and the link's next message pays for it. " +
	"Over two links, a message and its echo sent whole on different networks each pay only their own link, so such a ping-pong can measure up to the two links' 200 Mbit/s where Fast Ethernet allows 100. " +
	"braid sends a small message whole (it stripes a segment only where that delivers it sooner, from the paths' measured rates: the run's log gives the segments striped at each size), so its figures and speed-ups at the sizes it sends whole are partly this artifact; tbf and htb (the shapers this host's kernel has; no netem) only set rates, and only a delay per packet (netem's rate, or a relay) would remove it."

// sweep003 holds the figures paper 003 gives for Enhanced MuniSocket over
// two Fast Ethernet networks, by message size: TCP100's effective
// bandwidth (0: not given), Enhanced MuniSocket's, and the speed-up the
// paper states where it gives no TCP100 figure.
var sweep003 = map[int][3]float64{
	8 << 10:  {72.26, 87.37, 0},
	64 << 10: {89.32, 166.44, 0},
	1 << 20:  {0, 184.97, 1.97},
	2 << 20:  {93.92, 186.41, 0},
	4 << 20:  {0, 187.09, 1.99},
}

func (s *Suite) basicVsEnhanced(ctx context.Context) error {
	t := s.section("Enhanced vs basic striping, 4 x 100 Mbit/s, 2 KB fragments (the paper's setting)",
		"Control messages per message: Start + End frames for enhanced; per-fragment sequence headers for basic.").
		table(text("size", "size"), text("mode", "mode"), numCol("effective_mbps", "effective Mbit/s", "Mbit/s", "%.1f"),
			numCol("control_per_message", "control messages per message", "", "%.1f"), numCol("starts_per_message", "starts per message", "", "%.1f"))
	return withBed(ctx, []int64{100e6, 100e6, 100e6, 100e6}, func(bed *testbed.Bed) error {
		for _, size := range []int{128 << 10, 2 << 20} {
			for _, mode := range []transport.StripeMode{transport.StripeEnhanced, transport.StripeBasic} {
				count := 40
				cfg := transport.Config{Stripe: mode, FragmentSize: 2 << 10, SegmentSize: 2 << 20}
				r, err := (&Braid{Bed: bed, Nets: seq(4), Config: cfg}).PingPong(ctx, size, count)
				if err != nil {
					return err
				}
				msgs := float64(r.Transport.Segments)
				ctl := float64(r.Transport.Starts+r.Transport.Ends) / msgs
				if mode == transport.StripeBasic {
					ctl = float64(size / (2 << 10))
				}
				t.add(sizeName(size), mode.String(), r.Mbps, ctl, float64(r.Transport.Starts)/msgs)
				s.logf("%s %v %.1f ctl=%.1f", sizeName(size), mode, r.Mbps, ctl)
			}
		}
		return nil
	})
}

// failover copies 200 MB over 3 paths and takes one link down mid-run,
// then the same with a silent blackhole.
func (s *Suite) failover(ctx context.Context) error {
	t := s.section("Failover: 200 MB over 3 x 100 Mbit/s, one link failing mid-run",
		"Dip: time from the fault until the 100 ms throughput is back above 90% of what the two remaining links carry.").
		table(text("fault", "fault"), Column{Key: "intact", Head: "bytes intact", Type: Boolean}, dur("dip_s", "dip"), dur("detection_s", "detection"),
			numCol("before_mbps", "Mbit/s before", "Mbit/s", "%.1f"), numCol("after_mbps", "Mbit/s after", "Mbit/s", "%.1f"),
			Column{Key: "reused", Head: "link used again after restore", Type: Boolean})
	for _, kind := range []string{"link down", "blackhole"} {
		err := withBed(ctx, []int64{100e6, 100e6, 100e6}, func(bed *testbed.Bed) error {
			r, err := s.failoverRun(ctx, bed, kind)
			if err != nil {
				return err
			}
			t.add(kind, r.intact, r.dip.Round(10*time.Millisecond), r.detect.Round(10*time.Millisecond), r.before, r.after, r.reused)
			s.logf("failover %s: %+v", kind, r)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

type failoverResult struct {
	intact        bool
	dip, detect   time.Duration
	before, after float64
	reused        bool
}

func (s *Suite) failoverRun(ctx context.Context, bed *testbed.Bed, kind string) (failoverResult, error) {
	var res failoverResult
	b := &Braid{Bed: bed, Nets: seq(3)}
	cli, srv, closeFn, err := b.session(ctx)
	if err != nil {
		return res, err
	}
	defer closeFn()
	const total = 200 << 20
	src := make([]byte, total)
	for i := range src {
		src[i] = byte(i*7 + i>>13)
	}
	want := sha256.Sum256(src)
	var mu sync.Mutex
	type sample struct {
		t time.Time
		n int64
	}
	var samples []sample
	done := make(chan [32]byte, 1)
	go func() {
		st, err := srv.AcceptStream(ctx)
		if err != nil {
			done <- [32]byte{}
			return
		}
		h := sha256.New()
		for {
			m, err := st.ReadMessage(ctx)
			if err != nil {
				break
			}
			h.Write(m)
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		done <- sum
	}()
	stopSample := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSample:
				return
			case now := <-t.C:
				var n int64
				for _, p := range srv.Stats() {
					n += p.BytesReceived
				}
				mu.Lock()
				samples = append(samples, sample{now, n})
				mu.Unlock()
			}
		}
	}()
	st, err := cli.OpenStream(ctx)
	if err != nil {
		return res, err
	}
	var faultAt, downAt time.Time
	var fmu sync.Mutex
	go func() {
		time.Sleep(2 * time.Second)
		fmu.Lock()
		faultAt = time.Now()
		fmu.Unlock()
		if kind == "link down" {
			bed.LinkDown(Client, 1)
		} else {
			bed.Blackhole(Client, 1)
		}
		if waitUntil(5*time.Second, func() bool { return cli.Stats()[1].State == "down" }) {
			fmu.Lock()
			downAt = time.Now()
			fmu.Unlock()
		}
	}()
	for off := 0; off < total; off += 1 << 20 {
		if err := st.WriteMessage(ctx, src[off:min(off+1<<20, total)]); err != nil {
			return res, err
		}
	}
	st.Close()
	var sum [32]byte
	select {
	case sum = <-done:
	case <-time.After(2 * time.Minute):
		return res, fmt.Errorf("transfer did not finish")
	}
	close(stopSample)
	res.intact = sum == want
	waitUntil(5*time.Second, func() bool { return cli.Stats()[1].State == "down" })
	time.Sleep(50 * time.Millisecond)
	fmu.Lock()
	fault := faultAt
	if !downAt.IsZero() {
		res.detect = downAt.Sub(faultAt)
	}
	fmu.Unlock()
	// Throughput series.
	mu.Lock()
	series := append([]sample(nil), samples...)
	mu.Unlock()
	var before, after []float64
	for i := 1; i < len(series); i++ {
		mbps := perf.Mbps(series[i].n-series[i-1].n, 0.1)
		switch {
		case series[i].t.Before(fault):
			before = append(before, mbps)
		case series[i].n-series[0].n < total*95/100:
			after = append(after, mbps)
		}
	}
	res.before = median(before)
	res.after = median(after)
	for i := 1; i < len(series); i++ {
		if series[i].t.Before(fault) {
			continue
		}
		mbps := perf.Mbps(series[i].n-series[i-1].n, 0.1)
		if mbps >= 0.9*res.before*2/3 {
			res.dip = max(0, series[i-1].t.Sub(fault))
			break
		}
	}
	if kind == "link down" {
		bed.LinkUp(Client, 1)
	} else {
		bed.Restore(Client, 1)
	}
	res.reused = waitUntil(10*time.Second, func() bool { return cli.Stats()[1].State == "up" })
	if res.reused {
		before := cli.Stats()[1].BytesSent
		// Within one stream window: nobody reads this stream, and the
		// acknowledgements alone tell where the bytes went.
		st2, _ := cli.OpenStream(ctx)
		for range 8 {
			st2.WriteMessage(ctx, src[:1<<20])
		}
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		cli.Flush(fctx)
		cancel()
		res.reused = cli.Stats()[1].BytesSent-before > 1<<20
	}
	return res, nil
}

func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// transports compares braid over each channel kind on 1, 2 and 3 paths of
// 100 Mbit/s, striped and not.
func (s *Suite) transports(ctx context.Context) error {
	t := s.section("Channel kinds on k x 100 Mbit/s: fraction of the sum of link rates",
		"Bulk: 1 MiB messages, one stream. Ping-pong: 1 MB messages. Unstriped runs spread whole 1 MiB segments by the soonest-delivery policy.").
		table(integer("k", "k", "paths"), text("transport", "transport"), text("stripe", "stripe"),
			numCol("bulk_mbps", "bulk Mbit/s", "Mbit/s", "%.1f"), numCol("bulk_ratio", "bulk / links", "", "%.3f"),
			numCol("pingpong_mbps", "ping-pong Mbit/s", "Mbit/s", "%.1f"), numCol("pingpong_ratio", "ping-pong / links", "", "%.3f"))
	for k := 1; k <= 3; k++ {
		rates := make([]int64, k)
		for i := range rates {
			rates[i] = 100e6
		}
		links := float64(k) * 100
		err := withBed(ctx, rates, func(bed *testbed.Bed) error {
			for _, tr := range []string{"tcp", "mptcp", "sctp-udp"} {
				for _, mode := range []transport.StripeMode{transport.StripeEnhanced, transport.StripeOff} {
					cfg := transport.Config{Transport: tr, Stripe: mode}
					b := &Braid{Bed: bed, Nets: seq(k), Config: cfg}
					bulk, err := b.Bulk(ctx, 1<<20, 1, s.Duration)
					if err != nil {
						return fmt.Errorf("%s bulk: %w", tr, err)
					}
					pp, err := b.PingPong(ctx, 1<<20, 20)
					if err != nil {
						return fmt.Errorf("%s ping-pong: %w", tr, err)
					}
					t.add(k, tr, mode.String(), bulk.Mbps, bulk.Mbps/links, pp.Mbps, pp.Mbps/links)
					s.logf("k=%d %s %v bulk=%.1f pp=%.1f", k, tr, mode, bulk.Mbps, pp.Mbps)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
