package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/internal/vmkernel"
	"github.com/braid-hpc/braid/testbed"
)

// Paper 002's layouts: one connection or association (Tables 1 and 2),
// four connections against four associations of two streams (Table 3),
// and one association of two streams (its "multi-streaming" point).
var (
	tcp1Layout    = assocLayout{"TCP, 1 connection", false, 1, 1, 0, 0}
	sctp1Layout   = assocLayout{"SCTP, 1 association", true, 1, 1, 0, 0}
	tcp4Layout    = assocLayout{"TCP, 4 connections", false, 4, 1, 0, 0}
	sctp4x2Layout = assocLayout{"SCTP, 4 associations x 2 streams", true, 4, 2, 0, 0}
	sctp1x2Layout = assocLayout{"SCTP, 1 association x 2 streams", true, 1, 2, 0, 0}
)

// paper002 holds the paper's throughputs (Mbit/s, send side) by layout
// and message size: Table 1 (12 KB), Table 2 (128 B, 256 KB windows),
// Table 3 (2.56 KB); and its CPU use of SCTP over TCP (send side).
var paper002 = map[string]map[int]float64{
	tcp1Layout.name:    {12 << 10: 1394, 128: 264},
	sctp1Layout.name:   {12 << 10: 1375, 128: 204},
	tcp4Layout.name:    {2560: 1705},
	sctp4x2Layout.name: {2560: 1776},
}

func (r *PaperRun) paper002(ctx context.Context, pr *PaperResult) error {
	pr.Title = "Almajadub et al., SCTP for data centers: TCP against SCTP, one association with several streams against several connections"
	reps := r.reps(3, 1)
	d := 3 * time.Second
	if r.Quick {
		d = 500 * time.Millisecond
	}
	sizes := []int{128, 2560, 12 << 10}
	layouts := []assocLayout{tcp1Layout, sctp1Layout, tcp4Layout, sctp4x2Layout, sctp1x2Layout}
	pr.Setup = fmt.Sprintf("Bulk one way between two namespaced hosts on one unshaped network: every connection or SCTP stream written by its own goroutine with messages of the size given, "+
		"counted at the receiver for %v after 300 ms of warm-up; CPU is the whole process (sender and receiver, user + system) per GB delivered over the same interval. "+
		"%d repetition(s), interleaved over the layouts. SCTP is braid's user-space SCTP over UDP (sctp-udp, pion/sctp); TCP the kernel's. "+
		"Fig. 9 on the host: 12 KB over one connection and one association with random loss on both hosts' links (nftables), runs of 2 s at least. "+
		"Fig. 8 on the host: 128 B messages over one connection and one association with a receive window of 128 KB and of 256 KB (sctp-udp's MaxReceiveBuffer; SO_RCVBUF on TCP's receiving socket), no-delay on both (Go sets TCP_NODELAY; pion bundles only what is queued).", d, reps)
	pr.Emulated = []string{
		"The paper measures Linux kernel SCTP (LK-SCTP) against TCP on Gigabit NICs with hardware counters (CPI, path length, cache misses); here both ends share one 2-core machine over a veth pair, and only throughput and CPU time per byte are measured.",
		"This kernel has no SCTP. The kernel-SCTP rows run inside a guest kernel (internal/vmkernel), tagged by how it ran: \"(UML)\" for User-Mode Linux, \"(QEMU)\" for a stock Debian kernel under QEMU. The same braid executable is the guest's command: kernel SCTP (Linux's own, the paper's LK-SCTP) against kernel TCP on the guest's loopback, both ends in the guest, so their absolute figures are far below the host's and only the SCTP / TCP ratios compare (the kernel rows' own paragraph below says how far). " +
			"On the host, braid's user-space SCTP over UDP (sctp-udp, pion/sctp) runs against the host kernel's TCP.",
	}
	pr.Emulated = append(pr.Emulated,
		"Fig. 8: the figure's caption and Table 2 say 128-byte packets, the text \"around 128KB\" next to receive windows of 128 KB and 256 KB; read as 128-byte messages with 128 KB and 256 KB receive windows, which is what ran (no 128 KB messages). The paper's optimized LK-SCTP is not available: kernel SCTP is Linux's stock one with braid's ksctp settings (SCTP_NODELAY, the window as SO_RCVBUF, which Linux doubles); the paper gives no values for Fig. 8, only its claims.",
		"Fig. 10: GBN was NOT reproduced. The paper's go-back-N is the authors' own modification of LK-SCTP; neither Linux SCTP nor pion/sctp can do it. What ran instead, inside the guest kernel: kernel SCTP, 12 KB messages over one association, with a SACK for every packet (sack_freq 1), the kernel's delayed SACK (every 2 packets) and a SACK every 7 packets (sack_freq 7, the paper's \"reduced SACK frequency\"), under netem loss on the guest's loopback. It compares acknowledgement rates under loss, not GBN's discard-and-resend against selective repeat.",
	)
	pr.Missing = []string{
		"Figs. 6-7 (the effect of each LK-SCTP optimization on CPU, connection scaling over several NICs): not re-run; the knobs are measured in docs/sctp.md.",
		"Fig. 10 with user-space SCTP: pion/sctp has no SACK-frequency setting, so only the kernel (UML) ran it.",
	}
	tp := pr.fig(&Figure{ID: "002-tables", Title: "Tables 1-3: throughput by layout and message size",
		XLabel: "message size (bytes)", YLabel: "throughput (Mbit/s)", Unit: "Mbit/s", LogX: true, Higher: true,
		Note:    "The paper: Table 1 at 12 KB, Table 2 at 128 B (256 KB windows), Table 3 at 2.56 KB; its send-side figures.",
		Apart:   "the paper's throughputs are between two machines on Gigabit NICs, braid's with both ends on one shared 2-core machine (host rows) or inside a guest kernel (kernel rows); only the SCTP / TCP ratios (next figures) compare.",
		Compare: [][2]string{{sctp1Layout.name, tcp1Layout.name}, {sctp4x2Layout.name, tcp4Layout.name}}})
	cpu := pr.fig(&Figure{ID: "002-cpu", Title: "Tables 1, 3: CPU time per GB delivered",
		XLabel: "message size (bytes)", YLabel: "CPU time per GB (s)", Unit: "s/GB", LogX: true,
		Compare: [][2]string{{sctp1Layout.name, tcp1Layout.name}, {sctp4x2Layout.name, tcp4Layout.name}}})
	ratio := pr.fig(&Figure{ID: "002-ratio", Title: "SCTP over TCP: throughput",
		XLabel: "message size (bytes)", YLabel: "SCTP / TCP throughput (ratio)", Unit: "ratio", LogX: true, Higher: true, Comparable: true,
		Note: "1 association over 1 connection (128 B, 12 KB), 4 associations x 2 streams over 4 connections (2.56 KB)."})
	cpuRatio := pr.fig(&Figure{ID: "002-cpu-ratio", Title: "SCTP over TCP: CPU per byte",
		XLabel: "message size (bytes)", YLabel: "SCTP / TCP CPU time per GB (ratio)", Unit: "ratio", LogX: true, Comparable: true,
		Note: "The same pairs. The paper's ratios are its \"CPU unit\" (Table 1) and CPU utilization (Table 3), send side, at nearly equal throughput."})
	f9 := pr.fig(&Figure{ID: "002-fig9", Title: "Fig. 9: throughput under random packet loss, 12 KiB messages",
		XLabel: "packet loss (%)", YLabel: "throughput (Mbit/s)", Unit: "Mbit/s", Higher: true,
		Note: "Host: runs of 2 s at least; loss drawn per packet by nftables on both hosts' links (testbed.SetLoss, both directions). Kernel rows (UML or QEMU): netem loss on the guest's loopback (both directions). " +
			"The 0% points are the Table 1 runs. The paper gives no values, only that SCTP does better than TCP at low drop rates and worse at high ones."})
	f9r := pr.fig(&Figure{ID: "002-fig9-ratio", Title: "Fig. 9: SCTP over TCP under random packet loss, 12 KiB messages",
		XLabel: "packet loss (%)", YLabel: "SCTP / TCP throughput (ratio)", Unit: "ratio", Higher: true,
		Note: "Each repetition's SCTP throughput over the TCP one measured beside it, at the same loss: above 1 SCTP does better. The paper: above 1 at low drop rates, below at high ones (no values)."})
	f8 := pr.fig(&Figure{ID: "002-fig8", Title: "Fig. 8: throughput with 128-byte messages, NO-DELAY on",
		XLabel: "receive window (KB)", YLabel: "throughput (Mbit/s)", Unit: "Mbit/s", Higher: true,
		Note: "One connection against one association, 128 B messages, no-delay, the receiver's window as given. The 256 KB kernel points are Table 2's runs. " +
			"The paper gives no values, only that SCTP and TCP are comparable, optimized SCTP's sending throughput above TCP's, and TCP ahead of optimized SCTP at a 128 KB window."})
	f10 := pr.fig(&Figure{ID: "002-fig10", Title: "Fig. 10 (emulated): throughput under loss by SACK frequency, 12 KiB messages, kernel SCTP",
		XLabel: "packet loss (%)", YLabel: "throughput (Mbit/s)", Unit: "Mbit/s", Higher: true,
		Note: "Not GBN: the paper's GBN against SACK is emulated by SACK frequencies of kernel SCTP inside the guest kernel (netem loss on the guest's loopback, both directions). " +
			"The paper: GBN and SACK identical at low loss, GBN 25% above SACK at 2.5% (no other values)."})
	f10r := pr.fig(&Figure{ID: "002-fig10-ratio", Title: "Fig. 10 (emulated): SACK frequency against the kernel's delayed SACK under loss",
		XLabel: "packet loss (%)", YLabel: "throughput over sack_freq 2 (ratio)", Unit: "ratio", Higher: true,
		Note:  "Each repetition's throughput over the delayed-SACK (sack_freq 2) one measured beside it at the same loss. The paper's 1.25 at 2.5% is GBN over SACK, shown beside both series; no series here is GBN.",
		Apart: "the paper's 1.25 is go-back-N over selective acknowledgement; every series here is selective acknowledgement at another SACK frequency, so the paper's value is a reference, not a target."})
	s := &Suite{Duration: d}
	lossy := &Suite{Duration: max(d, 2*time.Second)}
	losses := []float64{0.1, 1, 3}
	gbn := []float64{0, 0.5, 1, 2.5, 5}
	var sacks []int // all three
	windows := fig8Windows
	if r.Quick { // one point of each figure
		losses = []float64{1}
		gbn, sacks = []float64{2.5}, []int{1, 2}
		windows = windows[:1]
	}
	err := withBed(ctx, []int64{0}, func(bed *testbed.Bed) error {
		hostLosses := losses
		if err := bed.SetLoss(Server, 0, 0); err != nil {
			pr.Missing = append(pr.Missing, fmt.Sprintf("Fig. 9 on the host: no loss emulation (%v).", err))
			hostLosses = nil
		}
		env := bedEnv("testbed", bed)
		for rep := range reps {
			for _, size := range sizes {
				x, xl := float64(size), sizeName(size)
				got := map[string]assocResult{}
				for _, l := range layouts {
					res, err := s.assocRun(ctx, env, l, size)
					if err != nil {
						return fmt.Errorf("%s at %s: %w", l.name, xl, err)
					}
					got[l.name] = res
					tp.add(l.name, l.kind(), x, xl, res.mbps)
					cpu.add(l.name, l.kind(), x, xl, res.cpuPerGB)
					r.logf("002 rep %d %s %s: %.1f Mbit/s, %.2f CPU s/GB", rep, xl, l.name, res.mbps, res.cpuPerGB)
				}
				a, b := sctp1Layout.name, tcp1Layout.name
				if size == 2560 {
					a, b = sctp4x2Layout.name, tcp4Layout.name
				}
				ratio.add("throughput, SCTP / TCP", kindBraid, x, xl, got[a].mbps/got[b].mbps)
				cpuRatio.add("CPU per GB, SCTP / TCP", kindBraid, x, xl, got[a].cpuPerGB/got[b].cpuPerGB)
				cpuRatio.add("parity", kindIdeal, x, xl, 1)
				ratio.add("parity", kindIdeal, x, xl, 1)
				if size == 12<<10 {
					f9.add(tcp1Layout.name, kindPeer, 0, "0%", got[b].mbps)
					f9.add(sctp1Layout.name, kindBraid, 0, "0%", got[a].mbps)
					f9r.add("sctp-udp / TCP (host)", kindBraid, 0, "0%", got[a].mbps/got[b].mbps)
				}
			}
			// Fig. 8: 128 B at two receive windows.
			for _, w := range windows {
				for _, l := range []assocLayout{tcp1Layout, sctp1Layout} {
					l.rwnd = w
					res, err := s.assocRun(ctx, env, l, 128)
					if err != nil {
						return fmt.Errorf("Fig. 8, %s at a %d KB window: %w", l.name, w>>10, err)
					}
					f8.add(l.name, l.kind(), float64(w>>10), fmt.Sprintf("%d KB", w>>10), res.mbps)
					r.logf("002 rep %d Fig. 8 window %d KB %s: %.1f Mbit/s", rep, w>>10, l.name, res.mbps)
				}
			}
			// Fig. 9: the loss sweep, both directions lossy.
			for _, loss := range hostLosses {
				xl := strconv.FormatFloat(loss, 'g', -1, 64) + "%"
				got := map[string]assocResult{}
				for _, l := range []assocLayout{tcp1Layout, sctp1Layout} {
					for _, h := range []string{Server, Client} {
						if err := bed.SetLoss(h, 0, loss); err != nil {
							return err
						}
					}
					// Under loss a run can stall in a retransmission timeout
					// (1 s at least for sctp-udp): runs last 2 s at least,
					// and one that moved nothing counts as 0 Mbit/s.
					res, err := lossy.assocRun(ctx, env, l, 12<<10)
					if errors.Is(err, errNothing) {
						res, err = assocResult{}, nil
					}
					if err != nil {
						return fmt.Errorf("%s at %s loss: %w", l.name, xl, err)
					}
					got[l.name] = res
					f9.add(l.name, l.kind(), loss, xl, res.mbps)
					r.logf("002 rep %d loss %s %s: %.1f Mbit/s", rep, xl, l.name, res.mbps)
				}
				if t := got[tcp1Layout.name].mbps; t > 0 {
					f9r.add("sctp-udp / TCP (host)", kindBraid, loss, xl, got[sctp1Layout.name].mbps/t)
				}
			}
			for _, h := range []string{Server, Client} {
				if err := bed.SetLoss(h, 0, 0); err != nil && hostLosses != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for name, byX := range paper002 {
		for size, v := range byX {
			tp.paper(name, float64(size), v)
		}
	}
	tag, err := r.kernel002(ctx, pr, guestSpec{losses: losses, gbn: gbn, sacks: sacks}, tp, cpu, ratio, cpuRatio, f9, f9r, f8, f10, f10r)
	if err != nil {
		return err
	}
	fig8Findings(pr, f8)
	fig10Findings(pr, f10)
	for _, x := range append([]float64{0}, losses...) {
		xl := strconv.FormatFloat(x, 'g', -1, 64) + "%"
		f9r.add("parity", kindIdeal, x, xl, 1)
	}
	ratio.paper("throughput, SCTP / TCP", 12<<10, 1375.0/1394)
	ratio.paper("throughput, SCTP / TCP", 128, 204.0/264)
	ratio.paper("throughput, SCTP / TCP", 2560, 1776.0/1705)
	cpuRatio.paper("CPU per GB, SCTP / TCP", 12<<10, 143.2/62.4)
	cpuRatio.paper("CPU per GB, SCTP / TCP", 2560, 198/79.2)
	relabel002(pr, tag)
	return nil
}

// kernelTag is the tag of the kernel rows' series for backend b: "UML"
// or "QEMU".
func kernelTag(b vmkernel.Backend) string {
	if b == vmkernel.QEMU {
		return "QEMU"
	}
	return "UML"
}

// relabel002 renames the kernel rows' series, which carry the tag "UML"
// while they are measured, for the backend that measured them, in the
// figures and the report's text.
func relabel002(pr *PaperResult, tag string) {
	if tag == "" || tag == "UML" {
		return
	}
	for _, f := range pr.Figures {
		for _, p := range f.Points {
			p.Series, p.Name = retag(p.Series, tag), retag(p.Name, tag)
		}
		for i := range f.Compare {
			f.Compare[i] = [2]string{retag(f.Compare[i][0], tag), retag(f.Compare[i][1], tag)}
		}
	}
	for _, l := range [][]string{pr.Findings, pr.Missing} {
		for i := range l {
			l[i] = retag(l[i], tag)
		}
	}
}

// retag replaces the kernel rows' tag "UML" in s (as in "kernel SCTP, 1
// association (UML)" and "(sack_freq 1, UML)") by tag.
func retag(s, tag string) string {
	return strings.NewReplacer(" (UML)", " ("+tag+")", ", UML)", ", "+tag+")").Replace(s)
}

// kernel002 adds the kernel-SCTP rows, measured inside a guest kernel
// (internal/vmkernel: User-Mode Linux where it boots, else QEMU), to the
// figures, and returns the tag of their series ("UML" or "QEMU"); where no
// guest kernel can run it says so in the report and the host's rows stand
// alone. An error is returned only for a guest that booted and failed.
func (r *PaperRun) kernel002(ctx context.Context, pr *PaperResult, g guestSpec, tp, cpu, ratio, cpuRatio, f9, f9r, f8, f10, f10r *Figure) (string, error) {
	g.d, g.reps = 2*time.Second, 3
	if r.Quick {
		g.d, g.reps = 300*time.Millisecond, 1
	}
	losses := g.losses
	choice, err := vmkernel.Choose(ctx)
	if err != nil {
		pr.Missing = append(pr.Missing, fmt.Sprintf("Kernel SCTP rows: not measured, no guest kernel can run here (%v); only braid's user-space SCTP on the host ran, and Fig. 10 (kernel SCTP only) is missing.", err))
		pr.Figures = slices.DeleteFunc(pr.Figures, func(f *Figure) bool { return f == f10 || f == f10r })
		return "", nil
	}
	tag := kernelTag(choice.Backend)
	r.logf("002 kernel SCTP inside a guest kernel, %s (%s)", choice.Reason, g)
	runs, el, kernel, err := kernel002(ctx, r.bin(), g)
	if errors.Is(err, vmkernel.ErrUnavailable) {
		pr.Missing = append(pr.Missing, fmt.Sprintf("Kernel SCTP rows: not measured, no guest kernel can run here (%v); only braid's user-space SCTP on the host ran, and Fig. 10 (kernel SCTP only) is missing.", err))
		pr.Figures = slices.DeleteFunc(pr.Figures, func(f *Figure) bool { return f == f10 || f == f10r })
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("kernel SCTP inside %s: %w", choice.Backend, err)
	}
	pr.Emulated = append(pr.Emulated, emulated002(choice, kernel))
	pr.Setup += fmt.Sprintf(" Kernel rows (%s): kernel TCP against kernel SCTP (braid's ksctp channels: no-delay, 4 MiB receive buffers, 256 KB for Table 2 on both carriers), "+
		"the same sizes and layouts, then 12 KB over one connection and one association under netem loss of %s%% on the guest's loopback (switched on once the connections are up: a lost handshake packet would wait out SCTP's 3 s initial RTO); %d run(s) of %v each after 300 ms of warm-up inside one %s boot of kernel %s (%s in all), %d repetition(s) interleaved.",
		tag, pcts(losses), len(runs), g.d, tag, kernel, el.Round(time.Second), g.reps)
	var freqs []float64
	for _, n := range g.sackFreqs() {
		freqs = append(freqs, float64(n))
	}
	pr.Setup += fmt.Sprintf(" Fig. 8 (%[1]s): 128 B over one connection and one association with SO_RCVBUF 128 KB (and Table 2's 256 KB runs), no-delay on both. "+
		"Fig. 10 (%[1]s): 12 KB over one association with sack_freq %s (2 is the kernel's default; sack_delay the kernel's 200 ms) under netem loss of %[3]s%%.", tag, pcts(freqs), pcts(g.gbn))
	type gkey struct {
		rep  int
		loss float64
	}
	sacks := map[gkey]map[string]float64{}
	type key struct {
		rep  int
		size int
		loss float64
	}
	by := map[key]map[string]kcase{}
	for _, c := range runs {
		k := key{c.Rep, c.Size, c.Loss}
		if by[k] == nil {
			by[k] = map[string]kcase{}
		}
		by[k][c.Carrier] = c
		x, xl := float64(c.Size), sizeName(c.Size)
		switch c.Table {
		case tableFig8:
			f8.add(c.Carrier, kindPeer, float64(c.Rcvbuf>>10), fmt.Sprintf("%d KB", c.Rcvbuf>>10), c.Mbps)
			r.logf("002 "+tag+" rep %d Fig. 8 window %d KB %s: %.1f Mbit/s", c.Rep, c.Rcvbuf>>10, retag(c.Carrier, tag), c.Mbps)
			continue
		case tableGBN:
			xl := strconv.FormatFloat(c.Loss, 'g', -1, 64) + "%"
			f10.add(c.Carrier, kindPeer, c.Loss, xl, c.Mbps)
			k := gkey{c.Rep, c.Loss}
			if sacks[k] == nil {
				sacks[k] = map[string]float64{}
			}
			sacks[k][c.Carrier] = c.Mbps
			r.logf("002 "+tag+" rep %d Fig. 10 loss %s %s: %.1f Mbit/s", c.Rep, xl, retag(c.Carrier, tag), c.Mbps)
			continue
		case "Table 2":
			f8.add(c.Carrier, kindPeer, float64(c.Rcvbuf>>10), fmt.Sprintf("%d KB", c.Rcvbuf>>10), c.Mbps)
		}
		if c.Table == tableLoss {
			xl := strconv.FormatFloat(c.Loss, 'g', -1, 64) + "%"
			f9.add(c.Carrier, kindPeer, c.Loss, xl, c.Mbps)
			r.logf("002 "+tag+" rep %d loss %s %s: %.1f Mbit/s", c.Rep, xl, retag(c.Carrier, tag), c.Mbps)
			continue
		}
		tp.add(c.Carrier, kindPeer, x, xl, c.Mbps)
		if c.Mbps > 0 { // a run that moved nothing has no CPU per byte
			cpu.add(c.Carrier, kindPeer, x, xl, c.CPU)
		}
		if c.Size == 12<<10 {
			f9.add(c.Carrier, kindPeer, 0, "0%", c.Mbps)
		}
		r.logf("002 "+tag+" rep %d %s %s: %.1f Mbit/s, %.2f CPU s/GB", c.Rep, xl, retag(c.Carrier, tag), c.Mbps, c.CPU)
	}
	for k, m := range sacks {
		base := m[kSACK2]
		if base == 0 {
			continue
		}
		xl := strconv.FormatFloat(k.loss, 'g', -1, 64) + "%"
		for _, n := range []int{1, 7} {
			if v, ok := m[sackCarriers[n]]; ok {
				f10r.add(fmt.Sprintf("sack_freq %d / sack_freq 2", n), kindPeer, k.loss, xl, v/base)
			}
		}
		f10r.add("parity", kindIdeal, k.loss, xl, 1)
	}
	for _, series := range []string{"sack_freq 1 / sack_freq 2", "sack_freq 7 / sack_freq 2"} {
		f10r.paper(series, 2.5, 1.25)
	}
	if len(f10r.Points) == 0 { // delayed SACK moved nothing at every loss rate
		pr.Missing = append(pr.Missing, "Fig. 10's ratios: the delayed-SACK runs moved nothing (stalled in loss recovery), so there is no ratio to draw.")
		pr.Figures = slices.DeleteFunc(pr.Figures, func(f *Figure) bool { return f == f10r })
	}
	for k, m := range by {
		a, b := m[kSCTP1], m[kTCP1]
		if k.size == 2560 {
			a, b = m[kSCTP4x2], m[kTCP4]
		}
		if b.Mbps == 0 || b.CPU == 0 {
			continue
		}
		if k.loss > 0 || k.size == 12<<10 {
			xl := strconv.FormatFloat(k.loss, 'g', -1, 64) + "%"
			f9r.add("kernel SCTP / TCP (UML)", kindPeer, k.loss, xl, a.Mbps/b.Mbps)
		}
		if k.loss == 0 {
			x, xl := float64(k.size), sizeName(k.size)
			ratio.add("kernel SCTP / TCP (UML)", kindPeer, x, xl, a.Mbps/b.Mbps)
			if a.Mbps > 0 {
				cpuRatio.add("kernel SCTP / TCP (UML)", kindPeer, x, xl, a.CPU/b.CPU)
			}
		}
	}
	for name, byX := range map[string]map[int]float64{kTCP1: paper002[tcp1Layout.name], kSCTP1: paper002[sctp1Layout.name],
		kTCP4: paper002[tcp4Layout.name], kSCTP4x2: paper002[sctp4x2Layout.name]} {
		for size, v := range byX {
			tp.paper(name, float64(size), v)
		}
	}
	for _, series := range []string{"kernel SCTP / TCP (UML)"} {
		ratio.paper(series, 12<<10, 1375.0/1394)
		ratio.paper(series, 128, 204.0/264)
		ratio.paper(series, 2560, 1776.0/1705)
		cpuRatio.paper(series, 12<<10, 143.2/62.4)
		cpuRatio.paper(series, 2560, 198/79.2)
	}
	return tag, nil
}

// emulated002 says, for the report, which kernel ran the kernel rows, how
// it was emulated, what that does to their absolute figures, and where
// even the SCTP / TCP ratios measured side by side in it are unreliable.
func emulated002(c vmkernel.Choice, kernel string) string {
	s := fmt.Sprintf("Kernel rows (%s): measured in %s; chosen as %q. ", kernelTag(c.Backend), vmkernel.Describe(c.Backend, kernel), c.Reason)
	s += "Only the ratios of SCTP to TCP measured side by side in the same guest compare with the paper; the absolute Mbit/s and CPU s/GB say nothing of the kernel's speed. "
	switch c.Backend {
	case vmkernel.UML:
		s += "Even the ratios are unreliable where timers decide: with HZ=100 the delayed SACK, delayed ACK and retransmission timers tick in 10 ms steps, so the loss sweep (Fig. 9) and the SACK frequencies (Fig. 10) carry that granularity; " +
			"and every system call is a ptrace round trip that costs the same per call, so at 128 B (Table 2, Fig. 8) the ratio is one of system calls per message more than of the protocols' per-byte work."
	case vmkernel.QEMU:
		s += "Even the ratios are unreliable where timers decide: the emulated CPU is about 25x slower while the kernel's timers (200 ms delayed SACK, 1 s minimum retransmission timeout) keep real time, so per timer far fewer packets move than on real hardware, which tilts the loss sweep (Fig. 9) and the SACK frequencies (Fig. 10) against whichever protocol waits on timers more; " +
			"sender and receiver share 2 emulated CPUs on a shared host, and CPU s/GB includes QEMU's translation, so the CPU ratios are rough; the no-loss throughput ratios (Tables 1-3) are the most trustworthy of them."
	}
	return s
}

// fig8Windows are Fig. 8's receive windows.
var fig8Windows = []int{128 << 10, 256 << 10}

// pcts lists percentages as "0.1, 1, 3".
func pcts(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, strconv.FormatFloat(x, 'g', -1, 64))
	}
	return strings.Join(out, ", ")
}

// avg is the mean of the samples of series at x, and whether there are any.
func avg(f *Figure, series string, x float64) (float64, bool) {
	p := f.point(series, x)
	if p == nil || len(p.Samples) == 0 {
		return 0, false
	}
	return mean(p.Samples), true
}

// fig8Findings says, for each pair measured, whether it agrees with the
// paper's Fig. 8: TCP ahead of SCTP at a 128 KB window, SCTP at least
// level with TCP at 256 KB.
func fig8Findings(pr *PaperResult, f8 *Figure) {
	for _, pair := range []struct{ what, sctp, tcp string }{
		{"braid's user-space SCTP (sctp-udp) against the host's TCP", sctp1Layout.name, tcp1Layout.name},
		{"kernel SCTP against kernel TCP (UML)", kSCTP1, kTCP1},
	} {
		var parts []string
		for _, w := range fig8Windows {
			x := float64(w >> 10)
			a, ok1 := avg(f8, pair.sctp, x)
			b, ok2 := avg(f8, pair.tcp, x)
			if !ok1 || !ok2 || b == 0 {
				continue
			}
			claim, agrees := "SCTP at least level with TCP", a >= 0.95*b
			if w == 128<<10 {
				claim, agrees = "TCP ahead of SCTP", b > a
			}
			verdict := "agrees with the paper"
			if !agrees {
				verdict = "does not agree with the paper"
			}
			parts = append(parts, fmt.Sprintf("at a %d KB window SCTP %s Mbit/s against TCP's %s (SCTP / TCP %.2f), which %s (%s)",
				w>>10, num(a), num(b), a/b, verdict, claim))
		}
		if len(parts) > 0 {
			pr.Findings = append(pr.Findings, fmt.Sprintf("Fig. 8, 128 B messages, %s: %s.", pair.what, strings.Join(parts, "; ")))
		}
	}
}

// fig10Findings compares the SACK frequencies against the paper's claims
// for GBN and SACK: identical at low loss, GBN 25% ahead at 2.5%.
func fig10Findings(pr *PaperResult, f10 *Figure) {
	xs, _ := f10.xs()
	if len(xs) == 0 {
		return
	}
	say := func(x float64, claim string, agrees func(r float64) bool) {
		base, ok := avg(f10, kSACK2, x)
		if !ok {
			return
		}
		if base == 0 {
			// A short run at this loss can move nothing: say so rather
			// than compare against zero.
			pr.Findings = append(pr.Findings, fmt.Sprintf("Fig. 10 (emulated, GBN not reproduced), kernel SCTP at %s%% loss: the kernel's delayed SACK moved nothing in this run's time, so there is no comparison; the paper: %s.",
				strconv.FormatFloat(x, 'g', -1, 64), claim))
			return
		}
		var parts []string
		for _, s := range []struct{ name, series string }{{"a SACK every packet", kSACK1}, {"a SACK every 7 packets", kSACK7}} {
			v, ok := avg(f10, s.series, x)
			if !ok {
				continue
			}
			verdict := "in line with"
			if !agrees(v / base) {
				verdict = "unlike"
			}
			parts = append(parts, fmt.Sprintf("%s %s Mbit/s (%+.0f%%, %s the paper's GBN against SACK)", s.name, num(v), 100*(v/base-1), verdict))
		}
		pr.Findings = append(pr.Findings, fmt.Sprintf("Fig. 10 (emulated, GBN not reproduced), kernel SCTP at %s%% loss: the kernel's delayed SACK %s Mbit/s, %s; the paper: %s.",
			strconv.FormatFloat(x, 'g', -1, 64), num(base), strings.Join(parts, ", "), claim))
	}
	low := xs[0]
	if low < 2.5 {
		say(low, "GBN and SACK identical at low loss", func(r float64) bool { return r > 0.9 && r < 1.1 })
	}
	if slices.Contains(xs, 2.5) {
		say(2.5, "GBN 25% above SACK at 2.5%", func(r float64) bool { return r >= 1.1 })
	}
}
