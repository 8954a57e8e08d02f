package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Version is the protocol version spoken in the handshake.
const Version = 1

var magic = [5]byte{'B', 'R', 'A', 'I', 'D'}

// Handshake message sizes. All are fixed so that a server reads exactly
// these bytes, and nothing more, from a peer that has not proven the key.
const (
	NonceLen     = 32
	MACLen       = 32
	SessionIDLen = 16
	HelloLen     = 6 + NonceLen
	ChallengeLen = 6 + NonceLen + MACLen
	JoinLen      = MACLen + SessionIDLen + 2 + 4 + 4
	VerdictLen   = 1 + 4 + 4 + 2 + maxReason
	maxReason    = 200
)

// Hello opens a channel: the client's nonce.
type Hello struct {
	Nonce [NonceLen]byte
}

// Append appends the Hello message.
func (h Hello) Append(b []byte) []byte {
	b = append(b, magic[:]...)
	b = append(b, Version)
	return append(b, h.Nonce[:]...)
}

// ParseHello decodes a Hello message.
func ParseHello(b []byte) (Hello, error) {
	var h Hello
	if err := checkMagic(b, HelloLen); err != nil {
		return h, err
	}
	copy(h.Nonce[:], b[6:])
	return h, nil
}

// Challenge answers Hello: the server's nonce and its proof of the key.
type Challenge struct {
	Nonce [NonceLen]byte
	MAC   [MACLen]byte
}

// Append appends the Challenge message.
func (c Challenge) Append(b []byte) []byte {
	b = append(b, magic[:]...)
	b = append(b, Version)
	b = append(b, c.Nonce[:]...)
	return append(b, c.MAC[:]...)
}

// ParseChallenge decodes a Challenge message.
func ParseChallenge(b []byte) (Challenge, error) {
	var c Challenge
	if err := checkMagic(b, ChallengeLen); err != nil {
		return c, err
	}
	copy(c.Nonce[:], b[6:])
	copy(c.MAC[:], b[6+NonceLen:])
	return c, nil
}

func checkMagic(b []byte, n int) error {
	if len(b) != n {
		return fmt.Errorf("%w: handshake message of %d bytes, want %d", ErrMalformed, len(b), n)
	}
	if !bytes.Equal(b[:5], magic[:]) {
		return fmt.Errorf("%w: not a braid peer (bad magic %q)", ErrMalformed, b[:5])
	}
	if b[5] != Version {
		return fmt.Errorf("%w: protocol version %d, this braid speaks %d", ErrMalformed, b[5], Version)
	}
	return nil
}

// Join proves the client's key and names the session and path the channel
// belongs to, with the client's receive parameters.
type Join struct {
	MAC     [MACLen]byte
	Session [SessionIDLen]byte
	Path    uint16
	Window  uint32 // per-stream receive window the client grants
	Segment uint32 // largest segment the client sends
}

// Append appends the Join message.
func (j Join) Append(b []byte) []byte {
	b = append(b, j.MAC[:]...)
	b = append(b, j.Session[:]...)
	b = binary.BigEndian.AppendUint16(b, j.Path)
	b = binary.BigEndian.AppendUint32(b, j.Window)
	return binary.BigEndian.AppendUint32(b, j.Segment)
}

// ParseJoin decodes a Join message.
func ParseJoin(b []byte) (Join, error) {
	var j Join
	if len(b) != JoinLen {
		return j, fmt.Errorf("%w: JOIN of %d bytes", ErrMalformed, len(b))
	}
	copy(j.MAC[:], b)
	copy(j.Session[:], b[MACLen:])
	o := MACLen + SessionIDLen
	j.Path = binary.BigEndian.Uint16(b[o:])
	j.Window = binary.BigEndian.Uint32(b[o+2:])
	j.Segment = binary.BigEndian.Uint32(b[o+6:])
	return j, j.validate()
}

func (j Join) validate() error {
	if j.Segment == 0 || j.Segment > MaxSegment {
		return fmt.Errorf("%w: segment size %d", ErrMalformed, j.Segment)
	}
	if j.Window < j.Segment {
		return fmt.Errorf("%w: window %d below segment size %d", ErrMalformed, j.Window, j.Segment)
	}
	return nil
}

// Verdict ends the handshake: accepted with the server's receive
// parameters, or refused with a reason.
type Verdict struct {
	OK      bool
	Window  uint32
	Segment uint32
	Reason  string
}

// Append appends the Verdict message (fixed size, reason truncated).
func (v Verdict) Append(b []byte) []byte {
	ok := byte(0)
	if v.OK {
		ok = 1
	}
	b = append(b, ok)
	b = binary.BigEndian.AppendUint32(b, v.Window)
	b = binary.BigEndian.AppendUint32(b, v.Segment)
	r := v.Reason
	if len(r) > maxReason {
		r = r[:maxReason]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(r)))
	b = append(b, r...)
	return append(b, make([]byte, maxReason-len(r))...)
}

// ParseVerdict decodes a Verdict message.
func ParseVerdict(b []byte) (Verdict, error) {
	var v Verdict
	if len(b) != VerdictLen {
		return v, fmt.Errorf("%w: VERDICT of %d bytes", ErrMalformed, len(b))
	}
	if b[0] > 1 {
		return v, fmt.Errorf("%w: VERDICT status %d", ErrMalformed, b[0])
	}
	v.OK = b[0] == 1
	v.Window = binary.BigEndian.Uint32(b[1:])
	v.Segment = binary.BigEndian.Uint32(b[5:])
	n := int(binary.BigEndian.Uint16(b[9:]))
	if n > maxReason {
		return v, fmt.Errorf("%w: VERDICT reason of %d bytes", ErrMalformed, n)
	}
	v.Reason = string(b[11 : 11+n])
	if v.OK {
		return v, Join{Window: v.Window, Segment: v.Segment}.validate()
	}
	return v, nil
}
