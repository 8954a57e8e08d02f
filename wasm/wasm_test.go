package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
)

func TestRunCat(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "cat")
	big := make([]byte, 5_000_000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"one", []byte("x")},
		{"line", []byte("hello, world\n")},
		{"64KiB+1", bytes.Repeat([]byte("ab"), 32<<10+1)[:64<<10+1]},
		{"5MB", big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := m.Run(t.Context(), "cat", tc.in, nil, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, tc.in) {
				t.Fatalf("got %d bytes, want the %d bytes of input", len(out), len(tc.in))
			}
		})
	}
}

func TestRunEnv(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "env")
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"none", nil, "arg=params\n"},
		{"empty", map[string]string{}, "arg=params\n"},
		{"sorted", map[string]string{"ZETA": "last", "ALPHA": "1", "mid": "a b=c"},
			"arg=params\nenv=ALPHA=1\nenv=ZETA=last\nenv=mid=a b=c\n"},
		{"empty value", map[string]string{"EMPTY": ""}, "arg=params\nenv=EMPTY=\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := m.Run(t.Context(), "params", nil, tc.env, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Fatalf("got %q, want %q", out, tc.want)
			}
		})
	}
}

// TestRunEnvReuse changes the environment between runs of one module: a
// run must never see another's.
func TestRunEnvReuse(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "env")
	env := map[string]string{"A": "1"}
	for i, want := range []string{"env=A=1\n", "env=A=2\n", "env=A=2\nenv=B=3\n", "", "env=A=2\nenv=B=3\n"} {
		switch i {
		case 1:
			env["A"] = "2"
		case 2:
			env["B"] = "3"
		}
		var in map[string]string
		if want != "" {
			in = env
		}
		out, err := m.Run(t.Context(), "params", nil, in, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if want = "arg=params\n" + want; string(out) != want {
			t.Fatalf("run %d: got %q, want %q", i, out, want)
		}
	}
	out, err := m.Run(t.Context(), "other", nil, env, Limits{})
	if want := "arg=other\nenv=A=2\nenv=B=3\n"; err != nil || string(out) != want {
		t.Fatalf("other name: got %q, %v; want %q", out, err, want)
	}
}

func TestRunBadEnv(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "env")
	for _, env := range []map[string]string{
		{"": "x"},
		{"A=B": "x"},
		{"A\x00": "x"},
		{"A": "x\x00y"},
	} {
		_, err := m.Run(t.Context(), "params", nil, env, Limits{})
		if !errors.Is(err, ErrBadEnv) {
			t.Errorf("env %q: got %v, want ErrBadEnv", env, err)
		}
	}
	checkCat(t, e)
}

func TestRunClockAndRandom(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "clock")
	out, err := m.Run(t.Context(), "clock", nil, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "ok 1\n" {
		t.Fatalf("got %q, want %q", out, "ok 1\n")
	}
}

func TestRunNoFilesystem(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "open")
	out, err := m.Run(t.Context(), "open", nil, nil, Limits{})
	if err != nil {
		re := runError(t, err)
		if re.Reason != ReasonExit || re.ExitCode != 1 {
			t.Fatalf("got %v, want exit code 1", err)
		}
	} else if !strings.Contains(string(out), "open failed") {
		t.Fatalf("got %q, want the open to fail", out)
	}
	if strings.Contains(string(out), "root:") {
		t.Fatalf("the module read /etc/passwd: %q", out)
	}
	checkCat(t, e)
}

// TestRunFails runs hostile and failing modules; after each the engine
// must still run cat.
func TestRunFails(t *testing.T) {
	e := newEngine(t, Config{})
	for _, tc := range []struct {
		name   string
		module string
		lim    Limits
		reason Reason
		check  func(t *testing.T, re *RunError)
	}{
		{"exit", "exit3", Limits{}, ReasonExit, func(t *testing.T, re *RunError) {
			if re.ExitCode != 3 || re.Stderr != "bad line 7\n" {
				t.Errorf("got exit code %d, stderr %q; want 3, %q", re.ExitCode, re.Stderr, "bad line 7\n")
			}
			if want := `exit3: exit code 3; stderr: "bad line 7"`; re.Error() != want {
				t.Errorf("Error() = %q, want %q", re.Error(), want)
			}
		}},
		{"trap", "trap", Limits{}, ReasonTrap, func(t *testing.T, re *RunError) {
			if re.Detail != "wasm error: unreachable" {
				t.Errorf("Detail = %q, want %q", re.Detail, "wasm error: unreachable")
			}
			if !strings.HasPrefix(re.Error(), "trap: trap: wasm error: unreachable") {
				t.Errorf("Error() = %q", re.Error())
			}
			if re.Stderr != "about to trap\n" {
				t.Errorf("Stderr = %q", re.Stderr)
			}
		}},
		{"stack overflow", "recurse", Limits{}, ReasonTrap, func(t *testing.T, re *RunError) {
			if !strings.HasPrefix(re.Error(), "recurse: trap: call stack limit of 32 MiB exceeded") {
				t.Errorf("Error() = %q, want the call stack limit", re.Error())
			}
		}},
		{"timeout", "loop", Limits{Timeout: 300 * time.Millisecond}, ReasonTimeout, func(t *testing.T, re *RunError) {
			if want := "loop: timed out after 300ms"; re.Error() != want {
				t.Errorf("Error() = %q, want %q", re.Error(), want)
			}
		}},
		{"timeout without loops", "calls", Limits{Timeout: 300 * time.Millisecond}, ReasonTimeout, func(t *testing.T, re *RunError) {
			if want := "calls: timed out after 300ms"; re.Error() != want {
				t.Errorf("Error() = %q, want %q", re.Error(), want)
			}
		}},
		{"memory bomb", "bomb", Limits{Memory: 32 << 20}, ReasonMemory, func(t *testing.T, re *RunError) {
			if !strings.Contains(re.Stderr, "out of memory after") {
				t.Errorf("Stderr = %q, want the module's complaint", re.Stderr)
			}
			if !strings.HasPrefix(re.Error(), "bomb: memory limit of 32 MiB reached; stderr: ") {
				t.Errorf("Error() = %q", re.Error())
			}
		}},
		{"memory at start", "bigdata", Limits{Memory: 32 << 20}, ReasonMemory, func(t *testing.T, re *RunError) {
			if want := "bigdata: memory limit of 32 MiB reached (needs 40.1 MiB at start)"; re.Error() != want {
				t.Errorf("Error() = %q, want %q", re.Error(), want)
			}
		}},
		{"output flood", "flood", Limits{Output: 1 << 20}, ReasonOutput, func(t *testing.T, re *RunError) {
			if want := "flood: wrote more than 1 MiB to stdout (the unit output cap)"; re.Error() != want {
				t.Errorf("Error() = %q, want %q", re.Error(), want)
			}
		}},
		{"stderr flood", "errflood", Limits{}, ReasonExit, func(t *testing.T, re *RunError) {
			if len(re.Stderr) > tailSize {
				t.Errorf("kept %d bytes of stderr, want at most %d", len(re.Stderr), tailSize)
			}
			if !strings.HasSuffix(re.Stderr, "eee\nthe last line\n") {
				t.Errorf("Stderr does not end with the last line: %q", re.Stderr)
			}
			if len(re.Error()) > 2*stderrInError {
				t.Errorf("Error() is %d bytes long", len(re.Error()))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := compile(t, e, tc.module)
			var err error
			within(t, 10*time.Second, func(ctx context.Context) {
				_, err = m.Run(ctx, tc.module, []byte("some input"), nil, tc.lim)
			})
			re := runError(t, err)
			if re.Reason != tc.reason {
				t.Fatalf("got %v (reason %s), want reason %s", err, re.Reason, tc.reason)
			}
			if re.Op != tc.module {
				t.Errorf("Op = %q, want %q", re.Op, tc.module)
			}
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v unwraps to a context error", err)
			}
			tc.check(t, re)
			checkCat(t, e)
		})
	}
}

// TestRunMemoryLimitPerRun runs the bomb with different limits at once:
// each run gets its own.
func TestRunMemoryLimitPerRun(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "bomb")
	limits := []int64{8 << 20, 24 << 20, 48 << 20}
	errs := make([]error, len(limits))
	var wg sync.WaitGroup
	for i, l := range limits {
		wg.Go(func() {
			_, errs[i] = m.Run(t.Context(), "bomb", nil, nil, Limits{Memory: l})
		})
	}
	wg.Wait()
	for i, l := range limits {
		re := runError(t, errs[i])
		if re.Reason != ReasonMemory {
			t.Fatalf("limit %d MiB: got %v, want ReasonMemory", l>>20, errs[i])
		}
		var n int64
		if _, err := fmt.Sscanf(re.Stderr, "out of memory after %d MiB", &n); err != nil {
			t.Fatalf("limit %d MiB: stderr %q: %v", l>>20, re.Stderr, err)
		}
		if n >= l>>20 || n < l>>20-8 {
			t.Errorf("limit %d MiB: the module got %d MiB", l>>20, n)
		}
	}
	checkCat(t, e)
}

func TestRunBigDataFits(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "bigdata")
	out, err := m.Run(t.Context(), "bigdata", nil, nil, Limits{Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "3\n" {
		t.Fatalf("got %q", out)
	}
}

// TestRunFreshMemory runs a module that dirties its memory again and
// again: reused memory must come back zeroed, static and grown alike.
func TestRunFreshMemory(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "dirty")
	for i := range 4 {
		out, err := m.Run(t.Context(), "dirty", nil, nil, Limits{})
		if err != nil || string(out) != "clean\n" {
			t.Fatalf("run %d: %q, %v", i, out, err)
		}
	}
}

func TestRunCanceled(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "loop")
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	var err error
	within(t, 10*time.Second, func(context.Context) {
		_, err = m.Run(ctx, "loop", nil, nil, Limits{Timeout: time.Minute})
	})
	re := runError(t, err)
	if re.Reason != ReasonCanceled {
		t.Fatalf("got %v, want ReasonCanceled", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("errors.Is(%v, context.Canceled) = false", err)
	}

	// A ctx that ended before Run does not start the module.
	_, err = m.Run(ctx, "loop", nil, nil, Limits{})
	if re := runError(t, err); re.Reason != ReasonCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a canceled ctx: %v", err)
	}
	checkCat(t, e)
}

func TestRunConcurrent(t *testing.T) {
	e := newEngine(t, Config{})
	cat := compile(t, e, "cat")
	env := compile(t, e, "env")
	const workers, runs = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range runs {
				in := fmt.Appendf(nil, "worker %d run %d %s", w, i, strings.Repeat("x", i*100))
				out, err := cat.Run(t.Context(), "cat", in, nil, Limits{})
				if err != nil || !bytes.Equal(out, in) {
					errs <- fmt.Errorf("cat worker %d run %d: %q, %v", w, i, out, err)
					return
				}
				v := fmt.Sprint(w*runs + i)
				out, err = env.Run(t.Context(), "env", nil, map[string]string{"V": v}, Limits{})
				if want := "arg=env\nenv=V=" + v + "\n"; err != nil || string(out) != want {
					errs <- fmt.Errorf("env worker %d run %d: got %q, %v; want %q", w, i, out, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestCompileOnce(t *testing.T) {
	e := newEngine(t, Config{})
	code := wasmCode(t, "cat")
	const n = 8
	mods := make([]*Module, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { mods[i], errs[i] = e.Compile(t.Context(), bytes.Clone(code)) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if mods[i] != mods[0] {
			t.Fatalf("Compile %d returned another *Module", i)
		}
	}
	again, err := e.Compile(t.Context(), code)
	if err != nil || again != mods[0] {
		t.Fatalf("Compile again: %p, %v; want %p", again, err, mods[0])
	}
	if got, ok := e.Lookup(mods[0].Hash()); !ok || got != mods[0] {
		t.Fatalf("Lookup(%s) = %p, %v", mods[0].Hash(), got, ok)
	}
	if got, ok := e.Lookup(strings.ToUpper(mods[0].Hash())); !ok || got != mods[0] {
		t.Fatalf("Lookup in upper case = %p, %v", got, ok)
	}
	if _, ok := e.Lookup(strings.Repeat("0", 64)); ok {
		t.Fatal("Lookup of an unknown hash succeeded")
	}
	if mods[0].Size() != len(code) || len(mods[0].Hash()) != 64 {
		t.Fatalf("Size %d, Hash %q", mods[0].Size(), mods[0].Hash())
	}
}

func TestEviction(t *testing.T) {
	e := newEngine(t, Config{MaxModules: 2})
	cat := compile(t, e, "cat")
	compile(t, e, "env")
	compile(t, e, "exit3") // evicts cat, the least recently used
	if _, ok := e.Lookup(cat.Hash()); ok {
		t.Fatal("cat is still cached beyond MaxModules")
	}
	// An evicted *Module still runs: it is compiled again.
	out, err := cat.Run(t.Context(), "cat", []byte("hi"), nil, Limits{})
	if err != nil || string(out) != "hi" {
		t.Fatalf("evicted cat: %q, %v", out, err)
	}
	if _, ok := e.Lookup(cat.Hash()); !ok {
		t.Fatal("cat is not cached after running again")
	}
}

// TestEvictionBySize: beyond Config.MaxCompiledBytes of estimated machine
// code the least recently used modules are evicted, however few they
// are, and the module just compiled is kept even when it alone is over.
// Before, only MaxModules bounded the cache.
func TestEvictionBySize(t *testing.T) {
	sizes := map[string]int64{}
	scratch := newEngine(t, Config{})
	for _, name := range []string{"cat", "env", "exit3"} {
		m := compile(t, scratch, name)
		if m.compiledSize < int64(m.Size()) {
			t.Fatalf("%s: estimated %d bytes compiled for %d bytes of code", name, m.compiledSize, m.Size())
		}
		sizes[name] = m.compiledSize
	}
	all := sizes["cat"] + sizes["env"] + sizes["exit3"]
	e := newEngine(t, Config{MaxCompiledBytes: all - 1})
	cat := compile(t, e, "cat")
	env := compile(t, e, "env")
	exit3 := compile(t, e, "exit3") // over by a byte: evicts cat
	cached := func(m *Module) bool { _, ok := e.Lookup(m.Hash()); return ok }
	if cached(cat) || !cached(env) || !cached(exit3) {
		t.Fatalf("after 3 modules of %d bytes under %d: cached cat %v, env %v, exit3 %v; want only cat evicted",
			all, all-1, cached(cat), cached(env), cached(exit3))
	}
	// env was used last (Lookup), so cat's return evicts exit3.
	env.touch()
	if out, err := cat.Run(t.Context(), "cat", []byte("hi"), nil, Limits{}); err != nil || string(out) != "hi" {
		t.Fatalf("evicted cat: %q, %v", out, err)
	}
	if !cached(cat) || !cached(env) || cached(exit3) {
		t.Fatalf("after cat ran again: cached cat %v, env %v, exit3 %v; want exit3 evicted", cached(cat), cached(env), cached(exit3))
	}

	// A module over the bound on its own is kept (runs need it), alone.
	tiny := newEngine(t, Config{MaxCompiledBytes: 1})
	first := compile(t, tiny, "cat")
	second := compile(t, tiny, "env")
	if _, ok := tiny.Lookup(first.Hash()); ok {
		t.Fatal("cat is still cached beyond a 1-byte bound")
	}
	if _, ok := tiny.Lookup(second.Hash()); !ok {
		t.Fatal("the module just compiled was evicted")
	}
}

// TestEvictionConcurrent runs two modules from two goroutines with room
// for one: every run evicts the other module, which runs on regardless.
func TestEvictionConcurrent(t *testing.T) {
	e := newEngine(t, Config{MaxModules: 1})
	mods := []*Module{compile(t, e, "cat"), compile(t, e, "exit3")}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 4 {
				m := mods[(w+i)%2]
				out, err := m.Run(t.Context(), "op", []byte("in"), nil, Limits{})
				if m == mods[0] && (err != nil || string(out) != "in") {
					t.Errorf("cat: %q, %v", out, err)
				}
				var re *RunError
				if m == mods[1] && (!errors.As(err, &re) || re.ExitCode != 3) {
					t.Errorf("exit3: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

func TestCacheDir(t *testing.T) {
	dir := t.TempDir()
	code := wasmCode(t, "cat")
	for i := range 2 {
		e, err := NewEngine(Config{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Compile(t.Context(), code)
		if err != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
		out, err := m.Run(t.Context(), "cat", []byte("cached"), nil, Limits{})
		if err != nil || string(out) != "cached" {
			t.Fatalf("engine %d: %q, %v", i, out, err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("nothing cached in %s: %v", dir, err)
	}
}

func TestClosed(t *testing.T) {
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := compile(t, e, "cat")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := m.Run(t.Context(), "cat", nil, nil, Limits{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v, want ErrClosed", err)
	}
	if _, err := e.Compile(t.Context(), wasmCode(t, "env")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Compile after Close: %v, want ErrClosed", err)
	}
	if !strings.Contains(ErrClosed.Error(), "closed") {
		t.Fatalf("ErrClosed = %q", ErrClosed)
	}
}

func TestCompileRejects(t *testing.T) {
	e := newEngine(t, Config{})
	for _, tc := range badModules(t) {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Compile(t.Context(), tc.code)
			if !errors.Is(err, ErrBadModule) {
				t.Fatalf("got %v, want ErrBadModule", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	checkCat(t, e)
}

// TestCloseDuringCompile closes the engine while compilations run: they
// fail with ErrClosed or finish, and nothing panics (wazero's runtime
// must not close under a compilation).
func TestCloseDuringCompile(t *testing.T) {
	code := wasmCode(t, "cat")
	for iter := range 8 {
		e, err := NewEngine(Config{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Distinct bytes: four compilations, not one shared.
				// A custom section: id 0, size 3, the name "x" and i.
				c := append(bytes.Clone(code), 0, 3, 2, 'x', byte(i))
				_, err := e.Compile(context.Background(), c)
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("compile: %v", err)
				}
			}()
		}
		// Close at different points of the compilations.
		time.Sleep(time.Duration(iter) * 3 * time.Millisecond)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}

// TestMaxCompiles: an Engine compiles at most Config.MaxCompiles modules
// at once, so what compiling takes stays bounded however many modules
// are asked for; the others wait for a turn and then compile, and Close
// ends a wait with ErrClosed.
func TestMaxCompiles(t *testing.T) {
	code := wasmCode(t, "cat")
	// Distinct bytes: distinct compilations. A custom section: id 0,
	// size 3, the name "x" and i.
	variant := func(i int) []byte { return append(bytes.Clone(code), 0, 3, 2, 'x', byte(i)) }
	const waiting = "wasm.(*Engine).compileBackground"

	t.Run("at most 2", func(t *testing.T) {
		e := newEngine(t, Config{MaxCompiles: 2})
		release := make(chan struct{})
		var building, most atomic.Int32
		e.building = func() {
			n := building.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
			building.Add(-1)
		}
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				if _, err := e.Compile(t.Context(), variant(i)); err != nil {
					t.Errorf("compile %d: %v", i, err)
				}
			})
		}
		// Two building, held in the hook, and the third waiting for a
		// turn: all three parked in compileBackground.
		testwait.For(t, "3 compilations parked", 10*time.Second, func() bool { return testwait.Parked(waiting) == 3 })
		if n := building.Load(); n != 2 {
			t.Errorf("%d compilations build at once; want 2 (MaxCompiles)", n)
		}
		close(release)
		wg.Wait()
		if n := most.Load(); n != 2 {
			t.Errorf("at most %d compilations built at once; want 2", n)
		}
	})

	t.Run("close while waiting", func(t *testing.T) {
		e, err := NewEngine(Config{MaxCompiles: 1})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		var building atomic.Int32
		e.building = func() { building.Add(1); <-release }
		first := make(chan error, 1)
		go func() { _, err := e.Compile(context.Background(), variant(0)); first <- err }()
		testwait.For(t, "the first compilation building", 10*time.Second, func() bool { return testwait.Parked(waiting) == 1 })
		second := make(chan error, 1)
		go func() { _, err := e.Compile(context.Background(), variant(1)); second <- err }()
		testwait.For(t, "the second waiting for its turn", 10*time.Second, func() bool { return testwait.Parked(waiting) == 2 })
		if n := building.Load(); n != 1 {
			close(release)
			e.Close()
			t.Fatalf("%d compilations build at once; want 1 (MaxCompiles)", n)
		}
		closed := make(chan error, 1)
		go func() { closed <- e.Close() }()
		if err := <-second; !errors.Is(err, ErrClosed) {
			t.Errorf("the waiting compilation: got %v, want ErrClosed", err)
		}
		close(release)
		if err := <-first; !errors.Is(err, ErrClosed) {
			t.Errorf("the compilation under way: got %v, want ErrClosed", err)
		}
		if err := <-closed; err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}
