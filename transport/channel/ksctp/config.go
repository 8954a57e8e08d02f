package ksctp

import (
	"fmt"
	"time"
)

// Config tunes kernel SCTP channels. The zero value works: every knob left
// at zero keeps the kernel's default (the net.sctp.* and net.core.*
// sysctls). The knobs are socket options set on the dialing socket before
// it connects and on the listening socket before it listens; the kernel
// copies them into each association it creates, so accepted associations
// have them too. Validate says which value is out of range.
type Config struct {
	// Nagle lets the kernel hold back small messages to bundle them.
	// False (the zero value) sets SCTP_NODELAY, as braid's TCP channels set
	// TCP_NODELAY.
	Nagle bool

	// SACKDelay is how long the receiver may hold back a SACK waiting for
	// more DATA to acknowledge in the same SACK (SCTP_DELAYED_SACK,
	// sack_delay). Zero keeps the kernel's (net.sctp.sack_timeout, 200 ms).
	// From 1 ms to 500 ms, in whole milliseconds.
	SACKDelay time.Duration

	// SACKFreq is how many packets carrying DATA the receiver takes before
	// it sends a SACK without waiting for SACKDelay (SCTP_DELAYED_SACK,
	// sack_freq). 1 turns delayed SACK off: one SACK per packet. Zero keeps
	// the kernel's (2). At most 65535.
	SACKFreq int

	// MaxBurst is the most packets the sender puts on the wire at once in
	// reply to one SACK, even when the congestion window allows more
	// (SCTP_MAX_BURST, Max.Burst in RFC 9260). Zero keeps the kernel's
	// (net.sctp.max_burst, 4); negative removes the limit. At most 65535.
	MaxBurst int

	// MaxSeg is the fragmentation point: the most user bytes in one DATA
	// chunk (SCTP_MAXSEG). Messages longer than that are cut into several
	// chunks; a smaller value gives smaller packets than the path MTU
	// allows. Zero means the path MTU less the headers. From 512 to 65516.
	MaxSeg int

	// RTOInitial, RTOMin and RTOMax are the initial retransmission
	// timeout and its bounds (SCTP_RTOINFO), in whole milliseconds. Zero
	// keeps the kernel's value (net.sctp.rto_initial 3 s, rto_min 1 s,
	// rto_max 60 s), and a value given is checked against the defaults of
	// those left out: min <= initial <= max.
	RTOInitial, RTOMin, RTOMax time.Duration

	// HeartbeatInterval is how often each idle peer address is probed
	// with a HEARTBEAT (SCTP_PEER_ADDR_PARAMS, spp_hbinterval, heartbeats
	// on), added to the address's RTO. Zero keeps the kernel's
	// (net.sctp.hb_interval, 30 s). From 1 ms to 24 h, in whole ms.
	HeartbeatInterval time.Duration

	// PathMaxRetrans is how many retransmissions or unanswered heartbeats
	// in a row mark a peer address inactive, so that a multi-homed
	// association moves to another (SCTP_PEER_ADDR_PARAMS,
	// spp_pathmaxrxt; Path.Max.Retrans in RFC 9260). With RFC 4960's RTO
	// bounds and the default of 5, a dead primary is found after 1+2+4+
	// 8+16+32 = 63 s; 2 with RTOMax 1 s finds it in about 3 s
	// (docs/sctp.md). Zero keeps the kernel's (net.sctp.path_max_retrans,
	// 5). At most 65535.
	PathMaxRetrans int

	// PFThreshold is the potentially-failed threshold (RFC 7829,
	// SCTP_PEER_ADDR_THLDS spt_pathpfthld; PFMR): after more than this
	// many timeouts in a row a peer address counts as potentially failed
	// and new data goes to another active address at once, while
	// heartbeats keep probing the failed one; only PathMaxRetrans
	// timeouts mark it down. A threshold at or above PathMaxRetrans turns
	// the state off, so traffic stays on the path until it is down. Zero
	// keeps the kernel's (net.sctp.pf_retrans, 0 by default: potentially
	// failed at the first timeout); -1 sets 0. At most 65535.
	PFThreshold int

	// SendBuffer is the socket's send buffer asked of the kernel
	// (SO_SNDBUF; Linux doubles it and caps it at net.core.wmem_max): the
	// bytes written and not yet acknowledged. Zero keeps the kernel's
	// (net.core.wmem_default). At most 1 GiB.
	SendBuffer int

	// ReceiveBuffer is the socket's receive buffer asked of the kernel
	// (SO_RCVBUF, capped at net.core.rmem_max); the association advertises
	// about this much as its receive window. Zero means 4 MiB: with the
	// kernel's default (net.core.rmem_default, 208 KiB) and loopback's
	// 64 KiB MTU the window holds three packets, and an association
	// crawls at the pace of delayed SACKs and retransmission timeouts
	// (4 Mbit/s against 220 with 4 MiB; docs/sctp.md). -1 keeps the
	// kernel's default. At most 1 GiB.
	ReceiveBuffer int

	// Backlog is the listen queue length. Zero means 128.
	Backlog int

	// Timeout bounds Dial's handshake when the context has no sooner
	// deadline. Zero means 10 s.
	Timeout time.Duration
}

// Limits of Config's knobs.
const (
	maxSACKDelay = 500 * time.Millisecond // the kernel refuses more
	maxCount     = 65535                  // SACKFreq, MaxBurst
	minMaxSeg    = 512
	maxMaxSeg    = 65516 // SCTP_MAX_CHUNK_LEN less the DATA chunk header
	maxRTO       = 24 * time.Hour
	maxBuffer    = 1 << 30

	defaultRTOInitial = 3 * time.Second
	defaultRTOMin     = 1 * time.Second
	defaultRTOMax     = 60 * time.Second
)

// Validate reports the first knob out of range, naming it.
func (c Config) Validate() error {
	if err := checkMillis("SACKDelay", c.SACKDelay, time.Millisecond, maxSACKDelay); err != nil {
		return err
	}
	if c.SACKFreq < 0 || c.SACKFreq > maxCount {
		return fmt.Errorf("ksctp: SACKFreq %d out of range [0, %d] (packets per SACK; 1 turns delayed SACK off)", c.SACKFreq, maxCount)
	}
	if c.MaxBurst > maxCount {
		return fmt.Errorf("ksctp: MaxBurst %d out of range (at most %d packets; negative for no limit)", c.MaxBurst, maxCount)
	}
	if c.MaxSeg != 0 && (c.MaxSeg < minMaxSeg || c.MaxSeg > maxMaxSeg) {
		return fmt.Errorf("ksctp: MaxSeg %d out of range [%d, %d] (bytes per DATA chunk; 0 for the path MTU)", c.MaxSeg, minMaxSeg, maxMaxSeg)
	}
	for _, r := range []struct {
		name string
		d    time.Duration
	}{{"RTOInitial", c.RTOInitial}, {"RTOMin", c.RTOMin}, {"RTOMax", c.RTOMax}} {
		if err := checkMillis(r.name, r.d, time.Millisecond, maxRTO); err != nil {
			return err
		}
	}
	lo, hi, init := or(c.RTOMin, defaultRTOMin), or(c.RTOMax, defaultRTOMax), or(c.RTOInitial, defaultRTOInitial)
	if lo > hi {
		return fmt.Errorf("ksctp: RTOMin %v above RTOMax %v (an unset one is the kernel's default): set both", lo, hi)
	}
	if init < lo || init > hi {
		return fmt.Errorf("ksctp: RTOInitial %v outside [RTOMin %v, RTOMax %v] (an unset one is the kernel's default)", init, lo, hi)
	}
	if err := checkMillis("HeartbeatInterval", c.HeartbeatInterval, time.Millisecond, maxRTO); err != nil {
		return err
	}
	if c.PathMaxRetrans < 0 || c.PathMaxRetrans > maxCount {
		return fmt.Errorf("ksctp: PathMaxRetrans %d out of range [0, %d] (retransmissions before a peer address counts as down)", c.PathMaxRetrans, maxCount)
	}
	if c.PFThreshold < -1 || c.PFThreshold > maxCount {
		return fmt.Errorf("ksctp: PFThreshold %d out of range [-1, %d] (timeouts before a peer address counts as potentially failed; -1 sets 0)", c.PFThreshold, maxCount)
	}
	if c.SendBuffer < 0 || c.SendBuffer > maxBuffer {
		return fmt.Errorf("ksctp: SendBuffer %d out of range [0, 1 GiB]", c.SendBuffer)
	}
	if c.ReceiveBuffer < -1 || c.ReceiveBuffer > maxBuffer {
		return fmt.Errorf("ksctp: ReceiveBuffer %d out of range [-1, 1 GiB]", c.ReceiveBuffer)
	}
	return nil
}

// defaultReceiveBuffer is the ReceiveBuffer zero asks for.
const defaultReceiveBuffer = 4 << 20

// checkMillis checks that d is zero or a whole number of milliseconds in
// [lo, hi].
func checkMillis(name string, d, lo, hi time.Duration) error {
	if d == 0 {
		return nil
	}
	if d < lo || d > hi {
		return fmt.Errorf("ksctp: %s %v out of range [%v, %v]", name, d, lo, hi)
	}
	if d%time.Millisecond != 0 {
		return fmt.Errorf("ksctp: %s %v is not a whole number of milliseconds (the kernel takes ms)", name, d)
	}
	return nil
}

func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (c Config) backlog() int {
	if c.Backlog <= 0 {
		return 128
	}
	return c.Backlog
}

func (c Config) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 10 * time.Second
	}
	return c.Timeout
}
