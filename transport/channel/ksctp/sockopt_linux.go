//go:build linux

package ksctp

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket options of linux/sctp.h that Config sets.
const (
	sctpRTOInfo     = 0  // SCTP_RTOINFO, struct sctp_rtoinfo
	sctpMaxSeg      = 13 // SCTP_MAXSEG, struct sctp_assoc_value
	sctpDelayedSACK = 16 // SCTP_DELAYED_SACK (= SCTP_DELAYED_ACK_TIME), struct sctp_sack_info
	sctpMaxBurst    = 20 // SCTP_MAX_BURST, struct sctp_assoc_value
	sctpPeerParams  = 9  // SCTP_PEER_ADDR_PARAMS, struct sctp_paddrparams
	sctpPeerThlds   = 31 // SCTP_PEER_ADDR_THLDS, struct sctp_paddrthlds

	// sppHBEnable is SPP_HB_ENABLE: heartbeats on, at spp_hbinterval.
	sppHBEnable = 1
	// paddrparamsLen is the size of struct sctp_paddrparams up to
	// spp_flags, padded to 4: the layout the kernel takes from callers
	// that predate spp_ipv6_flowlabel and spp_dscp (the struct is packed:
	// assoc id at 0, a 128-byte sockaddr_storage at 4, hbinterval at 132,
	// the 16-bit pathmaxrxt at 136, pathmtu at 138, sackdelay at 142,
	// flags at 146).
	paddrparamsLen = 152
	// struct sctp_paddrthlds is not packed: its sockaddr_storage is
	// aligned to a pointer, so on 64-bit systems the assoc id at 0 is
	// followed by 4 bytes of padding, the address at 8, the 16-bit
	// spt_pathmaxrxt at 136 and spt_pathpfthld at 138, 144 bytes in all
	// (4, 132, 134 and 136 on 32-bit ones). The _V2 option adds
	// spt_pathcpthld, which braid leaves alone.
	thldsAddr     = int(unsafe.Sizeof(uintptr(0)))
	thldsMaxRxt   = thldsAddr + 128
	thldsPF       = thldsMaxRxt + 2
	paddrthldsLen = (thldsPF + 2 + thldsAddr - 1) / thldsAddr * thldsAddr

	// sctpFutureAssoc is SCTP_FUTURE_ASSOC, the sctp_assoc_t that means
	// "this socket's associations to come": the only one a one-to-one
	// socket takes before it connects.
	sctpFutureAssoc = 0
)

// sockopt is one setsockopt call: level, option and the option's bytes
// in the kernel's layout.
type sockopt struct {
	level, opt int
	name       string // for errors: "SCTP_MAX_BURST"
	val        []byte
}

// sockopts returns the options that cfg's knobs ask for, in the order they
// are set; knobs left at zero set nothing. SCTP_NODELAY is set apart (see
// proto.noDelay). cfg must have passed Validate.
func sockopts(cfg *Config) []sockopt {
	var out []sockopt
	if cfg.SendBuffer > 0 {
		out = append(out, sockopt{unix.SOL_SOCKET, unix.SO_SNDBUF, "SO_SNDBUF", u32s(uint32(cfg.SendBuffer))})
	}
	rcv := cfg.ReceiveBuffer
	if rcv == 0 {
		rcv = defaultReceiveBuffer
	}
	if rcv > 0 {
		out = append(out, sockopt{unix.SOL_SOCKET, unix.SO_RCVBUF, "SO_RCVBUF", u32s(uint32(rcv))})
	}
	if cfg.SACKDelay != 0 || cfg.SACKFreq != 0 {
		// struct sctp_sack_info { sctp_assoc_t sack_assoc_id; uint32_t
		// sack_delay; uint32_t sack_freq; }: a zero field is left as is.
		out = append(out, sockopt{solSCTP, sctpDelayedSACK, "SCTP_DELAYED_SACK",
			u32s(sctpFutureAssoc, millis(cfg.SACKDelay), uint32(cfg.SACKFreq))})
	}
	if cfg.MaxBurst != 0 {
		// struct sctp_assoc_value { sctp_assoc_t assoc_id; uint32_t
		// assoc_value; }: 0 is no limit.
		v := uint32(max(cfg.MaxBurst, 0))
		out = append(out, sockopt{solSCTP, sctpMaxBurst, "SCTP_MAX_BURST", u32s(sctpFutureAssoc, v)})
	}
	if cfg.MaxSeg != 0 {
		out = append(out, sockopt{solSCTP, sctpMaxSeg, "SCTP_MAXSEG", u32s(sctpFutureAssoc, uint32(cfg.MaxSeg))})
	}
	if cfg.RTOInitial != 0 || cfg.RTOMin != 0 || cfg.RTOMax != 0 {
		// struct sctp_rtoinfo { sctp_assoc_t srto_assoc_id; __u32
		// srto_initial; __u32 srto_max; __u32 srto_min; }, in ms: a zero
		// field is left as is.
		out = append(out, sockopt{solSCTP, sctpRTOInfo, "SCTP_RTOINFO",
			u32s(sctpFutureAssoc, millis(cfg.RTOInitial), millis(cfg.RTOMax), millis(cfg.RTOMin))})
	}
	if cfg.HeartbeatInterval != 0 || cfg.PathMaxRetrans != 0 {
		// A zero address is every peer address, and the socket's
		// associations to come; a zero field is left as is.
		b := make([]byte, paddrparamsLen)
		binary.NativeEndian.PutUint32(b[132:], millis(cfg.HeartbeatInterval))
		binary.NativeEndian.PutUint16(b[136:], uint16(cfg.PathMaxRetrans))
		if cfg.HeartbeatInterval != 0 {
			binary.NativeEndian.PutUint32(b[146:], sppHBEnable)
		}
		out = append(out, sockopt{solSCTP, sctpPeerParams, "SCTP_PEER_ADDR_PARAMS", b})
	}
	if cfg.PFThreshold != 0 {
		// A zero address is every peer address, and the socket's
		// associations to come. The kernel sets the threshold always and
		// the path max retrans only when it is not zero.
		b := make([]byte, paddrthldsLen)
		binary.NativeEndian.PutUint16(b[thldsMaxRxt:], uint16(cfg.PathMaxRetrans))
		binary.NativeEndian.PutUint16(b[thldsPF:], uint16(max(cfg.PFThreshold, 0)))
		out = append(out, sockopt{solSCTP, sctpPeerThlds, "SCTP_PEER_ADDR_THLDS", b})
	}
	return out
}

// u32s lays out 32-bit fields back to back in host byte order, as the
// kernel's structs of __u32 and sctp_assoc_t (__s32) are.
func u32s(vs ...uint32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.NativeEndian.AppendUint32(b, v)
	}
	return b
}

func millis(d time.Duration) uint32 { return uint32(d / time.Millisecond) }

// setsockopt passes b to the kernel as the option's value, unchanged.
func setsockopt(fd, level, opt int, b []byte) error {
	return unix.SetsockoptString(fd, level, opt, string(b))
}

// setOpts sets cfg's options on fd through set.
func setOpts(fd int, cfg *Config, set func(fd, level, opt int, b []byte) error) error {
	for _, o := range sockopts(cfg) {
		if err := set(fd, o.level, o.opt, o.val); err != nil {
			return fmt.Errorf("ksctp: %w", os.NewSyscallError("setsockopt "+o.name, err))
		}
	}
	return nil
}
