package bench

import (
	"context"
	"fmt"
	"time"

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
		"%d repetition(s), interleaved over the layouts. SCTP is braid's user-space SCTP over UDP (sctp-udp, pion/sctp); TCP the kernel's.", d, reps)
	pr.Emulated = []string{
		"The paper measures Linux kernel SCTP (LK-SCTP) against TCP on Gigabit NICs with hardware counters (CPI, path length, cache misses); here both ends share one 2-core machine over a veth pair, and only throughput and CPU time per byte are measured.",
		"Kernel SCTP is not available on this kernel (only inside User-Mode Linux, not run here): the user-space sctp-udp stands in, so the absolute throughputs do not compare; the ratios SCTP / TCP do, as far as user space against kernel allows.",
	}
	pr.Missing = []string{
		"Figs. 6-10 (the effect of each LK-SCTP optimization, connection scaling over several NICs, the loss sweep, GBN against SACK): not re-run; the loss behaviour is in docs/benchmarks.md (head-of-line blocking under 1% loss).",
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
	s := &Suite{Duration: d}
	err := withBed(ctx, []int64{0}, func(bed *testbed.Bed) error {
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
	ratio.paper("throughput, SCTP / TCP", 12<<10, 1375.0/1394)
	ratio.paper("throughput, SCTP / TCP", 128, 204.0/264)
	ratio.paper("throughput, SCTP / TCP", 2560, 1776.0/1705)
	cpuRatio.paper("CPU per GB, SCTP / TCP", 12<<10, 143.2/62.4)
	cpuRatio.paper("CPU per GB, SCTP / TCP", 2560, 198/79.2)
	return nil
}
