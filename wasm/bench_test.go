package wasm

import (
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/wasmtest"
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

// BenchmarkRunSmallCopies measures what charging bulk instructions to the
// countdown costs a module that copies in small pieces, as memcpy does
// when clang builds with bulk memory: one run is 1,000,000 memory.copy of
// 64 bytes in a loop.
func BenchmarkRunSmallCopies(b *testing.B) {
	const n = 1_000_000
	// loop: local0 += 1; copy 64 bytes; br_if local0 < n
	body := []byte{0x03, 0x40, 0x20, 0, 0x41, 1, 0x6a, 0x22, 0} // loop; local.get 0; i32.const 1; i32.add; local.tee 0
	body = append(body, 0x1a)                                   // drop
	body = wasmtest.I32(wasmtest.I32(wasmtest.I32(body, 0), 1024), 64)
	body = append(body, wasmtest.MemoryCopy...)
	body = append(body, 0x20, 0)
	body = wasmtest.I32(body, n)
	body = append(body, 0x48, 0x0d, 0, 0x0b) // i32.lt_s; br_if 0; end
	e := newEngine(b, Config{})
	m, err := e.Compile(b.Context(), wasmtest.Module{MemPages: 1, Locals: 1, Start: body}.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	start := cpuTime(b)
	for b.Loop() {
		if _, err := m.Run(b.Context(), "copies", nil, nil, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N)/n, "cpu-ns/copy")
}

// BenchmarkRunLongFills measures what running long bulk instructions a
// slice at a time (bulk.go) costs: one run is 64 memory.fill of 16 MiB,
// 1 GiB, with a call to Go every MiB.
func BenchmarkRunLongFills(b *testing.B) {
	fill := wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), 1), 16<<20)
	fill = append(fill, wasmtest.MemoryFill...)
	e := newEngine(b, Config{})
	m, err := e.Compile(b.Context(), wasmtest.Module{MemPages: 256, Start: wasmtest.Repeat(fill, 64)}.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1 << 30)
	for b.Loop() {
		if _, err := m.Run(b.Context(), "fills", nil, nil, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileLimits measures what compiling the costliest modules
// the limits let through takes a worker (a fresh Engine each time, so
// nothing is cached): 33 functions each a phi nest just under MaxFrame
// (4,125,000 phis, just under MaxModulePhis), 8 of them, and a real Go
// program of 8 MB. Run one at a time to see its peak memory, e.g.
//
//	go test -c -o wasm.test ./wasm/
//	/usr/bin/time -f '%M KB' ./wasm.test -test.run '^$' -test.bench 'CompileLimits/phi-nests=33' -test.benchtime 1x
func BenchmarkCompileLimits(b *testing.B) {
	for _, bc := range []struct {
		name string
		code func(b *testing.B) []byte
	}{
		{"phi-nests=33", func(*testing.B) []byte { return wasmtest.PhiNests(33) }},
		{"phi-nests=8", func(*testing.B) []byte { return wasmtest.PhiNests(8) }},
		{"go=8MB", func(b *testing.B) []byte { return wasmtest.Go(b, bigGo) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			code := bc.code(b)
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				compileFresh(b, Config{}, code)
			}
			reportCPU(b, start)
		})
	}
}

// BenchmarkCompileWorkers compiles the costliest module the limits admit
// (33 phi nests just under MaxFrame, as in BenchmarkCompileLimits) with
// Config.CompileWorkers goroutines: "default" is what a worker uses
// (GOMAXPROCS, at most DefaultCompileWorkers), the others lift that cap.
// Each goroutine holds the memory of the function it is compiling, and Go
// time-slices them whatever the cores, so the peak with N goroutines
// shows on a small machine too. It reports the peak of Go's heap objects
// (sampled every 10 ms) and the process's peak RSS: run one sub-benchmark
// a process, e.g.
//
//	go test -c -o wasm.test ./wasm/
//	GOMAXPROCS=32 /usr/bin/time -v ./wasm.test -test.run '^$' -test.bench 'CompileWorkers/workers=8$' -test.benchtime 1x
func BenchmarkCompileWorkers(b *testing.B) {
	code := wasmtest.PhiNests(33)
	for _, workers := range []int{0, 2, 4, 8, 16, 32} {
		name := fmt.Sprintf("workers=%d", workers)
		if workers == 0 {
			name = "workers=default"
		}
		b.Run(name, func(b *testing.B) {
			peak := heapPeak(b)
			start := cpuTime(b)
			for b.Loop() {
				compileFresh(b, Config{CompileWorkers: workers}, code)
			}
			reportCPU(b, start)
			reportMemory(b, peak())
		})
	}
	// Three such modules (33, 32 and 31 nests: distinct) asked for at
	// once, as a worker's unit threads and prefetch may: Config.MaxCompiles
	// (2 by default) compiles two at a time.
	for _, most := range []int{0, 3} {
		name := fmt.Sprintf("modules=3/max-compiles=%d", most)
		if most == 0 {
			name = "modules=3/max-compiles=default"
		}
		b.Run(name, func(b *testing.B) {
			codes := [][]byte{code, wasmtest.PhiNests(32), wasmtest.PhiNests(31)}
			peak := heapPeak(b)
			start := cpuTime(b)
			for b.Loop() {
				e, err := NewEngine(Config{MaxCompiles: most})
				if err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				for _, c := range codes {
					wg.Go(func() {
						if _, err := e.Compile(b.Context(), c); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				e.Close()
			}
			reportCPU(b, start)
			reportMemory(b, peak())
		})
	}
}

// reportMemory reports the peak of Go's heap objects and the process's
// peak RSS (of the whole process: run one benchmark a process).
func reportMemory(b *testing.B, heap uint64) {
	b.ReportMetric(float64(heap)/1e6, "peak-heap-MB")
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(ru.Maxrss)/1e3, "maxrss-MB") // KB on Linux
}

// heapPeak samples the bytes in Go's heap objects every 10 ms until the
// returned function is called, which returns their peak.
func heapPeak(tb testing.TB) func() uint64 {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var peak uint64
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	wg.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	var once sync.Once
	done := func() uint64 {
		once.Do(func() { close(stop); wg.Wait() })
		return peak
	}
	tb.Cleanup(func() { done() })
	return done
}

// compileFresh compiles code on a new Engine of cfg, which it closes: the
// cost of a compile with nothing cached.
func compileFresh(b *testing.B, cfg Config, code []byte) {
	e, err := NewEngine(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Compile(b.Context(), code); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCompiledSize measures the memory a compiled module keeps while
// cached, against the size of its instrumented code, which
// compiledSize multiplies by compiledRatio: the process's RSS after a
// garbage collection, before the compile and after it with the module
// kept. Run one sub-benchmark a process, e.g.
//
//	go test -c -o wasm.test ./wasm/
//	./wasm.test -test.run '^$' -test.bench 'CompiledSize/go=8MB' -test.benchtime 1x
func BenchmarkCompiledSize(b *testing.B) {
	for _, bc := range []struct {
		name string
		code func(b *testing.B) []byte
	}{
		{"cat", func(b *testing.B) []byte { return wasmCode(b, "cat") }},
		{"phi-nests=8", func(*testing.B) []byte { return wasmtest.PhiNests(8) }},
		{"phi-nests=33", func(*testing.B) []byte { return wasmtest.PhiNests(33) }},
		{"go=8MB", func(b *testing.B) []byte { return wasmtest.Go(b, bigGo) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			code := bc.code(b)
			for b.Loop() {
				e, err := NewEngine(Config{})
				if err != nil {
					b.Fatal(err)
				}
				before := rss(b)
				m, err := e.Compile(b.Context(), code)
				if err != nil {
					b.Fatal(err)
				}
				kept := rss(b) - before
				inst, _, phis, err := instrumentPhis(code)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(kept)/1e6, "kept-MB")
				b.ReportMetric(float64(m.compiledSize)/1e6, "estimate-MB")
				b.ReportMetric(float64(len(inst)), "instrumented-bytes")
				b.ReportMetric(float64(phis), "phis")
				e.Close()
			}
		})
	}
}

// rss returns the process's resident memory after a garbage collection
// that hands free memory back to the kernel.
func rss(tb testing.TB) int64 {
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		tb.Skipf("no /proc/self/statm: %v", err)
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		tb.Fatalf("/proc/self/statm: %v", err)
	}
	return resident * int64(os.Getpagesize())
}
