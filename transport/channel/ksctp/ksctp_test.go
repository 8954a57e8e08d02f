package ksctp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/vmkernel"
	"github.com/braid-hpc/braid/transport/channel"
)

// requireKernel skips t where the kernel has no SCTP. The reason reads
// "kernel SCTP unavailable: socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP):
// <errno>; load the sctp module (modprobe sctp)". With
// BRAID_REQUIRE_KSCTP=1 (CI) the test must run somewhere: it fails, unless
// a guest kernel can run it here (TestKernelSCTPInVM does, in User-Mode
// Linux or QEMU).
func requireKernel(t testing.TB) {
	t.Helper()
	err := Available()
	if err == nil {
		return
	}
	if os.Getenv("BRAID_REQUIRE_KSCTP") == "1" {
		if os.Getenv(vmkernel.EnvInGuest) == "1" {
			t.Fatalf("BRAID_REQUIRE_KSCTP=1 but %v", err)
		}
		if verr := vmkernel.Installed(); verr != nil {
			t.Fatalf("BRAID_REQUIRE_KSCTP=1 but %v, and %v", err, verr)
		}
		t.Skipf("%v; TestKernelSCTPInVM runs this test inside a guest kernel", err)
	}
	t.Skip(err)
}

func TestRegistered(t *testing.T) {
	k, err := channel.Lookup("sctp")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := k.(Kind); !ok {
		t.Fatalf("sctp is %T", k)
	}
}

func TestParseAddr(t *testing.T) {
	ip := func(s string) net.IPAddr {
		h, z, _ := strings.Cut(s, "%")
		return net.IPAddr{IP: net.ParseIP(h), Zone: z}
	}
	for _, tc := range []struct {
		in       string
		needPort bool
		want     *Addr // nil: an error
	}{
		{"10.0.0.1:9000", true, &Addr{IPs: []net.IPAddr{ip("10.0.0.1")}, Port: 9000}},
		{"10.0.0.1,10.0.1.1:9000", true, &Addr{IPs: []net.IPAddr{ip("10.0.0.1"), ip("10.0.1.1")}, Port: 9000}},
		{"10.0.0.1:9000, 10.0.1.1:9000", true, &Addr{IPs: []net.IPAddr{ip("10.0.0.1"), ip("10.0.1.1")}, Port: 9000}},
		{"[fd00::1]:9000,10.0.1.1", true, &Addr{IPs: []net.IPAddr{ip("fd00::1"), ip("10.0.1.1")}, Port: 9000}},
		{"fe80::1%7,[fd00::2]", false, &Addr{IPs: []net.IPAddr{ip("fe80::1%7"), ip("fd00::2")}}},
		{"10.0.0.1", false, &Addr{IPs: []net.IPAddr{ip("10.0.0.1")}}},
		{"", false, &Addr{}},
		{":9000", true, &Addr{Port: 9000}},
		{"10.0.0.1", true, nil},                    // no port
		{"10.0.0.1:9000,10.0.1.1:9001", true, nil}, // ports differ
		{"10.0.0.1,,10.0.1.1:9000", true, nil},     // empty entry
		{":9000,10.0.0.1", true, nil},              // wildcard mixed in
		{"10.0.0.1:http-nope", true, nil},          // bad port
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseAddr(t.Context(), nil, tc.in, tc.needPort)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("ParseAddr(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want.String() || len(got.IPs) != len(tc.want.IPs) {
				t.Fatalf("ParseAddr(%q) = %v, want %v", tc.in, got, tc.want)
			}
			for i := range got.IPs {
				if !got.IPs[i].IP.Equal(tc.want.IPs[i].IP) || got.IPs[i].Zone != tc.want.IPs[i].Zone {
					t.Fatalf("ParseAddr(%q) address %d = %v, want %v", tc.in, i, got.IPs[i], tc.want.IPs[i])
				}
			}
		})
	}
}

func TestAddrString(t *testing.T) {
	a := &Addr{IPs: []net.IPAddr{{IP: net.ParseIP("10.0.0.1")}, {IP: net.ParseIP("fd00::1")}}, Port: 9000}
	if got, want := a.String(), "10.0.0.1,[fd00::1]:9000"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	// The string parses back to the same address.
	b, err := ParseAddr(t.Context(), nil, a.String(), true)
	if err != nil || b.String() != a.String() {
		t.Errorf("round trip: %v, %v", b, err)
	}
	if got := (&Addr{Port: 80}).String(); got != ":80" {
		t.Errorf("wildcard String = %q", got)
	}
	if a.Network() != "sctp" {
		t.Errorf("Network = %q", a.Network())
	}
}

func TestPackSockaddrs(t *testing.T) {
	a := &Addr{
		IPs: []net.IPAddr{
			{IP: net.ParseIP("10.0.0.1")},
			{IP: net.ParseIP("fe80::1"), Zone: "eth7"},
			{IP: net.ParseIP("127.0.0.2")},
		},
		Port: 0x1234,
	}
	zones := func(z string) (uint32, error) {
		if z == "eth7" {
			return 7, nil
		}
		return 0, errors.New("no such zone")
	}
	b, err := packSockaddrs(a, zones)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	fam := func(f uint16) []byte { return binary.NativeEndian.AppendUint16(nil, f) }
	// struct sockaddr_in: family, port (network order), address, zero[8].
	want = append(want, fam(2)...)
	want = append(want, 0x12, 0x34, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	// struct sockaddr_in6: family, port, flowinfo, address, scope id.
	want = append(want, fam(10)...)
	want = append(want, 0x12, 0x34, 0, 0, 0, 0)
	want = append(want, net.ParseIP("fe80::1").To16()...)
	want = binary.NativeEndian.AppendUint32(want, 7)
	want = append(want, fam(2)...)
	want = append(want, 0x12, 0x34, 127, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0)
	if !bytes.Equal(b, want) {
		t.Fatalf("packed\n%x\nwant\n%x", b, want)
	}
	if len(b) != 2*sizeofSockaddrInet4+sizeofSockaddrInet6 {
		t.Fatalf("%d bytes", len(b))
	}
	if _, err := packSockaddrs(&Addr{IPs: []net.IPAddr{{IP: net.ParseIP("fe80::1"), Zone: "nope"}}}, zones); err == nil {
		t.Error("unknown zone packed")
	}
	if _, err := packSockaddrs(&Addr{}, zones); err == nil {
		t.Error("empty address list packed")
	}
}

func TestFamily(t *testing.T) {
	v4 := &Addr{IPs: []net.IPAddr{{IP: net.ParseIP("10.0.0.1")}}}
	v6 := &Addr{IPs: []net.IPAddr{{IP: net.ParseIP("fd00::1")}}}
	if v4.hasIPv6() || !v6.hasIPv6() || (&Addr{}).hasIPv6() {
		t.Fatal("hasIPv6 wrong")
	}
}

// TestUnavailable takes the path of a kernel without SCTP on any kernel:
// socket(IPPROTO_SCTP) fails as it does there (withoutSCTP).
func TestUnavailable(t *testing.T) {
	withoutSCTP(t)
	err := Available()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Available() = %v, does not wrap ErrUnavailable", err)
	}
	if runtime.GOOS == "linux" {
		for _, s := range []string{"kernel SCTP unavailable", "socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP)", "protocol not supported", "load the sctp module"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%q lacks %q", err, s)
			}
		}
	}
	if _, err := (Kind{}).Listen(t.Context(), "127.0.0.1:0"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Listen: %v, want ErrUnavailable", err)
	}
	if _, err := (Kind{}).Listen(t.Context(), ":0"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Listen on the wildcard: %v, want ErrUnavailable", err)
	}
	if _, err := (Kind{}).Dial(t.Context(), "", "127.0.0.1:9"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Dial: %v, want ErrUnavailable", err)
	}
}

// The tests below need kernel SCTP.

// pair returns both ends of one kernel SCTP channel; they close with t.
func pair(t testing.TB, k Kind, local, listenAddr string) (c, s net.Conn, ln net.Listener) {
	t.Helper()
	ln, err := k.Listen(t.Context(), listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		if s, err := ln.Accept(); err == nil {
			accepted <- s
		}
		close(accepted)
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err = k.Dial(ctx, local, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	select {
	case s = <-accepted:
		if s == nil {
			t.Fatal("accept failed")
		}
		t.Cleanup(func() { _ = s.Close() })
	case <-time.After(10 * time.Second):
		t.Fatal("accept timed out")
	}
	return c, s, ln
}

func TestEcho(t *testing.T) {
	requireKernel(t)
	c, s, _ := pair(t, Kind{}, "127.0.0.1", "127.0.0.1:0")
	go func() { _, _ = io.Copy(s, s) }()
	for _, size := range []int{1, 1500, 64 << 10, 1 << 20} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("size %d: echo %v", size, err)
		}
	}
	if c.LocalAddr().Network() != "sctp" || c.RemoteAddr().Network() != "sctp" {
		t.Errorf("addresses %v %v", c.LocalAddr(), c.RemoteAddr())
	}
	// SCTP_NODELAY is on by default, on both ends.
	for _, conn := range []net.Conn{c, s} {
		if v := noDelay(t, conn); v != 1 {
			t.Errorf("SCTP_NODELAY = %d on %v", v, conn.LocalAddr())
		}
	}
}

func TestMultihomed(t *testing.T) {
	requireKernel(t)
	// Two loopback addresses per side: 127.0.0.0/8 is all local on Linux.
	c, s, ln := pair(t, Kind{}, "127.0.0.1,127.0.0.2", "127.0.0.1:0,127.0.0.3")
	if got := ln.Addr().String(); !strings.HasPrefix(got, "127.0.0.1,127.0.0.3:") {
		t.Errorf("listener address %q", got)
	}
	go func() { _, _ = io.Copy(s, s) }()
	if _, err := c.Write([]byte("two paths")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "two paths" {
		t.Fatalf("echo %q, %v", buf, err)
	}
}

func TestCloseEOF(t *testing.T) {
	requireKernel(t)
	c, s, _ := pair(t, Kind{}, "", "127.0.0.1:0")
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*Conn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "bye" {
		t.Fatalf("read %q, %v; want bye, EOF", got, err)
	}
	_ = c.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
}

func TestDeadline(t *testing.T) {
	requireKernel(t)
	c, _, _ := pair(t, Kind{}, "", "127.0.0.1:0")
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past deadline: %v", err)
	}
}

func TestDialRefused(t *testing.T) {
	requireKernel(t)
	ln, err := Kind{}.Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := (Kind{}).Dial(ctx, "", addr); err == nil {
		t.Fatal("Dial to a closed port succeeded")
	}
}

func noDelay(t *testing.T, c net.Conn) int {
	t.Helper()
	return getNoDelay(t, c)
}

// TestLanesKernel runs lanes over a real association: the dialer writes on
// lanes 0, 1 and 2 at once, the listener accepts lanes 1 and 2 and reads
// each back in order, and answers on lane 2.
func TestLanesKernel(t *testing.T) {
	requireKernel(t)
	c, s, _ := pair(t, Kind{}, "127.0.0.1", "127.0.0.1:0")
	cl, sl := c.(channel.Lanes), s.(channel.Lanes)
	payload := func(lane, size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(lane*31 + i/977)
		}
		return b
	}
	sizes := map[uint16]int{0: 100 << 10, 1: 1 << 20, 2: 3000}
	errs := make(chan error, 3)
	for id, size := range sizes {
		go func() {
			conn := c
			if id != 0 {
				var err error
				if conn, err = cl.OpenLane(id); err != nil {
					errs <- err
					return
				}
			}
			_, err := conn.Write(payload(int(id), size))
			errs <- err
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := map[uint16]net.Conn{0: s}
	for range 2 {
		id, l, err := sl.AcceptLane(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got[id] != nil {
			t.Fatalf("lane %d accepted twice", id)
		}
		got[id] = l
	}
	for range sizes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for id, size := range sizes {
		l := got[id]
		if l == nil {
			t.Fatalf("lane %d not accepted", id)
		}
		if b := readN(t, l, size); !bytes.Equal(b, payload(int(id), size)) {
			t.Errorf("lane %d: bytes differ", id)
		}
	}
	if _, err := got[2].Write([]byte("back on 2")); err != nil {
		t.Fatal(err)
	}
	l2, _ := cl.OpenLane(2)
	if b := readN(t, l2, 9); string(b) != "back on 2" {
		t.Errorf("answer %q", b)
	}
	if _, err := cl.OpenLane(numStreams); err == nil {
		t.Errorf("OpenLane(%d) beyond the negotiated streams succeeded", numStreams)
	}
	// Closing the channel ends AcceptLane.
	done := make(chan error, 1)
	go func() { _, _, err := cl.AcceptLane(context.Background()); done <- err }()
	_ = c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("AcceptLane after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end AcceptLane")
	}
}
