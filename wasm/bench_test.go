package wasm

import (
	"bytes"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time (user and system) the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per op since start, GC and all goroutines
// included: on a shared machine it says more than ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRunCat measures one run of the minimal operation, cat, on a
// small unit: the per-unit overhead of the sandbox.
func BenchmarkRunCat(b *testing.B) {
	e := newEngine(b, Config{})
	m := compile(b, e, "cat")
	in := bytes.Repeat([]byte("0123456789abcdef"), 8)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	start := cpuTime(b)
	for b.Loop() {
		out, err := m.Run(b.Context(), "cat", in, nil, Limits{})
		if err != nil || len(out) != len(in) {
			b.Fatalf("%d bytes, %v", len(out), err)
		}
		Recycle(out)
	}
	reportCPU(b, start)
}

// BenchmarkRunCatParallel is BenchmarkRunCat from GOMAXPROCS goroutines:
// the throughput of one Engine.
func BenchmarkRunCatParallel(b *testing.B) {
	e := newEngine(b, Config{})
	m := compile(b, e, "cat")
	in := bytes.Repeat([]byte("0123456789abcdef"), 8)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	start := cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			out, err := m.Run(b.Context(), "cat", in, nil, Limits{})
			if err != nil || len(out) != len(in) {
				b.Errorf("%d bytes, %v", len(out), err)
				return
			}
			Recycle(out)
		}
	})
	reportCPU(b, start)
}
