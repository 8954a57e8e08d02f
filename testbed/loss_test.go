package testbed

import (
	"errors"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// udpCount sends n datagrams from host from to host to over network net_
// and returns how many arrived. It paces itself so that neither socket
// buffer overflows on an unshaped link.
func udpCount(t testing.TB, b *Bed, from, to string, net_, n int) int {
	t.Helper()
	var rc, sc *net.UDPConn
	if err := b.Run(to, func() (err error) {
		rc, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(b.Addr(to, net_))})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_ = rc.SetReadBuffer(4 << 20)
	if err := b.Run(from, func() (err error) {
		sc, err = net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(b.Addr(from, net_))}, rc.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			if _, err := rc.Read(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	msg := make([]byte, 200)
	for i := range n {
		if _, err := sc.Write(msg); err != nil {
			t.Fatalf("send datagram %d: %v", i, err)
		}
		if i%100 == 99 {
			time.Sleep(200 * time.Microsecond)
		}
	}
	// Wait (bounded) until the count stops growing.
	last := int64(-1)
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		if g := got.Load(); g == last {
			break
		} else {
			last = g
		}
	}
	rc.SetReadDeadline(time.Now())
	<-done
	return int(got.Load())
}

// udpReady sends a datagram from host from to host to over network net_
// every 20 ms until one arrives (at most 5 s): a bed just made may still be
// resolving its neighbours, and a burst sent meanwhile is dropped before
// any loss rule sees it.
func udpReady(t testing.TB, b *Bed, from, to string, net_ int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if udpCount(t, b, from, to, net_, 1) == 1 {
			return
		}
	}
	t.Fatalf("no datagram from %s to %s on network %d arrived within 5 s", from, to, net_)
}

func TestSetLoss(t *testing.T) {
	SkipLoss(t)
	b := upBed(t, Spec{Hosts: []string{"a", "b"}, Networks: []Network{{}, {}}})
	const n = 20000
	udpReady(t, b, "a", "b", 0)
	udpReady(t, b, "b", "a", 0)
	udpReady(t, b, "a", "b", 1)

	for _, tc := range []struct {
		pct    float64
		lo, hi float64 // accepted dropped fraction, about ±5 standard deviations
	}{
		{10, 0.088, 0.112},
		{0.5, 0.0025, 0.0080}, // below 1%: the 0.01% steps matter
	} {
		if err := b.SetLoss("a", 0, tc.pct); err != nil {
			t.Fatalf("SetLoss %v: %v", tc.pct, err)
		}
		pct, before, err := b.Loss("a", 0)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(pct-tc.pct) > 1e-9 {
			t.Errorf("Loss reports %v%%, want %v%%", pct, tc.pct)
		}
		got := udpCount(t, b, "a", "b", 0, n)
		_, after, err := b.Loss("a", 0)
		if err != nil {
			t.Fatal(err)
		}
		dropped := after - before
		if f := float64(dropped) / n; f < tc.lo || f > tc.hi {
			t.Errorf("loss %v%%: rule dropped %d of %d (%.4f), want within [%v, %v]", tc.pct, dropped, n, f, tc.lo, tc.hi)
		}
		// What did not arrive is what the rule dropped, give or take a
		// few lost elsewhere.
		if lost := int64(n - got); lost < dropped || lost > dropped+n/100 {
			t.Errorf("loss %v%%: %d of %d datagrams arrived, rule dropped %d", tc.pct, got, n, dropped)
		}
		t.Logf("loss %v%%: %d of %d arrived, %d dropped by the rule", tc.pct, got, n, dropped)
	}

	// The other direction and the other network are untouched.
	if got := udpCount(t, b, "b", "a", 0, 5000); got < 4950 {
		t.Errorf("b to a with loss on a's egress: %d of 5000 arrived", got)
	}
	if got := udpCount(t, b, "a", "b", 1, 5000); got < 4950 {
		t.Errorf("a to b on network 1: %d of 5000 arrived", got)
	}

	// Removed, it drops nothing; removing twice is fine.
	for range 2 {
		if err := b.SetLoss("a", 0, 0); err != nil {
			t.Fatalf("SetLoss 0: %v", err)
		}
	}
	if pct, dropped, err := b.Loss("a", 0); err != nil || pct != 0 || dropped != 0 {
		t.Errorf("Loss after removal = %v, %d, %v; want 0, 0, nil", pct, dropped, err)
	}
	if got := udpCount(t, b, "a", "b", 0, 5000); got < 4950 {
		t.Errorf("a to b after removal: %d of 5000 arrived", got)
	}
}

func TestSetLossBadInput(t *testing.T) {
	SkipLoss(t)
	b := upBed(t, Spec{Hosts: []string{"a", "b"}, Networks: []Network{{}}})
	if pct, dropped, err := b.Loss("a", 0); err != nil || pct != 0 || dropped != 0 {
		t.Errorf("Loss before any SetLoss = %v, %d, %v; want 0, 0, nil", pct, dropped, err)
	}
	for _, tc := range []struct {
		host string
		net  int
		pct  float64
		want string
	}{
		{"a", 0, -1, "out of range"},
		{"a", 0, 100.5, "out of range"},
		{"a", 0, math.NaN(), "out of range"},
		{"a", 0, 0.001, "below the resolution"},
		{"z", 0, 1, "unknown host"},
		{"a", 1, 1, "unknown network"},
		{"a", -1, 1, "unknown network"},
	} {
		err := b.SetLoss(tc.host, tc.net, tc.pct)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetLoss(%q, %d, %v) = %v, want an error with %q", tc.host, tc.net, tc.pct, err, tc.want)
		}
	}
	// 100% drops everything; Down takes the rules with the namespace.
	if err := b.SetLoss("a", 0, 100); err != nil {
		t.Fatal(err)
	}
	if got := udpCount(t, b, "a", "b", 0, 500); got != 0 {
		t.Errorf("%d of 500 datagrams arrived at 100%% loss", got)
	}
	if err := b.Down(); err != nil {
		t.Fatal(err)
	}
	if nsExists(b.hostNS(0)) {
		t.Errorf("namespace %s left after Down", b.hostNS(0))
	}
	if err := b.SetLoss("a", 0, 1); !errors.Is(err, ErrDown) {
		t.Errorf("SetLoss after Down: %v, want ErrDown", err)
	}
}
