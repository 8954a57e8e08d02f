package channel

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// SocketOptions are settings of a channel's socket that a user asks for,
// as iperf3's -C (congestion control) and -w (socket buffers) set them on
// its sockets. The zero value changes nothing. They apply to TCP and MPTCP
// channels; a channel of another kind refuses them (Apply).
type SocketOptions struct {
	// Congestion names the TCP congestion control algorithm
	// (TCP_CONGESTION), e.g. "cubic", "reno", "bbr"; "": the system's.
	Congestion string `json:"congestion,omitempty"`
	// Buffer sets both socket buffers (SO_SNDBUF, SO_RCVBUF) in bytes;
	// the kernel doubles it and caps it at net.core.wmem_max/rmem_max.
	// 0: the kernel's autotuning.
	Buffer int `json:"buffer,omitempty"`
	// MSS, if not 0, is the TCP maximum segment size (TCP_MAXSEG) a
	// dialed channel announces and sends with, so both directions use
	// segments of at most MSS bytes. The kernel fixes it at connect: it
	// is set when the channel is dialed (Dial with a context from
	// WithSocketOptions) and ignored by Apply and by accepted channels.
	MSS int `json:"mss,omitempty"`
	// TOS sets the IP type of service byte (IP_TOS, or IPV6_TCLASS on
	// IPv6): DSCP in its upper 6 bits; 0: none.
	TOS int `json:"tos,omitempty"`
}

// IsZero reports whether o changes nothing.
func (o SocketOptions) IsZero() bool { return o == SocketOptions{} }

type dialOptionsKey struct{}

// WithSocketOptions returns a context whose dials of TCP and MPTCP
// channels set o's dial-time options (MSS) before they connect.
func WithSocketOptions(ctx context.Context, o SocketOptions) context.Context {
	if o.MSS == 0 {
		return ctx
	}
	return context.WithValue(ctx, dialOptionsKey{}, o)
}

// dialOptions returns the options of WithSocketOptions.
func dialOptions(ctx context.Context) SocketOptions {
	o, _ := ctx.Value(dialOptionsKey{}).(SocketOptions)
	return o
}

// MaxBuffer bounds SocketOptions.Buffer.
const MaxBuffer = 1 << 30

// Check reports what is wrong with o before any socket is touched.
func (o SocketOptions) Check() error {
	if o.Buffer < 0 || o.Buffer > MaxBuffer {
		return fmt.Errorf("socket buffer %d bytes out of range 0..%d", o.Buffer, MaxBuffer)
	}
	if o.MSS != 0 && (o.MSS < 88 || o.MSS > 65535) {
		return fmt.Errorf("MSS %d out of range 88..65535", o.MSS)
	}
	if o.TOS < 0 || o.TOS > 255 {
		return fmt.Errorf("TOS %d out of range 0..255", o.TOS)
	}
	if len(o.Congestion) > 15 || strings.ContainsAny(o.Congestion, " /\x00") {
		return fmt.Errorf("congestion control %q: not an algorithm name", o.Congestion)
	}
	return nil
}

// Apply sets o on c's socket. c must be a TCP or MPTCP channel's
// connection unless o is zero.
func (o SocketOptions) Apply(c net.Conn) error {
	o.MSS = 0 // set at dial time only
	if o.IsZero() {
		return nil
	}
	if err := o.Check(); err != nil {
		return err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("socket options (congestion control, buffer size, TOS) apply to tcp and mptcp channels, not to this %T", c)
	}
	if o.Buffer > 0 {
		if err := tc.SetReadBuffer(o.Buffer); err != nil {
			return fmt.Errorf("SO_RCVBUF %d: %w", o.Buffer, err)
		}
		if err := tc.SetWriteBuffer(o.Buffer); err != nil {
			return fmt.Errorf("SO_SNDBUF %d: %w", o.Buffer, err)
		}
	}
	if o.TOS != 0 {
		if err := setTOS(tc, o.TOS); err != nil {
			return err
		}
	}
	if o.Congestion != "" {
		if err := setCongestion(tc, o.Congestion); err != nil {
			avail := "unknown"
			if b, rerr := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control"); rerr == nil {
				avail = strings.TrimSpace(string(b))
			}
			return fmt.Errorf("TCP_CONGESTION %q: %w (this kernel has: %s)", o.Congestion, err, avail)
		}
	}
	return nil
}

// SocketInfo is what a channel's socket runs with, as iperf3 reports it.
type SocketInfo struct {
	Congestion       string // "" where unknown
	SendBuffer       int    // SO_SNDBUF as the kernel reports it; 0 where unknown
	ReceiveBuffer    int    // SO_RCVBUF
	MaxSegmentSize   int    // TCP_MAXSEG; 0 where unknown
	TOS              int    // IP_TOS or IPV6_TCLASS
	IsTCPOrMultipath bool   // c is a TCP or MPTCP connection
}

// Info returns what c's socket runs with; the zero value for a
// connection that is not TCP or MPTCP.
func Info(c net.Conn) SocketInfo {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return SocketInfo{}
	}
	i := socketInfo(tc)
	i.IsTCPOrMultipath = true
	return i
}

// TCPInfo is what the kernel measures of a TCP connection (TCP_INFO), as
// iperf3 reports it per stream.
type TCPInfo struct {
	RTT         time.Duration // smoothed round trip (tcpi_rtt)
	SendCwnd    int64         // congestion window in bytes (tcpi_snd_cwnd * tcpi_snd_mss)
	Retransmits int64         // segments retransmitted since the connection opened (tcpi_total_retrans)
}
