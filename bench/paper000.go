package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport"
)

// Transfer sends total bytes as msgSize messages on one stream and returns
// the time from the first write until the receiver has every byte.
func (b *Braid) Transfer(ctx context.Context, total, msgSize int) (time.Duration, error) {
	cli, srv, closeFn, err := b.session(ctx)
	if err != nil {
		return 0, err
	}
	defer closeFn()
	done := make(chan error, 1)
	var end time.Time
	go func() {
		st, err := srv.AcceptStream(ctx)
		if err != nil {
			done <- err
			return
		}
		got := 0
		for got < total {
			m, err := st.ReadMessage(ctx)
			if err != nil {
				done <- fmt.Errorf("after %d of %d bytes: %w", got, total, err)
				return
			}
			got += len(m)
			st.Release(m)
		}
		end = time.Now()
		done <- nil
	}()
	st, err := cli.OpenStream(ctx)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, msgSize)
	start := time.Now()
	for off := 0; off < total; off += msgSize {
		if err := st.WriteMessage(ctx, buf[:min(msgSize, total-off)]); err != nil {
			return 0, err
		}
	}
	select {
	case err := <-done:
		if err != nil {
			return 0, err
		}
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("transfer of %d bytes did not finish in 5 minutes", total)
	}
	return end.Sub(start), nil
}

// Transfer sends total bytes split evenly over the connections (one MPTCP
// connection if Multipath) and returns the time until the receivers have
// every byte.
func (t *TCP) Transfer(ctx context.Context, total int) (time.Duration, error) {
	cli, srv, err := t.conns(ctx)
	if err != nil {
		return 0, err
	}
	defer closeAll(cli, srv)
	k := len(cli)
	share := func(i int) int64 { return int64(total/k + boolInt(i < total%k)) }
	errs := make([]error, 2*k)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range k {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, errs[i] = io.CopyN(io.Discard, srv[i], share(i))
		}()
		go func() {
			defer wg.Done()
			_, errs[k+i] = io.CopyN(cli[i], zeros{}, share(i))
		}()
	}
	wg.Wait()
	el := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return el, nil
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// paper000Table is the paper's Tables I and II: exchange time in "mSec"
// of the single-homed, dual-homed and triple-homed cluster by data size.
var paper000Table = []struct {
	mb                   int
	single, dual, triple float64
}{
	{20, 2.286814, 1.351112, 2.236239},
	{24, 4.464083, 3.578660, 4.111785},
	{28, 8.456284, 6.659053, 6.756544},
	{32, 13.645028, 10.097254, 11.328705},
	{36, 19.722385, 14.629627, 15.363163},
	{40, 30.331633, 19.855265, 23.849022},
}

const rate000 = 100e6

func (r *PaperRun) paper000(ctx context.Context, pr *PaperResult) error {
	pr.Title = "Mohammed et al., round-robin over single, dual and triple homed hosts (ICN 2015)"
	sizes := []int{20, 24, 28, 32, 36, 40}
	if r.Quick {
		sizes = []int{20}
	}
	reps := r.reps(3, 1)
	pr.Setup = fmt.Sprintf("Two namespaced hosts joined by k = 1, 2, 3 networks of %s each (tbf-shaped veth). "+
		"Each point sends N MB (MiB) from one host to the other as 1 MiB messages on one stream and times it from the first write to the last byte received; "+
		"%d repetition(s), interleaved over the series. braid round-robin is `--stripe off --policy round-robin` (whole 1 MiB segments, paths in turn, as the paper's API deals messages out); "+
		"braid striped is the default enhanced striping. Peers in the same run: one plain TCP connection (single homed), k TCP connections with the bytes split evenly by hand, one Linux MPTCP connection over the k networks. "+
		"Expected: the single-homed TCP time divided by k (the paper's \"expected performance\", Figs. 8-9).",
		testbed.FormatRate(rate000), reps)
	pr.Emulated = []string{
		"The paper's cluster is simulated in OMNeT++/INET (SCTP with CMT, DatarateChannel links of unstated rate); here real Linux hosts in network namespaces exchange over links shaped to 100 Mbit/s.",
		"The paper's times (\"mSec\", 2.3-30 for 20-40 MB) imply links far faster than any stated setup; only the speed-ups (single-homed time over multi-homed time) compare, so Tables I-II state no shortfall against the paper's absolute times.",
	}
	apart := "the paper's times come from a simulation over links of unstated rate (20 MB in 2.29 ms is 73 Gbit/s), braid's from links of 100 Mbit/s; only the speed-ups (Figs. 8-9, below) compare."
	t1 := pr.fig(&Figure{ID: "000-table1", Title: "Table I / Fig. 6: single vs dual homed, exchange time",
		XLabel: "data size (MiB)", YLabel: "exchange time (ms)", Unit: "ms", Apart: apart})
	t2 := pr.fig(&Figure{ID: "000-table2", Title: "Table II / Fig. 7: single vs triple homed, exchange time",
		XLabel: "data size (MiB)", YLabel: "exchange time (ms)", Unit: "ms", Apart: apart})
	sp := pr.fig(&Figure{ID: "000-speedup", Title: "Figs. 8-9: speed-up over single homed, real and expected",
		XLabel: "data size (MiB)", YLabel: "speed-up over 1 path (x)", Unit: "x", Higher: true, Comparable: true,
		Note: "Speed-up = the mean single-homed time of the same sender over the multi-homed time (braid over braid's 1-path time, TCP and MPTCP over one TCP connection's); the paper's points are its Table I-II columns divided.",
	})
	for k, f := range []*Figure{2: t1, 3: t2} {
		if f == nil {
			continue
		}
		for _, peer := range []string{"TCP x%d by hand", "MPTCP, %d paths"} {
			for _, b := range []string{"braid round-robin, %d paths", "braid striped, %d paths"} {
				pair := [2]string{fmt.Sprintf(b, k), fmt.Sprintf(peer, k)}
				f.Compare = append(f.Compare, pair)
				sp.Compare = append(sp.Compare, pair)
			}
		}
	}
	single := map[int]map[string]float64{} // size -> braid/tcp mean 1-path ms
	for k := 1; k <= 3; k++ {
		rates := make([]int64, k)
		for i := range rates {
			rates[i] = rate000
		}
		type run struct {
			series, base string
			do           func(ctx context.Context, bed *testbed.Bed, total int) (time.Duration, error)
		}
		braid := func(mode transport.StripeMode, pol transport.Policy) func(context.Context, *testbed.Bed, int) (time.Duration, error) {
			return func(ctx context.Context, bed *testbed.Bed, total int) (time.Duration, error) {
				return (&Braid{Bed: bed, Nets: seq(k), Config: transport.Config{Stripe: mode, Policy: pol}}).Transfer(ctx, total, 1<<20)
			}
		}
		tcp := func(mp bool) func(context.Context, *testbed.Bed, int) (time.Duration, error) {
			return func(ctx context.Context, bed *testbed.Bed, total int) (time.Duration, error) {
				return (&TCP{Bed: bed, Nets: seq(k), Multipath: mp}).Transfer(ctx, total)
			}
		}
		var runs []run
		if k == 1 {
			runs = []run{{"braid, 1 path", "braid", braid(transport.StripeEnhanced, transport.PolicySoonest)}, {"TCP, 1 path", "tcp", tcp(false)}}
		} else {
			runs = []run{
				{fmt.Sprintf("braid round-robin, %d paths", k), "braid", braid(transport.StripeOff, transport.PolicyRoundRobin)},
				{fmt.Sprintf("braid striped, %d paths", k), "braid", braid(transport.StripeEnhanced, transport.PolicySoonest)},
				{fmt.Sprintf("TCP x%d by hand", k), "tcp", tcp(false)},
				{fmt.Sprintf("MPTCP, %d paths", k), "tcp", tcp(true)},
			}
		}
		err := withBed(ctx, rates, func(bed *testbed.Bed) error {
			if k > 1 {
				if err := bed.EnableMPTCP(ctx, Server, Client); err != nil {
					pr.Missing = append(pr.Missing, fmt.Sprintf("MPTCP over %d paths: %v", k, err))
					runs = runs[:3]
				}
			}
			for rep := range reps {
				for _, mb := range sizes {
					for _, rn := range runs {
						el, err := rn.do(ctx, bed, mb<<20)
						if err != nil {
							return fmt.Errorf("%s, %d MB: %w", rn.series, mb, err)
						}
						ms := float64(el.Microseconds()) / 1000
						r.logf("000 rep %d k=%d %d MB %s: %.0f ms", rep, k, mb, rn.series, ms)
						x, xl := float64(mb), fmt.Sprintf("%d MiB", mb)
						kind := kindPeer
						if rn.base == "braid" {
							kind = kindBraid
						}
						for _, f := range []*Figure{t1, t2} {
							if k == 1 || (f == t1) == (k == 2) {
								f.add(rn.series, kind, x, xl, ms)
							}
						}
						if k > 1 {
							sp.add(rn.series, kind, x, xl, single[mb][rn.base]/ms)
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if k == 1 {
			for _, mb := range sizes {
				single[mb] = map[string]float64{
					"braid": mean(t1.point("braid, 1 path", float64(mb)).Samples),
					"tcp":   mean(t1.point("TCP, 1 path", float64(mb)).Samples),
				}
			}
		}
	}
	for _, mb := range sizes {
		x, xl := float64(mb), fmt.Sprintf("%d MiB", mb)
		for _, k := range []int{2, 3} {
			f := t1
			if k == 3 {
				f = t2
			}
			f.add(fmt.Sprintf("expected: 1-path TCP / %d", k), kindIdeal, x, xl, single[mb]["tcp"]/float64(k))
			sp.add(fmt.Sprintf("expected: %d-fold", k), kindIdeal, x, xl, float64(k))
		}
	}
	for _, row := range paper000Table {
		x := float64(row.mb)
		t1.paper("braid, 1 path", x, row.single)
		t2.paper("braid, 1 path", x, row.single)
		t1.paper("braid round-robin, 2 paths", x, row.dual)
		t2.paper("braid round-robin, 3 paths", x, row.triple)
		sp.paper("braid round-robin, 2 paths", x, row.single/row.dual)
		sp.paper("braid round-robin, 3 paths", x, row.single/row.triple)
	}
	return nil
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
