package transport

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
)

func TestNextMessageReadsAnySize(t *testing.T) {
	for _, k := range []int{1, 3} {
		c, s := pair(t, k, func(c *Config) {
			c.FragmentSize = 4 << 10
			c.SegmentSize = 64 << 10
			c.StreamWindow = 256 << 10
			c.MaxMessageSize = 256 << 10
		})
		ctx := t.Context()
		// Big messages are 8 windows long: far above MaxMessageSize.
		big, small := randBytes(1, 2<<20), randBytes(2, 1000)
		st, err := c.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			for _, m := range [][]byte{big, small, nil, big, small, big} {
				if err := st.WriteMessage(ctx, m); err != nil {
					errc <- err
					return
				}
			}
			errc <- st.Close()
		}()
		rs, err := s.AcceptStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		readWhole := func(i int, want []byte) {
			t.Helper()
			m, err := rs.NextMessage(ctx)
			if err != nil {
				t.Fatalf("paths=%d message %d: %v", k, i, err)
			}
			h := sha256.New()
			n, err := io.Copy(h, m)
			if err != nil {
				t.Fatalf("paths=%d message %d: after %d bytes: %v", k, i, n, err)
			}
			if n != int64(len(want)) || m.Len() != n || !bytes.Equal(h.Sum(nil), sha(want)) {
				t.Fatalf("paths=%d message %d: got %d bytes (Len %d), want %d, content differs", k, i, n, m.Len(), len(want))
			}
		}
		readWhole(0, big)
		// Messages of any size may be read either way, in any mix.
		if got, err := rs.ReadMessage(ctx); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("paths=%d message 1: %d bytes, %v", k, len(got), err)
		}
		readWhole(2, nil)
		// A reader closed early skips the rest of its message.
		m, err := rs.NextMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		part := make([]byte, 1000)
		if _, err := io.ReadFull(m, part); err != nil || !bytes.Equal(part, big[:1000]) {
			t.Fatalf("paths=%d: first 1000 bytes of message 3: %v", k, err)
		}
		if _, err := rs.ReadMessage(ctx); !errors.Is(err, errReaderOpen) {
			t.Fatalf("paths=%d: ReadMessage with a reader open: %v, want %v", k, err, errReaderOpen)
		}
		m.Close()
		if _, err := m.Read(part); err == nil {
			t.Fatalf("paths=%d: read after Close succeeded", k)
		}
		if got, err := rs.ReadMessage(ctx); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("paths=%d message 4 after a closed reader: %d bytes, %v", k, len(got), err)
		}
		// ReadMessage still refuses what is too large, and the stream goes on.
		if _, err := rs.ReadMessage(ctx); !errors.Is(err, ErrMessageTooLarge) {
			t.Fatalf("paths=%d: ReadMessage of 2 MiB with a 256 KiB limit: %v", k, err)
		}
		if _, err := rs.NextMessage(ctx); err != io.EOF {
			t.Fatalf("paths=%d: after the last message: %v, want io.EOF", k, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func sha(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}
