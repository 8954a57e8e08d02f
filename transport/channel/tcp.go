package channel

import (
	"context"
	"net"
	"syscall"
	"time"
)

func init() {
	Register(TCP{})
	Register(TCP{Multipath: true})
}

// TCP is a plain TCP channel, or a Linux MPTCP one when Multipath is set
// (Go falls back to TCP where the kernel lacks MPTCP).
type TCP struct {
	Multipath bool
}

// Name implements Kind.
func (t TCP) Name() string {
	if t.Multipath {
		return "mptcp"
	}
	return "tcp"
}

// Dial implements Kind.
func (t TCP) Dial(ctx context.Context, local, remote string) (net.Conn, error) {
	la, err := ResolveLocal(local)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{KeepAlive: -1, Timeout: 10 * time.Second}
	if la != nil {
		d.LocalAddr = la
	}
	d.SetMultipathTCP(t.Multipath)
	if mss := dialOptions(ctx).MSS; mss > 0 {
		d.Control = func(_, _ string, raw syscall.RawConn) error { return setMSS(raw, mss) }
	}
	c, err := d.DialContext(ctx, "tcp", remote)
	if err != nil {
		return nil, err
	}
	tune(c)
	return c, nil
}

// Listen implements Kind.
func (t TCP) Listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	lc.SetMultipathTCP(t.Multipath)
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return tunedListener{ln}, nil
}

type tunedListener struct{ net.Listener }

func (l tunedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		tune(c)
	}
	return c, err
}
