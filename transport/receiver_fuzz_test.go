package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport/internal/wire"
)

// cutConn is a plaintext channel that delivers its bytes in reads cut at
// the sizes cuts gives, in turn, as a socket may: a frame can arrive a
// byte at a time or together with the next ones. Its vectored read cuts
// the same way.
type cutConn struct {
	net.Conn // nil: the reader uses only the methods below
	data     []byte
	cuts     []byte
	i        int
}

// chunk returns the size of the next read: 1 to 65026 bytes.
func (c *cutConn) chunk() int {
	if len(c.cuts) == 0 {
		return len(c.data)
	}
	b := int(c.cuts[c.i%len(c.cuts)])
	c.i++
	return 1 + b*b
}

func (c *cutConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.chunk())], c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *cutConn) readv(a, b []byte) (int, int, error) {
	k := min(c.chunk(), len(c.data))
	n := copy(a[:min(len(a), k)], c.data)
	c.data, k = c.data[n:], k-n
	extra := 0
	if n == len(a) && k > 0 {
		extra = copy(b[:min(len(b), k)], c.data)
		c.data = c.data[extra:]
	}
	return n, extra, nil
}

func (c *cutConn) SetReadDeadline(time.Time) error { return nil }
func (c *cutConn) Close() error                    { return nil }

// receive runs the receive path of a listening session (the reader of
// one plaintext channel, reassembly, delivery) over stream, cut at cuts,
// until the bytes end or a frame is refused, and returns the messages it
// delivered on each stream and why reading stopped.
func receive(t testing.TB, stream, cuts []byte) (map[uint32][][]byte, error) {
	t.Helper()
	cfg, err := (&Config{Key: []byte("fuzz"), InsecurePlaintext: true, Logger: slog.New(slog.DiscardHandler)}).populate()
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(cfg, newSessionID(), false, uint32(cfg.StreamWindow), uint32(cfg.SegmentSize))
	defer s.wait()
	defer s.closeWith(ErrClosed)
	conn := &cutConn{data: stream, cuts: cuts}
	l := &lane{conn: conn, reading: true}
	p := &path{id: 0, s: s, conn: conn, gen: 1, nlanes: 1, lanes: []*lane{l}}
	s.mu.Lock()
	s.paths = []*path{p}
	s.pathsChanged()
	s.mu.Unlock()
	r := &reader{s: s, p: p, gen: 1, l: l, conn: conn, br: newPlainReader(conn)}
	runErr := r.run()

	// Everything has arrived: read what is complete, without waiting.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := map[uint32][][]byte{}
	for {
		st, err := s.AcceptStream(ctx)
		if err != nil {
			break
		}
		for {
			m, err := st.ReadMessage(ctx)
			if err != nil {
				break
			}
			got[st.ID()] = append(got[st.ID()], m)
		}
	}
	return got, runErr
}

// encodeFrames returns what a sender writes on one channel for msgs on
// stream 1, one segment each: plan[i] says how message i travels: whole
// (bit 0 clear) or striped in fragments of 512 x (1 + bits 2-5) bytes,
// announced by a Start in increasing or (bit 1) decreasing order and
// closed by an End, or (bit 6) as FragX frames that carry their own
// place (basic striping). Bit 7 puts a Ping before the message.
func encodeFrames(msgs [][]byte, plan []byte) []byte {
	var b []byte
	for i, m := range msgs {
		var how byte
		if len(plan) > 0 {
			how = plan[i%len(plan)]
		}
		if how&0x80 != 0 {
			b = wire.AppendU64(b, wire.TypePing, uint64(i))
		}
		ref := wire.SegmentRef{Stream: 1, Seq: uint64(i), Len: uint32(len(m)), Flags: wire.FlagFin}
		if how&1 == 0 || len(m) == 0 {
			b = wire.AppendMsgHeader(b, ref)
			b = append(b, m...)
			continue
		}
		ref.FragSize = uint32(512 * (1 + int(how>>2)&15))
		n := ref.Fragments()
		order := make([]int, n)
		for k := range order {
			order[k] = k
			if how&2 != 0 {
				order[k] = n - 1 - k
			}
		}
		if how&0x40 != 0 {
			for _, k := range order {
				b = wire.AppendFragXHeader(b, ref, k)
				b = append(b, m[k*int(ref.FragSize):][:ref.FragLen(k)]...)
			}
			continue
		}
		dir := wire.DirInc
		if how&2 != 0 {
			dir = wire.DirDec
		}
		b = wire.Start{Ref: ref, First: uint32(order[0]), Dir: dir}.Append(b)
		for _, k := range order {
			b = wire.AppendFragHeader(b, ref.FragLen(k))
			b = append(b, m[k*int(ref.FragSize):][:ref.FragLen(k)]...)
		}
		b = wire.End{Stream: 1, Seq: uint64(i)}.Append(b)
	}
	return b
}

// messagesOf derives up to 8 messages of up to 24 KB from spec, 2 bytes
// of size each, filled with a pattern of their index.
func messagesOf(spec []byte) [][]byte {
	var msgs [][]byte
	for i := 0; i+1 < len(spec) && len(msgs) < 8; i += 2 {
		n := (int(spec[i])<<8 | int(spec[i+1])) % (24 << 10)
		m := make([]byte, n)
		for k := range m {
			m[k] = byte(len(msgs)*31 + k*7)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// FuzzReceive feeds the real receive path (plaintext reader, frame
// decoding, the striping counter, reassembly and delivery) with the frames
// of a few messages, whole or striped either way, cut into reads at
// arbitrary boundaries, then arbitrary bytes. Every message must arrive
// intact and in order whatever the cuts; what follows must end the channel
// with an error, never a panic or a hang, and a protocol fault must be a
// *ProtocolError.
func FuzzReceive(f *testing.F) {
	f.Add([]byte{0, 100}, []byte{0x00}, []byte{}, []byte{})
	f.Add([]byte{0x10, 0x00, 0x40, 0x01, 0, 0}, []byte{0x01, 0x03, 0x07, 0x41}, []byte{1, 3, 0x45, 0x80}, []byte{})
	f.Add([]byte{0x5d, 0xc0, 0x20, 0x00}, []byte{0xff, 0x02}, []byte{0x3d, 0x3f}, []byte{})
	f.Add([]byte{0x00, 0x10}, []byte{5}, []byte{0}, encodeFrames([][]byte{{1, 2, 3}}, nil))   // the same segment again
	f.Add([]byte{0x00, 0x10}, []byte{5}, []byte{0}, wire.AppendFragHeader(nil, 16))           // FRAG without START
	f.Add([]byte{}, []byte{1}, []byte{}, wire.AppendHeader(nil, wire.TypeStart, 3))           // short START
	f.Add([]byte{}, []byte{9}, []byte{}, []byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 1, 2, 3}) // garbage
	f.Fuzz(func(t *testing.T, spec, cuts, plan, garbage []byte) {
		msgs := messagesOf(spec)
		stream := append(encodeFrames(msgs, plan), garbage...)
		got, err := receive(t, stream, cuts)
		if len(got[1]) < len(msgs) {
			t.Fatalf("%d of %d messages delivered (reading stopped: %v)", len(got[1]), len(msgs), err)
		}
		for i, m := range msgs {
			if !bytes.Equal(got[1][i], m) {
				t.Fatalf("message %d: %d bytes differ from the %d sent", i, len(got[1][i]), len(m))
			}
		}
		if len(garbage) == 0 && err != io.EOF {
			t.Fatalf("reading a clean stream ended with %v, want io.EOF", err)
		}
		var pe *ProtocolError
		if errors.As(err, &pe) != errors.Is(err, ErrProtocol) {
			t.Fatalf("error %v: errors.As finds a ProtocolError %v, errors.Is(ErrProtocol) %v", err, errors.As(err, &pe), errors.Is(err, ErrProtocol))
		}
	})
}

// TestProtocolErrorIsFoundThroughThePathError checks what a caller who
// sees a path's error can learn from it: that the peer broke the
// protocol, and the decoder's reason.
func TestProtocolErrorIsFoundThroughThePathError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []byte
		reason error // the decoder's error that Unwrap reaches, or nil
	}{
		{"FRAG without START", wire.AppendFragHeader(nil, 16), nil},
		{"short START", append(wire.AppendHeader(nil, wire.TypeStart, 3), 1, 2, 3), wire.ErrMalformed},
		{"unknown frame type", []byte{0xee, 0, 0, 0, 0, 0, 0, 0}, wire.ErrUnknownType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := receive(t, tc.frames, []byte{1})
			perr := error(&PathError{Path: 0, Remote: "peer", Op: "read", Err: err})
			var pe *ProtocolError
			if !errors.As(perr, &pe) {
				t.Fatalf("errors.As(%v, *ProtocolError) = false", perr)
			}
			if !errors.Is(perr, ErrProtocol) {
				t.Errorf("errors.Is(%v, ErrProtocol) = false", perr)
			}
			if tc.reason != nil && !errors.Is(perr, tc.reason) {
				t.Errorf("errors.Is(%v, %v) = false", perr, tc.reason)
			}
			if tc.reason == nil && pe.Unwrap() != nil {
				t.Errorf("ProtocolError %v unwraps to %v, want nil", pe, pe.Unwrap())
			}
		})
	}
}
