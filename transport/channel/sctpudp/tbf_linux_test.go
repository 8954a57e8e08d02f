//go:build linux

package sctpudp

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport/channel"
)

// TestTbfBulk measures bulk over one 100 Mbit/s tbf link between two
// testbed hosts (root and namespaces), sctp-udp with two send buffers
// beside kernel TCP, alternating, for docs/sctp.md; cli's tbf drops and
// the sender's counters are logged per run. It is a measurement, run only
// with BRAID_SCTPUDP_TBF=1 (BRAID_SCTPUDP_TBF_REPS sets the repetitions,
// 3 by default; BRAID_SCTPUDP_TBF_MBIT the link rate, 100 by default):
//
//	BRAID_SCTPUDP_TBF=1 go test -count=1 -run TestTbfBulk -v ./transport/channel/sctpudp/
func TestTbfBulk(t *testing.T) {
	if os.Getenv("BRAID_SCTPUDP_TBF") != "1" {
		t.Skip("measurement; BRAID_SCTPUDP_TBF=1")
	}
	testbed.Skip(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	rate := int64(100e6)
	if n, err := strconv.Atoi(os.Getenv("BRAID_SCTPUDP_TBF_MBIT")); err == nil && n > 0 && n <= 10000 {
		rate = int64(n) * 1e6
	}
	bed, err := testbed.Up(ctx, testbed.Spec{Hosts: []string{"srv", "cli"}, Networks: []testbed.Network{{Rate: rate}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Down(); err != nil {
			t.Error(err)
		}
	})
	tcp, err := channel.Lookup("tcp")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		kind channel.Kind
	}{
		{"tcp", tcp},
		{"sctp-udp, SendBuffer tuned (default)", Kind{}},
		{"sctp-udp, SendBuffer 64 KiB", Kind{Config: Config{SendBuffer: 64 << 10}}},
		{"sctp-udp, SendBuffer 128 KiB", Kind{Config: Config{SendBuffer: 128 << 10}}},
	}
	reps, dur := 3, 4*time.Second
	if n, err := strconv.Atoi(os.Getenv("BRAID_SCTPUDP_TBF_REPS")); err == nil && n > 0 && n <= 20 {
		reps = n
	}
	res := make([][]string, len(cases))
	for rep := range reps {
		for i, bc := range cases {
			drops0 := tbfDrops(t, bed)
			mbps, st, err := tbfBulk(ctx, bed, bc.kind, dur)
			if err != nil {
				t.Errorf("%s, run %d: %v", bc.name, rep+1, err)
				res[i] = append(res[i], "error")
				continue
			}
			drops := tbfDrops(t, bed) - drops0
			t.Logf("%s, run %d: %.1f Mbit/s, tbf drops at cli %d, sender %+v", bc.name, rep+1, mbps, drops, st)
			res[i] = append(res[i], fmt.Sprintf("%.1f (%d drops)", mbps, drops))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| case | Mbit/s, %d runs of %v |\n|---|---|\n", reps, dur)
	for i, bc := range cases {
		fmt.Fprintf(&b, "| %s | %s |\n", bc.name, strings.Join(res[i], " / "))
	}
	t.Logf("bulk, one %s tbf link, cli to srv:\n%s", testbed.FormatRate(rate), b.String())
}

// tbfDrops returns the packets cli's tbf on network 0 has dropped so far.
func tbfDrops(t *testing.T, bed *testbed.Bed) int {
	out, err := bed.Exec(t.Context(), "cli", "tc", "-s", "qdisc", "show", "dev", bed.Dev("cli", 0)).Output()
	if err != nil {
		t.Logf("tc: %v", err)
		return 0
	}
	m := regexp.MustCompile(`dropped (\d+)`).FindSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// tbfBulk sends 1 MiB writes from cli to srv for d and returns the rate
// the reader saw, from its first byte to its last (not to the end of the
// stream: the end waits for the last SACK, which the receiver may delay
// by up to 200 ms), and the sender's association counters (sctp-udp
// only) as the last write returned.
func tbfBulk(ctx context.Context, bed *testbed.Bed, k channel.Kind, d time.Duration) (float64, Stats, error) {
	var ln net.Listener
	if err := bed.Run("srv", func() (err error) {
		ln, err = k.Listen(ctx, bed.Addr("srv", 0)+":0")
		return err
	}); err != nil {
		return 0, Stats{}, err
	}
	defer ln.Close()
	type result struct {
		n   int64
		dur time.Duration
		err error
	}
	got := make(chan result, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer s.Close()
		buf := make([]byte, 256<<10)
		var n int64
		var first, last time.Time
		for {
			m, err := s.Read(buf)
			if m > 0 {
				last = time.Now()
				if n == 0 {
					first = last
				}
			}
			n += int64(m)
			if err == io.EOF {
				got <- result{n: n, dur: last.Sub(first)}
				return
			}
			if err != nil {
				got <- result{err: err}
				return
			}
		}
	}()
	var c net.Conn
	if err := bed.Run("cli", func() (err error) {
		c, err = k.Dial(ctx, bed.Addr("cli", 0), ln.Addr().String())
		return err
	}); err != nil {
		return 0, Stats{}, err
	}
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(d); time.Now().Before(end); {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return 0, Stats{}, err
		}
	}
	var st Stats
	if s, ok := c.(*Stream); ok {
		st = s.Assoc().Stats()
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(60 * time.Second):
		r.err = fmt.Errorf("reader did not finish within 60 s")
	}
	_ = c.Close()
	if r.err != nil {
		return 0, st, r.err
	}
	return float64(r.n) * 8 / r.dur.Seconds() / 1e6, st, nil
}
