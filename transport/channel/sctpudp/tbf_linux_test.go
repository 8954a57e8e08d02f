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
	"testing"
	"time"

	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport/channel"
)

// BenchmarkTbfBulk measures bulk over one 100 Mbit/s tbf link between two
// testbed hosts (root and namespaces), sctp-udp with three send buffers
// beside kernel TCP, for docs/sctp.md; cli's tbf drops are reported per
// run and the sender's counters logged. Each iteration is a 4 s run;
// -count repeats, benchstat compares (BRAID_SCTPUDP_TBF_MBIT sets the
// link rate, 100 by default):
//
//	go test -run '^$' -bench TbfBulk -count=3 -v ./transport/channel/sctpudp/
func BenchmarkTbfBulk(b *testing.B) {
	testbed.Skip(b)
	rate := int64(100e6)
	if n, err := strconv.Atoi(os.Getenv("BRAID_SCTPUDP_TBF_MBIT")); err == nil && n > 0 && n <= 10000 {
		rate = int64(n) * 1e6
	}
	bed, err := testbed.Up(b.Context(), testbed.Spec{Hosts: []string{"srv", "cli"}, Networks: []testbed.Network{{Rate: rate, FullDuplex: true}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := bed.Down(); err != nil {
			b.Error(err)
		}
	})
	tcp, err := channel.Lookup("tcp")
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		kind channel.Kind
	}{
		{"tcp", tcp},
		{"sctp-udp/sndbuf=tuned", Kind{}},
		{"sctp-udp/sndbuf=64KiB", Kind{Config: Config{SendBuffer: 64 << 10}}},
		{"sctp-udp/sndbuf=128KiB", Kind{Config: Config{SendBuffer: 128 << 10}}},
	}
	const dur = 4 * time.Second
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			var mbps float64
			var drops int
			for b.Loop() {
				drops0 := tbfDrops(b, bed)
				m, st, err := tbfBulk(b.Context(), bed, bc.kind, dur)
				if err != nil {
					b.Fatal(err)
				}
				mbps, drops = m, tbfDrops(b, bed)-drops0
				b.Logf("%.1f Mbit/s over one %s tbf link, tbf drops at cli %d, sender %+v", mbps, testbed.FormatRate(rate), drops, st)
			}
			b.ReportMetric(mbps, "Mbit/s")
			b.ReportMetric(float64(drops), "tbf-drops")
		})
	}
}

// tbfDrops returns the packets cli's tbf on network 0 has dropped so far.
func tbfDrops(t testing.TB, bed *testbed.Bed) int {
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
