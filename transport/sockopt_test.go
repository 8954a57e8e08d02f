package transport

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
)

// Socket options (iperf3's -C and -w) reach every channel's socket: on
// the dialing side from Config.Socket, on the accepting side from
// SetSocketOptions on the running session. A congestion control the kernel lacks, or a
// channel without TCP sockets, fails with an error naming it.
func TestSocketOptions(t *testing.T) {
	if _, err := os.Stat("/proc/sys/net/ipv4/tcp_congestion_control"); err != nil {
		t.Skip("no TCP_CONGESTION here (not Linux)")
	}
	want := channel.SocketOptions{Congestion: "reno", Buffer: 256 << 10}
	c, s := pair(t, 2, func(cfg *Config) {
		if cfg.Socket.IsZero() {
			cfg.Socket = want
		}
	})
	// pair gives both configs the options; the server's listener
	// applies them too: check each side, then change the server's.
	for name, sess := range map[string]*Session{"client": c, "server": s} {
		i := sess.SocketInfo()
		// Linux doubles the buffer sizes it is given.
		if i.Congestion != "reno" || i.SendBuffer < want.Buffer || i.ReceiveBuffer < want.Buffer || i.SendBuffer > 4*want.Buffer {
			t.Errorf("%s: socket %+v, want reno and buffers of %d", name, i, want.Buffer)
		}
	}
	if err := s.SetSocketOptions(channel.SocketOptions{Congestion: "cubic"}); err != nil {
		t.Fatal(err)
	}
	if got := s.SocketInfo().Congestion; got != "cubic" {
		t.Errorf("server after SetSocketOptions: %q, want cubic", got)
	}
	// TOS (iperf3 -S).
	if err := c.SetSocketOptions(channel.SocketOptions{TOS: 0x28}); err != nil {
		t.Fatal(err)
	}
	if i := c.SocketInfo(); i.TOS != 0x28 {
		t.Errorf("client after TOS 0x28: %+v", i)
	}
	if err := c.SetSocketOptions(channel.SocketOptions{TOS: 256}); err == nil || !strings.Contains(err.Error(), "TOS 256") {
		t.Errorf("TOS 256: %v", err)
	}
	// Data still flows with the options set.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	roundTrip(t, ctx, c, s)

	err := s.SetSocketOptions(channel.SocketOptions{Congestion: "no-such-cc"})
	if err == nil || !strings.Contains(err.Error(), `TCP_CONGESTION "no-such-cc"`) || !strings.Contains(err.Error(), "this kernel has: ") {
		t.Errorf("unknown algorithm: %v", err)
	}

	lctx, lcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer lcancel()
	cfg := testConfig(t)
	ln, err := Listen(lctx, []string{"127.0.0.1:0"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bad := testConfig(t)
	bad.Socket = channel.SocketOptions{Congestion: "no-such-cc"}
	if _, err := Dial(lctx, []Path{{Remote: ln.Addrs()[0].String()}}, bad); err == nil || !strings.Contains(err.Error(), "no-such-cc") {
		t.Errorf("Dial with an unknown algorithm: %v", err)
	}
	bad.Socket = channel.SocketOptions{Buffer: -1}
	if _, err := Dial(lctx, []Path{{Remote: ln.Addrs()[0].String()}}, bad); err == nil || !strings.Contains(err.Error(), "socket buffer -1") {
		t.Errorf("Dial with a negative buffer: %v", err)
	}
}

// A channel kind without TCP sockets refuses socket options by name.
func TestSocketOptionsNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	err := channel.SocketOptions{Congestion: "reno"}.Apply(a)
	if err == nil || !strings.Contains(err.Error(), "apply to tcp and mptcp channels") {
		t.Errorf("Apply on a non-TCP conn: %v", err)
	}
	if err := (channel.SocketOptions{}).Apply(a); err != nil {
		t.Errorf("zero options on a non-TCP conn: %v", err)
	}
}

// MSS (iperf3 -M) is set when a channel is dialed, before it connects, so
// the dialer announces it and both ends send segments of at most MSS.
func TestSocketOptionsMSS(t *testing.T) {
	if _, err := os.Stat("/proc/sys/net/ipv4/tcp_congestion_control"); err != nil {
		t.Skip("no TCP_MAXSEG here (not Linux)")
	}
	c, s := pair(t, 2, func(cfg *Config) { cfg.Socket = channel.SocketOptions{MSS: 1000} })
	for name, sess := range map[string]*Session{"client": c, "server": s} {
		if i := sess.SocketInfo(); i.MaxSegmentSize == 0 || i.MaxSegmentSize > 1000 {
			t.Errorf("%s: MSS %d, want at most 1000", name, i.MaxSegmentSize)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	roundTrip(t, ctx, c, s)
	if err := (channel.SocketOptions{MSS: 10}).Check(); err == nil || !strings.Contains(err.Error(), "MSS 10") {
		t.Errorf("MSS 10: %v", err)
	}
}
