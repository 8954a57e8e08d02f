package bench

import (
	"context"
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

func TestExploreFailover(t *testing.T) {
	if !*explore {
		t.Skip("exploratory; run with -explore")
	}
	testbed.Skip(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bed, err := NewBed(ctx, []int64{100e6, 100e6, 100e6})
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Down()
	s := &Suite{Log: os.Stderr, Duration: 2 * time.Second}
	r, err := s.failoverRun(ctx, bed, "link down")
	t.Logf("%+v %v", r, err)
}
