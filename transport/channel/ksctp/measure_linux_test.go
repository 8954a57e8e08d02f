//go:build linux

package ksctp

import (
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
)

// TestStallProbe measures (BRAID_KSCTP_STALL=1, for docs/sctp.md): 1 and
// 4 lanes' writers send 8 MiB each at once over one association; it logs
// the rate and the longest gap between reads on the receiving side.
// PROBE_SACKFREQ1=1, PROBE_SACKDELAY10=1 and PROBE_RCVBUF=1 set
// SACKFreq 1, SACKDelay 10ms and ReceiveBuffer 4 MiB.
func TestStallProbe(t *testing.T) {
	if os.Getenv("BRAID_KSCTP_STALL") != "1" {
		t.Skip("measurement; BRAID_KSCTP_STALL=1")
	}
	requireKernel(t)
	for _, lanes := range []int{1, 4} {
		var cfg Config
		if os.Getenv("PROBE_SACKFREQ1") == "1" {
			cfg.SACKFreq = 1
		}
		if os.Getenv("PROBE_SACKDELAY10") == "1" {
			cfg.SACKDelay = 10 * time.Millisecond
		}
		if os.Getenv("PROBE_RCVBUF") == "1" {
			cfg.ReceiveBuffer = 4 << 20
		}
		c, s, _ := pair(t, Kind{Config: cfg}, "127.0.0.1", "127.0.0.1:0")
		cl, sl := c.(channel.Lanes), s.(channel.Lanes)
		const size = 8 << 20
		start := time.Now()
		for i := 1; i <= lanes; i++ {
			go func() {
				l, _ := cl.OpenLane(uint16(i))
				_, _ = l.Write(make([]byte, size))
			}()
		}
		var mu sync.Mutex
		var maxGap time.Duration
		var wg sync.WaitGroup
		for range lanes {
			_, l, err := sl.AcceptLane(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				b := make([]byte, 64<<10)
				last := time.Now()
				n := 0
				for n < size {
					_ = l.SetReadDeadline(time.Now().Add(30 * time.Second))
					k, err := l.Read(b)
					if err != nil && err != io.EOF {
						t.Error(err)
						return
					}
					n += k
					now := time.Now()
					mu.Lock()
					if g := now.Sub(last); g > maxGap {
						maxGap = g
					}
					mu.Unlock()
					last = now
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		t.Logf("lanes=%d total=%d MiB in %v (%.0f Mbit/s), longest read gap %v", lanes, lanes*size>>20, el.Round(time.Millisecond), float64(lanes*size*8)/el.Seconds()/1e6, maxGap.Round(time.Millisecond))
		_ = c.Close()
		_ = s.Close()
	}
}

// TestStallProbeTCP is TestStallProbe's baseline: 64 MiB over one TCP
// connection.
func TestStallProbeTCP(t *testing.T) {
	if os.Getenv("BRAID_KSCTP_STALL") != "1" {
		t.Skip("measurement; BRAID_KSCTP_STALL=1")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 64 << 20
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 64<<10)
		for n := 0; n < size; n += len(b) {
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	n, _ := io.Copy(io.Discard, s)
	el := time.Since(start)
	t.Logf("tcp %d MiB in %v (%.0f Mbit/s)", n>>20, el.Round(time.Millisecond), float64(n*8)/el.Seconds()/1e6)
}
