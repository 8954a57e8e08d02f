package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/internal/uml"
	"github.com/braid-hpc/braid/testbed"
)

// Paper 002's layouts: one connection or association (Tables 1 and 2),
// four connections against four associations of two streams (Table 3),
// and one association of two streams (its "multi-streaming" point).
var (
	tcp1Layout    = assocLayout{"TCP, 1 connection", false, 1, 1, 0}
	sctp1Layout   = assocLayout{"SCTP, 1 association", true, 1, 1, 0}
	tcp4Layout    = assocLayout{"TCP, 4 connections", false, 4, 1, 0}
	sctp4x2Layout = assocLayout{"SCTP, 4 associations x 2 streams", true, 4, 2, 0}
	sctp1x2Layout = assocLayout{"SCTP, 1 association x 2 streams", true, 1, 2, 0}
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
		"Fig. 9 on the host: 12 KB over one connection and one association with random loss on both hosts' links (nftables), runs of 2 s at least.", d, reps)
	pr.Emulated = []string{
		"The paper measures Linux kernel SCTP (LK-SCTP) against TCP on Gigabit NICs with hardware counters (CPI, path length, cache misses); here both ends share one 2-core machine over a veth pair, and only throughput and CPU time per byte are measured.",
		"This kernel has no SCTP. The kernel-SCTP rows (\"(UML)\") run inside User-Mode Linux: the same braid executable booted as the guest's command, kernel SCTP (Linux's own, the paper's LK-SCTP) against kernel TCP on the guest's loopback, both ends on the guest's one CPU (HZ=100), so their absolute figures are far below the host's and only the SCTP / TCP ratios compare. " +
			"On the host, braid's user-space SCTP over UDP (sctp-udp, pion/sctp) runs against the host kernel's TCP.",
	}
	pr.Missing = []string{
		"Figs. 6-8 and 10 (the effect of each LK-SCTP optimization, connection scaling over several NICs, GBN against SACK): not re-run; the knobs are measured in docs/sctp.md.",
	}
	tp := pr.fig(&Figure{ID: "002-tables", Title: "Tables 1-3: throughput by layout and message size",
		XLabel: "message size (bytes)", YLabel: "throughput (Mbit/s)", Unit: "Mbit/s", LogX: true, Higher: true,
		Note:    "The paper: Table 1 at 12 KB, Table 2 at 128 B (256 KB windows), Table 3 at 2.56 KB; its send-side figures.",
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
	f9 := pr.fig(&Figure{ID: "002-fig9", Title: "Fig. 9: throughput under random packet loss, 12 KB messages",
		XLabel: "packet loss (%)", YLabel: "throughput (Mbit/s)", Unit: "Mbit/s", Higher: true,
		Note: "Host: runs of 2 s at least; loss drawn per packet by nftables on both hosts' links (testbed.SetLoss, both directions). UML: netem loss on the guest's loopback (both directions). " +
			"The 0% points are the Table 1 runs. The paper gives no values, only that SCTP does better than TCP at low drop rates and worse at high ones."})
	f9r := pr.fig(&Figure{ID: "002-fig9-ratio", Title: "Fig. 9: SCTP over TCP under random packet loss, 12 KB messages",
		XLabel: "packet loss (%)", YLabel: "SCTP / TCP throughput (ratio)", Unit: "ratio", Higher: true,
		Note: "Each repetition's SCTP throughput over the TCP one measured beside it, at the same loss: above 1 SCTP does better. The paper: above 1 at low drop rates, below at high ones (no values)."})
	s := &Suite{Duration: d}
	lossy := &Suite{Duration: max(d, 2*time.Second)}
	losses := []float64{0.1, 1, 3}
	if r.Quick {
		losses = []float64{1}
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
					kind := kindPeer
					if l.sctp {
						kind = kindBraid
					}
					tp.add(l.name, kind, x, xl, res.mbps)
					cpu.add(l.name, kind, x, xl, res.cpuPerGB)
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
					if err != nil && err.Error() == "nothing arrived" {
						res, err = assocResult{}, nil
					}
					if err != nil {
						return fmt.Errorf("%s at %s loss: %w", l.name, xl, err)
					}
					got[l.name] = res
					kind := kindPeer
					if l.sctp {
						kind = kindBraid
					}
					f9.add(l.name, kind, loss, xl, res.mbps)
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
	if err := r.kernel002(ctx, pr, losses, tp, cpu, ratio, cpuRatio, f9, f9r); err != nil {
		return err
	}
	for _, x := range append([]float64{0}, losses...) {
		xl := strconv.FormatFloat(x, 'g', -1, 64) + "%"
		f9r.add("parity", kindIdeal, x, xl, 1)
	}
	ratio.paper("throughput, SCTP / TCP", 12<<10, 1375.0/1394)
	ratio.paper("throughput, SCTP / TCP", 128, 204.0/264)
	ratio.paper("throughput, SCTP / TCP", 2560, 1776.0/1705)
	cpuRatio.paper("CPU per GB, SCTP / TCP", 12<<10, 143.2/62.4)
	cpuRatio.paper("CPU per GB, SCTP / TCP", 2560, 198/79.2)
	return nil
}

// kernel002 adds the kernel-SCTP rows, measured inside User-Mode Linux, to
// the figures; where UML cannot run it says so in the report and the
// host's rows stand alone. An error is returned only for a guest that
// booted and failed.
func (r *PaperRun) kernel002(ctx context.Context, pr *PaperResult, losses []float64, tp, cpu, ratio, cpuRatio, f9, f9r *Figure) error {
	g := guestSpec{d: 2 * time.Second, reps: 3, losses: losses}
	if r.Quick {
		g = guestSpec{d: 300 * time.Millisecond, reps: 1, losses: losses}
	}
	r.logf("002 kernel SCTP inside User-Mode Linux (%s)", g)
	runs, el, err := kernel002(ctx, r.bin(), g)
	if errors.Is(err, uml.ErrUnavailable) {
		pr.Missing = append(pr.Missing, fmt.Sprintf("Kernel SCTP rows: not measured, User-Mode Linux cannot run here (%v); only braid's user-space SCTP on the host ran.", err))
		return nil
	}
	if err != nil {
		return fmt.Errorf("kernel SCTP inside User-Mode Linux: %w", err)
	}
	pr.Setup += fmt.Sprintf(" Kernel rows (UML): kernel TCP against kernel SCTP (braid's ksctp channels: no-delay, 4 MiB receive buffers, 256 KB for Table 2 on both carriers), "+
		"the same sizes and layouts, then 12 KB over one connection and one association under netem loss of %s%% on the guest's loopback; %d run(s) of %v each after 300 ms of warm-up inside one User-Mode Linux boot (%s in all), %d repetition(s) interleaved.",
		strings.Trim(strings.ReplaceAll(fmt.Sprint(losses), " ", ", "), "[]"), len(runs), g.d, el.Round(time.Second), g.reps)
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
		if c.Table == "loss" {
			xl := strconv.FormatFloat(c.Loss, 'g', -1, 64) + "%"
			f9.add(c.Carrier, kindPeer, c.Loss, xl, c.Mbps)
			r.logf("002 UML rep %d loss %s %s: %.1f Mbit/s", c.Rep, xl, c.Carrier, c.Mbps)
			continue
		}
		tp.add(c.Carrier, kindPeer, x, xl, c.Mbps)
		cpu.add(c.Carrier, kindPeer, x, xl, c.CPU)
		if c.Size == 12<<10 {
			f9.add(c.Carrier, kindPeer, 0, "0%", c.Mbps)
		}
		r.logf("002 UML rep %d %s %s: %.1f Mbit/s, %.2f CPU s/GB", c.Rep, xl, c.Carrier, c.Mbps, c.CPU)
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
			cpuRatio.add("kernel SCTP / TCP (UML)", kindPeer, x, xl, a.CPU/b.CPU)
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
	return nil
}
