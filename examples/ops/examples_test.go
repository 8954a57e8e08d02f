// Package examples tests the example operations of examples/ops: each is
// built into a WebAssembly module once per test binary, then run by
// braid's runner (package wasm) on units cut by braid's splits, and the
// results merged by braid's merges (package ops), as a job would.
//
// The Go examples build with the go tool that runs the tests. The C ones
// need clang for wasm32-wasi with wasi-libc, the Rust one rustc with the
// wasm32-wasi standard library; without them their tests skip, saying
// what to install, unless BRAID_REQUIRE_WASM=1 (or, for Rust,
// BRAID_REQUIRE_RUST=1), which makes that a failure (for CI).
package examples

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/leaktest"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/wasm"
)

// goExamples are the examples written in Go, one main package each;
// cExamples those written in C, each one file NAME/NAME.c; rustExamples
// those written in Rust, each one file NAME/main.rs.
var (
	goExamples   = []string{"wordcount", "sumcounts"}
	cExamples    = []string{"cat", "boxblur", "blur"}
	rustExamples = []string{"bytehist"}
)

// cFlags are build.sh's flags for the C examples.
var cFlags = []string{"--target=wasm32-wasi", "-O3", "-msimd128", "-Wall", "-Wextra", "-ffp-contract=off", "-Wl,--strip-debug"}

// installHint says how to get the C toolchain.
const installHint = "apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32"

// TestMain runs the tests, then closes the engine, removes the built
// modules and fails the run if a test left goroutines behind.
func TestMain(m *testing.M) {
	code := m.Run()
	built.close()
	if code == 0 {
		if leaked := leaktest.Leaked(time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// builds is what the tests build once and share: a directory for the
// modules, the engine, and the compiled modules of each language.
type builds struct {
	mu  sync.Mutex
	dir string
	eng *wasm.Engine

	goLang, cLang, rustLang lang
}

// lang is the compiled examples of one language.
type lang struct {
	once sync.Once
	mods map[string]*wasm.Module
	skip string // why the toolchain is missing: the tests skip
	err  error  // a failed build or compile: the tests fail
}

var built builds

// setup returns the directory and engine, made on first use.
func (b *builds) setup() (string, *wasm.Engine, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.eng != nil {
		return b.dir, b.eng, nil
	}
	dir, err := os.MkdirTemp("", "braid-examples-")
	if err != nil {
		return "", nil, err
	}
	eng, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	b.dir, b.eng = dir, eng
	return dir, eng, nil
}

func (b *builds) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.eng != nil {
		b.eng.Close()
		os.RemoveAll(b.dir)
	}
}

// module returns the compiled example name, building its language's
// examples on first use. It skips t if the C toolchain is missing, unless
// BRAID_REQUIRE_WASM=1.
func module(t testing.TB, name string) *wasm.Module {
	t.Helper()
	l, build, require := &built.goLang, buildGo, os.Getenv("BRAID_REQUIRE_WASM") == "1"
	switch {
	case slices.Contains(cExamples, name):
		l, build = &built.cLang, buildC
	case slices.Contains(rustExamples, name):
		l, build = &built.rustLang, buildRust
		require = require || os.Getenv("BRAID_REQUIRE_RUST") == "1"
	}
	l.once.Do(func() {
		dir, eng, err := built.setup()
		if err != nil {
			l.err = err
			return
		}
		start := time.Now()
		var files map[string]string
		files, l.skip, l.err = build(dir)
		if l.err != nil || l.skip != "" {
			return
		}
		buildTime := time.Since(start)
		// Compiling a Go module takes seconds: compile them concurrently.
		var mu sync.Mutex
		var wg sync.WaitGroup
		l.mods = map[string]*wasm.Module{}
		for n, file := range files {
			wg.Go(func() {
				code, err := os.ReadFile(file)
				var mod *wasm.Module
				if err == nil {
					mod, err = eng.Compile(context.Background(), code)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					l.err = errors.Join(l.err, fmt.Errorf("compile %s: %w", n, err))
				}
				l.mods[n] = mod
			})
		}
		wg.Wait()
		if l.err != nil {
			return
		}
		t.Logf("built %s in %v, compiled them in %v", strings.Join(slices.Sorted(maps.Keys(files)), ", "),
			buildTime.Round(time.Millisecond), (time.Since(start) - buildTime).Round(time.Millisecond))
	})
	switch {
	case l.err != nil:
		t.Fatalf("build the examples: %v", l.err)
	case l.skip != "" && require:
		t.Fatalf("%s (BRAID_REQUIRE_WASM=1 or BRAID_REQUIRE_RUST=1)", l.skip)
	case l.skip != "":
		t.Skip(l.skip)
	}
	return l.mods[name]
}

// goTool returns the go command of the toolchain running the tests.
func goTool() string {
	// runtime.GOROOT is deprecated for finding a toolchain at run time,
	// but a test binary runs where it was built: it names go test's own.
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// buildGo builds the Go examples into dir with one go build.
func buildGo(dir string) (files map[string]string, skip string, err error) {
	out := filepath.Join(dir, "go") + string(filepath.Separator)
	args := []string{"build", "-trimpath", "-o", out}
	for _, n := range goExamples {
		args = append(args, "./"+n)
	}
	cmd := exec.Command(goTool(), args...)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("GOOS=wasip1 GOARCH=wasm go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	files = map[string]string{}
	for _, n := range goExamples {
		files[n] = filepath.Join(out, n) // go build -o DIR/ names them after the package
	}
	return files, "", nil
}

// buildC builds the C examples into dir with clang, after a probe that
// tells a missing toolchain (skip) from a broken example (err).
func buildC(dir string) (files map[string]string, skip string, err error) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		return nil, "clang not found, so the C examples cannot be built; " + installHint, nil
	}
	probe := filepath.Join(dir, "probe.c")
	src := "#include <math.h>\n#include <stdio.h>\nint main(void) { printf(\"%g\\n\", exp(1.0)); return 0; }\n"
	if err := os.WriteFile(probe, []byte(src), 0o666); err != nil {
		return nil, "", err
	}
	if msg, err := exec.Command(clang, "--target=wasm32-wasi", "-o", probe+".wasm", probe, "-lm").CombinedOutput(); err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(msg)), "\n")
		return nil, fmt.Sprintf("clang cannot build for wasm32-wasi (%s), so the C examples cannot be built; %s", first, installHint), nil
	}
	files = map[string]string{}
	for _, n := range cExamples {
		file := filepath.Join(dir, n+".wasm")
		args := append(slices.Clone(cFlags), "-Werror", "-o", file, filepath.Join(n, n+".c"), "-lm")
		if msg, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
			return nil, "", fmt.Errorf("clang %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
		files[n] = file
	}
	return files, "", nil
}

// rustHint says how to get a Rust toolchain that builds for WASI.
const rustHint = "apt-get install -y rustc libstd-rust-dev-wasm32 (Debian's rustc, with the wasm32-wasi standard library), " +
	"or rustup target add wasm32-wasip1; RUSTC names the rustc to use"

// rustFlags are the flags of every Rust example's build, after --target.
var rustFlags = []string{"--edition", "2021", "-C", "opt-level=3", "-C", "strip=debuginfo"}

// rustCompiler finds a rustc that builds for WASI preview 1: $RUSTC, the
// rustc on PATH, or Debian's /usr/bin/rustc (which a rustup installation
// on PATH may hide), each tried with the target's new name, wasm32-wasip1
// (Rust 1.78 on), then its old one, wasm32-wasi (until Rust 1.84). It
// returns the compiler and target, or why there is none.
func rustCompiler(dir string) (rustc, target, skip string, err error) {
	var cands []string
	if p := os.Getenv("RUSTC"); p != "" {
		cands = append(cands, p)
	}
	if p, err := exec.LookPath("rustc"); err == nil {
		cands = append(cands, p)
	}
	if fileExists("/usr/bin/rustc") {
		cands = append(cands, "/usr/bin/rustc")
	}
	if len(cands) == 0 {
		return "", "", "rustc not found, so the Rust examples cannot be built; " + rustHint, nil
	}
	probe := filepath.Join(dir, "probe.rs")
	if err := os.WriteFile(probe, []byte("fn main() { println!(\"{}\", std::env::args().count()); }\n"), 0o666); err != nil {
		return "", "", "", err
	}
	var tried []string
	for _, c := range slices.Compact(cands) {
		for _, tg := range []string{"wasm32-wasip1", "wasm32-wasi"} {
			msg, err := exec.Command(c, "--target", tg, "-o", probe+".wasm", probe).CombinedOutput()
			if err == nil {
				return c, tg, "", nil
			}
			first, _, _ := strings.Cut(strings.TrimSpace(string(msg)), "\n")
			tried = append(tried, fmt.Sprintf("%s --target %s: %s", c, tg, first))
		}
	}
	return "", "", fmt.Sprintf("no rustc here builds for WASI (%s), so the Rust examples cannot be built; %s",
		strings.Join(tried, "; "), rustHint), nil
}

// buildRust builds the Rust examples into dir with rustc, one file each.
func buildRust(dir string) (files map[string]string, skip string, err error) {
	rustc, target, skip, err := rustCompiler(dir)
	if skip != "" || err != nil {
		return nil, skip, err
	}
	files = map[string]string{}
	for _, n := range rustExamples {
		file := filepath.Join(dir, n+".wasm")
		args := append([]string{"--target", target}, rustFlags...)
		args = append(args, "-D", "warnings", "-o", file, filepath.Join(n, "main.rs"))
		if msg, err := exec.Command(rustc, args...).CombinedOutput(); err != nil {
			return nil, "", fmt.Errorf("%s %s: %v\n%s", rustc, strings.Join(args, " "), err, msg)
		}
		files[n] = file
	}
	return files, "", nil
}

// run runs mod on stdin with env and the default limits.
func run(t testing.TB, mod *wasm.Module, name string, stdin []byte, env map[string]string) ([]byte, error) {
	t.Helper()
	return mod.Run(t.Context(), name, stdin, env, wasm.Limits{})
}

// mustRun is run that fails t on an error.
func mustRun(t testing.TB, mod *wasm.Module, name string, stdin []byte, env map[string]string) []byte {
	t.Helper()
	out, err := run(t, mod, name, stdin, env)
	if err != nil {
		t.Fatalf("%s with %v: %v", name, env, err)
	}
	return out
}

// runUnits cuts in by split, as a job would, and runs mod on every unit
// with env, two at a time, returning the results in unit order.
func runUnits(t testing.TB, mod *wasm.Module, name string, in []byte, split string, env map[string]string) [][]byte {
	t.Helper()
	sp, err := ops.ParseSplit(split)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := ops.SplitInput(name, bytes.NewReader(in), int64(len(in)), sp, env)
	if err != nil {
		t.Fatalf("split %s: %v", split, err)
	}
	results := make([][]byte, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, s := range specs {
		data := s.Data
		if s.FromInput {
			data = in[s.Off : s.Off+s.Len]
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i], errs[i] = run(t, mod, name, data, s.Params)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s, split %s, unit %d of %d: %v", name, split, i, len(specs), err)
		}
	}
	return results
}

// wantExit checks that err is a RunError for exit code code whose stderr
// holds every one of want.
func wantExit(t testing.TB, err error, code int, want ...string) {
	t.Helper()
	var re *wasm.RunError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *wasm.RunError for exit code %d", err, code)
	}
	if re.Reason != wasm.ReasonExit || re.ExitCode != code {
		t.Errorf("reason %s, exit code %d, want exit code %d: %v", re.Reason, re.ExitCode, code, err)
	}
	for _, w := range want {
		if !strings.Contains(re.Stderr, w) {
			t.Errorf("stderr %q does not mention %q", re.Stderr, w)
		}
	}
}

func TestCat(t *testing.T) {
	mod := module(t, "cat")
	in := make([]byte, 1<<20)
	rand.Read(in)
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"size=1MiB", in},
		{"size=0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out := mustRun(t, mod, "cat", tc.in, nil); !bytes.Equal(out, tc.in) {
				t.Errorf("cat of %d bytes gave %d bytes, not the same", len(tc.in), len(out))
			}
		})
	}
}
