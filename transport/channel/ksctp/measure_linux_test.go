//go:build linux

package ksctp

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/internal/vmkernel"
	"github.com/braid-hpc/braid/transport/channel"
)

// The benchmarks below measure kernel SCTP on loopback for docs/sctp.md.
// Where this kernel has no SCTP, BenchmarkKernelSCTPInVM runs them inside
// a guest kernel (vm_linux_test.go). The ones that put netem on lo run
// only there, as root: on a host, lo is everybody's.

// loNetem replaces lo's root qdisc with netem and the arguments, and
// removes it at the end of b. It skips b outside a guest kernel.
func loNetem(b *testing.B, args ...string) {
	b.Helper()
	if os.Getenv(vmkernel.EnvInGuest) != "1" || os.Geteuid() != 0 {
		b.Skip("netem on lo: only as root inside a guest kernel (BenchmarkKernelSCTPInVM)")
	}
	a := append([]string{"qdisc", "replace", "dev", "lo", "root", "netem"}, args...)
	if out, err := exec.Command("tc", a...).CombinedOutput(); err != nil {
		b.Fatalf("tc %v: %v: %s", a, err, out)
	}
	b.Cleanup(func() { _ = exec.Command("tc", "qdisc", "del", "dev", "lo", "root").Run() })
}

// BenchmarkStall measures what clocks one association on loopback: each
// of 1 or 4 lanes' writers sends 8 MiB at once, with the kernel's default
// receive buffer (alone, with SACKFreq 1, with SACKDelay 10 ms) and with
// the channel's default 4 MiB; carrier=tcp is the baseline, 64 MiB over
// one TCP connection. Metrics: Mbit/s, and the longest time the receiving
// side read nothing on any lane (max-gap-ms, over all iterations: the
// association's longest stall).
//
//	go test -run '^$' -bench Stall -benchtime 3x ./transport/channel/ksctp/
func BenchmarkStall(b *testing.B) {
	knobs := []struct {
		name string
		cfg  Config
	}{
		{"rcvbuf=kernel", Config{ReceiveBuffer: -1}},
		{"rcvbuf=kernel,sackfreq=1", Config{ReceiveBuffer: -1, SACKFreq: 1}},
		{"rcvbuf=kernel,sackdelay=10ms", Config{ReceiveBuffer: -1, SACKDelay: 10 * time.Millisecond}},
		{"rcvbuf=4MiB", Config{}},
	}
	for _, k := range knobs {
		for _, lanes := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/lanes=%d", k.name, lanes), func(b *testing.B) {
				requireKernel(b)
				stallRun(b, k.cfg, lanes)
			})
		}
	}
	b.Run("carrier=tcp", stallTCP)
}

// stallRun sends 8 MiB on each of lanes lanes of one association per
// iteration.
func stallRun(b *testing.B, cfg Config, lanes int) {
	const size = 8 << 20
	c, s, ln := pair(b, Kind{Config: cfg}, "127.0.0.1", "127.0.0.1:0")
	defer func() { c.Close(); s.Close(); ln.Close() }()
	ws, rs := openLanes(b, c, s, lanes)
	for _, r := range rs {
		if _, err := io.ReadFull(r, make([]byte, 1)); err != nil { // openLanes' byte
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	var maxGap, busy time.Duration
	b.SetBytes(int64(lanes * size))
	for b.Loop() {
		start := time.Now()
		last := start // the receiving side's last read, on any lane
		// A bound against a hang only: the lanes share one send queue,
		// so a lane may wait for the others' 8 MiB before its first byte
		// (4 lanes at 1 Mbit/s take over 4 minutes).
		deadline := start.Add(10 * time.Minute)
		var writers, readers sync.WaitGroup
		for i, w := range ws {
			writers.Go(func() {
				if _, err := w.Write(make([]byte, size)); err != nil && !b.Failed() {
					b.Errorf("writer %d: write: %v", i, err)
				}
			})
		}
		for i, r := range rs {
			readers.Go(func() {
				buf := make([]byte, 64<<10)
				_ = r.SetReadDeadline(deadline)
				for n := 0; n < size; {
					k, err := r.Read(buf[:min(len(buf), size-n)])
					if err != nil {
						b.Errorf("reader %d: read after %d bytes: %v", i, n, err)
						return
					}
					n += k
					now := time.Now()
					mu.Lock()
					maxGap = max(maxGap, now.Sub(last))
					last = now
					mu.Unlock()
				}
			})
		}
		readers.Wait()
		if b.Failed() {
			// A reader gave up: closing the association ends the
			// writers' blocked writes.
			c.Close()
			s.Close()
		}
		writers.Wait()
		if b.Failed() {
			b.FailNow()
		}
		busy += time.Since(start)
	}
	b.ReportMetric(float64(b.N*lanes*size*8)/busy.Seconds()/1e6, "Mbit/s")
	b.ReportMetric(float64(maxGap)/float64(time.Millisecond), "max-gap-ms")
}

// stallTCP is BenchmarkStall's baseline: 64 MiB over one TCP connection
// per iteration.
func stallTCP(b *testing.B) {
	const size = 64 << 20
	flows, done := tcpFlows(b, 1, 0)
	defer done()
	f := flows[0]
	var busy time.Duration
	b.SetBytes(size)
	for b.Loop() {
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			buf := make([]byte, 64<<10)
			for n := 0; n < size; n += len(buf) {
				if _, err := f.w.Write(buf); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		if _, err := io.CopyN(io.Discard, f.r, size); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		busy += time.Since(start)
	}
	b.ReportMetric(float64(b.N*size*8)/busy.Seconds()/1e6, "Mbit/s")
}

// BenchmarkHOL measures head-of-line blocking between SCTP streams: the
// latency of 50 messages of 1 KiB sent every 20 ms while 4 MiB of bulk
// goes out at once, on the bulk's lane (lane=shared, one SCTP stream) or
// on a lane of their own, with netem delay 5 ms and loss on lo (inside a
// guest kernel only, see loNetem). Metrics: the small messages' latency
// over all iterations (p50-ms, p90-ms, max-ms).
func BenchmarkHOL(b *testing.B) {
	for _, loss := range []string{"0%", "1%", "3%"} {
		for _, shared := range []bool{true, false} {
			lane := map[bool]string{true: "shared", false: "own"}[shared]
			b.Run(fmt.Sprintf("loss=%s/lane=%s", loss, lane), func(b *testing.B) {
				requireKernel(b)
				loNetem(b, "delay", "5ms", "loss", loss)
				var lat []time.Duration
				for b.Loop() {
					lat = append(lat, holProbe(b, shared)...)
				}
				slices.Sort(lat)
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
				b.ReportMetric(ms(lat[len(lat)*9/10]), "p90-ms")
				b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
			})
		}
	}
}

// holProbe runs one round of BenchmarkHOL on a new association and
// returns the small messages' latencies. Every small message must arrive
// within a minute.
func holProbe(b *testing.B, shared bool) []time.Duration {
	const n, size = 50, 1 << 10
	c, s, ln := pair(b, Kind{Config: Config{ReceiveBuffer: 4 << 20}}, "127.0.0.1", "127.0.0.1:0")
	defer ln.Close()
	cl, sl := c.(channel.Lanes), s.(channel.Lanes)
	bulk, err := cl.OpenLane(1)
	if err != nil {
		b.Fatal(err)
	}
	small := bulk
	if !shared {
		if small, err = cl.OpenLane(2); err != nil {
			b.Fatal(err)
		}
	}
	go func() { _, _ = bulk.Write(make([]byte, 4<<20)) }()
	sent := make(chan time.Time, n)
	go func() {
		for range n {
			msg := bytes.Repeat([]byte{0xAA}, size)
			sent <- time.Now()
			if _, err := small.Write(msg); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var lat []time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range map[bool]int{true: 1, false: 2}[shared] {
		_, l, err := sl.AcceptLane(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			buf := make([]byte, 64<<10)
			marks := 0 // 0xAA bytes read: small messages are all 0xAA, bulk bytes zero
			for {
				_ = l.SetReadDeadline(time.Now().Add(20 * time.Second))
				k, err := l.Read(buf)
				if err != nil {
					return
				}
				before := marks / size
				marks += bytes.Count(buf[:k], []byte{0xAA})
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
	all := testwait.Until(60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(lat) == n
	})
	_ = c.Close()
	_ = s.Close()
	wg.Wait()
	if !all {
		b.Fatalf("%d of %d small messages arrived within a minute", len(lat), n)
	}
	return lat
}
