package transport

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport/channel/ksctp"
)

// The tests below run braid sessions over kernel SCTP (Transport "sctp").
// Where the kernel has none they skip; ksctp's TestKernelSCTPInVM runs
// them inside a guest kernel (User-Mode Linux or QEMU, internal/vmkernel),
// where BRAID_REQUIRE_KSCTP=1 makes a skip a failure.

func requireKernelSCTP(t testing.TB) {
	t.Helper()
	err := ksctp.Available()
	if err == nil {
		return
	}
	if os.Getenv("BRAID_REQUIRE_KSCTP") == "1" && os.Getenv("BRAID_IN_VM") == "1" {
		t.Fatalf("BRAID_REQUIRE_KSCTP=1 but %v", err)
	}
	t.Skipf("%v (ksctp's TestKernelSCTPInVM, and BenchmarkKernelSCTPInVM for benchmarks, run this inside a guest kernel)", err)
}

// sctpConfig sets kernel SCTP with the channel's defaults, whose 4 MiB
// receive buffer keeps the association off the 200 ms delayed-SACK clock
// on loopback's 64 KiB MTU (docs/sctp.md).
func sctpConfig(m StripeMode) func(*Config) {
	return func(c *Config) {
		c.Transport = "sctp"
		c.Stripe = m
		c.FragmentSize = 4 << 10
		c.SegmentSize = 64 << 10
		c.StreamWindow = 256 << 10
		// UML has one CPU, and QEMU's are emulated, shared with a loaded
		// host: a path must not time out while the guest is starved.
		c.PathTimeout = 5 * time.Second
	}
}

// echoStreams answers every message on every stream s accepts with itself,
// until ctx ends.
func echoStreams(ctx context.Context, s *Session) {
	for {
		rs, err := s.AcceptStream(ctx)
		if err != nil {
			return
		}
		go func() {
			defer rs.Close()
			for {
				m, err := rs.ReadMessage(ctx)
				if err != nil || rs.WriteMessage(ctx, m) != nil {
					return
				}
			}
		}()
	}
}

// echoMany sends msgs messages on each of streams streams at once and
// checks each echo.
func echoMany(t *testing.T, ctx context.Context, c *Session, streams, msgs, maxSize int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Go(func() {
			st, err := c.OpenStream(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			for j := range msgs {
				want := randBytes(uint64(i*1000+j), (i*7919+j*104729)%maxSize)
				if err := st.WriteMessage(ctx, want); err != nil {
					errs <- fmt.Errorf("stream %d msg %d: write: %w", st.ID(), j, err)
					return
				}
				got, err := st.ReadMessage(ctx)
				if err != nil {
					errs <- fmt.Errorf("stream %d msg %d: %w", st.ID(), j, err)
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("stream %d msg %d: echo differs", st.ID(), j)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestKernelSCTPSessions: messages arrive whole and in order over one and
// three per-path associations, in every striping mode, and many streams
// echo at once over lanes (SCTP streams) shared between them.
func TestKernelSCTPSessions(t *testing.T) {
	requireKernelSCTP(t)
	for _, k := range []int{1, 3} {
		for _, m := range []StripeMode{StripeEnhanced, StripeBasic, StripeOff} {
			t.Run(fmt.Sprintf("paths=%d/stripe=%v", k, m), func(t *testing.T) {
				c, s := pair(t, k, sctpConfig(m))
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				sizes := []int{0, 1, 100, 4 << 10, 4<<10 + 1, 64 << 10, 200 << 10, 1 << 20, 3 << 20}
				sendInOrder(t, ctx, c, s, sizes, false)
				go echoStreams(ctx, s)
				echoMany(t, ctx, c, 8, 5, 200<<10)
				for _, p := range c.Stats() {
					if p.Lanes < 2 {
						t.Errorf("path %d: %d lanes in use: the streams did not go on SCTP streams", p.ID, p.Lanes)
					}
				}
			})
		}
	}
}

// TestKernelSCTPMultihomedAssociation: one braid path over one association
// between two addresses on each side (SCTP multi-homing under braid).
func TestKernelSCTPMultihomedAssociation(t *testing.T) {
	requireKernelSCTP(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	scfg, ccfg := testConfig(t), testConfig(t)
	sctpConfig(StripeEnhanced)(scfg)
	sctpConfig(StripeEnhanced)(ccfg)
	ln, err := Listen(ctx, []string{"127.0.0.1,127.0.0.3:0"}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addrs := ln.Addrs()
	if len(addrs) != 1 {
		t.Fatalf("listener addresses %v, want one multi-homed address", addrs)
	}
	remote := addrs[0].String()
	if !bytes.HasPrefix([]byte(remote), []byte("127.0.0.1,127.0.0.3:")) {
		t.Fatalf("listener address %q does not list both addresses", remote)
	}
	c, s := dialAccept(t, ctx, ln, []Path{{Local: "127.0.0.2,127.0.0.4", Remote: remote}}, ccfg)
	go echoStreams(ctx, s)
	echoMany(t, ctx, c, 4, 5, 1<<20)
	if st := c.Stats(); len(st) != 1 || st[0].State != "up" {
		t.Errorf("client paths %+v, want one up", st)
	}
}

// dialAccept dials a session over paths to ln and accepts it; both are
// closed at the end of the test.
func dialAccept(t *testing.T, ctx context.Context, ln *Listener, paths []Path, cfg *Config) (client, server *Session) {
	t.Helper()
	c, err := Dial(ctx, paths, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); c.wait() })
	s, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}
