package bench

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport"
)

var explore = flag.Bool("explore", false, "run the exploratory testbed measurements")

func TestExplore(t *testing.T) {
	if !*explore {
		t.Skip("exploratory; run with -explore")
	}
	testbed.Skip(t)
	ctx := t.Context()
	rates := []int64{100e6, 25e6}
	if os.Getenv("RATES3") != "" {
		rates = []int64{100e6, 50e6, 10e6}
	}
	bed, err := NewBed(ctx, rates)
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Down()
	for _, n := range []int{} {
		r, err := (&TCP{Bed: bed, Nets: []int{n}}).Bulk(ctx, 3*time.Second)
		t.Log(r.Name, r.Mbps, err)
	}
	r, err := (&Braid{Bed: bed, Nets: seq(len(rates))}).Bulk(ctx, 1<<20, 1, 4*time.Second)
	t.Log("braid bulk", r.Mbps, r.PerPath, err)
	for _, size := range []int{64 << 10, 1 << 20, 8 << 20} {
		for _, n := range [][]int{} {
			r, err := (&TCP{Bed: bed, Nets: n}).PingPong(ctx, size, 20)
			t.Log(fmt.Sprintf("size=%d", size), r.Name, r.Mbps, r.RTT, err)
		}
		r, err := (&Braid{Bed: bed, Nets: seq(len(rates))}).PingPong(ctx, size, 20)
		t.Log(fmt.Sprintf("size=%d", size), "braid", r.Mbps, r.RTT, r.Transport, err)
		r, err = (&Braid{Bed: bed, Nets: seq(len(rates)), Config: transport.Config{FragmentSize: 16 << 10}}).PingPong(ctx, size, 20)
		t.Log(fmt.Sprintf("size=%d", size), "braid frag16k", r.Mbps, r.RTT, r.Transport, err)
	}
}
