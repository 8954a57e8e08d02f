package wasm

import (
	"bytes"
	"testing"
)

// BenchmarkRunCat measures one run of the minimal operation, cat, on a
// small unit: the per-unit overhead of the sandbox.
func BenchmarkRunCat(b *testing.B) {
	e := newEngine(b, Config{})
	m := compile(b, e, "cat")
	in := bytes.Repeat([]byte("0123456789abcdef"), 8)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := m.Run(b.Context(), "cat", in, nil, Limits{})
		if err != nil || len(out) != len(in) {
			b.Fatalf("%d bytes, %v", len(out), err)
		}
	}
}

// BenchmarkRunCatParallel is BenchmarkRunCat from GOMAXPROCS goroutines:
// the throughput of one Engine.
func BenchmarkRunCatParallel(b *testing.B) {
	e := newEngine(b, Config{})
	m := compile(b, e, "cat")
	in := bytes.Repeat([]byte("0123456789abcdef"), 8)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			out, err := m.Run(b.Context(), "cat", in, nil, Limits{})
			if err != nil || len(out) != len(in) {
				b.Errorf("%d bytes, %v", len(out), err)
				return
			}
		}
	})
}
