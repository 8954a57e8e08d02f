package transport

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLoopback compares one braid path with a plain TCP socket on
// loopback, 1 MiB messages, side by side in one run: the framing overhead.
func BenchmarkLoopback(b *testing.B) {
	const size = 1 << 20
	b.Run("impl=tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		done := make(chan int64, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				done <- 0
				return
			}
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			done <- n
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, size)
		b.SetBytes(size)
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.Close()
		<-done
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*size), "cpu-ns/B")
	})
	type variant struct {
		paths   int
		mode    StripeMode
		release bool // the reader hands buffers back with Session.Release
		plain   bool // Config.InsecurePlaintext
	}
	for _, v := range []variant{
		{1, StripeEnhanced, true, false}, {1, StripeOff, true, false}, {1, StripeOff, false, false},
		{2, StripeEnhanced, true, false}, {2, StripeOff, true, false},
		{1, StripeEnhanced, true, true}, {1, StripeOff, true, true},
	} {
		paths, mode := v.paths, v.mode
		{
			b.Run(fmt.Sprintf("impl=braid/paths=%d/stripe=%v/release=%v/plain=%v", paths, mode, v.release, v.plain), func(b *testing.B) {
				c, s := pair(b, paths, func(c *Config) { c.Stripe = mode; c.InsecurePlaintext = v.plain })
				ctx := context.Background()
				st, _ := c.OpenStream(ctx)
				st.WriteMessage(ctx, nil)
				rs, _ := s.AcceptStream(ctx)
				rs.ReadMessage(ctx)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for {
						m, err := rs.ReadMessage(ctx)
						if err != nil {
							return
						}
						if v.release {
							rs.Release(m)
						}
					}
				}()
				buf := make([]byte, size)
				b.SetBytes(size)
				b.ReportAllocs()
				cpu0 := processCPU()
				for b.Loop() {
					if err := st.WriteMessage(ctx, buf); err != nil {
						b.Fatal(err)
					}
				}
				fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				c.Flush(fctx)
				cancel()
				// Both ends run in this process: CPU per byte of the pair.
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*size), "cpu-ns/B")
				st.Close()
				<-done
			})
		}
	}
}

// processCPU returns the user and system CPU time this process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPingPong measures the round trip of one message echoed back, and
// reports the paper's effective bandwidth (eq. 1). The striped=4KiB cases
// force an 8 KiB message into two 4 KiB fragments, one per path: on
// loopback, where striping saves nothing, their difference from the plain
// 8 KiB case is what striping a small message costs (plan.go's stripeCost).
// The impl=tcp cases echo over one plain TCP connection: what braid's
// round trip adds to it is braid's cost per message.
func BenchmarkPingPong(b *testing.B) {
	type pcase struct {
		name string
		size int
		mod  func(*Config)
	}
	cases := []pcase{
		{"size=1KiB", 1 << 10, nil},
		{"size=8KiB", 8 << 10, nil},
		{"size=8KiB/striped=4KiB", 8 << 10, func(c *Config) { c.StripeThreshold, c.FragmentSize = 1, 4<<10 }},
		{"size=64KiB", 64 << 10, nil},
		{"size=1024KiB", 1 << 20, nil},
	}
	for _, size := range []int{1 << 10, 8 << 10} {
		b.Run(fmt.Sprintf("impl=tcp/size=%dKiB", size>>10), func(b *testing.B) { tcpPingPong(b, size) })
	}
	plain := func(c *Config) { c.InsecurePlaintext = true }
	cases = append(cases, pcase{"plain/size=1KiB", 1 << 10, plain}, pcase{"plain/size=8KiB", 8 << 10, plain})
	for _, pc := range cases {
		size := pc.size
		b.Run("impl=braid/"+pc.name, func(b *testing.B) {
			c, s := pair(b, 2, pc.mod)
			ctx := context.Background()
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
					rs.WriteMessage(ctx, m)
				}
			}()
			st, _ := c.OpenStream(ctx)
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			start, cpu0 := time.Now(), processCPU()
			for b.Loop() {
				st.WriteMessage(ctx, buf)
				if _, err := st.ReadMessage(ctx); err != nil {
					b.Fatal(err)
				}
			}
			rtt := time.Since(start).Seconds() / float64(b.N)
			b.ReportMetric((8*float64(size)/1e6)/(rtt/2), "eff-Mbit/s")
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(c.StripeStats().Segments)/float64(b.N), "striped/op")
		})
	}
}

// tcpPingPong echoes size-byte messages over one loopback TCP connection.
func tcpPingPong(b *testing.B, size int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, size)
	b.SetBytes(int64(size))
	start, cpu0 := time.Now(), processCPU()
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	rtt := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric((8*float64(size)/1e6)/(rtt/2), "eff-Mbit/s")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}
