package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/braid-hpc/braid/testbed"
)

func TestExploreMedium(t *testing.T) {
	if !*explore {
		t.Skip("exploratory; run with -explore")
	}
	testbed.Skip(t)
	ctx := t.Context()
	bed, err := NewBed(ctx, []int64{100e6, 100e6})
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Down()
	size := 64 << 10
	tr, err := (&TCP{Bed: bed, Nets: []int{0}}).PingPong(ctx, size, 30)
	t.Log("tcp", tr.Mbps, tr.RTT, err)
	b := &Braid{Bed: bed, Nets: seq(2)}
	cli, srv, closeFn, err := b.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	go func() {
		st, err := srv.AcceptStream(ctx)
		if err != nil {
			return
		}
		for {
			m, err := st.ReadMessage(ctx)
			if err != nil {
				return
			}
			if st.WriteMessage(ctx, m) != nil {
				return
			}
		}
	}()
	st, _ := cli.OpenStream(ctx)
	buf := make([]byte, size)
	var line string
	for i := range 40 {
		t0 := time.Now()
		st.WriteMessage(ctx, buf)
		st.ReadMessage(ctx)
		line += fmt.Sprintf(" %.1f", time.Since(t0).Seconds()*1e3)
		if i%10 == 9 {
			t.Log(line)
			line = ""
		}
	}
	for _, s := range cli.Stats() {
		t.Logf("cli %+v", s)
	}
	for _, s := range srv.Stats() {
		t.Logf("srv %+v", s)
	}
}
