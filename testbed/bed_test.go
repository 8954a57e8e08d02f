package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// upBed brings a bed up for one test and takes it down in t.Cleanup, even
// when the test fails.
func upBed(t testing.TB, spec Spec) *Bed {
	t.Helper()
	Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := Up(ctx, spec)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Down(); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	return b
}

// listen opens a TCP listener inside host on its address on network net.
func listen(t testing.TB, b *Bed, host string, net_ int) net.Listener {
	t.Helper()
	var ln net.Listener
	err := b.Run(host, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(b.Addr(host, net_), "0"))
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", host, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dial connects from inside host to addr within timeout.
func dial(b *Bed, host, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := b.Run(host, func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// acceptOne accepts one connection on ln within 5 s.
func acceptOne(t testing.TB, ln net.Listener) net.Conn {
	t.Helper()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pair connects client to server over network net and returns both ends.
func pair(t testing.TB, b *Bed, server, client string, net_ int) (s, c net.Conn) {
	t.Helper()
	ln := listen(t, b, server, net_)
	c, err := dial(b, client, ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", ln.Addr(), client, err)
	}
	t.Cleanup(func() { c.Close() })
	return acceptOne(t, ln), c
}

// expectRead reads exactly want from c within d.
func expectRead(t testing.TB, c net.Conn, want string, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read %q: %v", want, err)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// expectSilence checks that nothing arrives on c for d.
func expectSilence(t testing.TB, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	var buf [64]byte
	n, err := c.Read(buf[:])
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v during a fault; want a timeout", buf[:n], err)
	}
}

// twoByTwo is two hosts on two networks, the first full duplex, the
// second half duplex (the default).
func twoByTwo() Spec {
	return Spec{Hosts: []string{"a", "b"}, Networks: []Network{{Rate: 100e6, FullDuplex: true}, {Rate: 50e6}}}
}

func TestUpAddressesAndConnectivity(t *testing.T) {
	t.Parallel()
	b := upBed(t, twoByTwo())

	want := map[string][]string{"a": {"10.1.0.1", "10.2.0.1"}, "b": {"10.1.0.2", "10.2.0.2"}}
	for host, addrs := range want {
		for j, a := range addrs {
			if got := b.Addr(host, j); got != a {
				t.Errorf("Addr(%s, %d) = %s, want %s", host, j, got, a)
			}
		}
		// The addresses are on the host's interfaces, inside its namespace.
		out, err := b.Exec(t.Context(), host, "ip", "-4", "-o", "addr", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("ip addr in %s: %v: %s", host, err, out)
		}
		for j, a := range addrs {
			if !strings.Contains(string(out), b.Dev(host, j)+"    inet "+a+"/24") {
				t.Errorf("%s: no %s on %s in:\n%s", host, a, b.Dev(host, j), out)
			}
		}
	}
	// None of them is in the root namespace.
	root, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range root {
		for _, addrs := range want {
			for _, w := range addrs {
				if strings.HasPrefix(a.String(), w+"/") {
					t.Errorf("bed address %s is in the root namespace", w)
				}
			}
		}
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if strings.Contains(i.Name, b.ID()) {
			t.Errorf("bed interface %s is in the root namespace", i.Name)
		}
	}

	for j := range b.Networks() {
		for _, dir := range [][2]string{{"a", "b"}, {"b", "a"}} {
			s, c := pair(t, b, dir[0], dir[1], j)
			if got := c.LocalAddr().(*net.TCPAddr).IP.String(); got != b.Addr(dir[1], j) {
				t.Errorf("net %d: client address %s, want %s", j, got, b.Addr(dir[1], j))
			}
			msg := fmt.Sprintf("hello %s->%s on %d", dir[1], dir[0], j)
			if _, err := c.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			expectRead(t, s, msg, 5*time.Second)
		}
	}

	// The caller's thread is back in the root namespace.
	if ifs2, _ := net.Interfaces(); len(ifs2) != len(ifs) {
		t.Errorf("root namespace has %d interfaces after Run, %d before", len(ifs2), len(ifs))
	}
}

func TestLinkDown(t *testing.T) {
	t.Parallel()
	b := upBed(t, twoByTwo())
	s, c := pair(t, b, "a", "b", 0)
	c.Write([]byte("before"))
	expectRead(t, s, "before", 5*time.Second)

	if err := b.LinkDown("b", 0); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("during"))
	expectSilence(t, s, 300*time.Millisecond)
	if conn, err := dial(b, "b", net.JoinHostPort(b.Addr("a", 0), "9"), 300*time.Millisecond); err == nil {
		conn.Close()
		t.Fatal("dial over a downed link succeeded")
	}
	// The other network still works.
	s1, c1 := pair(t, b, "a", "b", 1)
	c1.Write([]byte("other"))
	expectRead(t, s1, "other", 5*time.Second)

	if err := b.LinkUp("b", 0); err != nil {
		t.Fatal(err)
	}
	expectRead(t, s, "during", 10*time.Second)
}

func TestBlackhole(t *testing.T) {
	t.Parallel()
	b := upBed(t, twoByTwo())
	for j := range b.Networks() { // full duplex, then half
		s, c := pair(t, b, "a", "b", j)
		c.Write([]byte("before"))
		expectRead(t, s, "before", 5*time.Second)

		if err := b.Blackhole("b", j); err != nil {
			t.Fatal(err)
		}
		// Silent: both ends keep their carrier.
		if err := b.ready(t.Context(), b.hostIndex("b"), j); !strings.Contains(fmt.Sprint(err), "bridge port") {
			t.Errorf("net %d: during a blackhole: ready = %v, want only the bridge port missing", j, err)
		}
		c.Write([]byte("during"))
		expectSilence(t, s, 300*time.Millisecond)
		_, err := dial(b, "b", net.JoinHostPort(b.Addr("a", j), "9"), 300*time.Millisecond)
		if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
			t.Fatalf("net %d: dial into a blackhole: %v, want a timeout", j, err)
		}

		if err := b.Restore("b", j); err != nil {
			t.Fatal(err)
		}
		expectRead(t, s, "during", 10*time.Second)
	}
}

func TestShaping(t *testing.T) {
	t.Parallel()
	const rate = 20e6
	b := upBed(t, Spec{Hosts: []string{"a", "b"}, Networks: []Network{{Rate: rate}}})
	got := throughput(t, b, "b", "a", 0, 1500*time.Millisecond)
	t.Logf("20 Mbit/s link: %.2f Mbit/s (%.3f of the rate)", got/1e6, got/rate)
	// Generous: precise numbers come from BenchmarkShaping.
	if got < 0.4*rate || got > 1.15*rate {
		t.Errorf("throughput %.2f Mbit/s on a %.0f Mbit/s link", got/1e6, rate/1e6)
	}

	if err := b.SetRate(0, 0); err != nil {
		t.Fatal(err)
	}
	if got := throughput(t, b, "b", "a", 0, 500*time.Millisecond); got < 2*rate {
		t.Errorf("unshaped: %.2f Mbit/s, want well above %.0f", got/1e6, rate/1e6)
	}
	if err := b.SetRate(0, rate/2); err != nil {
		t.Fatal(err)
	}
	if got := throughput(t, b, "b", "a", 0, time.Second); got < 0.25*rate || got > 0.6*rate {
		t.Errorf("after SetRate(%.0f Mbit/s): %.2f Mbit/s", rate/2e6, got/1e6)
	}
	if st := b.State(); st.Spec.Networks[0].Rate != rate/2 {
		t.Errorf("State rate %d, want %d", st.Spec.Networks[0].Rate, int64(rate/2))
	}
}

// throughput sends from client to server over network net for about d and
// returns the bit/s of payload the server received, measured after the
// first 10%.
func throughput(t testing.TB, b *Bed, client, server string, net_ int, d time.Duration) float64 {
	t.Helper()
	good, _ := measure(t, b, client, server, net_, d, nil)
	return good
}

// measure is throughput that also returns the wire rate in bit/s: the
// growth of counter (bytes) over the same window; 0 if counter is nil.
// The window runs from 15% to 85% of d after the first byte, clear of slow
// start and of the drain at the end; payload is counted by the kernel
// (TCP_INFO bytes received), so a reader slowed by load does not skew it.
func measure(t testing.TB, b *Bed, client, server string, net_ int, d time.Duration, counter func() int64) (good, wire float64) {
	t.Helper()
	s, c := pair(t, b, server, client, net_)
	go func() {
		buf := make([]byte, 64<<10)
		c.SetWriteDeadline(time.Now().Add(d))
		for {
			if _, err := c.Write(buf); err != nil {
				break
			}
		}
		c.Close()
	}()
	s.SetReadDeadline(time.Now().Add(d + 10*time.Second))
	type sample struct {
		n, w   int64
		at, wt time.Time
	}
	take := func() (x sample) {
		x.n = tcpReceived(t, s)
		x.at = time.Now()
		if counter != nil {
			before := time.Now()
			x.w = counter()
			x.wt = before.Add(time.Since(before) / 2)
		}
		return x
	}
	samples := make(chan sample, 2)
	buf := make([]byte, 256<<10)
	for first := true; ; first = false {
		_, err := s.Read(buf)
		if first {
			go func() {
				start := time.Now()
				for _, f := range []float64{0.15, 0.85} {
					time.Sleep(time.Until(start.Add(time.Duration(f * float64(d)))))
					samples <- take()
				}
			}()
		}
		if err != nil {
			if err != io.EOF {
				t.Fatalf("read: %v", err)
			}
			break
		}
	}
	x, y := <-samples, <-samples
	good = float64((y.n-x.n)*8) / y.at.Sub(x.at).Seconds()
	if counter != nil {
		wire = float64((y.w-x.w)*8) / y.wt.Sub(x.wt).Seconds()
	}
	return good, wire
}

// tcpReceived returns the payload bytes c's kernel socket has received.
func tcpReceived(t testing.TB, c net.Conn) int64 {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var serr error
	if err := rc.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || serr != nil {
		t.Errorf("TCP_INFO: %v %v", err, serr) // may run off the test goroutine
		return 0
	}
	return int64(info.Bytes_received)
}

// txBytes returns the bytes sent so far by dev in ns.
func txBytes(t testing.TB, ns, dev string) int64 {
	out, err := run(context.Background(), "ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev)
	if err != nil {
		t.Fatal(err)
	}
	var st []struct {
		Stats struct {
			TX struct {
				Bytes int64 `json:"bytes"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &st); err != nil || len(st) != 1 {
		t.Fatalf("parse %s: %v", out, err)
	}
	return st[0].Stats.TX.Bytes
}

// BenchmarkShaping reports achieved/rate of a tbf-shaped link (both ends
// shaped; or half duplex, one bucket per host for both ways) for one TCP
// stream between two namespaces: payload (goodput) and Ethernet frames
// leaving the hub towards the receiver (wire).
//
//	go test -run '^$' -bench Shaping -benchtime 1x -count 3 ./testbed/
func BenchmarkShaping(b *testing.B) {
	for _, tc := range []struct {
		rate int64
		half bool
	}{{100e6, false}, {25e6, false}, {100e6, true}} {
		rate := tc.rate
		name := fmt.Sprintf("rate=%dM", rate/1e6)
		if tc.half {
			name += "/duplex=half"
		}
		b.Run(name, func(b *testing.B) {
			bed := upBed(b, Spec{Hosts: []string{"a", "b"}, Networks: []Network{{Rate: rate, FullDuplex: !tc.half}}})
			counter := func() int64 { return txBytes(b, bed.hubNS(), bed.hubDev(0, 0)) }
			var good, wire float64
			var runs int
			for b.Loop() {
				g, w := measure(b, bed, "b", "a", 0, 3*time.Second, counter)
				good += g
				wire += w
				runs++
			}
			good /= float64(runs)
			wire /= float64(runs)
			b.ReportMetric(good/1e6, "Mbit/s")
			b.ReportMetric(good/float64(rate), "goodput/rate")
			b.ReportMetric(wire/float64(rate), "wire/rate")
		})
	}
}

func TestDownRemovesEverything(t *testing.T) {
	Skip(t)
	before := bedNamespaces(t)
	b := upBed(t, Spec{Hosts: []string{"a", "b", "c"}, Networks: []Network{{Rate: 10e6}, {}, {Rate: 1e9}}})
	mine := b.State()
	during := bedNamespaces(t)
	for _, ns := range []string{"bt" + b.ID() + "-hub", "bt" + b.ID() + "-a", "bt" + b.ID() + "-b", "bt" + b.ID() + "-c"} {
		if !during[ns] {
			t.Errorf("namespace %s missing while up; have %v", ns, during)
		}
	}
	if err := b.Down(); err != nil {
		t.Fatal(err)
	}
	if err := b.Down(); err != nil {
		t.Errorf("second Down: %v", err)
	}
	if err := b.LinkDown("a", 0); !errors.Is(err, ErrDown) {
		t.Errorf("LinkDown after Down: %v, want ErrDown", err)
	}
	after := bedNamespaces(t)
	for ns := range after {
		if strings.HasPrefix(ns, "bt"+mine.ID) {
			t.Errorf("namespace %s left after Down", ns)
		}
		if !before[ns] && !strings.HasPrefix(ns, "bt") {
			t.Errorf("namespace %s appeared", ns)
		}
	}
}

func TestUpCleansUpOnFailure(t *testing.T) {
	Skip(t)
	for _, stage := range []string{"namespaces", "links"} {
		t.Run(stage, func(t *testing.T) {
			var id string
			testHookUp = func(b *Bed, s string) error {
				id = b.ID()
				if s == stage {
					return errors.New("injected")
				}
				return nil
			}
			defer func() { testHookUp = nil }()
			b, err := Up(t.Context(), twoByTwo())
			if err == nil {
				b.Down()
				t.Fatal("Up succeeded despite the injected failure")
			}
			if id == "" {
				t.Fatal("hook never ran")
			}
			for ns := range bedNamespaces(t) {
				if strings.HasPrefix(ns, "bt"+id) {
					t.Errorf("namespace %s left after failed Up", ns)
				}
			}
		})
	}
}

// bedNamespaces lists the named network namespaces.
func bedNamespaces(t testing.TB) map[string]bool {
	t.Helper()
	out, err := run(context.Background(), "ip", "netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, l := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			m[f[0]] = true
		}
	}
	return m
}

func TestEnableMPTCP(t *testing.T) {
	t.Parallel()
	b := upBed(t, Spec{Hosts: []string{"srv", "cli"}, Networks: []Network{{}, {}, {}}})
	if err := b.EnableMPTCP(t.Context(), "srv", "cli"); err != nil {
		t.Fatal(err)
	}
	for host, flag := range map[string]string{"srv": "signal", "cli": "subflow"} {
		out, err := b.Exec(t.Context(), host, "ip", "mptcp", "endpoint", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", host, err, out)
		}
		for j := 1; j < 3; j++ {
			want := b.Addr(host, j)
			if !strings.Contains(string(out), want) || !strings.Contains(string(out), flag) || !strings.Contains(string(out), "dev "+b.Dev(host, j)) {
				t.Errorf("%s endpoints lack %s %s dev %s:\n%s", host, want, flag, b.Dev(host, j), out)
			}
		}
	}
}

func TestSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		err  string
	}{
		{"ok", twoByTwo(), ""},
		{"no hosts", Spec{Networks: []Network{{}}}, "no hosts"},
		{"no nets", Spec{Hosts: []string{"a"}}, "no networks"},
		{"hub", Spec{Hosts: []string{"hub"}, Networks: []Network{{}}}, "bad host name"},
		{"upper", Spec{Hosts: []string{"A"}, Networks: []Network{{}}}, "bad host name"},
		{"dup", Spec{Hosts: []string{"a", "a"}, Networks: []Network{{}}}, "named twice"},
		{"public", Spec{Hosts: []string{"a"}, Networks: []Network{{Subnet: mustPrefix("8.8.8.0/24")}}}, "not a private"},
		{"overlap", Spec{Hosts: []string{"a"}, Networks: []Network{{}, {Subnet: mustPrefix("10.1.0.0/16")}}}, "overlap"},
		{"small", Spec{Hosts: []string{"a", "b", "c"}, Networks: []Network{{Subnet: mustPrefix("10.9.0.0/30")}}}, "room for 2"},
		{"negative", Spec{Hosts: []string{"a"}, Networks: []Network{{Rate: -1}}}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.spec.populate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("populate: %v, want %q", err, tc.err)
			}
		})
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]int64{"100M": 100e6, "2.5G": 2.5e9, "800kbit": 800e3, "0": 0, "1500": 1500, "10Mbit/s": 10e6, "25m": 25e6} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v, want %d", in, got, err, want)
		}
		if in != "0" {
			if back, _ := ParseRate(strings.TrimSuffix(FormatRate(got), "/s")); back != got {
				t.Errorf("FormatRate(%d) = %s does not parse back", got, FormatRate(got))
			}
		}
	}
	for _, bad := range []string{"", "M", "-1M", "fast", "10T"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) succeeded", bad)
		}
	}
	if got := tbfBurst(100e6); got != 3200 {
		t.Errorf("tbfBurst(100M) = %d, want 3200", got)
	}
	if got := tbfBurst(1e9); got != 16000 {
		t.Errorf("tbfBurst(1G) = %d, want 16000", got)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestAttachAndUnknownNames(t *testing.T) {
	// No root needed: nothing here touches the system.
	b, err := Attach(State{ID: "abc123", Spec: twoByTwo()})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Addr("b", 1); got != "10.2.0.2" {
		t.Errorf("Addr(b, 1) = %q", got)
	}
	if got := b.Namespace("a"); got != "btabc123-a" {
		t.Errorf("Namespace(a) = %q", got)
	}
	if got := b.Dev("a", 1); got != "btabc123n1" || len(b.hubDev(MaxHosts-1, MaxNetworks-1)) > 15 {
		t.Errorf("Dev(a, 1) = %q; longest hub name %q", got, b.hubDev(MaxHosts-1, MaxNetworks-1))
	}
	if b.Addr("z", 0) != "" || b.Addr("a", 2) != "" || b.Dev("z", 0) != "" || b.Addrs("z") != nil {
		t.Error("unknown host or network gave a name")
	}
	if err := b.Exec(t.Context(), "z", "true").Run(); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("Exec on an unknown host: %v", err)
	}
	if err := b.Run("z", func() error { return nil }); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("Run on an unknown host: %v", err)
	}
	if err := b.LinkDown("a", 5); !errors.Is(err, ErrUnknownNetwork) {
		t.Errorf("LinkDown on network 5: %v", err)
	}
	if err := b.SetRate(-1, 0); !errors.Is(err, ErrUnknownNetwork) {
		t.Errorf("SetRate on network -1: %v", err)
	}
	if _, err := Attach(State{ID: "../../x", Spec: twoByTwo()}); err == nil {
		t.Error("Attach accepted a bad id")
	}
}

// A network's duplex survives a state file, also one written before half
// duplex was the default (a "half_duplex" key, absent for full duplex).
func TestNetworkDuplexJSON(t *testing.T) {
	for _, tc := range []struct {
		json string
		full bool
	}{
		{`{"rate":100000000}`, true}, // old: full duplex wrote no key
		{`{"rate":100000000,"half_duplex":true}`, false},
		{`{"rate":100000000,"full_duplex":false}`, false},
		{`{"rate":100000000,"full_duplex":true}`, true},
	} {
		var n Network
		if err := json.Unmarshal([]byte(tc.json), &n); err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		if n.FullDuplex != tc.full || n.Rate != 100e6 {
			t.Errorf("%s: read as %+v, want FullDuplex %v", tc.json, n, tc.full)
		}
	}
	for _, full := range []bool{false, true} {
		data, err := json.Marshal(Network{Rate: 1e6, FullDuplex: full})
		if err != nil {
			t.Fatal(err)
		}
		var back Network
		if err := json.Unmarshal(data, &back); err != nil || back.FullDuplex != full {
			t.Errorf("%s read back as %+v, %v", data, back, err)
		}
	}
}
