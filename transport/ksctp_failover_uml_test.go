//go:build linux

package transport

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/channel/ksctp"
)

// The benchmarks below (for docs/sctp.md) run braid over kernel SCTP
// between two testbed hosts joined by two networks. They need kernel SCTP
// and root: ksctp's BenchmarkKernelSCTPInVM runs them inside a guest
// kernel (User-Mode Linux, or QEMU).
//
//	testbed hub (bridges)  net 0: 10.1.0.0/24, net 1: 10.2.0.0/24
//	srv: 10.1.0.1, 10.2.0.1     cli: 10.1.0.2, 10.2.0.2
//
// A path dies in the middle of a paced transfer from cli to srv, silently
// (testbed Blackhole: its hub port leaves the bridge, packets vanish both
// ways) or loudly (testbed LinkDown: cli's interface goes down, sends on
// it fail at once); the stall is the longest gap between messages read on
// srv.

// nsKind creates the sockets of an inner kind inside a testbed host's
// network namespace: braid's own redials, from goroutines outside it, land
// there too.
type nsKind struct {
	channel.Kind
	bed  *testbed.Bed
	host string
}

func (k nsKind) Dial(ctx context.Context, local, remote string) (c net.Conn, err error) {
	rerr := k.bed.Run(k.host, func() error {
		c, err = k.Kind.Dial(ctx, local, remote)
		return nil
	})
	if rerr != nil {
		return nil, rerr
	}
	return c, err
}

func (k nsKind) Listen(ctx context.Context, addr string) (l net.Listener, err error) {
	rerr := k.bed.Run(k.host, func() error {
		l, err = k.Kind.Listen(ctx, addr)
		return nil
	})
	if rerr != nil {
		return nil, rerr
	}
	return l, err
}

// requireBench skips unless kernel SCTP and testbeds are here.
func requireBench(b *testing.B) {
	b.Helper()
	requireKernelSCTP(b)
	testbed.Skip(b)
}

// twoNetBed builds srv and cli joined by two unshaped networks.
func twoNetBed(t testing.TB) *testbed.Bed {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	var bed *testbed.Bed
	var err error
	// The guest's one CPU, starved by a loaded host, may miss testbed's
	// readiness deadline: try again.
	for range 3 {
		if bed, err = testbed.Up(ctx, testbed.Spec{Hosts: []string{"srv", "cli"}, Networks: []testbed.Network{{}, {}}}); err == nil {
			break
		}
		t.Logf("testbed: %v; again", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Down(); err != nil {
			t.Error(err)
		}
	})
	return bed
}

// sysctls sets net.sctp sysctls (name=value) in both hosts' namespaces
// (they are per namespace).
func sysctls(t testing.TB, bed *testbed.Bed, kv ...string) {
	t.Helper()
	for _, h := range []string{"srv", "cli"} {
		for _, e := range kv {
			out, err := bed.Exec(t.Context(), h, "sysctl", "-q", "-w", e).CombinedOutput()
			if err != nil {
				t.Fatalf("sysctl %s in %s: %v: %s", e, h, err, out)
			}
		}
	}
}

// failoverCase is one way of carrying a braid session over the bed.
type failoverCase struct {
	name      string
	multihome bool     // one association over both networks, else one per network
	sysctl    []string // net.sctp sysctls, both hosts
	knobs     ksctp.Config
	mod       func(*Config)
	noFault   bool // the baseline: no network dies
	linkDown  bool // network 0 dies by LinkDown, else by Blackhole
}

// failoverRun is what one repetition measured.
type failoverRun struct {
	stall  time.Duration // longest gap between messages read
	total  time.Duration
	intact bool
	err    error
}

// runFailover opens a session as c says, sends paced messages from cli to
// srv on one stream and kills network 0 (the multi-homed association's
// primary path) after a third of them.
func runFailover(t testing.TB, bed *testbed.Bed, fc failoverCase) failoverRun {
	const (
		msgs     = 240
		msgSize  = 32 << 10
		interval = 20 * time.Millisecond // ~13 Mbit/s offered
		faultAt  = msgs / 3
	)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Second)
	defer cancel()
	base := func(c *Config) {
		c.Transport = "sctp"
		c.FragmentSize = 4 << 10
		c.SegmentSize = 64 << 10
		c.StreamWindow = 1 << 20
		if fc.mod != nil {
			fc.mod(c)
		}
	}
	scfg, ccfg := testConfig(t), testConfig(t)
	base(scfg)
	base(ccfg)
	scfg.Channel = nsKind{ksctp.Kind{Config: fc.knobs}, bed, "srv"}
	ccfg.Channel = nsKind{ksctp.Kind{Config: fc.knobs}, bed, "cli"}
	var listen []string
	if fc.multihome {
		listen = []string{bed.Addr("srv", 0) + "," + bed.Addr("srv", 1) + ":0"}
	} else {
		listen = []string{bed.Addr("srv", 0) + ":0", bed.Addr("srv", 1) + ":0"}
	}
	ln, err := Listen(ctx, listen, scfg)
	if err != nil {
		return failoverRun{err: err}
	}
	defer ln.Close()
	var paths []Path
	if fc.multihome {
		paths = []Path{{Local: bed.Addr("cli", 0) + "," + bed.Addr("cli", 1), Remote: ln.Addrs()[0].String()}}
	} else {
		for i, a := range ln.Addrs() {
			paths = append(paths, Path{Local: bed.Addr("cli", i), Remote: a.String()})
		}
	}
	c, err := Dial(ctx, paths, ccfg)
	if err != nil {
		return failoverRun{err: err}
	}
	defer func() { c.Close(); c.wait() }()
	s, err := ln.Accept(ctx)
	if err != nil {
		return failoverRun{err: err}
	}
	defer s.Close()
	st, err := c.OpenStream(ctx)
	if err != nil {
		return failoverRun{err: err}
	}
	src := randBytes(7, msgs*msgSize)
	errc := make(chan error, 1)
	sent := make(chan struct{})
	kill, heal := bed.Blackhole, bed.Restore
	if fc.linkDown {
		kill, heal = bed.LinkDown, bed.LinkUp
	}
	// On every return: stop the sender, then heal network 0 for the next
	// run (the sender may be the one cutting it).
	defer func() {
		cancel()
		<-sent
		if err := heal("cli", 0); err != nil {
			t.Errorf("heal network 0: %v", err)
		}
	}()
	go func() {
		defer close(sent)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := range msgs {
			if i == faultAt && !fc.noFault {
				if err := kill("cli", 0); err != nil {
					errc <- err
					return
				}
			}
			if err := st.WriteMessage(ctx, src[i*msgSize:(i+1)*msgSize]); err != nil {
				errc <- err
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				errc <- ctx.Err()
				return
			}
		}
		errc <- st.Close()
	}()
	rs, err := s.AcceptStream(ctx)
	if err != nil {
		return failoverRun{err: err}
	}
	var r failoverRun
	start := time.Now()
	last := start
	n := 0
	intact := true
	for {
		m, err := rs.ReadMessage(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return failoverRun{err: fmt.Errorf("after %d bytes: %w", n, err)}
		}
		now := time.Now()
		if n > 0 {
			r.stall = max(r.stall, now.Sub(last))
		}
		last = now
		if n+len(m) > len(src) || !bytes.Equal(m, src[n:n+len(m)]) {
			intact = false
		}
		n += len(m)
	}
	if err := <-errc; err != nil {
		return failoverRun{err: err}
	}
	r.total = time.Since(start)
	r.intact = intact && n == len(src)
	return r
}

// BenchmarkKernelSCTPFailover measures failover when a network dies
// under a transfer: braid over one multi-homed kernel-SCTP association
// (SCTP's path management: kernel defaults, RFC 4960 without the
// potentially-failed state, and tuned knobs) against braid's own
// multi-path over one association per network (braid's PathTimeout). One
// iteration is one paced transfer of 240 x 32 KiB, one every 20 ms, with
// network 0 blackholed (or its link at cli down) after 80. Metrics: the
// longest gap between two messages read (gap-s, the mean over iterations;
// max-gap-s, the largest) and the transfer time (transfer-s). Every byte
// must arrive intact in every run, or the benchmark fails.
func BenchmarkKernelSCTPFailover(b *testing.B) {
	requireBench(b)
	bed := twoNetBed(b)
	// Kernel 6.1's defaults, restated so that each case starts from them.
	defaults := []string{"net.sctp.pf_enable=1", "net.sctp.pf_retrans=0", "net.sctp.path_max_retrans=5",
		"net.sctp.hb_interval=30000", "net.sctp.rto_min=1000", "net.sctp.rto_max=60000", "net.sctp.rto_initial=3000"}
	tuned := ksctp.Config{RTOInitial: 200 * time.Millisecond, RTOMin: 100 * time.Millisecond, RTOMax: 1 * time.Second}
	// A single braid path must outlive SCTP's own failover.
	patient := func(c *Config) { c.HeartbeatInterval = time.Second; c.PathTimeout = 180 * time.Second }
	cases := []failoverCase{
		{name: "1 assoc, no fault", multihome: true, sysctl: defaults, mod: patient, noFault: true},
		{name: "1 assoc, kernel defaults (PF on)", multihome: true, sysctl: defaults, mod: patient},
		{name: "1 assoc, RFC 4960 (PF off)", multihome: true, sysctl: append(slices.Clone(defaults), "net.sctp.pf_enable=0"), mod: patient},
		{name: "1 assoc, PF off, RTO 100ms-1s, hb 1s, pmr 2", multihome: true, knobs: tuned,
			sysctl: append(slices.Clone(defaults), "net.sctp.pf_enable=0", "net.sctp.hb_interval=1000", "net.sctp.path_max_retrans=2"), mod: patient},
		{name: "1 assoc, PF on, RTO 100ms-1s", multihome: true, knobs: tuned, sysctl: defaults, mod: patient},
		{name: "braid 2 paths, no fault", sysctl: defaults, noFault: true},
		{name: "braid 2 paths, PathTimeout 500ms", sysctl: defaults},
		{name: "braid 2 paths, PathTimeout 2s", sysctl: defaults, mod: func(c *Config) { c.PathTimeout = 2 * time.Second }},
	}
	// The potentially-failed threshold as a socket knob (PFThreshold,
	// SCTP_PEER_ADDR_THLDS): the path turns potentially failed after 2
	// timeouts instead of the first, and down after 4.
	pfKnob := tuned
	pfKnob.PFThreshold, pfKnob.PathMaxRetrans = 2, 4
	cases = append(cases, failoverCase{name: "1 assoc, RTO 100ms-1s, PFThreshold 2, PathMaxRetrans 4", multihome: true, knobs: pfKnob, sysctl: defaults, mod: patient})
	// The same faults, but network 0 goes down loudly: cli's interface is
	// taken down, so sends on it fail at once.
	for _, fc := range slices.Clone(cases) {
		if !fc.noFault {
			fc.name += ", link down"
			fc.linkDown = true
			cases = append(cases, fc)
		}
	}
	for _, fc := range cases {
		b.Run(fc.name, func(b *testing.B) {
			sysctls(b, bed, fc.sysctl...)
			var gaps, total, worst time.Duration
			for b.Loop() {
				r := runFailover(b, bed, fc)
				if r.err != nil {
					b.Fatal(r.err)
				}
				if !r.intact {
					b.Fatal("the bytes did not arrive intact")
				}
				gaps += r.stall
				total += r.total
				worst = max(worst, r.stall)
			}
			b.ReportMetric(gaps.Seconds()/float64(b.N), "gap-s")
			b.ReportMetric(worst.Seconds(), "max-gap-s")
			b.ReportMetric(total.Seconds()/float64(b.N), "transfer-s")
		})
	}
}

// holRun runs a paced bulk transfer (16 KiB messages every 100 ms, about
// 1.3 Mbit/s: far below what the starved guest moves, so that the queues
// stay short and what the small messages wait for is the bulk's lost
// packets) on one
// stream and 150 small messages (1 KiB, every 20 ms) on another, from cli
// to srv over network 0, and returns the small messages' one-way
// latencies and the bulk's rate meanwhile.
func holRun(t testing.TB, bed *testbed.Bed, kind channel.Kind, mod func(*Config)) (lat []time.Duration, bulkMbps float64, err error) {
	const (
		smalls   = 150
		interval = 20 * time.Millisecond
		bulkGap  = 100 * time.Millisecond
	)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	scfg, ccfg := testConfig(t), testConfig(t)
	for _, c := range []*Config{scfg, ccfg} {
		c.FragmentSize = 4 << 10
		c.SegmentSize = 64 << 10
		c.StreamWindow = 1 << 20
		// Loss and one starved CPU: keep braid's path alive, and spare
		// the guest's CPU the encryption.
		c.PathTimeout = 10 * time.Second
		c.InsecurePlaintext = true
		if mod != nil {
			mod(c)
		}
	}
	scfg.Channel = nsKind{kind, bed, "srv"}
	ccfg.Channel = nsKind{kind, bed, "cli"}
	ln, err := Listen(ctx, []string{bed.Addr("srv", 0) + ":0"}, scfg)
	if err != nil {
		return nil, 0, err
	}
	defer ln.Close()
	c, err := Dial(ctx, []Path{{Local: bed.Addr("cli", 0), Remote: ln.Addrs()[0].String()}}, ccfg)
	if err != nil {
		return nil, 0, err
	}
	defer func() { c.Close(); c.wait() }()
	s, err := ln.Accept(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	bulk, err := c.OpenStream(ctx)
	if err != nil {
		return nil, 0, err
	}
	small, err := c.OpenStream(ctx)
	if err != nil {
		return nil, 0, err
	}
	stop := make(chan struct{})
	bulkDone := make(chan struct{})
	go func() {
		defer close(bulkDone)
		m := bytes.Repeat([]byte{'B'}, 16<<10)
		tick := time.NewTicker(bulkGap)
		defer tick.Stop()
		for {
			if bulk.WriteMessage(ctx, m) != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	type got struct {
		lat  time.Duration
		bulk int
	}
	gotc := make(chan got, 1024)
	for range 2 {
		go func() {
			rs, err := s.AcceptStream(ctx)
			if err != nil {
				return
			}
			for {
				m, err := rs.ReadMessage(ctx)
				if err != nil {
					return
				}
				if len(m) >= 9 && m[0] == 'S' {
					sent, _ := strconv.ParseInt(strings.TrimSpace(string(m[1:21])), 10, 64)
					gotc <- got{lat: time.Since(time.Unix(0, sent))}
				} else {
					gotc <- got{bulk: len(m)}
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // the bulk fills the pipe
	go func() {
		for range smalls {
			m := make([]byte, 1<<10)
			copy(m, fmt.Sprintf("S%20d", time.Now().UnixNano()))
			if small.WriteMessage(ctx, m) != nil {
				return
			}
			time.Sleep(interval)
		}
	}()
	start := time.Now()
	bulkBytes := 0
	for len(lat) < smalls {
		select {
		case g := <-gotc:
			if g.bulk > 0 {
				bulkBytes += g.bulk
			} else {
				lat = append(lat, g.lat)
			}
		case <-ctx.Done():
			close(stop)
			return lat, 0, fmt.Errorf("%d of %d small messages: %w", len(lat), smalls, ctx.Err())
		}
	}
	el := time.Since(start)
	close(stop)
	cancel()
	<-bulkDone
	slices.Sort(lat)
	return lat, float64(bulkBytes) * 8 / el.Seconds() / 1e6, nil
}

// netem sets delay and loss on both ends of network 0 (each host's egress).
func netem(t testing.TB, bed *testbed.Bed, args ...string) {
	t.Helper()
	for _, h := range []string{"srv", "cli"} {
		a := append([]string{"qdisc", "replace", "dev", bed.Dev(h, 0), "root", "netem"}, args...)
		if out, err := bed.Exec(t.Context(), h, "tc", a...).CombinedOutput(); err != nil {
			t.Fatalf("tc %v in %s: %v: %s", a, h, err, out)
		}
	}
}

// BenchmarkKernelSCTPHOL measures head-of-line blocking under loss: the
// latency of small messages on one stream while a bulk transfer runs on
// another (holRun; one iteration is one run), over one kernel-SCTP
// association with lanes (braid streams on SCTP streams), with everything
// on one SCTP stream (Lanes 1), and over TCP, with netem delay 5 ms and
// loss on the path. Metrics: the small messages' latency over all
// iterations (p50-ms, p99-ms, max-ms) and the bulk's rate (bulk-Mbit/s).
func BenchmarkKernelSCTPHOL(b *testing.B) {
	requireBench(b)
	bed := twoNetBed(b)
	tcp, err := channel.Lookup("tcp")
	if err != nil {
		b.Fatal(err)
	}
	sysctls(b, bed, "net.sctp.rto_min=200", "net.sctp.rto_initial=1000")
	type hcase struct {
		name string
		kind channel.Kind
		mod  func(*Config)
	}
	cases := []hcase{
		{"carrier=sctp-lanes", ksctp.Kind{}, nil},
		{"carrier=sctp-one-stream", ksctp.Kind{}, func(c *Config) { c.Lanes = 1 }},
		{"carrier=tcp", tcp, nil},
	}
	for _, loss := range []string{"0%", "1%", "3%"} {
		for _, hc := range cases {
			b.Run("loss="+loss+"/"+hc.name, func(b *testing.B) {
				netem(b, bed, "delay", "5ms", "loss", loss)
				var lat []time.Duration
				var rate float64
				for b.Loop() {
					l, mbps, err := holRun(b, bed, hc.kind, hc.mod)
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, l...)
					rate += mbps
				}
				slices.Sort(lat)
				ms := func(f float64) float64 {
					return float64(lat[int(f*float64(len(lat)-1))]) / float64(time.Millisecond)
				}
				b.ReportMetric(ms(0.5), "p50-ms")
				b.ReportMetric(ms(0.99), "p99-ms")
				b.ReportMetric(ms(1), "max-ms")
				b.ReportMetric(rate/float64(b.N), "bulk-Mbit/s")
			})
		}
	}
}
