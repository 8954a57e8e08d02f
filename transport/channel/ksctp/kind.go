package ksctp

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
)

var errNoRemote = errors.New("no remote address")

func init() {
	channel.Register(Kind{})
}

// Kind is the "sctp" channel kind.
type Kind struct {
	Config Config
}

// Name implements channel.Kind.
func (Kind) Name() string { return "sctp" }

// Dial implements channel.Kind. local and remote may be address lists (see
// the package documentation); the association binds every local address
// and knows every remote one.
func (k Kind) Dial(ctx context.Context, local, remote string) (net.Conn, error) {
	if err := k.Config.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, k.Config.timeout())
	defer cancel()
	raddr, err := ParseAddr(ctx, nil, remote, true)
	if err != nil {
		return nil, err
	}
	if len(raddr.IPs) == 0 {
		return nil, &net.OpError{Op: "dial", Net: "sctp", Addr: raddr, Err: errNoRemote}
	}
	laddr, err := ParseAddr(ctx, nil, local, false)
	if err != nil {
		return nil, err
	}
	c, err := dial(ctx, &k.Config, laddr, raddr)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "sctp", Source: laddr, Addr: raddr, Err: err}
	}
	return c, nil
}

// Listen implements channel.Kind. addr may be an address list (see the
// package documentation); ":port" listens on every local address.
func (k Kind) Listen(ctx context.Context, addr string) (net.Listener, error) {
	if err := k.Config.Validate(); err != nil {
		return nil, err
	}
	laddr, err := ParseAddr(ctx, nil, addr, true)
	if err != nil {
		return nil, err
	}
	ln, err := listen(&k.Config, laddr)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "sctp", Addr: laddr, Err: err}
	}
	return ln, nil
}

// Conn is one kernel SCTP association as a net.Conn.
type Conn struct {
	net.Conn // a *net.TCPConn over the SCTP socket: the stream-socket plumbing
	laddr    *Addr
	raddr    *Addr

	// mux reads the socket and hands each SCTP stream's data to its lane;
	// lane 0 is this Conn. Nil where there are no lanes (the tests' TCP
	// stand-in): Read then reads the socket directly.
	mux  *mux
	lane *lane // lane 0, when mux is set

	lmu   sync.Mutex
	lanes map[uint16]*Lane
}

// LocalAddr implements net.Conn: the address the association was set up
// from (the primary local one when several are bound).
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr implements net.Conn: the peer's primary address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// maxMessage is the largest SCTP message one Write sends: the kernel
// takes a message whole or not at all, so a Write larger than the socket
// buffer would never go out in one piece.
const maxMessage = 64 << 10

// Write implements net.Conn: p goes out as SCTP messages of at most 64 KiB
// on stream 0, which the peer reads back as one ordered byte stream.
func (c *Conn) Write(p []byte) (int, error) {
	if c.mux != nil {
		n, err := c.lane.write(p, c.Conn.Write)
		if err != nil && !isOpError(err) {
			err = &net.OpError{Op: "write", Net: "sctp", Source: c.laddr, Addr: c.raddr, Err: err}
		}
		return n, err
	}
	n := 0
	for n < len(p) {
		m, err := c.Conn.Write(p[n:min(len(p), n+maxMessage)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Read implements net.Conn: the bytes the peer wrote on stream 0, in
// order.
func (c *Conn) Read(p []byte) (int, error) {
	if c.mux == nil {
		return c.Conn.Read(p)
	}
	n, err := c.lane.read(p)
	if err != nil && err != io.EOF {
		err = &net.OpError{Op: "read", Net: "sctp", Source: c.laddr, Addr: c.raddr, Err: err}
	}
	return n, err
}

// SetDeadline implements net.Conn.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.mux == nil {
		return c.Conn.SetReadDeadline(t)
	}
	c.lane.setReadDeadline(t)
	return nil
}

// SetWriteDeadline implements net.Conn. The socket's deadline is shared
// with the lanes' (see lane.setWriteDeadline).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.mux == nil {
		return c.Conn.SetWriteDeadline(t)
	}
	return c.lane.setWriteDeadline(t)
}

// Close implements net.Conn: it ends the association and every lane,
// waking their readers, writers and AcceptLane.
func (c *Conn) Close() error {
	if c.mux != nil {
		c.mux.close()
	}
	return c.Conn.Close()
}

func isOpError(err error) bool {
	_, ok := err.(*net.OpError)
	return ok
}

// CloseWrite starts the SCTP SHUTDOWN: the peer reads io.EOF after the
// data already written, and this side can still read.
func (c *Conn) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

// wrap turns the TCPConn that net.FileConn made of an SCTP socket into a
// Conn that reports "sctp" addresses.
func wrap(c net.Conn) *Conn {
	return &Conn{Conn: c, laddr: fromTCP(c.LocalAddr()), raddr: fromTCP(c.RemoteAddr())}
}

func fromTCP(a net.Addr) *Addr {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta == nil {
		return &Addr{}
	}
	return &Addr{IPs: []net.IPAddr{{IP: ta.IP, Zone: ta.Zone}}, Port: ta.Port}
}

// listener hands out Conns.
type listener struct {
	net.Listener // a *net.TCPListener over the SCTP socket
	addr         *Addr
	cfg          *Config
	noDelay      func(fd int, on bool) error
	wrap         func(net.Conn) (*Conn, error)
}

// Accept implements net.Listener. An association that cannot be set up
// (its options or lanes) is closed and skipped: it is that peer's
// failure, not the listener's, and the caller's accept loop goes on.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := setNoDelay(c, l.noDelay, !l.cfg.Nagle); err != nil {
			_ = c.Close()
			continue
		}
		if l.wrap == nil {
			return wrap(c), nil
		}
		kc, err := l.wrap(c)
		if err != nil {
			_ = c.Close()
			continue
		}
		return kc, nil
	}
}

// Addr implements net.Listener: every address bound, with the port (which
// the kernel chose if the listen address had port 0).
func (l *listener) Addr() net.Addr {
	a := fromTCP(l.Listener.Addr())
	if len(l.addr.IPs) > 1 {
		a.IPs = l.addr.IPs
	}
	return a
}
