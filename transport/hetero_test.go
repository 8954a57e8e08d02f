package transport

import (
	"bytes"
	"context"
	"net"
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

func TestFragmentSizeFollowsTheSlowestPath(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	up := func(rate float64) *path { return &path{conn: c1, drate: rate} }
	for _, tc := range []struct {
		name  string
		frag  int
		paths []*path
		want  int
	}{
		{"rates unknown", 32 << 10, []*path{up(0), up(0)}, 32 << 10},
		{"1 Gbit/s paths", 32 << 10, []*path{up(125e6), up(125e6)}, 32 << 10},
		{"100 Mbit/s paths", 32 << 10, []*path{up(125e6), up(12.5e6)}, 25000},
		{"one 25 Mbit/s path", 32 << 10, []*path{up(12.5e6), up(3.125e6)}, 6250},
		{"very slow path", 32 << 10, []*path{up(12.5e6), up(10e3)}, minFragment},
		{"slow path down", 32 << 10, []*path{up(125e6), {drate: 10e3}}, 32 << 10},
		{"configured below the floor", 1 << 10, []*path{up(10e3)}, 1 << 10},
	} {
		s := &Session{cfg: &Config{FragmentSize: tc.frag}, paths: tc.paths}
		if got := s.fragSize(); got != tc.want {
			t.Errorf("%s: fragment size %d, want %d", tc.name, got, tc.want)
		}
	}
}
