package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
)

// requireEnv makes missing clang or wasi-libc a failure instead of a skip.
const requireEnv = "BRAID_REQUIRE_WASM"

// builds lists the test modules: output name, C source in testdata, and
// extra clang flags.
var builds = []struct {
	name, src string
	flags     []string
}{
	{"cat", "cat.c", nil},
	{"env", "env.c", nil},
	{"exit3", "exit3.c", nil},
	{"trap", "trap.c", nil},
	{"loop", "loop.c", nil},
	{"recurse", "recurse.c", nil},
	{"calls", "calls.c", nil},
	{"dirty", "dirty.c", nil},
	{"bomb", "bomb.c", nil},
	{"bigdata", "bigdata.c", nil},
	{"flood", "flood.c", nil},
	{"errflood", "errflood.c", nil},
	{"open", "open.c", nil},
	{"files", "files.c", nil},
	{"clock", "clock.c", nil},
	{"envimport", "envimport.c", nil},
	{"tickimport", "tickimport.c", nil},
	{"reactor", "reactor.c", []string{"-mexec-model=reactor"}},
	{"importmem", "cat.c", []string{"-Wl,--import-memory"}},
}

var (
	buildDir  string // set by TestMain
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "braid-wasm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := checkLeaks(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// checkLeaks waits up to wait for goroutines of this package or of wazero
// to end, and reports those left.
func checkLeaks(wait time.Duration) error {
	var leaked []string
	if !testwait.Until(wait, func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = nil
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "checkLeaks") {
				continue
			}
			if strings.Contains(g, "tetratelabs/wazero") || strings.Contains(g, "braid/wasm.") {
				leaked = append(leaked, g)
			}
		}
		return len(leaked) == 0
	}) {
		return fmt.Errorf("leaked %d goroutines:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
	return nil
}

// buildAll compiles every test module into buildDir, as many at once as
// there are CPUs.
func buildAll() error {
	clang, err := exec.LookPath("clang")
	if err != nil {
		return fmt.Errorf("clang not found (install clang, wasi-libc and libclang-rt-dev-wasm32): %w", err)
	}
	errs := make([]error, len(builds))
	sem := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for i, b := range builds {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append([]string{"--target=wasm32-wasi", "-O2"}, b.flags...)
			args = append(args, "-o", filepath.Join(buildDir, b.name+".wasm"), filepath.Join("testdata", b.src))
			cmd := exec.Command(clang, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("clang %s (is wasi-libc installed?): %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// wasmCode returns the code of the test module name, building the modules
// on first use. Without clang or wasi-libc it skips the test, or fails it
// when BRAID_REQUIRE_WASM=1.
func wasmCode(t testing.TB, name string) []byte {
	t.Helper()
	buildOnce.Do(func() { buildErr = buildAll() })
	if buildErr != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("cannot build test modules and %s=1: %v", requireEnv, buildErr)
		}
		t.Skipf("cannot build test modules (set %s=1 to fail instead): %v", requireEnv, buildErr)
	}
	code, err := os.ReadFile(filepath.Join(buildDir, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// newEngine returns an Engine closed when the test ends.
func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// compile compiles the test module name in e.
func compile(t testing.TB, e *Engine, name string) *Module {
	t.Helper()
	m, err := e.Compile(t.Context(), wasmCode(t, name))
	if err != nil {
		t.Fatalf("Compile %s: %v", name, err)
	}
	return m
}

// checkCat checks that e still runs cat correctly.
func checkCat(t testing.TB, e *Engine) {
	t.Helper()
	m := compile(t, e, "cat")
	in := []byte("still alive\n")
	out, err := m.Run(t.Context(), "cat", in, nil, Limits{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("cat after a hostile run: %v", err)
	}
	if !bytes.Equal(out, in) {
		t.Fatalf("cat after a hostile run: got %q, want %q", out, in)
	}
}

// runError asserts err is a *RunError and returns it.
func runError(t testing.TB, err error) *RunError {
	t.Helper()
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("got error %v (%T), want a *RunError", err, err)
	}
	return re
}

// within fails the test if f takes longer than bound: a generous bound, to
// catch a hang, never a measurement.
func within(t testing.TB, bound time.Duration, f func(ctx context.Context)) {
	t.Helper()
	start := time.Now()
	f(t.Context())
	if d := time.Since(start); d > bound {
		t.Fatalf("took %v, want at most %v", d, bound)
	}
}
