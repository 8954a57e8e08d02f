//go:build linux

package ksctp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// From linux/sctp.h; golang.org/x/sys/unix does not define them.
const (
	solSCTP             = 132 // SOL_SCTP
	sctpNoDelay         = 3   // SCTP_NODELAY
	sctpSockoptBindxAdd = 100 // SCTP_SOCKOPT_BINDX_ADD
	sctpSockoptConnectx = 110 // SCTP_SOCKOPT_CONNECTX
)

// proto is the protocol-specific part of dialing and listening: the
// socket's protocol, how it binds and connects to an address list, and its
// no-delay option. sctpProto is the real one; the tests drive the same
// poller plumbing with a TCP stand-in where the kernel lacks SCTP.
type proto struct {
	num     int
	bind    func(fd int, b []byte) error // packed sockaddrs, all on one port
	connect func(fd int, b []byte) error // packed sockaddrs; EINPROGRESS expected
	noDelay func(fd int, on bool) error
	// setopt sets one socket option from its bytes: Config's knobs
	// (sockopts).
	setopt func(fd, level, opt int, b []byte) error
	// lanes: ask for numStreams streams (SCTP_INITMSG) and demultiplex
	// them (lanesWrap). The TCP stand-in has none.
	lanes bool
}

var sctpProto = proto{
	num: unix.IPPROTO_SCTP,
	bind: func(fd int, b []byte) error {
		return os.NewSyscallError("sctp_bindx", unix.SetsockoptString(fd, solSCTP, sctpSockoptBindxAdd, string(b)))
	},
	// sctp_connectx: start the handshake to all remote addresses at once.
	connect: func(fd int, b []byte) error {
		return unix.SetsockoptString(fd, solSCTP, sctpSockoptConnectx, string(b))
	},
	noDelay: setsockoptNoDelay,
	setopt:  setsockopt,
	lanes:   true,
}

// setInitMsg asks for numStreams streams each way on associations fd sets
// up.
func (p proto) setInitMsg(fd int) error {
	if !p.lanes {
		return nil
	}
	if err := p.setopt(fd, solSCTP, sctpInitMsg, initMsg(numStreams)); err != nil {
		return fmt.Errorf("ksctp: %w", os.NewSyscallError("setsockopt SCTP_INITMSG", err))
	}
	return nil
}

// wrap makes a Conn of a connected socket: with lanes, or plain.
func (p proto) wrap(c net.Conn) (*Conn, error) {
	if !p.lanes {
		return wrap(c), nil
	}
	return lanesWrap(c)
}

// The system calls whose failures say that the kernel lacks SCTP; the
// tests replace them to take those paths on any kernel.
var (
	sysSocket = unix.Socket
	sysListen = unix.Listen
)

// Available reports whether the kernel can run a session over SCTP: it
// opens an SCTP socket and listens on it (on an ephemeral port of every
// address), which also needs the HMAC transform of SCTP's cookie (the
// hmac module): with sctp loaded but not hmac, socket works and listen
// fails. The error wraps ErrUnavailable and says what to load.
func Available() error {
	fd, err := socket(unix.AF_INET, unix.IPPROTO_SCTP)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return listenSCTP(fd, 1)
}

// listenSCTP listens on an SCTP socket. The kernel sets up the cookie's
// HMAC (net.sctp.cookie_hmac_alg, hmac(md5) by default) here, so a
// missing hmac module shows as ENOSYS.
func listenSCTP(fd, backlog int) error {
	err := sysListen(fd, backlog)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: listen on an SCTP socket: %w: the kernel lacks the HMAC of SCTP's cookie (net.sctp.cookie_hmac_alg); load the hmac module (modprobe hmac)",
			ErrUnavailable, err)
	}
	return os.NewSyscallError("listen", err)
}

// socket opens a non-blocking one-to-one (SOCK_STREAM) socket.
func socket(family, proto int) (int, error) {
	fd, err := sysSocket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err == nil {
		return fd, nil
	}
	if proto != unix.IPPROTO_SCTP {
		return -1, os.NewSyscallError("socket", err)
	}
	name := "AF_INET"
	if family == unix.AF_INET6 {
		name = "AF_INET6"
	}
	switch {
	case errors.Is(err, unix.EPROTONOSUPPORT), errors.Is(err, unix.ESOCKTNOSUPPORT),
		errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return -1, fmt.Errorf("%w: socket(%s, SOCK_STREAM, IPPROTO_SCTP): %w; load the sctp module (modprobe sctp)",
			ErrUnavailable, name, err)
	}
	return -1, os.NewSyscallError("socket", err)
}

func family(addrs ...*Addr) int {
	for _, a := range addrs {
		if a.hasIPv6() {
			return unix.AF_INET6
		}
	}
	return unix.AF_INET
}

// bindAll binds fd to every address of a (sctp_bindx with
// SCTP_BINDX_ADD_ADDR), or to the wildcard address with a's port when a
// has none.
func (p proto) bindAll(fd, fam int, a *Addr) error {
	if len(a.IPs) == 0 {
		var sa unix.Sockaddr = &unix.SockaddrInet4{Port: a.Port}
		if fam == unix.AF_INET6 {
			sa = &unix.SockaddrInet6{Port: a.Port}
		}
		return os.NewSyscallError("bind", unix.Bind(fd, sa))
	}
	b, err := packSockaddrs(a, zoneIndex)
	if err != nil {
		return err
	}
	return p.bind(fd, b)
}

func setsockoptNoDelay(fd int, on bool) error {
	v := 0
	if on {
		v = 1
	}
	return os.NewSyscallError("setsockopt SCTP_NODELAY", unix.SetsockoptInt(fd, solSCTP, sctpNoDelay, v))
}

// setNoDelay sets the no-delay option on a socket the poller already owns.
func setNoDelay(c net.Conn, set func(fd int, on bool) error, on bool) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = set(int(fd), on) }); err != nil {
		return err
	}
	return serr
}

func dial(ctx context.Context, cfg *Config, laddr, raddr *Addr) (net.Conn, error) {
	return sctpProto.dial(ctx, cfg, laddr, raddr)
}

func (p proto) dial(ctx context.Context, cfg *Config, laddr, raddr *Addr) (net.Conn, error) {
	fam := family(laddr, raddr)
	fd, err := socket(fam, p.num)
	if err != nil {
		return nil, err
	}
	owned := false // once os.NewFile has it, f.Close closes fd
	defer func() {
		if !owned {
			_ = unix.Close(fd)
		}
	}()
	if err := p.noDelay(fd, !cfg.Nagle); err != nil {
		return nil, err
	}
	if err := setOpts(fd, cfg, p.setopt); err != nil {
		return nil, err
	}
	if err := p.setInitMsg(fd); err != nil {
		return nil, err
	}
	if len(laddr.IPs) > 0 || laddr.Port != 0 {
		if err := p.bindAll(fd, fam, laddr); err != nil {
			return nil, err
		}
	}
	b, err := packSockaddrs(raddr, zoneIndex)
	if err != nil {
		return nil, err
	}
	// A non-blocking socket answers EINPROGRESS.
	cerr := p.connect(fd, b)
	if cerr != nil && !errors.Is(cerr, unix.EINPROGRESS) {
		return nil, os.NewSyscallError("connect", cerr)
	}
	f := os.NewFile(uintptr(fd), "sctp")
	owned = true
	defer f.Close() // net.FileConn keeps a duplicate
	if cerr != nil {
		if err := waitConnected(ctx, f); err != nil {
			return nil, err
		}
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	kc, err := p.wrap(c)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return kc, nil
}

// waitConnected waits, in the runtime poller, for the non-blocking connect
// on f to finish, as package net does for TCP: writability, then SO_ERROR,
// then getpeername to tell a real connection from a spurious wakeup.
func waitConnected(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = f.SetWriteDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(aLongTimeAgo) })
	defer stop()
	// The callback checks the socket first and only then lets the poller
	// wait: RawConn.Write resets the poller's readiness before its first
	// call, so a connect that finished before that shows in the socket's
	// state, not as an event.
	var cerr error
	err = rc.Write(func(fd uintptr) bool {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			cerr = os.NewSyscallError("getsockopt SO_ERROR", err)
			return true
		}
		switch e := syscall.Errno(v); e {
		case 0:
			if _, err := unix.Getpeername(int(fd)); err == nil {
				return true
			}
			return false // not connected yet
		case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
			return false
		default:
			cerr = os.NewSyscallError("connect", e)
			return true
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return cerr
}

func listen(cfg *Config, laddr *Addr) (net.Listener, error) {
	return sctpProto.listen(cfg, laddr)
}

func (p proto) listen(cfg *Config, laddr *Addr) (net.Listener, error) {
	fam := family(laddr)
	if len(laddr.IPs) == 0 {
		fam = unix.AF_INET6 // the wildcard: dual-stack where IPv6 exists
	}
	fd, err := socket(fam, p.num)
	if err != nil && fam == unix.AF_INET6 && len(laddr.IPs) == 0 && errors.Is(err, unix.EAFNOSUPPORT) {
		fam = unix.AF_INET
		fd, err = socket(fam, p.num)
	}
	if err != nil {
		return nil, err
	}
	owned := false
	defer func() {
		if !owned {
			_ = unix.Close(fd)
		}
	}()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return nil, os.NewSyscallError("setsockopt SO_REUSEADDR", err)
	}
	if err := p.noDelay(fd, !cfg.Nagle); err != nil {
		return nil, err
	}
	// Accepted associations inherit these from the listening socket.
	if err := setOpts(fd, cfg, p.setopt); err != nil {
		return nil, err
	}
	if err := p.setInitMsg(fd); err != nil {
		return nil, err
	}
	if err := p.bindAll(fd, fam, laddr); err != nil {
		return nil, err
	}
	if p.num == unix.IPPROTO_SCTP {
		err = listenSCTP(fd, cfg.backlog())
	} else if err = sysListen(fd, cfg.backlog()); err != nil {
		err = os.NewSyscallError("listen", err)
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "sctp-listener")
	owned = true
	defer f.Close() // net.FileListener keeps a duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	return &listener{Listener: ln, addr: laddr, cfg: cfg, noDelay: p.noDelay, wrap: p.wrap}, nil
}
