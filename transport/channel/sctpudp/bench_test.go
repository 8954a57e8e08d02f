package sctpudp

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
)

// BenchmarkThroughput moves bytes one way over one channel on loopback, for
// sctp-udp beside plain TCP, so one run compares them:
//
//	go test -run=^$ -bench=Throughput -count=5 ./transport/channel/sctpudp
//
// Add -cpuprofile=cpu.out and `go tool pprof -top -cum cpu.out` for where
// the time goes: for sctp-udp, pion's one writeLoop goroutine per
// association, building each MTU-sized packet in freshly allocated slices,
// so a larger MTU (loopback's path MTU, mtu=path) is the main lever.
func BenchmarkThroughput(b *testing.B) {
	tcp, err := channel.Lookup("tcp")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		kind channel.Kind
	}{
		{"kind=tcp", tcp},
		{"kind=sctp-udp/mtu=1452", Kind{Config: Config{MTU: 1452}}},
		{"kind=sctp-udp/mtu=1452/sndbuf=4MiB", Kind{Config: Config{MTU: 1452, SendBuffer: 4 << 20}}},
		{"kind=sctp-udp/mtu=path", Kind{}},
		{"kind=sctp-udp/mtu=path/sndbuf=64KiB", Kind{Config: Config{SendBuffer: 64 << 10}}},
		{"kind=sctp-udp/mtu=path/zerocsum", Kind{Config: Config{ZeroChecksum: true}}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchThroughput(b, bc.kind) })
	}
}

func benchThroughput(b *testing.B, k channel.Kind) {
	const chunk = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := k.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer s.Close()
		n, _ := io.CopyBuffer(io.Discard, s, make([]byte, 256<<10))
		got <- n
	}()
	c, err := k.Dial(ctx, "", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, chunk)
	var sent int64
	b.SetBytes(chunk)
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		n, err := c.Write(buf)
		if err != nil {
			b.Fatal(err)
		}
		sent += int64(n)
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
	if n := <-got; n != sent {
		b.Fatalf("received %d of %d bytes", n, sent)
	}
	// CPU time of both ends (user and system, this process) per MiB: on a
	// shared machine a steadier figure than the wall-clock rate.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	_ = c.Close()
}
