package wasmbench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testenv"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/wasm"
	"github.com/braid-hpc/braid/worker"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// examples is examples/ops, where the C sources of the modules are.
const examples = "../../examples/ops"

// cFlags are examples/ops/build.sh's: -O3 -msimd128 vectorize,
// -ffp-contract=off keeps blur's kernel computed exactly as the
// built-in's.
var cFlags = []string{"--target=wasm32-wasi", "-O3", "-msimd128", "-Wall", "-Wextra", "-ffp-contract=off", "-Wl,--strip-debug"}

const installHint = "apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32"

// buildC builds examples/ops/NAME/NAME.c into tb.TempDir() with
// build.sh's flags and then flags, and returns the module. It skips tb
// when clang cannot build for wasm32-wasi at all (a probe), and fails it
// when the example does not build.
func buildC(tb testing.TB, name string, flags ...string) []byte {
	tb.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		testenv.Missing(tb, "BRAID_REQUIRE_WASM", "clang not found, so the C modules cannot be built; "+installHint)
	}
	dir := tb.TempDir()
	probe := filepath.Join(dir, "probe.c")
	src := "#include <math.h>\n#include <stdio.h>\nint main(void) { printf(\"%g\\n\", exp(1.0)); return 0; }\n"
	if err := os.WriteFile(probe, []byte(src), 0o666); err != nil {
		tb.Fatal(err)
	}
	if msg, err := exec.Command(clang, "--target=wasm32-wasi", "-o", probe+".wasm", probe, "-lm").CombinedOutput(); err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(msg)), "\n")
		testenv.Missing(tb, "BRAID_REQUIRE_WASM", fmt.Sprintf("clang cannot build for wasm32-wasi (%s), so the C modules cannot be built; %s", first, installHint))
	}
	out := filepath.Join(dir, name+".wasm")
	args := append(slices.Concat(cFlags, flags), "-o", out, filepath.Join(examples, name, name+".c"), "-lm")
	if msg, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		tb.Fatalf("clang %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	code, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	return code
}

// echoGo is the Go module of BenchmarkFirstUnit: it copies stdin to
// stdout, which with fmt makes a wasip1 binary of about 2.6 MB.
const echoGo = `package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}
`

// buildGo builds echoGo with GOOS=wasip1 GOARCH=wasm into b.TempDir().
func buildGo(b *testing.B) []byte {
	b.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go") // the toolchain running the benchmark
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	dir := b.TempDir()
	for name, text := range map[string]string{"main.go": echoGo, "go.mod": "module echo\n\ngo 1.21\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o666); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", "echo.wasm", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("GOOS=wasip1 GOARCH=wasm go build: %v\n%s", err, msg)
	}
	code, err := os.ReadFile(filepath.Join(dir, "echo.wasm"))
	if err != nil {
		b.Fatal(err)
	}
	return code
}

func newEngine(tb testing.TB, cfg wasm.Config) *wasm.Engine {
	tb.Helper()
	e, err := wasm.NewEngine(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

func compile(tb testing.TB, e *wasm.Engine, code []byte) *wasm.Module {
	tb.Helper()
	m, err := e.Compile(context.Background(), code)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// cpuTime returns the user plus system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// blurImpl is one way of blurring an encoded tile.
type blurImpl struct {
	name string
	run  func(tb testing.TB, tile []byte) []byte
}

// blurSetup cuts a 2048x2048 sample image into 256x256 tiles with a halo
// of 5, as a job split tiles:256x256+5 does, and returns them with the
// ways of blurring them with radius 5: the built-in first.
func blurSetup(tb testing.TB) (tiles [][]byte, impls []blurImpl) {
	tb.Helper()
	const size, side, radius = 2048, 256, 5
	code := buildC(tb, "blur")
	scalar := buildC(tb, "blur", "-O2", "-mno-simd128") // the flags' last -O wins
	eng := newEngine(tb, wasm.Config{})
	mod, modScalar := compile(tb, eng, code), compile(tb, eng, scalar)
	sp, err := ops.ParseSplit(fmt.Sprintf("tiles:%dx%d+%d", side, side, radius))
	if err != nil {
		tb.Fatal(err)
	}
	img := ops.SamplePNG(size, size)
	specs, err := ops.SplitInput("blur", bytes.NewReader(img), int64(len(img)), sp, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range specs {
		tiles = append(tiles, s.Data)
	}
	blur := ops.Blur()
	params := map[string]string{"radius": fmt.Sprint(radius)}
	env := map[string]string{"RADIUS": fmt.Sprint(radius)}
	ctx := context.Background()
	builtin := func(tb testing.TB, tile []byte) []byte {
		out, err := blur.Run(ctx, params, [][]byte{tile})
		if err != nil {
			tb.Fatal(err)
		}
		return out
	}
	module := func(m *wasm.Module) func(testing.TB, []byte) []byte {
		return func(tb testing.TB, tile []byte) []byte {
			out, err := m.Run(ctx, "blur", tile, env, wasm.Limits{})
			if err != nil {
				tb.Fatal(err)
			}
			return out
		}
	}
	return tiles, []blurImpl{
		{"builtin", builtin},
		{"wasm", module(mod)},
		{"wasm-O2-scalar", module(modScalar)},
		{"wazero-nocheck", plainWazero(tb, code, "blur", env, false)},
		{"wazero-closeondone", plainWazero(tb, code, "blur", env, true)},
		{"wazero-nocheck-O2-scalar", plainWazero(tb, scalar, "blur", env, false)},
		{"wazero-closeondone-O2-scalar", plainWazero(tb, scalar, "blur", env, true)},
	}
}

// sameBlur checks that every impl gives the built-in's bytes for tile i.
func sameBlur(tb testing.TB, tiles [][]byte, impls []blurImpl, i int) {
	tb.Helper()
	want := impls[0].run(tb, tiles[i])
	for _, impl := range impls[1:] {
		if got := impl.run(tb, tiles[i]); !bytes.Equal(got, want) {
			tb.Fatalf("tile %d of %d: %s gave %d bytes, %s %d, not the same", i, len(tiles), impl.name, len(got), impls[0].name, len(want))
		}
	}
}

// TestBlurTiles checks that every way of BenchmarkBlurTile gives the
// built-in's bytes on every tile.
func TestBlurTiles(t *testing.T) {
	if testing.Short() {
		t.Skip("blurs 64 tiles five ways: 10-60 s")
	}
	tiles, impls := blurSetup(t)
	for i := range tiles {
		sameBlur(t, tiles, impls, i)
	}
}

// BenchmarkBlurTile blurs the 256x256 tiles (halo 5) of a 2048x2048
// image with radius 5: the built-in ops.Blur against its C port run as a
// module (compiled once, a fresh instance per tile, as a worker runs
// units), on the same encoded tiles. One iteration is one tile, the 64 in
// a fixed order that mixes edge and inner tiles. impl=both runs the two
// on each tile, one after the other, checks they give the same bytes, and
// reports the ratio of their times measured side by side. (TestBlurTiles
// checks every tile of every way; this checks three before it starts.)
//
// More ways say where the module's time goes: impl=wasm-O2-scalar is
// the same C built with -O2 and no SIMD (build.sh's flags before), which
// runs blur.c's plain C loops instead of its explicit SIMD path;
// impl=wazero-nocheck runs build.sh's module, not instrumented, on a
// plain wazero runtime, which cannot stop it (the ceiling of what
// package wasm's countdown can reach); impl=wazero-closeondone runs it on
// wazero with WithCloseOnContextDone, which package wasm used before:
// every loop back-edge leaves the machine code for Go to see whether the
// run was stopped. The -O2-scalar variants are the same for the scalar
// build.
func BenchmarkBlurTile(b *testing.B) {
	tiles, impls := blurSetup(b)
	for _, i := range []int{0, 9, len(tiles) - 1} {
		sameBlur(b, tiles, impls, i)
	}
	// next returns the tile of iteration i: 9 is prime to 64, so every
	// tile comes once in 64 iterations, rows mixed.
	next := func(i int) int { return i * 9 % len(tiles) }
	pixels := 256.0 * 256 // a tile's core
	report := func(b *testing.B, d time.Duration, prefix string) {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), prefix+"ns/tile")
		b.ReportMetric(pixels*float64(b.N)/d.Seconds()/1e6, prefix+"MPixel/s")
	}
	b.Run("impl=both", func(b *testing.B) {
		builtin, module := impls[0].run, impls[1].run
		var tb, tw time.Duration
		i := 0
		for b.Loop() {
			t := tiles[next(i)]
			// Alternate which goes first, so neither always finds the
			// caches as the other left them.
			var want, got []byte
			if i%2 == 0 {
				t0 := time.Now()
				want = builtin(b, t)
				t1 := time.Now()
				got = module(b, t)
				tb, tw = tb+t1.Sub(t0), tw+time.Since(t1)
			} else {
				t0 := time.Now()
				got = module(b, t)
				t1 := time.Now()
				want = builtin(b, t)
				tw, tb = tw+t1.Sub(t0), tb+time.Since(t1)
			}
			if !bytes.Equal(got, want) {
				b.Fatalf("tile %d: the module's bytes differ from the built-in's", next(i))
			}
			i++
		}
		report(b, tb, "builtin-")
		report(b, tw, "wasm-")
		b.ReportMetric(tw.Seconds()/tb.Seconds(), "wasm/builtin")
	})
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				impl.run(b, tiles[next(i)])
				i++
			}
			report(b, b.Elapsed(), "")
		})
	}
}

// plainWazero returns a function that runs code as package wasm does
// (a fresh instance per call, stdin in, stdout out, env) but on a plain
// wazero runtime without WithCloseOnContextDone: no loop back-edge checks,
// and no way to stop a run.
func plainWazero(tb testing.TB, code []byte, name string, env map[string]string, closeOnDone bool) func(testing.TB, []byte) []byte {
	tb.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(closeOnDone))
	tb.Cleanup(func() { rt.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	cm, err := rt.CompileModule(ctx, code)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := wazero.NewModuleConfig().WithName("").WithArgs(name)
	for k, v := range env {
		cfg = cfg.WithEnv(k, v)
	}
	return func(tb testing.TB, in []byte) []byte {
		var out bytes.Buffer
		m, err := rt.InstantiateModule(ctx, cm, cfg.WithStdin(bytes.NewReader(in)).WithStdout(&out))
		if err != nil {
			tb.Fatal(err)
		}
		m.Close(ctx)
		return out.Bytes()
	}
}

// BenchmarkRunCat runs the minimal module, cat, once per iteration as a
// worker runs a unit (Module.Run, a fresh instance, default limits): on
// no input, the cost of instantiating and starting it; on the 19 KB
// sample GIF, that plus copying the unit in and out.
func BenchmarkRunCat(b *testing.B) {
	mod := compile(b, newEngine(b, wasm.Config{}), buildC(b, "cat"))
	for _, in := range []struct {
		name string
		data []byte
	}{{"size=0", nil}, {"size=19KB", ops.SampleGIF()}} {
		b.Run(in.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				out, err := mod.Run(ctx, "cat", in.data, map[string]string{}, wasm.Limits{})
				if err != nil || !bytes.Equal(out, in.data) {
					b.Fatalf("cat of %d bytes gave %d: %v", len(in.data), len(out), err)
				}
				wasm.Recycle(out) // as the worker does once it sent the result
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

var key = []byte("wasmbench-cluster-key-0123456789ab")

// logger discards logs unless BRAID_TEST_LOG is set.
func logger() *slog.Logger {
	if os.Getenv("BRAID_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// cluster is a server in this process on loopback, as server's own tests
// run one (server/cluster_test.go), with its client.
type cluster struct {
	srv *server.Server
	c   *client.Client
}

// newCluster starts a server on a fresh data directory; it stops when b
// ends, after the workers started since.
func newCluster(b *testing.B) *cluster {
	b.Helper()
	srv, err := server.New(server.Config{
		Listen:            "127.0.0.1:0",
		Data:              b.TempDir(),
		Key:               key,
		HeartbeatInterval: 50 * time.Millisecond,
		WorkerTimeout:     400 * time.Millisecond,
		Logger:            logger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("server Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			b.Error("server did not stop within 15s")
		}
	})
	return &cluster{srv: srv, c: client.New(srv.URL(), client.WithKey(key))}
}

// startWorker starts a worker lending threads, with a fresh temporary
// module directory (so a fresh engine and compilation cache), and
// returns the function that stops it. It is stopped when b ends if not
// before.
func (c *cluster) startWorker(b *testing.B, threads int) (stop func()) {
	b.Helper()
	w, err := worker.New(worker.Config{
		Servers:       []string{c.srv.URL()},
		Key:           key,
		Threads:       threads,
		Listen:        []string{"127.0.0.1:0"},
		Logger:        logger(),
		RetryInterval: 20 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Error("worker did not stop within 10s")
		}
	}
	b.Cleanup(stop)
	return stop
}

// waitWorkers waits until the server has n live workers.
func (c *cluster) waitWorkers(b *testing.B, n int) {
	b.Helper()
	var h api.Health
	var err error
	if !testwait.Until(10*time.Second, func() bool {
		h, err = c.c.Health(context.Background())
		return err == nil && h.Workers == n
	}) {
		b.Fatalf("server has %d live workers after 10s, want %d (err %v)", h.Workers, n, err)
	}
}

func (c *cluster) put(b *testing.B, data []byte) string {
	b.Helper()
	id, err := c.c.Put(context.Background(), bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	return id
}

func (c *cluster) addOp(b *testing.B, name string, code []byte) api.OpInfo {
	b.Helper()
	info, err := c.c.AddOp(context.Background(), name, bytes.NewReader(code), client.OpOptions{})
	if err != nil {
		b.Fatalf("add %s: %v", name, err)
	}
	return info
}

// run submits a job, waits up to a minute for it and fails b unless it
// is done.
func (c *cluster) run(b *testing.B, req api.JobRequest) api.JobStatus {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := c.c.Submit(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	if st, err = c.c.Wait(ctx, st.Job, nil); err != nil {
		b.Fatalf("job %d: %v (last status %+v)", st.Job, err, st)
	}
	if st.State != api.JobDone {
		b.Fatalf("job %d %s: %s", st.Job, st.State, st.Error)
	}
	return st
}

// BenchmarkUnits measures units per second through one server and one
// worker in this process on loopback, as server's BenchmarkNoop does:
// one job per iteration of the 19 KB sample GIF repeated 4000 times (one
// unit each, 16 in flight per stream, the server's default), side by
// side with the built-in noop (op=noop) and the cat module, both moving
// the 19 KB in and out of every unit. op=cat is a job that names only
// the operation; op=cat-explicit says --split whole --merge concat, the
// module's defaults, which makes the server assemble the output of a
// repeated job from one copy (op=cat concatenates all 4000: 76 MB). The
// worker fetches and compiles cat in a warm-up job first.
func BenchmarkUnits(b *testing.B) {
	const units = 4000
	cat := buildC(b, "cat")
	gif := ops.SampleGIF()
	for _, threads := range []int{1, 2} {
		for _, job := range []struct {
			name string
			req  api.JobRequest
		}{
			{"noop", api.JobRequest{Op: "noop"}},
			{"cat", api.JobRequest{Op: "cat"}},
			{"cat-explicit", api.JobRequest{Op: "cat", Split: "whole", Merge: "concat"}},
		} {
			b.Run(fmt.Sprintf("threads=%d/op=%s", threads, job.name), func(b *testing.B) {
				c := newCluster(b)
				c.startWorker(b, threads)
				c.waitWorkers(b, 1)
				if job.req.Op == "cat" {
					c.addOp(b, "cat", cat)
				}
				req := job.req
				req.Input = c.put(b, gif)
				req.Repeat = 100
				c.run(b, req) // warm-up
				req.Repeat = units
				b.SetBytes(int64(units * len(gif)))
				b.ReportAllocs()
				var n int
				var busy, cpu, compute time.Duration
				for b.Loop() {
					start, cpu0 := time.Now(), cpuTime()
					st := c.run(b, req)
					busy += time.Since(start)
					cpu += cpuTime() - cpu0
					compute += time.Duration(st.Timings.ComputeNanos)
					n += units
				}
				b.ReportMetric(float64(n)/busy.Seconds(), "units/s")
				// Server, worker and client together.
				b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/unit")
				// What the worker timed around the operation's Run.
				b.ReportMetric(float64(compute.Microseconds())/float64(n), "run-µs/unit")
			})
		}
	}
}

// BenchmarkFirstUnit measures a never-seen module of 2.6 MB (a Go program
// built for wasip1) reaching its first result, and its parts:
//
//   - step=job: a job of one unit, from submit to the client seeing it
//     done, on a worker started afresh for each iteration (fresh module
//     directory, engine and compilation cache): download, sha256 check,
//     compile, run. Then the same job again on that worker (module
//     compiled): warm-ms/job. Also what the server recorded: submit to
//     first unit sent, first unit sent to done, and the run itself.
//   - step=fetch: downloading the module from the server and its sha256,
//     as the worker does.
//   - step=compile-cold: Engine.Compile on a new engine with an empty
//     CacheDir, as a fresh worker compiles (workers=1), and with 2
//     goroutines compiling functions in parallel (workers=2).
//   - step=compile-cached: Engine.Compile on a new engine whose CacheDir
//     holds the module's compiled code (a restarted worker).
//   - step=run: Module.Run of the compiled module on a 6-byte input;
//     step=run-nocheck the same on wazero without WithCloseOnContextDone.
func BenchmarkFirstUnit(b *testing.B) {
	code := buildGo(b)
	sum := sha256.Sum256(code)
	hash := hex.EncodeToString(sum[:])
	b.Logf("module of %d bytes", len(code))
	ctx := context.Background()

	b.Run("step=job", func(b *testing.B) {
		c := newCluster(b)
		info := c.addOp(b, "echo", code)
		if info.Hash != hash {
			b.Fatalf("server's hash %s, want %s", info.Hash, hash)
		}
		var total, warm, queued, ran, compute time.Duration
		i := 0
		for b.Loop() {
			stop := c.startWorker(b, 1)
			c.waitWorkers(b, 1)
			// A new input each time, so no job is like another.
			data := fmt.Appendf(nil, "hello %d\n", i)
			i++
			req := api.JobRequest{Op: "echo", Input: c.put(b, data)}
			start := time.Now()
			st := c.run(b, req)
			total += time.Since(start)
			queued += st.Timings.Started.Sub(st.Timings.Submitted)
			ran += st.Timings.Finished.Sub(st.Timings.Started)
			compute += time.Duration(st.Timings.ComputeNanos)
			req.Input = c.put(b, append(data, data...))
			start = time.Now()
			c.run(b, req)
			warm += time.Since(start)
			stop()
			c.waitWorkers(b, 0)
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
		b.ReportMetric(ms(total), "ms/first-unit")
		b.ReportMetric(ms(warm), "warm-ms/job")
		b.ReportMetric(ms(queued), "submit-to-sent-ms")
		b.ReportMetric(ms(ran), "sent-to-done-ms")
		b.ReportMetric(ms(compute), "run-ms")
	})

	b.Run("step=fetch", func(b *testing.B) {
		c := newCluster(b)
		c.addOp(b, "echo", code)
		for b.Loop() {
			var buf bytes.Buffer
			if _, err := c.c.Get(ctx, hash, &buf); err != nil {
				b.Fatal(err)
			}
			if s := sha256.Sum256(buf.Bytes()); s != sum {
				b.Fatal("wrong sha256")
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/fetch")
	})

	// compileOnce compiles the module on a new engine with CacheDir dir,
	// with workers compiling its functions in parallel (wazero's
	// experimental.WithCompilationWorkers, through Config.CompileWorkers;
	// 0, what braid's worker does, is GOMAXPROCS).
	compileOnce := func(b *testing.B, dir string, workers int) time.Duration {
		e, err := wasm.NewEngine(wasm.Config{CacheDir: dir, CompileWorkers: workers})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		start := time.Now()
		if _, err := e.Compile(ctx, code); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("step=compile-cold/workers=%d", workers), func(b *testing.B) {
			var d time.Duration
			for b.Loop() {
				d += compileOnce(b, b.TempDir(), workers) // empty
			}
			b.ReportMetric(float64(d.Microseconds())/1000/float64(b.N), "ms/compile")
		})
	}
	b.Run("step=compile-cached", func(b *testing.B) {
		dir := b.TempDir()
		compileOnce(b, dir, 1)
		var d time.Duration
		for b.Loop() {
			d += compileOnce(b, dir, 1)
		}
		b.ReportMetric(float64(d.Microseconds())/1000/float64(b.N), "ms/compile")
	})
	b.Run("step=run", func(b *testing.B) {
		mod := compile(b, newEngine(b, wasm.Config{}), code)
		in := []byte("hello\n")
		for b.Loop() {
			out, err := mod.Run(ctx, "echo", in, map[string]string{}, wasm.Limits{})
			if err != nil || !bytes.Equal(out, in) {
				b.Fatalf("echo gave %q: %v", out, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/run")
	})
	// The same on a plain wazero runtime without WithCloseOnContextDone
	// (see BenchmarkBlurTile): what the Go runtime's start-up costs
	// without a check at every loop back-edge.
	b.Run("step=run-nocheck", func(b *testing.B) {
		run := plainWazero(b, code, "echo", nil, false)
		in := []byte("hello\n")
		for b.Loop() {
			if out := run(b, in); !bytes.Equal(out, in) {
				b.Fatalf("echo gave %q", out)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/run")
	})
}
