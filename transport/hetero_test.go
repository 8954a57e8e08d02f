package transport

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/braid-hpc/braid/testbed/relay"
)

// TestHeterogeneousPingPong echoes messages over paths of very different
// speeds: every message must come back intact whatever the striping
// decides (slow paths leaving the end of a segment to fast ones).
func TestHeterogeneousPingPong(t *testing.T) {
	c, s, relays := relayed(t, 3, nil)
	for i, r := range []int64{80e6, 40e6, 8e6} {
		relays[i].(*relay.TCP).SetRate(r)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	go func() {
		rs, err := s.AcceptStream(ctx)
		if err != nil {
			return
		}
		for {
			m, err := rs.ReadMessage(ctx)
			if err != nil {
				return
			}
			if rs.WriteMessage(ctx, m) != nil {
				return
			}
		}
	}()
	st, _ := c.OpenStream(ctx)
	for i, size := range []int{64 << 10, 1 << 20, 1 << 20, 300 << 10, 1 << 20, 2 << 20, 1 << 20, 1 << 20} {
		msg := randBytes(uint64(i), size)
		if err := st.WriteMessage(ctx, msg); err != nil {
			t.Fatal(err)
		}
		got, err := st.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("message %d (%d bytes): %v", i, size, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("message %d corrupted", i)
		}
	}
}
