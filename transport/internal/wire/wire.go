// Package wire defines the frames a braid session exchanges on each
// channel. Every frame starts with a 5-byte header: a type byte and a
// 32-bit big-endian body length. Fixed fields follow in the body; frames
// that carry data put it last, so a reader can place the payload straight
// into its destination buffer.
//
// Enhanced striping (Frag) frames carry no sequence header at all: the
// receiver knows where a fragment goes from the Start frame that preceded
// it on the same channel and the channel's FIFO order. On a channel split
// into lanes (independent ordered streams of one connection, such as SCTP
// streams) the unit of FIFO order is the lane: Start, Frag and End of one
// segment travel on one lane, and data frames are acknowledged per lane
// (Ack for lane 0, AckLane for the others). Every other control frame
// travels on lane 0.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Type identifies a frame.
type Type uint8

// Frame types.
const (
	TypeMsg     Type = 1  // a whole segment of a message on one channel
	TypeStart   Type = 2  // enhanced striping: the next fragments on this channel
	TypeFrag    Type = 3  // enhanced striping: one fragment, no header
	TypeFragX   Type = 4  // a fragment with its position (basic striping, retransmission)
	TypeEnd     Type = 5  // enhanced striping: this channel sends no more of a segment
	TypeAck     Type = 6  // data frames received on this channel so far
	TypeWindow  Type = 7  // per-stream flow-control limit
	TypePing    Type = 8  // heartbeat with a timestamp to echo
	TypePong    Type = 9  // echo of a Ping
	TypeGoAway  Type = 10 // the session is closing
	TypeAckLane Type = 11 // data frames received on one lane of this channel so far
)

func (t Type) String() string {
	switch t {
	case TypeMsg:
		return "MSG"
	case TypeStart:
		return "START"
	case TypeFrag:
		return "FRAG"
	case TypeFragX:
		return "FRAGX"
	case TypeEnd:
		return "END"
	case TypeAck:
		return "ACK"
	case TypeWindow:
		return "WINDOW"
	case TypePing:
		return "PING"
	case TypePong:
		return "PONG"
	case TypeGoAway:
		return "GOAWAY"
	case TypeAckLane:
		return "ACKLANE"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// IsData reports whether frames of type t are counted and acknowledged:
// they are retransmitted on another channel if theirs fails.
func (t Type) IsData() bool { return t == TypeMsg || t == TypeFrag || t == TypeFragX }

// HeaderLen is the size of every frame header.
const HeaderLen = 5

// MaxSegment is the largest segment a peer may announce or send. It bounds
// every allocation a received frame can cause.
const MaxSegment = 64 << 20

// MaxFrame bounds the body of any frame.
const MaxFrame = MaxSegment + 64

// maxControl bounds the body of frames that carry no payload.
const maxControl = 4096

// Segment flags.
const (
	FlagFin   uint8 = 1 << 0 // last segment of a message
	FlagClose uint8 = 1 << 1 // the stream ends after this (empty) segment
)

// Direction of a striping counter (the paper's counterMode).
const (
	DirInc uint8 = 0
	DirDec uint8 = 1
)

// Errors returned by the decoder.
var (
	ErrUnknownType = errors.New("wire: unknown frame type")
	ErrTooLarge    = errors.New("wire: frame too large")
	ErrMalformed   = errors.New("wire: malformed frame")
)

// Header is a decoded frame header.
type Header struct {
	Type Type
	Len  uint32 // body length
}

// ParseHeader decodes and checks a frame header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: short header", ErrMalformed)
	}
	h := Header{Type: Type(b[0]), Len: binary.BigEndian.Uint32(b[1:5])}
	var limit uint32
	switch h.Type {
	case TypeMsg, TypeFrag, TypeFragX:
		limit = MaxFrame
	case TypeStart, TypeEnd, TypeAck, TypeWindow, TypePing, TypePong, TypeGoAway, TypeAckLane:
		limit = maxControl
	default:
		return h, fmt.Errorf("%w %d", ErrUnknownType, uint8(h.Type))
	}
	if h.Len > limit {
		return h, fmt.Errorf("%w: %v body of %d bytes (limit %d)", ErrTooLarge, h.Type, h.Len, limit)
	}
	return h, nil
}

// AppendHeader appends a frame header.
func AppendHeader(b []byte, t Type, bodyLen int) []byte {
	b = append(b, byte(t))
	return binary.BigEndian.AppendUint32(b, uint32(bodyLen))
}

// SegmentRef names one segment of one stream and its shape. It prefixes
// Msg, Start and FragX bodies.
type SegmentRef struct {
	Stream   uint32
	Seq      uint64 // segment sequence number within the stream
	Len      uint32 // segment length in bytes
	FragSize uint32 // fragment size used to stripe it (0 for Msg)
	Flags    uint8
}

const segRefLen = 4 + 8 + 4 + 4 + 1

func (r SegmentRef) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, r.Stream)
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = binary.BigEndian.AppendUint32(b, r.Len)
	b = binary.BigEndian.AppendUint32(b, r.FragSize)
	return append(b, r.Flags)
}

func parseSegRef(b []byte) (SegmentRef, error) {
	if len(b) < segRefLen {
		return SegmentRef{}, fmt.Errorf("%w: short segment reference", ErrMalformed)
	}
	r := SegmentRef{
		Stream:   binary.BigEndian.Uint32(b),
		Seq:      binary.BigEndian.Uint64(b[4:]),
		Len:      binary.BigEndian.Uint32(b[12:]),
		FragSize: binary.BigEndian.Uint32(b[16:]),
		Flags:    b[20],
	}
	return r, r.validate()
}

// Fragments returns how many fragments the segment has.
func (r SegmentRef) Fragments() int {
	if r.FragSize == 0 || r.Len == 0 {
		return 1
	}
	return int((uint64(r.Len) + uint64(r.FragSize) - 1) / uint64(r.FragSize))
}

// FragLen returns the length of fragment i.
func (r SegmentRef) FragLen(i int) int {
	if r.FragSize == 0 {
		return int(r.Len)
	}
	off := uint64(i) * uint64(r.FragSize)
	return int(min(uint64(r.FragSize), uint64(r.Len)-off))
}

func (r SegmentRef) validate() error {
	if r.Len > MaxSegment {
		return fmt.Errorf("%w: segment of %d bytes (limit %d)", ErrTooLarge, r.Len, MaxSegment)
	}
	if r.FragSize > MaxSegment {
		return fmt.Errorf("%w: fragment size %d", ErrMalformed, r.FragSize)
	}
	if r.Flags&^(FlagFin|FlagClose) != 0 {
		return fmt.Errorf("%w: unknown segment flags %#x", ErrMalformed, r.Flags)
	}
	return nil
}

// MsgHeaderLen is the body length of a Msg frame before its payload.
const MsgHeaderLen = segRefLen

// AppendMsgHeader appends the header and fixed fields of a Msg frame whose
// payload (ref.Len bytes) the caller writes next.
func AppendMsgHeader(b []byte, ref SegmentRef) []byte {
	ref.FragSize = 0
	b = AppendHeader(b, TypeMsg, segRefLen+int(ref.Len))
	return ref.append(b)
}

// ParseMsg decodes the fixed fields of a Msg body; body is at least the
// MsgHeaderLen first bytes, bodyLen the whole body length.
func ParseMsg(body []byte, bodyLen uint32) (SegmentRef, error) {
	if bodyLen < segRefLen {
		return SegmentRef{}, fmt.Errorf("%w: short MSG", ErrMalformed)
	}
	r, err := parseSegRef(body)
	if err != nil {
		return r, err
	}
	if r.FragSize != 0 || uint64(r.Len) != uint64(bodyLen)-segRefLen {
		return r, fmt.Errorf("%w: MSG length %d does not match body %d", ErrMalformed, r.Len, bodyLen-segRefLen)
	}
	return r, nil
}

// Start begins (or moves) this channel's counter on a striped segment:
// the fragments that follow are First, First±1, ... in direction Dir.
type Start struct {
	Ref   SegmentRef
	First uint32
	Dir   uint8
}

// Append appends the Start frame.
func (s Start) Append(b []byte) []byte {
	b = AppendHeader(b, TypeStart, segRefLen+5)
	b = s.Ref.append(b)
	b = binary.BigEndian.AppendUint32(b, s.First)
	return append(b, s.Dir)
}

// ParseStart decodes a Start body.
func ParseStart(body []byte) (Start, error) {
	if len(body) != segRefLen+5 {
		return Start{}, fmt.Errorf("%w: START body of %d bytes", ErrMalformed, len(body))
	}
	ref, err := parseSegRef(body)
	if err != nil {
		return Start{}, err
	}
	s := Start{Ref: ref, First: binary.BigEndian.Uint32(body[segRefLen:]), Dir: body[segRefLen+4]}
	if ref.FragSize == 0 || ref.Len == 0 {
		return s, fmt.Errorf("%w: START without fragments", ErrMalformed)
	}
	if s.Dir > DirDec {
		return s, fmt.Errorf("%w: START direction %d", ErrMalformed, s.Dir)
	}
	if int(s.First) >= ref.Fragments() {
		return s, fmt.Errorf("%w: START at fragment %d of %d", ErrMalformed, s.First, ref.Fragments())
	}
	return s, nil
}

// AppendFragHeader appends the header of a Frag frame of n payload bytes.
func AppendFragHeader(b []byte, n int) []byte { return AppendHeader(b, TypeFrag, n) }

// FragXHeaderLen is the body length of a FragX frame before its payload.
const FragXHeaderLen = segRefLen + 4

// AppendFragXHeader appends the header and fixed fields of a FragX frame
// carrying fragment index of ref; the caller writes the payload next.
func AppendFragXHeader(b []byte, ref SegmentRef, index int) []byte {
	b = AppendHeader(b, TypeFragX, FragXHeaderLen+ref.FragLen(index))
	b = ref.append(b)
	return binary.BigEndian.AppendUint32(b, uint32(index))
}

// ParseFragX decodes the fixed fields of a FragX body.
func ParseFragX(body []byte, bodyLen uint32) (SegmentRef, int, error) {
	if bodyLen < FragXHeaderLen || len(body) < FragXHeaderLen {
		return SegmentRef{}, 0, fmt.Errorf("%w: short FRAGX", ErrMalformed)
	}
	ref, err := parseSegRef(body)
	if err != nil {
		return ref, 0, err
	}
	idx := int(binary.BigEndian.Uint32(body[segRefLen:]))
	if ref.FragSize == 0 || ref.Len == 0 || idx >= ref.Fragments() {
		return ref, 0, fmt.Errorf("%w: FRAGX fragment %d of %d", ErrMalformed, idx, ref.Fragments())
	}
	if int(bodyLen)-FragXHeaderLen != ref.FragLen(idx) {
		return ref, 0, fmt.Errorf("%w: FRAGX payload %d, want %d", ErrMalformed, int(bodyLen)-FragXHeaderLen, ref.FragLen(idx))
	}
	return ref, idx, nil
}

// End says this channel sends no more fragments of the segment.
type End struct {
	Stream uint32
	Seq    uint64
}

// Append appends the End frame.
func (e End) Append(b []byte) []byte {
	b = AppendHeader(b, TypeEnd, 12)
	b = binary.BigEndian.AppendUint32(b, e.Stream)
	return binary.BigEndian.AppendUint64(b, e.Seq)
}

// ParseEnd decodes an End body.
func ParseEnd(body []byte) (End, error) {
	if len(body) != 12 {
		return End{}, fmt.Errorf("%w: END body of %d bytes", ErrMalformed, len(body))
	}
	return End{Stream: binary.BigEndian.Uint32(body), Seq: binary.BigEndian.Uint64(body[4:])}, nil
}

// AppendU64 appends a frame whose body is one 64-bit value (Ack, Ping,
// Pong).
func AppendU64(b []byte, t Type, v uint64) []byte {
	b = AppendHeader(b, t, 8)
	return binary.BigEndian.AppendUint64(b, v)
}

// ParseU64 decodes a one-value body.
func ParseU64(t Type, body []byte) (uint64, error) {
	if len(body) != 8 {
		return 0, fmt.Errorf("%w: %v body of %d bytes", ErrMalformed, t, len(body))
	}
	return binary.BigEndian.Uint64(body), nil
}

// AckLane acknowledges the data frames received on one lane of a channel
// (see transport's Config.Lanes): Count is how many arrived on lane Lane
// so far. Lane 0, the channel itself, is acknowledged with Ack.
type AckLane struct {
	Lane  uint16
	Count uint64
}

// Append appends the AckLane frame.
func (a AckLane) Append(b []byte) []byte {
	b = AppendHeader(b, TypeAckLane, 10)
	b = binary.BigEndian.AppendUint16(b, a.Lane)
	return binary.BigEndian.AppendUint64(b, a.Count)
}

// ParseAckLane decodes an AckLane body.
func ParseAckLane(body []byte) (AckLane, error) {
	if len(body) != 10 {
		return AckLane{}, fmt.Errorf("%w: ACKLANE body of %d bytes", ErrMalformed, len(body))
	}
	a := AckLane{Lane: binary.BigEndian.Uint16(body), Count: binary.BigEndian.Uint64(body[2:])}
	if a.Lane == 0 {
		return a, fmt.Errorf("%w: ACKLANE for lane 0 (the channel is acknowledged with ACK)", ErrMalformed)
	}
	return a, nil
}

// Window raises the flow-control limit of a stream: the sender may have
// started segments totalling Limit bytes on it.
type Window struct {
	Stream uint32
	Limit  uint64
}

// Append appends the Window frame.
func (w Window) Append(b []byte) []byte {
	b = AppendHeader(b, TypeWindow, 12)
	b = binary.BigEndian.AppendUint32(b, w.Stream)
	return binary.BigEndian.AppendUint64(b, w.Limit)
}

// ParseWindow decodes a Window body.
func ParseWindow(body []byte) (Window, error) {
	if len(body) != 12 {
		return Window{}, fmt.Errorf("%w: WINDOW body of %d bytes", ErrMalformed, len(body))
	}
	return Window{Stream: binary.BigEndian.Uint32(body), Limit: binary.BigEndian.Uint64(body[4:])}, nil
}

// AppendGoAway appends a GoAway frame carrying a reason.
func AppendGoAway(b []byte, reason string) []byte {
	if len(reason) > maxControl {
		reason = reason[:maxControl]
	}
	b = AppendHeader(b, TypeGoAway, len(reason))
	return append(b, reason...)
}
