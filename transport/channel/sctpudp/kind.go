package sctpudp

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/braid-hpc/braid/transport/channel"
	"github.com/pion/sctp"
)

func init() {
	channel.Register(Kind{})
}

// Kind is the "sctp-udp" channel kind. The zero value uses Config's
// defaults.
type Kind struct {
	Config Config
}

// Name implements channel.Kind.
func (Kind) Name() string { return "sctp-udp" }

// Dial implements channel.Kind: it binds a UDP socket to local (host or
// host:port; empty means any), connects it to remote and runs the SCTP
// handshake, within Config.HandshakeTimeout. The returned net.Conn is a
// *Stream: stream 0 of the new association.
func (k Kind) Dial(ctx context.Context, local, remote string) (net.Conn, error) {
	cfg, err := k.Config.populate()
	if err != nil {
		return nil, err
	}
	d := net.Dialer{}
	if local != "" {
		la, err := channel.ResolveLocal(local)
		if err != nil {
			return nil, err
		}
		d.LocalAddr = &net.UDPAddr{IP: la.IP, Port: la.Port}
	}
	c, err := d.DialContext(ctx, "udp", remote)
	if err != nil {
		return nil, err
	}
	uc := &udpConn{UDPConn: c.(*net.UDPConn)}
	_ = uc.SetReadBuffer(cfg.ReceiveBuffer)
	if cfg.SendBuffer > 0 {
		_ = uc.SetWriteBuffer(cfg.SendBuffer)
	} else {
		uc.tuner = newSendTuner(uc.SetWriteBuffer)
	}

	hctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	a, err := sctp.ClientContext(hctx, clientOptions(&cfg, initFixConn{uc})...)
	if err != nil {
		_ = uc.Close()
		if rerr := uc.readErr(); rerr != nil && errors.Is(err, sctp.ErrAssociationClosedBeforeConn) {
			err = rerr // say "connection refused" rather than pion's summary
		}
		return nil, &net.OpError{Op: "dial", Net: "sctp-udp", Source: uc.LocalAddr(), Addr: uc.RemoteAddr(), Err: err}
	}
	as, err := newAssoc(a, &cfg, uc.LocalAddr(), uc.RemoteAddr())
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	as.tuner = uc.tuner
	cfg.Logger.Debug("sctp-udp: association up", "path", remote, "local", uc.LocalAddr().String())
	return as.main, nil
}

// Listen implements channel.Kind: it binds one UDP socket to addr and runs
// an SCTP association with each peer address that sends a valid INIT. The
// listener's Accept returns *Stream values: stream 0 of each association.
//
// Closing the listener stops new associations; accepted ones keep the
// socket open until they are closed.
func (k Kind) Listen(ctx context.Context, addr string) (net.Listener, error) {
	cfg, err := k.Config.populate()
	if err != nil {
		return nil, err
	}
	return listen(ctx, &cfg, addr)
}

func clientOptions(cfg *Config, nc net.Conn) []sctp.ClientOption {
	opts := cfg.options(nc, "client "+nc.RemoteAddr().String())
	out := make([]sctp.ClientOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

func serverOptions(cfg *Config, nc net.Conn) []sctp.ServerOption {
	opts := cfg.options(nc, "server "+nc.RemoteAddr().String())
	out := make([]sctp.ServerOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// resolveUDP resolves addr (host:port) for the local side of a listener.
func resolveUDP(ctx context.Context, addr string) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("sctpudp: listen address %q: %w", addr, err)
	}
	var r net.Resolver
	p, err := r.LookupPort(ctx, "udp", port)
	if err != nil {
		return nil, fmt.Errorf("sctpudp: listen address %q: %w", addr, err)
	}
	if host == "" {
		return &net.UDPAddr{Port: p}, nil
	}
	ips, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("sctpudp: listen address %q: %w", addr, err)
	}
	return &net.UDPAddr{IP: ips[0].IP, Port: p, Zone: ips[0].Zone}, nil
}
