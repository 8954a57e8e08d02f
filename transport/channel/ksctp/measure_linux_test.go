//go:build linux

package ksctp

import (
	"bytes"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
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

// TestHOLProbe measures (BRAID_KSCTP_STALL=1, for docs/sctp.md) the
// latency of 1 KiB messages sent every 20 ms while 4 MiB of bulk goes out
// at once, both on one lane (one SCTP stream) or on two: with loss on the
// link (netem, set by the caller), the small messages wait behind the
// bulk's retransmissions only when they share its stream.
func TestHOLProbe(t *testing.T) {
	if os.Getenv("BRAID_KSCTP_STALL") != "1" {
		t.Skip("measurement; BRAID_KSCTP_STALL=1")
	}
	requireKernel(t)
	for _, shared := range []bool{true, false} {
		c, s, _ := pair(t, Kind{Config: Config{ReceiveBuffer: 4 << 20}}, "127.0.0.1", "127.0.0.1:0")
		cl, sl := c.(channel.Lanes), s.(channel.Lanes)
		bulk, _ := cl.OpenLane(1)
		small := bulk
		if !shared {
			small, _ = cl.OpenLane(2)
		}
		const n, size = 50, 1 << 10
		go func() { _, _ = bulk.Write(make([]byte, 4<<20)) }()
		sent := make(chan time.Time, n)
		go func() {
			for i := 0; i < n; i++ {
				msg := bytes.Repeat([]byte{0xAA}, size)
				sent <- time.Now()
				_, _ = small.Write(msg)
				time.Sleep(20 * time.Millisecond)
			}
		}()
		var lat []time.Duration
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range map[bool]int{true: 1, false: 2}[shared] {
			_, l, err := sl.AcceptLane(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				b := make([]byte, 64<<10)
				marks := 0 // 0xAA bytes read: small messages are all 0xAA, bulk bytes zero
				for {
					_ = l.SetReadDeadline(time.Now().Add(20 * time.Second))
					k, err := l.Read(b)
					if err != nil {
						return
					}
					before := marks / size
					marks += bytes.Count(b[:k], []byte{0xAA})
					for range marks/size - before {
						mu.Lock()
						lat = append(lat, time.Since(<-sent))
						done := len(lat) == n
						mu.Unlock()
						if done {
							return
						}
					}
				}
			})
		}
		// Whatever arrived within a minute is reported below.
		testwait.Until(60*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(lat) == n
		})
		_ = c.Close()
		_ = s.Close()
		wg.Wait()
		mu.Lock()
		slices.Sort(lat)
		if len(lat) > 0 {
			t.Logf("shared=%v: %d of %d small messages; latency median %v, p90 %v, max %v", shared, len(lat), n,
				lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*9/10].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
		}
		mu.Unlock()
	}
}
