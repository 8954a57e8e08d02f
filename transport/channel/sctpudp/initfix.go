package sctpudp

import (
	"encoding/binary"
	"hash/crc32"
	"net"
)

// initFixConn hands pion a peer's INIT without the parameters pion cannot
// parse. RFC 9260 makes a receiver understand IPv4 and IPv6 Address,
// Supported Address Types, Cookie Preservative and Host Name Address; pion
// does not know them and, as their type asks, refuses the whole INIT.
// usrsctp and kernel stacks send address parameters in every INIT. Over
// one UDP 4-tuple they carry nothing we could use (a peer's other addresses
// would need UDP ports too), so dropping them leaves what pion would do had
// it parsed them: run single-homed on the packet's source address.
type initFixConn struct{ net.Conn }

func (c initFixConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 12 && p[12] == ctInit {
		n = stripInitParams(p[:n])
	}
	return n, err
}

const ctInit = 1 // INIT chunk type

// Parameter types dropped from an INIT (RFC 9260 section 3.3.2.1).
const (
	paramIPv4Address        = 5
	paramIPv6Address        = 6
	paramCookiePreservative = 9
	paramHostName           = 11
	paramAddressTypes       = 12
)

// stripInitParams removes the parameters above from the INIT packet b in
// place, fixes the chunk length and checksum, and returns the new packet
// length. A packet that is not a well-formed INIT with a valid checksum is
// left as it is, for pion to judge.
func stripInitParams(b []byte) int {
	const (
		common = 12
		fixed  = 20 // chunk header and INIT fixed fields
	)
	if len(b) < common+fixed || b[common] != ctInit || !checksumOK(b) {
		return len(b)
	}
	chunkLen := int(binary.BigEndian.Uint16(b[common+2:]))
	if chunkLen < fixed || common+chunkLen > len(b) {
		return len(b)
	}
	end := common + chunkLen
	r, w := common+fixed, common+fixed // read and write offsets
	last := w                          // end of the last kept parameter, unpadded
	dropped := false
	for r+4 <= end {
		typ := binary.BigEndian.Uint16(b[r:])
		l := int(binary.BigEndian.Uint16(b[r+2:]))
		if l < 4 || r+l > end {
			return len(b) // malformed: leave it to pion
		}
		padded := min((l+3)&^3, len(b)-r)
		switch typ {
		case paramIPv4Address, paramIPv6Address, paramCookiePreservative, paramHostName, paramAddressTypes:
			dropped = true
		default:
			copy(b[w:], b[r:r+padded])
			last = w + l
			w += padded
		}
		r += padded
	}
	if !dropped {
		return len(b)
	}
	binary.BigEndian.PutUint16(b[common+2:], uint16(last-common))
	n := (last + 3) &^ 3
	clear(b[last:n])
	binary.LittleEndian.PutUint32(b[8:], 0)
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b[:n], castagnoli))
	return n
}

// checksumOK reports whether the SCTP packet b carries a valid CRC32c.
func checksumOK(b []byte) bool {
	sum := crc32.Update(0, castagnoli, b[:8])
	sum = crc32.Update(sum, castagnoli, []byte{0, 0, 0, 0})
	sum = crc32.Update(sum, castagnoli, b[12:])
	return sum == binary.LittleEndian.Uint32(b[8:12])
}
