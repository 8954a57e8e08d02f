package sctpudp

import (
	"net"
	"testing"
)

// TestPathMTU checks that an association with Config.MTU zero sends
// packets as large as pion takes over loopback (whose route MTU is 65536),
// that an explicit MTU wins, and that data of several full packets arrives
// whole either way.
func TestPathMTU(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"from path", Config{}, MaxMTU},
		{"explicit", Config{MTU: 1200}, 1200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, _ := pair(t, Kind{Config: tc.cfg})
			for _, st := range []*Stream{c, s} {
				if got := st.Assoc().Stats().MTU; got != tc.want {
					t.Errorf("%v side: MTU %d, want %d", st.LocalAddr(), got, tc.want)
				}
			}
			msg := make([]byte, 5*MaxMTU+17)
			for i := range msg {
				msg[i] = byte(i * 7)
			}
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(msg))
			for n := 0; n < len(got); {
				m, err := s.Read(got[n:])
				if err != nil {
					t.Fatalf("read after %d bytes: %v", n, err)
				}
				n += m
			}
			if string(got) != string(msg) {
				t.Fatal("data changed on the way")
			}
		})
	}
}

// TestRouteMTU asks the kernel for loopback routes' MTU.
func TestRouteMTU(t *testing.T) {
	for _, ip := range []string{"127.0.0.1", "::1"} {
		mtu, ok := routeMTU(&net.UDPAddr{IP: net.ParseIP(ip), Port: 9})
		if ip == "::1" && !ok {
			t.Logf("no IPv6 loopback route here")
			continue
		}
		if !ok || mtu < 1500 {
			t.Errorf("route MTU to %s: %d, %v; want loopback's (65536)", ip, mtu, ok)
		}
	}
	if _, ok := routeMTU(&net.UDPAddr{}); ok {
		t.Errorf("route MTU for an address without IP: ok")
	}
}
