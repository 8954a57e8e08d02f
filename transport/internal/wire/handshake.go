package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Version is the protocol version spoken in the handshake. Version 2
// replaced version 1's HMAC challenge-response with a Noise handshake and
// encrypted records.
const Version = 2

var magic = [5]byte{'B', 'R', 'A', 'I', 'D'}

// Handshake message sizes. All are fixed so that a server reads exactly
// these bytes, and nothing more, from a peer that has not proven the key.
const (
	// NoiseLen is one Noise NNpsk0 handshake message with an empty
	// payload: an ephemeral X25519 public key and an AEAD tag.
	NoiseLen     = 32 + TagLen
	TagLen       = 16
	SessionIDLen = 16
	HelloLen     = 6 + NoiseLen
	ReplyLen     = 6 + 1 + NoiseLen
	JoinLen      = SessionIDLen + 2 + 4 + 4 + 1
	VerdictLen   = 1 + 4 + 4 + 2 + maxReason
	maxReason    = 200
)

// Hello opens a channel: the dialer's first Noise message (-> psk, e).
type Hello struct {
	Noise [NoiseLen]byte
}

// Append appends the Hello message.
func (h Hello) Append(b []byte) []byte {
	b = append(b, magic[:]...)
	b = append(b, Version)
	return append(b, h.Noise[:]...)
}

// ParseHello decodes a Hello message.
func ParseHello(b []byte) (Hello, error) {
	var h Hello
	if err := checkMagic(b, HelloLen); err != nil {
		return h, err
	}
	copy(h.Noise[:], b[6:])
	return h, nil
}

// Reply answers Hello: the listener's Noise message (<- e, ee), or a
// refusal when the Hello did not prove the key.
type Reply struct {
	Refused bool
	Noise   [NoiseLen]byte
}

// Append appends the Reply message.
func (r Reply) Append(b []byte) []byte {
	b = append(b, magic[:]...)
	b = append(b, Version)
	st := byte(0)
	if r.Refused {
		st = 1
	}
	b = append(b, st)
	return append(b, r.Noise[:]...)
}

// ParseReply decodes a Reply message.
func ParseReply(b []byte) (Reply, error) {
	var r Reply
	if err := checkMagic(b, ReplyLen); err != nil {
		return r, err
	}
	if b[6] > 1 {
		return r, fmt.Errorf("%w: REPLY status %d", ErrMalformed, b[6])
	}
	r.Refused = b[6] == 1
	copy(r.Noise[:], b[7:])
	return r, nil
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

// Join names the session and path a channel belongs to, with the
// dialer's receive parameters. It travels as the first encrypted record,
// so it also proves that the dialer completed the handshake (a replayed
// Hello cannot produce it).
type Join struct {
	Session [SessionIDLen]byte
	Path    uint16
	Window  uint32 // per-stream receive window the client grants
	Segment uint32 // largest segment the client sends
	Flags   uint8  // JoinPlaintext, JoinRejoin
}

const (
	// JoinPlaintext asks for data records without encryption (the
	// handshake itself stays encrypted); both sides must be configured
	// for it.
	JoinPlaintext = 1
	// JoinRejoin marks a channel that replaces a lost one of an
	// established session: the listener must know the session, and
	// answers Verdict.Gone if it does not (it closed the session, or
	// restarted), instead of starting a new one under the old ID.
	JoinRejoin = 2
)

// Append appends the Join message.
func (j Join) Append(b []byte) []byte {
	b = append(b, j.Session[:]...)
	b = binary.BigEndian.AppendUint16(b, j.Path)
	b = binary.BigEndian.AppendUint32(b, j.Window)
	b = binary.BigEndian.AppendUint32(b, j.Segment)
	return append(b, j.Flags)
}

// ParseJoin decodes a Join message.
func ParseJoin(b []byte) (Join, error) {
	var j Join
	if len(b) != JoinLen {
		return j, fmt.Errorf("%w: JOIN of %d bytes", ErrMalformed, len(b))
	}
	copy(j.Session[:], b)
	o := SessionIDLen
	j.Path = binary.BigEndian.Uint16(b[o:])
	j.Window = binary.BigEndian.Uint32(b[o+2:])
	j.Segment = binary.BigEndian.Uint32(b[o+6:])
	j.Flags = b[o+10]
	if j.Flags&^(JoinPlaintext|JoinRejoin) != 0 {
		return j, fmt.Errorf("%w: JOIN flags %#x", ErrMalformed, j.Flags)
	}
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
// parameters, or refused with a reason. Gone refuses a JoinRejoin for a
// session the listener does not know.
type Verdict struct {
	OK      bool
	Gone    bool
	Window  uint32
	Segment uint32
	Reason  string
}

// Verdict statuses on the wire.
const (
	verdictRefused = 0
	verdictOK      = 1
	verdictGone    = 2
)

// Append appends the Verdict message (fixed size, reason truncated).
func (v Verdict) Append(b []byte) []byte {
	st := byte(verdictRefused)
	switch {
	case v.OK:
		st = verdictOK
	case v.Gone:
		st = verdictGone
	}
	b = append(b, st)
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
	if b[0] > verdictGone {
		return v, fmt.Errorf("%w: VERDICT status %d", ErrMalformed, b[0])
	}
	v.OK, v.Gone = b[0] == verdictOK, b[0] == verdictGone
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
