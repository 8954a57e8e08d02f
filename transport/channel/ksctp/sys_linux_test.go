//go:build linux

package ksctp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// getNoDelay reads SCTP_NODELAY off c's socket.
func getNoDelay(t *testing.T, c net.Conn) int {
	t.Helper()
	return sockoptInt(t, c, solSCTP, sctpNoDelay)
}

// tcpStandIn runs the SCTP code path over TCP, for kernels without SCTP:
// same non-blocking socket, packed sockaddrs (first address only), poller
// wait for the connect, net.FileConn and net.FileListener.
var tcpStandIn = proto{
	num: unix.IPPROTO_TCP,
	bind: func(fd int, b []byte) error {
		return unix.Bind(fd, firstSockaddr(b))
	},
	connect: func(fd int, b []byte) error {
		return unix.Connect(fd, firstSockaddr(b))
	},
	noDelay: func(fd int, on bool) error {
		v := 0
		if on {
			v = 1
		}
		return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, v)
	},
	setopt: setsockopt, // the SOL_SOCKET ones; the tests fake SOL_SCTP
}

// firstSockaddr decodes the first struct sockaddr_in of a packed list.
func firstSockaddr(b []byte) unix.Sockaddr {
	sa := &unix.SockaddrInet4{Port: int(b[2])<<8 | int(b[3])}
	copy(sa.Addr[:], b[4:8])
	return sa
}

func TestPollerPlumbingTCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	loop, err := ParseAddr(ctx, nil, "127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tcpStandIn.listen(&Config{}, loop)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raddr, err := ParseAddr(ctx, nil, ln.Addr().String(), true)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- s
		_, _ = io.Copy(s, s)
		_ = s.Close()
	}()
	local, _ := ParseAddr(ctx, nil, "127.0.0.1", false)
	c, err := tcpStandIn.dial(ctx, &Config{}, local, raddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	if sockoptInt(t, c, unix.IPPROTO_TCP, unix.TCP_NODELAY) != 1 || sockoptInt(t, s, unix.IPPROTO_TCP, unix.TCP_NODELAY) != 1 {
		t.Error("no-delay not set on both ends")
	}
	msg := bytes.Repeat([]byte("x"), 300<<10) // several 64 KiB writes
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(got); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past deadline: %v", err)
	}
	if c.RemoteAddr().String() != ln.Addr().String() || c.LocalAddr().Network() != "sctp" {
		t.Errorf("addresses %v -> %v, listener %v", c.LocalAddr(), c.RemoteAddr(), ln.Addr())
	}
	if err := c.(*Conn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(got); err != io.EOF {
		t.Fatalf("Read after CloseWrite and the echo's close: %v, want EOF", err)
	}

	// A refused connect comes back through SO_ERROR.
	_ = ln.Close()
	if _, err := tcpStandIn.dial(ctx, &Config{}, &Addr{}, raddr); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("dial to a closed port: %v, want ECONNREFUSED", err)
	}
}

// sockoptInt reads an integer socket option off c's socket.
func sockoptInt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	if kc, ok := c.(*Conn); ok {
		c = kc.Conn
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	_ = rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, opt) })
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// TestAcceptSkipsFailedSetup: an association whose setup fails is closed
// and skipped; Accept returns the next one instead of an error that would
// stop the caller's accept loop.
func TestAcceptSkipsFailedSetup(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fails := 2
	ln := &listener{Listener: tl, addr: &Addr{}, cfg: &Config{},
		noDelay: func(fd int, on bool) error {
			if fails > 0 {
				fails--
				return syscall.ENOMEM
			}
			return nil
		}}
	defer ln.Close()
	var dialed []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", tl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dialed = append(dialed, c)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("Accept = %v, want the third association", err)
	}
	defer c.Close()
	if fails != 0 {
		t.Errorf("%d setups left to fail", fails)
	}
	for i, d := range dialed[:2] {
		_ = d.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := d.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("association %d, whose setup failed, was not closed: %v", i, err)
		}
	}
}

// withoutSCTP makes socket(..., IPPROTO_SCTP) fail as on a kernel without
// the sctp module, until t ends.
func withoutSCTP(t testing.TB) {
	t.Helper()
	old := sysSocket
	sysSocket = func(family, typ, proto int) (int, error) {
		if proto == unix.IPPROTO_SCTP {
			return -1, unix.EPROTONOSUPPORT
		}
		return old(family, typ, proto)
	}
	t.Cleanup(func() { sysSocket = old })
}

// TestUnavailableWithoutHMAC: with sctp loaded but not hmac, socket works
// and listen fails with ENOSYS. Available must say no, and name hmac; the
// socket it opened is closed. A TCP socket stands in for the SCTP one.
func TestUnavailableWithoutHMAC(t *testing.T) {
	oldSocket, oldListen := sysSocket, sysListen
	t.Cleanup(func() { sysSocket, sysListen = oldSocket, oldListen })
	opened := -1
	sysSocket = func(family, typ, proto int) (int, error) {
		fd, err := oldSocket(family, typ, unix.IPPROTO_TCP)
		opened = fd
		return fd, err
	}
	listened := 0
	sysListen = func(fd, backlog int) error {
		listened++
		if fd != opened {
			t.Errorf("listen on fd %d, socket opened %d", fd, opened)
		}
		return unix.ENOSYS
	}
	err := Available()
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, unix.ENOSYS) {
		t.Fatalf("Available() = %v, want ErrUnavailable wrapping ENOSYS", err)
	}
	for _, s := range []string{"listen on an SCTP socket", "modprobe hmac"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	if listened != 1 {
		t.Errorf("listen called %d times, want 1", listened)
	}
	if _, err := unix.FcntlInt(uintptr(opened), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Errorf("Available left its socket %d open: F_GETFD %v", opened, err)
	}
	// Another listen error is not "unavailable".
	sysListen = func(int, int) error { return unix.EADDRINUSE }
	if err := Available(); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("Available() with EADDRINUSE = %v, want an error that is not ErrUnavailable", err)
	}
}
