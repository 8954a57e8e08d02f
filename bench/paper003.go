package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport"
)

// The paper's effective bandwidths (Mbit/s) on 100 Mbit/s Fast Ethernet,
// by message size: Fig. 5 (TCP100, basic and enhanced MuniSocket over two
// networks at 8 KB, 64 KB and 2 MB), Fig. 1 (basic at 4 MB) and Fig. 11
// (enhanced at 1 MB and 4 MB).
var paper003 = map[string]map[int]float64{
	"TCP100 (1 path)": {8 << 10: 72.26, 64 << 10: 89.32, 2 << 20: 93.92},
	"braid basic":     {64 << 10: 112.75, 2 << 20: 183.36, 4 << 20: 186.4},
	"braid enhanced":  {8 << 10: 87.37, 64 << 10: 166.44, 1 << 20: 184.97, 2 << 20: 186.41, 4 << 20: 187.09},
}

const rate003 = 100e6

func (r *PaperRun) paper003(ctx context.Context, pr *PaperResult) error {
	pr.Title = "Mohamed et al., Enhanced MuniSocket: message striping over reliable transports (2006)"
	reps := r.reps(3, 2)
	sizes := []int{1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20}
	budget := 8 << 20 // bytes per point, each way
	if r.Quick {
		sizes = []int{8 << 10, 64 << 10, 2 << 20}
		budget = 1 << 20
	}
	count := func(size int) int { return max(r.reps(5, 3), min(r.reps(100, 20), budget/size)) }
	pr.Setup = fmt.Sprintf("The paper's ping-pong benchmark: a message of each size is echoed back and forth, effective bandwidth = 8 x size / (RTT / 2) (eq. 1), "+
		"RTT the mean over up to %d round trips after 2 warm-up ones; %d repetition(s), interleaved over the series. Two namespaced hosts with 2 (Figs. 1, 5, 6) or 4 (Fig. 10) networks of %s each. "+
		"braid basic is `--stripe basic` (shared counter, sequence header per fragment, the paper's basic MuniSocket), braid enhanced the default (fragments claimed from both ends, Start/End control messages). "+
		"Peers in the same run: one TCP connection on one network (TCP100), the message split evenly by hand over one TCP connection per network (the paper's Peak), one Linux MPTCP connection, and a bonding-like comparator (each message whole over the path a layer3+4 hash picks, Fig. 11).",
		r.reps(100, 20), reps, testbed.FormatRate(rate003))
	pr.Emulated = []string{
		"The paper's Sandhills cluster (AthlonMP 1.4 GHz, two or four Fast Ethernet cards per node) is emulated by veth links shaped with tbf to 100 Mbit/s between two network namespaces on one 2-core machine; both ends share the CPUs.",
		"The links are half duplex (the testbed's default; not testbed.Network.FullDuplex): one token bucket per host and network for both directions. A token bucket lets a lone packet through at once instead of holding it for its time on the wire, so with a bucket per direction a message and its echo each passed one of their own, and a 1 KB ping-pong over one 100 Mbit/s link measured up to twice the rate (the previous run of this report: TCP100 up to 183 Mbit/s at 2 KB, the Peak over 2 x 100 up to 383). With one bucket for both directions each round trip pays for both messages, as on the paper's Fast Ethernet, and no point of one path can exceed 100 Mbit/s (TestPingPongWithinRate). The cost: TCP's acknowledgements share the bucket with the data, so one stream's goodput is about 0.93 of the rate instead of 0.945 (BenchmarkShaping), and the largest messages reach about 0.92 of it. " +
			"What this cannot emulate: a message still crosses its link without its transmission time, so a ping-pong whose message and echo travel whole over different networks pays each link for one message only, and can measure up to the two links' 200 Mbit/s where Fast Ethernet allows 100 (each message would spend its time on its wire, one after the other). " +
			"This touches the series that send messages whole (braid at the sizes it does not stripe, the bonding-like comparator): their points above 100 Mbit/s are this artifact, not a gain; the series that split every message (the Peak, braid where it stripes) are bound by the two links together, as on the paper's cluster.",
	}
	pr.Emulated = append(pr.Emulated,
		"Fig. 11's channel bonding (the JAZZ cluster's, per-packet round-robin in the kernel) is emulated in user space by a bonding-like comparator: one TCP connection per network and each message sent whole over the path a layer3+4 hash (Linux bonding's xmit_hash_policy layer3+4) picks for it, each message hashed as a flow of its own; no message is split.")
	f5 := pr.fig(&Figure{ID: "003-fig5", Title: "Figs. 1, 5, 11: effective bandwidth on 2 x 100 Mbit/s",
		XLabel: "message size (bytes)", YLabel: "effective bandwidth (Mbit/s)", Unit: "Mbit/s", LogX: true, Higher: true, Comparable: true,
		Note: "braid's defaults: 32 KB fragments, and a message is striped when that delivers it sooner than its best path alone (decided from the paths' measured rates; with these defaults on these links braid bench --only sweep counts every message striped from 8 KB on and none at 1-4 KB). " +
			"Points of braid at the sizes it sends whole and of the bonding-like comparator above 100 Mbit/s are an artifact of the emulation: a message and its echo on different networks each skip their transmission time (see \"Emulated\" above).",
		Compare: [][2]string{{"braid enhanced", "Peak 2x100 (TCP x2 by hand)"}, {"braid enhanced", "MPTCP, 2 paths"}, {"braid enhanced", "TCP100 (1 path)"},
			{"braid enhanced, 2 KiB fragments", "Peak 2x100 (TCP x2 by hand)"}}})
	f6 := pr.fig(&Figure{ID: "003-fig6", Title: "Figs. 3, 6: bandwidth utilization, normalized to Peak 2x100",
		XLabel: "message size (bytes)", YLabel: "effective bandwidth / Peak (ratio)", Unit: "ratio", LogX: true, Higher: true, Comparable: true,
		Note:    "Each repetition's value over the Peak measured right beside it. The paper: basic reaches 30% of the peak at 8 KB and the peak at 0.5 MB; enhanced reaches the peak at 16 KB.",
		Compare: [][2]string{{"braid enhanced", "MPTCP, 2 paths"}}})
	f10 := pr.fig(&Figure{ID: "003-fig10", Title: "Fig. 10: effective bandwidth on 4 x 100 Mbit/s, 2 KiB fragments",
		XLabel: "message size (bytes)", YLabel: "effective bandwidth (Mbit/s)", Unit: "Mbit/s", LogX: true, Higher: true,
		Note:    "The paper's 4-network setting: 2 KB fragments for both modes. The paper gives no absolute values for Fig. 10, only enhanced's margin over basic (next figure).",
		Compare: [][2]string{{"braid enhanced", "Peak 4x100 (TCP x4 by hand)"}, {"braid enhanced", "MPTCP, 4 paths"}}})
	gain := pr.fig(&Figure{ID: "003-fig10-gain", Title: "Fig. 10: enhanced over basic on 4 x 100 Mbit/s",
		XLabel: "message size (bytes)", YLabel: "enhanced / basic effective bandwidth (ratio)", Unit: "ratio", LogX: true, Higher: true, Comparable: true,
		Note: "The paper: enhanced is 35% ahead of basic at 128 KB and 7.6% at 2 MB."})
	f11 := pr.fig(&Figure{ID: "003-fig11", Title: "Fig. 11: speed-up over one network, striping against bonding-like hashing, 2 x 100 Mbit/s",
		XLabel: "message size (bytes)", YLabel: "effective bandwidth / TCP100's (ratio)", Unit: "ratio", LogX: true, Higher: true, Comparable: true,
		Note: "Each repetition's effective bandwidth over TCP100's measured right beside it. The paper: channel bonding on JAZZ went from 86.8 to 160.4 Mbit/s at 1 MB (1.85x) and from 86.88 to 162.08 at 4 MB (1.87x), " +
			"1.23x on average under 12 KB; Enhanced MuniSocket 1.97x at 1 MB and 1.99x at 4 MB. The paper's bonding values stand beside the bonding-like series, which hashes whole messages instead of striping packets. " +
			"Below 64 KB, values of the bonding-like series (and of braid at the sizes it sends whole, 1-4 KB here) above 1 are partly an artifact of the emulation: a message and its echo on different networks each skip their transmission time (see \"Emulated\" above).",
		Compare: [][2]string{{"braid enhanced", "bonding-like (layer3+4 hash)"}}})
	cpu := pr.fig(&Figure{ID: "003-fig1-cpu", Title: "Fig. 1 (text): CPU per byte of braid enhanced over 2 x 100 Mbit/s, relative to TCP100",
		XLabel: "message size (bytes)", YLabel: "CPU time per byte / TCP100's (ratio)", Unit: "ratio", LogX: true, Comparable: true,
		Note: "This process's CPU time (both ends run in it) over the bytes a ping-pong moved, braid's over TCP100's measured right beside it. " +
			"The paper measured CPU utilization during a very large message: 13.26% per processor for TCP100 at 93.92 Mbit/s, 26.16% for MuniSocket over two networks at 186.4 Mbit/s, " +
			"so about the same CPU per byte (ratio 0.99)."})
	starts := pr.fig(&Figure{ID: "003-starts", Title: "Sec. 5: Start control messages per 2 MiB message, 4 paths, 2 KiB fragments",
		XLabel: "message size (bytes)", YLabel: "Start messages per message (count)", Unit: "count", Comparable: true,
		Note: "1024 fragments per message; basic striping sends 1024 sequence headers instead. The paper counted 4 to 5 on unloaded networks."})

	type series struct {
		name, kind string
		pp         func(ctx context.Context, bed *testbed.Bed, size, count int) (Result, error)
	}
	braid := func(k int, cfg transport.Config) func(context.Context, *testbed.Bed, int, int) (Result, error) {
		return func(ctx context.Context, bed *testbed.Bed, size, count int) (Result, error) {
			return (&Braid{Bed: bed, Nets: seq(k), Config: cfg}).PingPong(ctx, size, count)
		}
	}
	tcp := func(nets []int, mp bool) func(context.Context, *testbed.Bed, int, int) (Result, error) {
		return func(ctx context.Context, bed *testbed.Bed, size, count int) (Result, error) {
			return (&TCP{Bed: bed, Nets: nets, Multipath: mp}).PingPong(ctx, size, count)
		}
	}
	err := withHalfDuplexBed(ctx, []int64{rate003, rate003}, func(bed *testbed.Bed) error {
		runs := []series{
			{"TCP100 (1 path)", kindPeer, tcp([]int{0}, false)},
			{"Peak 2x100 (TCP x2 by hand)", kindPeer, tcp(seq(2), false)},
			{"braid basic", kindBraid, braid(2, transport.Config{Stripe: transport.StripeBasic})},
			{"braid enhanced", kindBraid, braid(2, transport.Config{})},
			{"braid enhanced, 2 KiB fragments", kindBraid, braid(2, transport.Config{FragmentSize: 2 << 10})},
			{"bonding-like (layer3+4 hash)", kindPeer, func(ctx context.Context, bed *testbed.Bed, size, count int) (Result, error) {
				return (&Bond{TCP{Bed: bed, Nets: seq(2)}}).PingPong(ctx, size, count)
			}},
			{"MPTCP, 2 paths", kindPeer, tcp(seq(2), true)},
		}
		if err := bed.EnableMPTCP(ctx, Server, Client); err != nil {
			pr.Missing = append(pr.Missing, fmt.Sprintf("MPTCP: %v", err))
			runs = runs[:len(runs)-1]
		}
		for rep := range reps {
			for _, size := range sizes {
				x, xl := float64(size), sizeName(size)
				got := map[string]float64{}
				cpuPerByte := map[string]float64{}
				for _, s := range runs {
					n := count(size)
					c0 := cpuTime()
					res, err := s.pp(ctx, bed, size, n)
					if err != nil {
						return fmt.Errorf("%s at %s: %w", s.name, xl, err)
					}
					// Both ways, warm-up round trips included.
					cpuPerByte[s.name] = float64(cpuTime()-c0) / float64(2*size*(n+2))
					got[s.name] = res.Mbps
					f5.add(s.name, s.kind, x, xl, res.Mbps)
					r.logf("003 rep %d %s %s: %.1f Mbit/s", rep, xl, s.name, res.Mbps)
				}
				if base := cpuPerByte["TCP100 (1 path)"]; size >= 1<<20 && base > 0 {
					cpu.add("braid enhanced", kindBraid, x, xl, cpuPerByte["braid enhanced"]/base)
					cpu.add("Peak 2x100 (TCP x2 by hand)", kindPeer, x, xl, cpuPerByte["Peak 2x100 (TCP x2 by hand)"]/base)
					cpu.add("same as TCP100", kindIdeal, x, xl, 1)
				}
				f5.add("ideal: 2 x TCP100", kindIdeal, x, xl, 2*got["TCP100 (1 path)"])
				peak := got["Peak 2x100 (TCP x2 by hand)"]
				for _, s := range runs[2:] {
					f6.add(s.name, s.kind, x, xl, got[s.name]/peak)
				}
				f6.add("ideal: the peak", kindIdeal, x, xl, 1)
				if base := got["TCP100 (1 path)"]; base > 0 {
					f11.add("braid enhanced", kindBraid, x, xl, got["braid enhanced"]/base)
					f11.add("bonding-like (layer3+4 hash)", kindPeer, x, xl, got["bonding-like (layer3+4 hash)"]/base)
					f11.add("ideal: 2 paths", kindIdeal, x, xl, 2)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for name, byX := range paper003 {
		for size, v := range byX {
			f5.paper(name, float64(size), v)
		}
	}
	if err := r.loaded003(ctx, pr, reps, count); err != nil {
		return err
	}
	cpu.paper("braid enhanced", 4<<20, (26.16/186.4)/(13.26/93.92))
	f6.paper("braid basic", 8<<10, 0.30)
	f6.paper("braid basic", 512<<10, 1)
	f6.paper("braid enhanced", 16<<10, 1)
	f11.paper("braid enhanced", 1<<20, 1.97)
	f11.paper("braid enhanced", 4<<20, 1.99)
	f11.paper("bonding-like (layer3+4 hash)", 1<<20, 160.4/86.8)
	f11.paper("bonding-like (layer3+4 hash)", 4<<20, 162.08/86.88)

	// Fig. 10 and the Start count: 4 networks, 2 KB fragments.
	return withHalfDuplexBed(ctx, []int64{rate003, rate003, rate003, rate003}, func(bed *testbed.Bed) error {
		frag := transport.Config{FragmentSize: 2 << 10, SegmentSize: 2 << 20}
		basic := frag
		basic.Stripe = transport.StripeBasic
		runs := []series{
			{"Peak 4x100 (TCP x4 by hand)", kindPeer, tcp(seq(4), false)},
			{"braid basic", kindBraid, braid(4, basic)},
			{"braid enhanced", kindBraid, braid(4, frag)},
			{"MPTCP, 4 paths", kindPeer, tcp(seq(4), true)},
		}
		if err := bed.EnableMPTCP(ctx, Server, Client); err != nil {
			runs = runs[:3]
		}
		for rep := range reps {
			for _, size := range []int{128 << 10, 2 << 20} {
				x, xl := float64(size), sizeName(size)
				got := map[string]float64{}
				for _, s := range runs {
					res, err := s.pp(ctx, bed, size, count(size))
					if err != nil {
						return fmt.Errorf("4 paths, %s at %s: %w", s.name, xl, err)
					}
					got[s.name] = res.Mbps
					f10.add(s.name, s.kind, x, xl, res.Mbps)
					r.logf("003 fig10 rep %d %s %s: %.1f Mbit/s", rep, xl, s.name, res.Mbps)
					if s.name == "braid enhanced" && size == 2<<20 && res.Transport.Segments > 0 {
						starts.add("braid enhanced", kindBraid, x, xl, float64(res.Transport.Starts)/float64(res.Transport.Segments))
					}
				}
				gain.add("braid enhanced / braid basic", kindBraid, x, xl, got["braid enhanced"]/got["braid basic"])
				gain.add("no gain", kindIdeal, x, xl, 1)
			}
		}
		gain.paper("braid enhanced / braid basic", 128<<10, 1.35)
		gain.paper("braid enhanced / braid basic", 2<<20, 1.076)
		starts.paper("braid enhanced", 2<<20, 4.5)
		return nil
	})
}

// loaded003 is Fig. 7: the same ping-pong while 32 KB messages go back
// and forth without pause on network 1.
func (r *PaperRun) loaded003(ctx context.Context, pr *PaperResult, reps int, count func(int) int) error {
	f7 := pr.fig(&Figure{ID: "003-fig7", Title: "Fig. 7: effective bandwidth with cross-traffic on network 1",
		XLabel: "message size (bytes)", YLabel: "effective bandwidth (Mbit/s)", Unit: "Mbit/s", LogX: true, Higher: true, Comparable: true,
		Note: "A TCP connection on network 1 echoes 32 KB messages without pause during every measurement (the paper's load). " +
			"The paper at 2 MB: 82.1 Mbit/s on either network alone, 161.8 with Enhanced MuniSocket over both.",
		Compare: [][2]string{{"braid enhanced", "Unloaded TCP100 (net 0)"}, {"braid enhanced", "Peak 2x100 (TCP x2 by hand)"}}})
	sizes := []int{8 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20}
	if r.Quick {
		sizes = []int{64 << 10, 2 << 20}
	}
	return withHalfDuplexBed(ctx, []int64{rate003, rate003}, func(bed *testbed.Bed) error {
		stop, err := (&TCP{Bed: bed, Nets: []int{1}}).Load(ctx, 32<<10)
		if err != nil {
			return fmt.Errorf("cross-traffic: %w", err)
		}
		defer stop()
		type series struct {
			name, kind string
			run        func(size, count int) (Result, error)
		}
		runs := []series{
			{"Unloaded TCP100 (net 0)", kindPeer, func(size, count int) (Result, error) {
				return (&TCP{Bed: bed, Nets: []int{0}}).PingPong(ctx, size, count)
			}},
			{"Loaded TCP100 (net 1)", kindPeer, func(size, count int) (Result, error) {
				return (&TCP{Bed: bed, Nets: []int{1}}).PingPong(ctx, size, count)
			}},
			{"Peak 2x100 (TCP x2 by hand)", kindPeer, func(size, count int) (Result, error) {
				return (&TCP{Bed: bed, Nets: seq(2)}).PingPong(ctx, size, count)
			}},
			{"braid enhanced", kindBraid, func(size, count int) (Result, error) {
				return (&Braid{Bed: bed, Nets: seq(2)}).PingPong(ctx, size, count)
			}},
		}
		for rep := range reps {
			for _, size := range sizes {
				for _, s := range runs {
					res, err := s.run(size, count(size))
					if err != nil {
						return fmt.Errorf("loaded, %s at %s: %w", s.name, sizeName(size), err)
					}
					f7.add(s.name, s.kind, float64(size), sizeName(size), res.Mbps)
					r.logf("003 fig7 rep %d %s %s: %.1f Mbit/s", rep, sizeName(size), s.name, res.Mbps)
				}
			}
		}
		f7.paper("Loaded TCP100 (net 1)", 2<<20, 82.123)
		f7.paper("braid enhanced", 2<<20, 161.84)
		return nil
	})
}

// Load echoes size-byte messages over the first connection without
// pause until the returned stop is called: cross-traffic.
func (t *TCP) Load(ctx context.Context, size int) (stop func(), err error) {
	cli, srv, err := t.conns(ctx)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(srv[0], buf); err != nil {
				return
			}
			if _, err := srv[0].Write(buf); err != nil {
				return
			}
		}
	}()
	go func() {
		defer close(done)
		buf := make([]byte, size)
		for ctx.Err() == nil {
			if _, err := cli[0].Write(buf); err != nil {
				return
			}
			if _, err := io.ReadFull(cli[0], buf); err != nil {
				return
			}
		}
	}()
	return func() {
		closeAll(cli, srv)
		<-done
	}, nil
}
