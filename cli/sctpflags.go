package cli

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/channel/ksctp"
	"github.com/braid-hpc/braid/transport/channel/sctpudp"

	"github.com/spf13/pflag"
)

// sctpKnob is one --sctp-* flag: what it sets in each SCTP kind's Config.
// A nil setter means the kind cannot honour the knob, and why says so.
type sctpKnob struct {
	name, usage string
	kind        string // the flag's value type: "size", "duration", "int", "bool"
	def         string // the flag's default, as text
	// udp and kern set the knob from the flag's text; field names the
	// Config field, to point range errors back at the flag.
	udp                func(c *sctpudp.Config, v string) error
	udpField, udpWhy   string
	kern               func(c *ksctp.Config, v string) error
	kernField, kernWhy string
}

const (
	pionNoSACKKnob = "pion acknowledges every second packet or after 200 ms, fixed (docs/sctp.md)"
	onlyUDP        = "it is a knob of the user-space SCTP, --transport sctp-udp"
)

var sctpKnobs = []sctpKnob{
	{
		name: "sctp-nodelay", kind: "bool", def: "true",
		usage: "send small messages at once; false lets the kernel hold them back to bundle them (Nagle). sctp: SCTP_NODELAY; sctp-udp: always on, false is refused",
		udp: func(c *sctpudp.Config, v string) error {
			if v == "false" {
				return fmt.Errorf("--sctp-nodelay=false: --transport sctp-udp cannot hold messages back: pion always sends at once")
			}
			return nil
		},
		kern: func(c *ksctp.Config, v string) error { c.Nagle = v == "false"; return nil },
	},
	{
		name: "sctp-sack-delay", kind: "duration",
		usage:  "sctp: longest a receiver holds a SACK back, waiting for more data to acknowledge in one (SCTP_DELAYED_SACK sack_delay, 1ms to 500ms; kernel default 200ms)",
		udpWhy: pionNoSACKKnob, kernField: "SACKDelay",
		kern: func(c *ksctp.Config, v string) (err error) { c.SACKDelay, err = time.ParseDuration(v); return },
	},
	{
		name: "sctp-sack-freq", kind: "int",
		usage:  "sctp: a receiver SACKs after `n` packets without waiting for the delay; 1 turns delayed SACK off (SCTP_DELAYED_SACK sack_freq; kernel default 2)",
		udpWhy: pionNoSACKKnob, kernField: "SACKFreq",
		kern: func(c *ksctp.Config, v string) (err error) { c.SACKFreq, err = intArg(v); return },
	},
	{
		name: "sctp-max-burst", kind: "int",
		usage:  "sctp: send at most `n` packets at once in reply to one SACK; 0 removes the limit (SCTP_MAX_BURST; kernel default 4)",
		udpWhy: "pion has no Max.Burst: only its congestion and receive windows bound a burst (docs/sctp.md)", kernField: "MaxBurst",
		kern: func(c *ksctp.Config, v string) error {
			n, err := intArg(v)
			if n < 0 {
				return fmt.Errorf("%d packets: want 1 to 65535, or 0 for no limit", n)
			}
			if n == 0 {
				n = -1 // the kernel's 0: no limit
			}
			c.MaxBurst = n
			return err
		},
	},
	{
		name: "sctp-maxseg", kind: "size",
		usage:  "sctp: fragmentation point, the most user bytes per DATA chunk; longer messages are cut (SCTP_MAXSEG, 512 to 65516; default: the path MTU's)",
		udpWhy: "pion fragments at the MTU: set --sctp-mtu (a DATA chunk carries MTU less 28 bytes)", kernField: "MaxSeg",
		kern: func(c *ksctp.Config, v string) (err error) { c.MaxSeg, err = sizeArg(v); return },
	},
	{
		name: "sctp-rto-initial", kind: "duration",
		usage:  "sctp: retransmission timeout before the first round-trip measurement (SCTP_RTOINFO; kernel default 3s)",
		udpWhy: "pion's initial RTO is fixed at 1s; --sctp-rto-max caps it", kernField: "RTOInitial",
		kern: func(c *ksctp.Config, v string) (err error) { c.RTOInitial, err = time.ParseDuration(v); return },
	},
	{
		name: "sctp-rto-min", kind: "duration",
		usage:  "sctp: lower bound of the retransmission timeout (SCTP_RTOINFO; kernel default 1s)",
		udpWhy: "pion's RTO.Min is fixed at 1s; --sctp-rto-max below 1s lowers the timeout itself", kernField: "RTOMin",
		kern: func(c *ksctp.Config, v string) (err error) { c.RTOMin, err = time.ParseDuration(v); return },
	},
	{
		name: "sctp-rto-max", kind: "duration",
		usage:    "upper bound of the retransmission timeout and its backoff. sctp: SCTP_RTOINFO (kernel default 60s); sctp-udp: pion's RTO cap, which below 1s is the timeout itself (10ms to 24h; default 3s; on LAN paths 200ms on both ends removes the 1s stalls after a loss, docs/sctp.md)",
		udpField: "RTOMax", kernField: "RTOMax",
		udp:  func(c *sctpudp.Config, v string) (err error) { c.RTOMax, err = time.ParseDuration(v); return },
		kern: func(c *ksctp.Config, v string) (err error) { c.RTOMax, err = time.ParseDuration(v); return },
	},
	{
		name: "sctp-hb-interval", kind: "duration",
		usage:  "sctp: how often an idle peer address is probed with a HEARTBEAT, plus its RTO (SCTP_PEER_ADDR_PARAMS; kernel default 30s)",
		udpWhy: "braid's session heartbeat (PathTimeout) watches sctp-udp paths; pion's own is not tunable", kernField: "HeartbeatInterval",
		kern: func(c *ksctp.Config, v string) (err error) { c.HeartbeatInterval, err = time.ParseDuration(v); return },
	},
	{
		name: "sctp-path-max-retrans", kind: "int",
		usage:  "sctp: after `n` retransmissions in a row a peer address of a multi-homed association counts as down and traffic moves to another (SCTP_PEER_ADDR_PARAMS; kernel default 5: with RTO 1s-60s, 63s; 2 with --sctp-rto-max 1s: about 3s)",
		udpWhy: "an sctp-udp association has one address: braid's own paths fail over", kernField: "PathMaxRetrans",
		kern: func(c *ksctp.Config, v string) (err error) { c.PathMaxRetrans, err = intArg(v); return },
	},
	{
		name: "sctp-pf-threshold", kind: "int",
		usage:  "sctp: after `n` timeouts in a row a peer address counts as potentially failed and new data moves to another address at once, before --sctp-path-max-retrans marks it down; at or above that, off (SCTP_PEER_ADDR_THLDS, RFC 7829; kernel default 0: at the first timeout)",
		udpWhy: "an sctp-udp association has one address: braid's own paths fail over", kernField: "PFThreshold",
		kern: func(c *ksctp.Config, v string) error {
			n, err := intArg(v)
			if n == 0 {
				n = -1 // Config's spelling of an explicit 0
			}
			c.PFThreshold = n
			return err
		},
	},
	{
		name: "sctp-sndbuf", kind: "size",
		usage:    "socket send buffer asked of the kernel (SO_SNDBUF, doubled by Linux, capped by net.core.wmem_max). sctp: the SCTP socket's (kernel default); sctp-udp: the UDP socket's, pion's only backpressure (default: about 10 ms of the send rate, 64K-1M; 64K on a listener)",
		udpField: "SendBuffer", kernField: "SendBuffer",
		udp:  func(c *sctpudp.Config, v string) (err error) { c.SendBuffer, err = sizeArg(v); return },
		kern: func(c *ksctp.Config, v string) (err error) { c.SendBuffer, err = sizeArg(v); return },
	},
	{
		name: "sctp-rcvbuf", kind: "size",
		usage:    "socket receive buffer asked of the kernel (SO_RCVBUF, capped by net.core.rmem_max). sctp: also the advertised receive window (default 4M asked); sctp-udp: the UDP socket's (default 4M)",
		udpField: "ReceiveBuffer", kernField: "ReceiveBuffer",
		udp:  func(c *sctpudp.Config, v string) (err error) { c.ReceiveBuffer, err = sizeArg(v); return },
		kern: func(c *ksctp.Config, v string) (err error) { c.ReceiveBuffer, err = sizeArg(v); return },
	},
	{
		name: "sctp-mtu", kind: "size",
		usage:    "sctp-udp: largest SCTP packet (UDP payload); it sets the fragmentation point, MTU less 28 bytes per DATA chunk (256 to 8192; default: the route MTU less IP and UDP headers, 8192 on loopback)",
		udpField: "MTU", kernWhy: "the kernel finds the path MTU itself: set the fragmentation point with --sctp-maxseg",
		udp: func(c *sctpudp.Config, v string) (err error) { c.MTU, err = sizeArg(v); return },
	},
	{
		name: "sctp-max-msg", kind: "size",
		usage:    "sctp-udp: largest SCTP message; writes are cut into messages of this size (default 64K)",
		udpField: "MaxMessageSize", kernWhy: "braid writes messages of 64 KiB to kernel SCTP",
		udp: func(c *sctpudp.Config, v string) (err error) { c.MaxMessageSize, err = sizeArg(v); return },
	},
	{
		name: "sctp-rwnd", kind: "size",
		usage:    "sctp-udp: receive window advertised to the peer, the bytes buffered before the reader takes them; at least --sctp-max-msg, as SCTP delivers a message only whole (default 4M)",
		udpField: "MaxReceiveBuffer", kernWhy: "kernel SCTP advertises its receive buffer: set --sctp-rcvbuf",
		udp: func(c *sctpudp.Config, v string) (err error) { c.MaxReceiveBuffer, err = sizeArg(v); return },
	},
	{
		name: "sctp-stream-sndbuf", kind: "size",
		usage:    "sctp-udp: send buffer of each SCTP stream, so streams do not wait for each other's writes; 0: pion's blocking writes, one at a time (default 0)",
		udpField: "StreamSendBuffer", kernWhy: onlyUDP,
		udp: func(c *sctpudp.Config, v string) (err error) { c.StreamSendBuffer, err = sizeArg(v); return },
	},
	{
		name: "sctp-zero-checksum", kind: "bool", def: "false",
		usage:   "sctp-udp: accept, and send when the peer accepts them, packets without CRC32c (RFC 9653), leaving integrity to the UDP checksum; both ends must be braid",
		kernWhy: onlyUDP,
		udp:     func(c *sctpudp.Config, v string) error { c.ZeroChecksum = v == "true"; return nil },
	},
}

func intArg(v string) (int, error) {
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil {
		return 0, fmt.Errorf("bad number %q", v)
	}
	return n, nil
}

func sizeArg(v string) (int, error) {
	n, err := parseSize(v)
	if err != nil {
		return 0, err
	}
	if n > 1<<40 {
		return 0, fmt.Errorf("size %q too large", v)
	}
	return int(n), nil
}

// sctpFlags are the --sctp-* knobs of the SCTP channel kinds, on every
// command that takes --transport. They only fill a channel kind's Config.
type sctpFlags struct {
	fs   *pflag.FlagSet
	vals map[string]pflag.Value
}

func addSCTPFlags(fs *pflag.FlagSet) *sctpFlags {
	f := &sctpFlags{fs: fs, vals: map[string]pflag.Value{}}
	for _, k := range sctpKnobs {
		switch k.kind {
		case "bool":
			fs.Bool(k.name, k.def == "true", k.usage)
		case "duration":
			fs.Duration(k.name, 0, k.usage)
		case "int":
			fs.Int(k.name, 0, k.usage)
		default:
			fs.String(k.name, "", k.usage+"; a `size` in bytes, K/M suffixes")
		}
	}
	return f
}

// channel returns the channel kind named by transport with the --sctp-*
// knobs given on the command line, or nil when none was given (the kind
// then comes from transport.Config.Transport, with its defaults). A knob
// the kind cannot honour, or a value out of range, is an error naming the
// flag.
func (f *sctpFlags) channel(transport string) (channel.Kind, error) {
	var set []sctpKnob
	f.fs.Visit(func(fl *pflag.Flag) {
		for _, k := range sctpKnobs {
			if k.name == fl.Name {
				set = append(set, k)
			}
		}
	})
	if len(set) == 0 {
		return nil, nil
	}
	val := func(k sctpKnob) string { return f.fs.Lookup(k.name).Value.String() }
	switch transport {
	case "sctp-udp":
		var cfg sctpudp.Config
		for _, k := range set {
			if k.udp == nil {
				return nil, fmt.Errorf("--%s: --transport sctp-udp cannot honour it: %s", k.name, k.udpWhy)
			}
			if err := k.udp(&cfg, val(k)); err != nil {
				return nil, fmt.Errorf("--%s: %w", k.name, err)
			}
		}
		if err := cfg.Validate(); err != nil {
			return nil, blame(err, set, func(k sctpKnob) string { return k.udpField })
		}
		return sctpudp.Kind{Config: cfg}, nil
	case "sctp":
		var cfg ksctp.Config
		for _, k := range set {
			if k.kern == nil {
				return nil, fmt.Errorf("--%s: --transport sctp (kernel SCTP) cannot honour it: %s", k.name, k.kernWhy)
			}
			if err := k.kern(&cfg, val(k)); err != nil {
				return nil, fmt.Errorf("--%s: %w", k.name, err)
			}
		}
		if err := cfg.Validate(); err != nil {
			return nil, blame(err, set, func(k sctpKnob) string { return k.kernField })
		}
		return ksctp.Kind{Config: cfg}, nil
	}
	return nil, fmt.Errorf("--%s: --transport %s has no SCTP knobs: they apply to --transport sctp or sctp-udp", set[0].name, transport)
}

// blame names the flags whose Config fields a validation error mentions.
func blame(err error, set []sctpKnob, field func(sctpKnob) string) error {
	var flags []string
	for _, k := range set {
		if fld := field(k); fld != "" && regexp.MustCompile(`\b`+fld+`\b`).MatchString(err.Error()) {
			flags = append(flags, "--"+k.name)
		}
	}
	if len(flags) == 0 {
		return err
	}
	return fmt.Errorf("%s: %w", strings.Join(flags, ", "), err)
}
