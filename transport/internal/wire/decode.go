package wire

// Frame is one decoded frame, for tests, fuzzing and diagnostics. The
// transport decodes frames incrementally instead, placing payloads
// directly into their destination buffers.
type Frame struct {
	Type    Type
	Ref     SegmentRef // Msg, Start, FragX
	Index   int        // FragX
	Start   Start
	End     End
	Window  Window
	AckLane AckLane
	Value   uint64 // Ack, Ping, Pong
	Payload []byte // Msg, Frag, FragX, GoAway reason
}

// Decode parses the first frame in b and returns it with the number of
// bytes it used. The payload aliases b.
func Decode(b []byte) (Frame, int, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Frame{}, 0, err
	}
	n := HeaderLen + int(h.Len)
	if len(b) < n {
		return Frame{}, 0, ErrMalformed
	}
	body := b[HeaderLen:n]
	f := Frame{Type: h.Type}
	switch h.Type {
	case TypeMsg:
		f.Ref, err = ParseMsg(body, h.Len)
		if err == nil {
			f.Payload = body[MsgHeaderLen:]
		}
	case TypeStart:
		f.Start, err = ParseStart(body)
	case TypeFrag:
		f.Payload = body
	case TypeFragX:
		f.Ref, f.Index, err = ParseFragX(body, h.Len)
		if err == nil {
			f.Payload = body[FragXHeaderLen:]
		}
	case TypeEnd:
		f.End, err = ParseEnd(body)
	case TypeWindow:
		f.Window, err = ParseWindow(body)
	case TypeAck, TypePing, TypePong:
		f.Value, err = ParseU64(h.Type, body)
	case TypeGoAway:
		f.Payload = body
	case TypeAckLane:
		f.AckLane, err = ParseAckLane(body)
	}
	if err != nil {
		return Frame{}, 0, err
	}
	return f, n, nil
}

// Append encodes f (the inverse of Decode).
func (f Frame) Append(b []byte) []byte {
	switch f.Type {
	case TypeMsg:
		b = AppendMsgHeader(b, f.Ref)
		return append(b, f.Payload...)
	case TypeStart:
		return f.Start.Append(b)
	case TypeFrag:
		b = AppendFragHeader(b, len(f.Payload))
		return append(b, f.Payload...)
	case TypeFragX:
		b = AppendFragXHeader(b, f.Ref, f.Index)
		return append(b, f.Payload...)
	case TypeEnd:
		return f.End.Append(b)
	case TypeWindow:
		return f.Window.Append(b)
	case TypeAck, TypePing, TypePong:
		return AppendU64(b, f.Type, f.Value)
	case TypeGoAway:
		return AppendGoAway(b, string(f.Payload))
	case TypeAckLane:
		return f.AckLane.Append(b)
	}
	return b
}
