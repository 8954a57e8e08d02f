package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync/atomic"
)

// Tamper is an alteration a relay makes, once, to the next data it
// carries in a direction: what an attacker on the path, or a broken
// middlebox, does to bytes. It tests that the ends notice.
type Tamper int32

const (
	// TamperNone leaves the data alone (disarms a pending tamper).
	TamperNone Tamper = iota
	// TamperFlip flips one bit in the middle of the data. On a UDP relay
	// it flips a byte of an SCTP DATA or I-DATA chunk's payload and fixes
	// the packet's CRC32c, as an attacker who knows SCTP would, so SCTP
	// itself does not drop the packet.
	TamperFlip
	// TamperDrop removes the next chunk of a TCP byte stream and keeps the
	// connection open (TCP relays only).
	TamperDrop
	// TamperReplay delivers the next chunk twice (TCP), or the next
	// datagram twice (UDP).
	TamperReplay
	// TamperTruncate delivers the first half of the next chunk, then
	// resets the connection (TCP relays only).
	TamperTruncate
)

func (t Tamper) String() string {
	switch t {
	case TamperNone:
		return "none"
	case TamperFlip:
		return "flip"
	case TamperDrop:
		return "drop"
	case TamperReplay:
		return "replay"
	case TamperTruncate:
		return "truncate"
	}
	return fmt.Sprintf("Tamper(%d)", int32(t))
}

// tampering holds the armed alteration of each direction and counts those
// made.
type tampering struct {
	armed [2]atomic.Int32
	done  atomic.Int64
	tap   atomic.Pointer[func(toTarget bool, b []byte)]
}

func (t *tampering) arm(d Dir, mode Tamper) {
	for _, i := range d.dirs() {
		t.armed[i].Store(int32(mode))
	}
}

// take returns and disarms direction dir's alteration.
func (t *tampering) take(dir int) Tamper {
	if t.armed[dir].Load() == 0 {
		return TamperNone
	}
	return Tamper(t.armed[dir].Swap(0))
}

// observe passes b to the tap, if one is set.
func (t *tampering) observe(dir int, b []byte) {
	if f := t.tap.Load(); f != nil {
		(*f)(dir == 0, b)
	}
}

// errTamperUDP is returned for alterations a datagram relay cannot make.
var errTamperUDP = errors.New("relay: a UDP relay can flip or replay, not drop or truncate (use SetLoss to drop datagrams)")

// Tamper arms mode for the next chunk of data read in direction d (of any
// connection). It replaces an alteration not yet made.
func (r *TCP) Tamper(d Dir, mode Tamper) { r.tamper.arm(d, mode) }

// Tampered returns how many alterations the relay made.
func (r *TCP) Tampered() int64 { return r.tamper.done.Load() }

// Tap calls f with every chunk the relay reads, before any alteration, in
// the reading goroutine (f must be quick and must not keep b); nil removes
// it.
func (r *TCP) Tap(f func(toTarget bool, b []byte)) { r.tamper.tap.Store(&f) }

// Tamper arms mode for the next datagram in direction d that carries SCTP
// user data (TamperFlip) or the next datagram (TamperReplay).
func (r *UDP) Tamper(d Dir, mode Tamper) error {
	if mode == TamperDrop || mode == TamperTruncate {
		return errTamperUDP
	}
	r.tamper.arm(d, mode)
	return nil
}

// Tampered returns how many alterations the relay made.
func (r *UDP) Tampered() int64 { return r.tamper.done.Load() }

// Tap calls f with every datagram the relay receives, before any
// alteration; nil removes it.
func (r *UDP) Tap(f func(toTarget bool, b []byte)) { r.tamper.tap.Store(&f) }

// flipSCTP flips a payload byte of the first DATA or I-DATA chunk of the
// SCTP packet b and fixes its checksum. It reports false when b carries
// no user data.
func flipSCTP(b []byte) bool {
	const common = 12
	if len(b) < common {
		return false
	}
	for off := common; off+4 <= len(b); {
		typ := b[off]
		n := int(binary.BigEndian.Uint16(b[off+2:]))
		if n < 4 || off+n > len(b) {
			return false
		}
		hdr := 0
		switch typ {
		case 0: // DATA
			hdr = 16
		case 64: // I-DATA
			hdr = 20
		}
		if hdr > 0 && n > hdr {
			b[off+hdr+(n-hdr)/2] ^= 0x01
			if binary.LittleEndian.Uint32(b[8:]) != 0 {
				binary.LittleEndian.PutUint32(b[8:], 0)
				binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
			}
			return true
		}
		off += (n + 3) &^ 3
	}
	return false
}
