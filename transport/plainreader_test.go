package transport

import (
	"bytes"
	"testing"
	"time"
)

// TestPlaintextPingPongNeverWaitsForMissingBytes sends messages of mixed
// sizes back and forth over a plaintext TCP channel, one at a time, so
// that after every large payload the receiver waits for the next frame's
// header on an idle socket: a receive low-water mark left above one byte
// there (plainreader_linux.go) would hold the read until the path timed
// out (nothing else comes: the peer waits for the echo), failing it over.
func TestPlaintextPingPongNeverWaitsForMissingBytes(t *testing.T) {
	c, s := pair(t, 1, func(c *Config) {
		c.InsecurePlaintext = true
		c.Stripe = StripeOff
		// Long enough that a loaded machine does not time the path out;
		// a read stuck on the mark still does, within the test's time.
		c.PathTimeout = 2 * time.Second
	})
	ctx := t.Context()
	cs, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1 << 20, 10, 3<<20 + 7, 0, 600 << 10, 5000, 8 << 10, 1<<20 - 1, 1}
	done := make(chan error, 1)
	go func() {
		ss, err := s.AcceptStream(ctx)
		if err != nil {
			done <- err
			return
		}
		for range sizes {
			m, err := ss.ReadMessage(ctx)
			if err == nil {
				err = ss.WriteMessage(ctx, m)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i, n := range sizes {
		want := randBytes(uint64(i), n)
		if err := cs.WriteMessage(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := cs.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("message %d (%d bytes): %v", i, n, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d: echo of %d bytes, want %d (content differs)", i, len(got), n)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, sess := range []*Session{c, s} {
		for _, p := range sess.Stats() {
			if p.Failovers != 0 || p.Reconnects != 0 || p.Encrypted {
				t.Errorf("path %d: %d failovers, %d reconnects, encrypted %v; want 0, 0, false", p.ID, p.Failovers, p.Reconnects, p.Encrypted)
			}
		}
	}
}
