package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

// StripeMode selects how large messages are split over paths.
type StripeMode uint8

const (
	// StripeEnhanced stripes with the Enhanced MuniSocket technique: the two
	// channels of a pair claim fragments from opposite ends, fragments
	// carry no sequence header, and free pairs help busy ones recursively.
	StripeEnhanced StripeMode = iota
	// StripeBasic stripes with a shared counter and a sequence header on
	// every fragment (the basic MuniSocket technique), for comparison.
	StripeBasic
	// StripeOff sends every segment whole on one path chosen by Policy.
	StripeOff
)

func (m StripeMode) String() string {
	switch m {
	case StripeEnhanced:
		return "enhanced"
	case StripeBasic:
		return "basic"
	case StripeOff:
		return "off"
	}
	return fmt.Sprintf("StripeMode(%d)", uint8(m))
}

// ParseStripeMode parses "enhanced", "basic" or "off".
func ParseStripeMode(s string) (StripeMode, error) {
	for _, m := range []StripeMode{StripeEnhanced, StripeBasic, StripeOff} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("transport: unknown stripe mode %q (want enhanced, basic or off)", s)
}

// Policy chooses the path for a message that travels whole.
type Policy uint8

const (
	// PolicySoonest sends on the path expected to deliver soonest: queued
	// bytes divided by the path's measured rate.
	PolicySoonest Policy = iota
	// PolicyRoundRobin cycles over the live paths.
	PolicyRoundRobin
)

func (p Policy) String() string {
	switch p {
	case PolicySoonest:
		return "soonest"
	case PolicyRoundRobin:
		return "round-robin"
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy parses "soonest" or "round-robin".
func ParsePolicy(s string) (Policy, error) {
	for _, p := range []Policy{PolicySoonest, PolicyRoundRobin} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("transport: unknown policy %q (want soonest or round-robin)", s)
}

// Config configures a session. The zero value works except for Key, which
// is required.
type Config struct {
	// Key is the cluster key. Every channel proves it holds the key in a
	// Noise handshake before any data is exchanged, and gets fresh keys
	// that encrypt and authenticate everything it carries. Required.
	Key []byte

	// InsecurePlaintext sends data frames unencrypted and unauthenticated
	// after the handshake (which still proves the key). Both sides must set
	// it. It exists to measure what encryption costs; a relay can then read
	// and alter the data. False (the zero value) encrypts.
	InsecurePlaintext bool

	// Transport names the channel kind: "tcp" (zero value), "mptcp",
	// "sctp-udp" or "sctp" when those packages are linked in.
	Transport string
	// Channel, if set, is used instead of the kind named by Transport:
	// custom channels, or channels created inside a network namespace.
	Channel channel.Kind

	// Lanes is how many lanes this side sends on over each path whose
	// channel kind has them (channel.Lanes: sctp-udp and sctp, one SCTP
	// stream per lane). Lane 0 carries control frames; the data of stream id goes on
	// lane 1 + (id/2) mod (Lanes-1), so a packet lost from one stream's
	// data delays only the streams that share its lane, not the whole path
	// (see lane.go). The peer reads whatever lanes this side uses. Zero
	// means 8; 1 sends everything on the channel, as over TCP. At most
	// MaxLanes. Channels without lanes ignore it.
	Lanes int

	// Stripe selects the striping technique. Zero means StripeEnhanced.
	Stripe StripeMode
	// Policy places messages that travel whole. Zero means PolicySoonest.
	Policy Policy

	// FragmentSize is the largest striping unit in bytes. Fragments are
	// sized so that the slowest live path sends one in about 2 ms (down to
	// 4 KiB), and so that each path takes about 4 of a striped segment
	// (down to 1 KiB). Zero means 1 MiB, and 32 KiB while no path's rate
	// is known yet.
	FragmentSize int
	// StripeThreshold: segments longer than this are striped over all live
	// paths; shorter ones travel whole. Zero (the default) decides per
	// segment from the paths' measured rates and round-trip times: a
	// segment is striped when that would deliver it sooner than the best
	// single path by more than a fixed cost (see plan.go).
	StripeThreshold int
	// SegmentSize splits messages into segments, the unit of striping, flow
	// control and delivery. Zero means 1 MiB.
	SegmentSize int
	// StreamWindow is the per-stream receive buffer: the peer may have at
	// most this many bytes of a stream in flight or unread. Zero means
	// 16 MiB. It must be at least SegmentSize.
	StreamWindow int
	// MaxMessageSize bounds what ReadMessage assembles. Zero means 1 GiB.
	MaxMessageSize int64
	// MaxStreams bounds the streams a peer may open. Zero means 4096.
	MaxStreams int

	// HeartbeatInterval is how often each path is looked after: its
	// acknowledgements sent and, if it needs one, a probe (a ping, whose
	// echo measures the round trip). A path is probed while it has data
	// awaiting acknowledgement, and otherwise only once it has been silent
	// for a quarter of PathTimeout. Zero means 100ms.
	HeartbeatInterval time.Duration
	// PathTimeout declares a path dead when nothing arrives on it for this
	// long. Zero means 500ms.
	PathTimeout time.Duration
	// SessionTimeout closes a session whose paths all stayed down this
	// long. Zero means 30s. A dialing session ends sooner, with
	// ErrPeerClosed, when every path is down and its redial was refused
	// (nothing listens at the peer's addresses any more: its process
	// ended), a ReconnectInterval after the peer's kernel closed the
	// channels.
	SessionTimeout time.Duration
	// HandshakeTimeout bounds the key exchange of each channel. Zero means
	// 5s. On a Listener it counts from the accept.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the channels each Listener holds that have not
	// yet proved the key; channels accepted beyond it are closed at once,
	// so a flood of idle connections costs at most this many descriptors
	// for HandshakeTimeout. Zero means 256.
	MaxHandshakes int
	// ReconnectInterval is the first delay between re-dials of a failed
	// path (doubling to 2s). Zero means 100ms. Only the dialing side
	// reconnects.
	ReconnectInterval time.Duration

	// Socket sets options on every channel's socket as it attaches
	// (congestion control, buffer sizes; TCP and MPTCP channels only: a
	// channel of another kind fails to attach). The zero value changes
	// nothing. Session.SetSocketOptions changes them on a running session.
	Socket channel.SocketOptions

	// Logger receives lifecycle and failover events. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// populate returns a copy of c with defaults filled in, or an error naming
// the first invalid field.
func (c *Config) populate() (*Config, error) {
	if c == nil {
		return nil, errors.New("transport: nil Config (a Key is required)")
	}
	cc := *c
	if len(cc.Key) == 0 {
		return nil, errors.New("transport: Config.Key is empty: set the cluster key (BRAID_KEY or --key-file)")
	}
	if cc.Transport == "" {
		cc.Transport = "tcp"
	}
	if cc.Channel == nil {
		k, err := channel.Lookup(cc.Transport)
		if err != nil {
			return nil, err
		}
		cc.Channel = k
	}
	if cc.Stripe > StripeOff {
		return nil, fmt.Errorf("transport: invalid Stripe %d", cc.Stripe)
	}
	if cc.Policy > PolicyRoundRobin {
		return nil, fmt.Errorf("transport: invalid Policy %d", cc.Policy)
	}
	setDefault(&cc.Lanes, 8)
	setDefault(&cc.SegmentSize, 1<<20)
	setDefault(&cc.StreamWindow, 16<<20)
	setDefault(&cc.MaxMessageSize, 1<<30)
	setDefault(&cc.MaxStreams, 4096)
	setDefault(&cc.HeartbeatInterval, 100*time.Millisecond)
	setDefault(&cc.PathTimeout, 500*time.Millisecond)
	setDefault(&cc.SessionTimeout, 30*time.Second)
	setDefault(&cc.HandshakeTimeout, 5*time.Second)
	setDefault(&cc.MaxHandshakes, 256)
	setDefault(&cc.ReconnectInterval, 100*time.Millisecond)
	if cc.Logger == nil {
		cc.Logger = slog.Default()
	}
	if cc.InsecurePlaintext {
		cc.Logger.Warn("INSECURE: data plane in plaintext (--insecure-plaintext): anyone on the path can read and alter the data; use it only to measure what encryption costs")
	}
	switch {
	case cc.Lanes < 1 || cc.Lanes > MaxLanes:
		return nil, fmt.Errorf("transport: Lanes %d must be between 1 and %d", cc.Lanes, MaxLanes)
	case cc.FragmentSize != 0 && (cc.FragmentSize < 512 || cc.FragmentSize > cc.SegmentSize):
		return nil, fmt.Errorf("transport: FragmentSize %d must be between 512 and SegmentSize (%d)", cc.FragmentSize, cc.SegmentSize)
	case cc.StripeThreshold < 0:
		return nil, fmt.Errorf("transport: StripeThreshold %d must be 0 (decided from the paths' rates) or more", cc.StripeThreshold)
	case cc.SegmentSize > wire.MaxSegment:
		return nil, fmt.Errorf("transport: SegmentSize %d above the protocol limit %d", cc.SegmentSize, wire.MaxSegment)
	case cc.StreamWindow < cc.SegmentSize || cc.StreamWindow > 1<<31:
		return nil, fmt.Errorf("transport: StreamWindow %d must be at least SegmentSize (%d) and at most 2 GiB", cc.StreamWindow, cc.SegmentSize)
	case cc.MaxHandshakes < 0:
		return nil, fmt.Errorf("transport: MaxHandshakes %d must be 0 (the default, 256) or more", cc.MaxHandshakes)
	case cc.Socket.Check() != nil:
		return nil, fmt.Errorf("transport: Socket: %w", cc.Socket.Check())
	case cc.PathTimeout <= cc.HeartbeatInterval:
		return nil, fmt.Errorf("transport: PathTimeout %v must exceed HeartbeatInterval %v", cc.PathTimeout, cc.HeartbeatInterval)
	}
	return &cc, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// probeAfter is how long a path with nothing of ours awaiting
// acknowledgement may stay silent before heartbeat probes it: a quarter
// of PathTimeout, or every tick if that is shorter than one. Silence then
// lasts at most about probeAfter plus a tick and a round trip, inside the
// 7/8 of PathTimeout after which the reader's deadline may fall due.
func (c *Config) probeAfter() time.Duration {
	if d := c.PathTimeout / 4; d >= c.HeartbeatInterval {
		return d
	}
	return 0
}
