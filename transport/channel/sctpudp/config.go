package sctpudp

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/pion/sctp"
)

// Limits and defaults.
const (
	// MaxMTU is the largest SCTP packet pion can receive.
	MaxMTU = 8192
	// minMTU leaves room for the common header, one I-DATA chunk header and
	// some payload.
	minMTU = 256

	defaultMTU              = 1452 // 1500-byte link less IPv6 and UDP headers
	defaultMaxMessageSize   = 64 << 10
	defaultMaxReceiveBuffer = 4 << 20
	defaultHandshakeTimeout = 10 * time.Second
	defaultLinger           = 2 * time.Second
	defaultBacklog          = 128
	defaultReceiveBuffer    = 4 << 20
	defaultRTOMax           = 3 * time.Second
	minRTOMax               = 10 * time.Millisecond
	maxRTOMax               = 24 * time.Hour
)

// fixedSendBuffer is the send buffer of a socket that is not tuned: the
// listener's, or any with Config.SendBuffer set.
func (c *Config) fixedSendBuffer() int {
	if c.SendBuffer > 0 {
		return c.SendBuffer
	}
	return autoSendMin
}

// Config tunes an sctp-udp channel. The zero value works.
type Config struct {
	// MTU is the largest SCTP packet sent, i.e. the UDP payload size. Zero
	// means from the path, per association: the MTU of the kernel's route
	// to the peer less the IP and UDP headers, at most MaxMTU. Over
	// loopback (MTU 65536) that is MaxMTU, which moves bulk data 2-4 times
	// as fast as 1452 for less than half the CPU (docs/sctp.md); over a 1500-byte link it is
	// 1472 (IPv4) or 1452 (IPv6). Where the kernel cannot say, 1452. At
	// most MaxMTU.
	MTU int

	// MaxMessageSize is the largest SCTP user message sent: Write cuts
	// longer byte runs into messages of this size. Zero means 64 KiB.
	MaxMessageSize int

	// MaxReceiveBuffer is the receive window advertised to the peer: the
	// bytes the association buffers before the reader takes them. Zero means
	// 4 MiB.
	MaxReceiveBuffer int

	// SendBuffer is the UDP socket's send buffer asked of the kernel
	// (SO_SNDBUF; Linux doubles it for bookkeeping and caps it at
	// net.core.wmem_max). It bounds the packets queued below pion, in the
	// local qdisc and device, and so is the only backpressure pion gets
	// from a slow link: a buffer larger than the link's queue lets a burst
	// overflow that queue and lose hundreds of packets at once, which
	// pion's loss recovery handles badly (docs/sctp.md, "sctp-udp bulk on
	// tbf links"). Zero sizes it to the rate: a dialed association's socket
	// holds about 10 ms of what it has been sending, from 64 KiB (up to
	// about 50 Mbit/s) to 1 MiB (sndbuf.go); a listener's socket, which
	// all its associations share, has 64 KiB.
	SendBuffer int

	// ReceiveBuffer is the UDP socket's receive buffer asked of the kernel
	// (SO_RCVBUF, capped at net.core.rmem_max): what arrives while pion's
	// read loop is busy. Zero means 4 MiB.
	ReceiveBuffer int

	// StreamSendBuffer, when positive, gives every stream its own send
	// buffer of about this many bytes: a Write waits only while its own
	// stream has that much written and not yet acknowledged, so streams do
	// not wait for each other. Zero means pion's blocking writes: the
	// association takes one Write at a time and the next waits until the
	// previous one's data has all left the send queue, whatever its
	// stream, so a stream of small messages waits behind another stream's
	// large ones (docs/benchmarks.md, "Head-of-line blocking under 1%
	// loss"). Both ends of the association may choose differently.
	StreamSendBuffer int

	// ZeroChecksum accepts SCTP packets with a zero checksum and, when the
	// peer accepts them too, sends them (RFC 9653). This saves the CRC32c
	// per packet but leaves integrity to the UDP checksum alone; pion
	// advertises DTLS as the alternate error detection method, so enable it
	// only where both ends are braid. False means every packet carries a
	// CRC32c.
	ZeroChecksum bool

	// RTOMax caps the retransmission timeout (pion's WithRTOMax): the
	// longest the sender waits for a SACK before it resends, and the
	// ceiling of its exponential backoff. pion's RTO.Initial and RTO.Min
	// are both fixed at 1 s (rtoInitial, rtoMin in its rtx_timer.go), so a
	// cap under 1 s also sets the timeout itself: with 200 ms, lost data
	// is resent after 200 ms instead of 1 s. The handshake retransmits its
	// INIT at most 8 times on the same timer, so a cap of a few
	// milliseconds gives up on a slow peer quickly. Zero means 3 s (pion's
	// and RFC 9260's 60 s lets one backed-off timer stall an association
	// for a minute, longer than braid's failover takes). From 10 ms to 24 h.
	RTOMax time.Duration

	// HandshakeTimeout bounds the INIT/COOKIE handshake of Dial (unless the
	// context ends sooner) and of each association a listener accepts.
	// Zero means 10 s.
	HandshakeTimeout time.Duration

	// Linger bounds how long Close waits for queued data to be acknowledged
	// and the SHUTDOWN exchange to finish before it aborts the association.
	// Close blocks that long at most, on a peer that has gone silent. Zero
	// means 2 s; negative means abort at once.
	Linger time.Duration

	// Backlog is how many handshaking or established-but-unaccepted
	// associations a listener holds; more INITs are dropped. Zero means 128.
	Backlog int

	// Logger receives lifecycle events and pion's own log lines, all at
	// Debug. Nil means slog.Default().
	Logger *slog.Logger
}

// populate returns c with defaults filled in, or an error for a value out of
// range.
func (c Config) populate() (Config, error) {
	if c.MTU != 0 && (c.MTU < minMTU || c.MTU > MaxMTU) {
		return c, fmt.Errorf("sctpudp: MTU %d out of range [%d, %d]", c.MTU, minMTU, MaxMTU)
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = defaultMaxMessageSize
	}
	if c.MaxMessageSize < 1 || c.MaxMessageSize > 1<<30 {
		return c, fmt.Errorf("sctpudp: MaxMessageSize %d out of range [1, 1 GiB]", c.MaxMessageSize)
	}
	if c.MaxReceiveBuffer == 0 {
		c.MaxReceiveBuffer = defaultMaxReceiveBuffer
	}
	// The window must hold one packet (the MTU, or the largest a path may
	// choose when the MTU comes from the path) and one whole message: SCTP
	// delivers a message only once all of it is reassembled, so a window
	// smaller than a message stalls the association for good (a 32 KiB
	// window under 64 KiB messages never moved a byte).
	if minWindow := max(cmp.Or(c.MTU, MaxMTU), c.MaxMessageSize); c.MaxReceiveBuffer < minWindow || c.MaxReceiveBuffer > 1<<30 {
		return c, fmt.Errorf("sctpudp: MaxReceiveBuffer %d out of range [%d, 1 GiB]: the receive window must hold one packet (MTU %d) and one whole message (MaxMessageSize %d)",
			c.MaxReceiveBuffer, minWindow, cmp.Or(c.MTU, MaxMTU), c.MaxMessageSize)
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = defaultHandshakeTimeout
	}
	if c.HandshakeTimeout < 0 {
		return c, fmt.Errorf("sctpudp: negative HandshakeTimeout %v", c.HandshakeTimeout)
	}
	if c.Linger == 0 {
		c.Linger = defaultLinger
	}
	if c.Backlog == 0 {
		c.Backlog = defaultBacklog
	}
	if c.Backlog < 0 {
		return c, fmt.Errorf("sctpudp: negative Backlog %d", c.Backlog)
	}
	if c.ReceiveBuffer == 0 {
		c.ReceiveBuffer = defaultReceiveBuffer
	}
	if c.StreamSendBuffer < 0 || c.StreamSendBuffer > 1<<30 {
		return c, fmt.Errorf("sctpudp: StreamSendBuffer %d out of range [0, 1 GiB]", c.StreamSendBuffer)
	}
	if c.SendBuffer < 0 || c.SendBuffer > 1<<30 || c.ReceiveBuffer < 0 || c.ReceiveBuffer > 1<<30 {
		return c, fmt.Errorf("sctpudp: socket buffers %d (send) and %d (receive) out of range [0, 1 GiB]", c.SendBuffer, c.ReceiveBuffer)
	}
	if c.RTOMax == 0 {
		c.RTOMax = defaultRTOMax
	}
	if c.RTOMax < minRTOMax || c.RTOMax > maxRTOMax {
		return c, fmt.Errorf("sctpudp: RTOMax %v out of range [%v, %v]", c.RTOMax, minRTOMax, maxRTOMax)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Validate reports the first field out of range, naming it, as Dial and
// Listen would.
func (c Config) Validate() error {
	_, err := c.populate()
	return err
}

// mtu returns Config.MTU or, when it is zero, the MTU of the path to
// raddr: the route's MTU less the IP and UDP headers, from minMTU to
// MaxMTU.
func (c *Config) mtu(raddr net.Addr) int {
	if c.MTU != 0 {
		return c.MTU
	}
	ua, ok := raddr.(*net.UDPAddr)
	if !ok {
		return defaultMTU
	}
	route, ok := routeMTU(ua)
	if !ok {
		return defaultMTU
	}
	hdr := 40 + 8 // IPv6 and UDP
	if ua.IP.To4() != nil {
		hdr = 20 + 8
	}
	return min(max(route-hdr, minMTU), MaxMTU)
}

// options translates a populated Config into pion's association options.
func (c *Config) options(nc net.Conn, name string) []sctp.AssociationOption {
	opts := []sctp.AssociationOption{
		sctp.WithNetConn(nc),
		sctp.WithName(name),
		sctp.WithLoggerFactory(pionLogger{c.Logger}),
		sctp.WithBlockWrite(c.StreamSendBuffer == 0),
		sctp.WithEnableZeroChecksum(c.ZeroChecksum),
		sctp.WithMTU(uint32(c.mtu(nc.RemoteAddr()))),
		sctp.WithMaxMessageSize(uint32(c.MaxMessageSize)),
		sctp.WithMaxReceiveBufferSize(uint32(c.MaxReceiveBuffer)),
		sctp.WithRTOMax(float64(c.RTOMax) / float64(time.Millisecond)),
		// RFC 8260 I-DATA, used only when the peer offers it too (usrsctp
		// does not by default): a large message is sent in chunks
		// interleaved with other streams' messages instead of ahead of
		// them. Weighted fair queueing with equal weights serves the
		// backlogged streams byte for byte, so a stream of small messages
		// gets its share beside a bulk stream.
		sctp.WithEnableInterleaving(true),
		sctp.WithInterleavingOptions(sctp.WithInterleavingWeightedFairQueueingScheduler()),
	}
	// RACK-TLP loss detection (RFC 8985) is always on in pion v1.12.
	return opts
}
