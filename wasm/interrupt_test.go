package wasm

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
)

// TestInstrument checks that every test module stays valid once
// instrumented, exports the same, and imports braid.tick after its own
// imports.
func TestInstrument(t *testing.T) {
	ctx := t.Context()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(context.WithoutCancel(ctx))
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			code := wasmCode(t, b.name)
			inst, _, err := instrument(code)
			if err != nil {
				t.Fatal(err)
			}
			orig, err := rt.CompileModule(ctx, code)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rt.CompileModule(ctx, inst)
			if err != nil {
				t.Fatalf("the instrumented module does not compile: %v", err)
			}
			if o, g := exportNames(orig), exportNames(got); !slices.Equal(o, g) {
				t.Errorf("exports %v, want %v", g, o)
			}
			oi, gi := orig.ImportedFunctions(), got.ImportedFunctions()
			if len(gi) != len(oi)+1 {
				t.Fatalf("%d imported functions, want %d", len(gi), len(oi)+1)
			}
			if mod, name, _ := gi[len(oi)].Import(); mod != tickModule || name != tickName {
				t.Errorf("last import %s.%s, want %s.%s", mod, name, tickModule, tickName)
			}
			for name, f := range orig.ExportedFunctions() {
				if g := got.ExportedFunctions()[name]; signatureOf(g) != signatureOf(f) {
					t.Errorf("export %s: %s, want %s", name, signatureOf(g), signatureOf(f))
				}
			}
		})
	}
}

func exportNames(cm wazero.CompiledModule) []string {
	var names []string
	for n := range cm.ExportedFunctions() {
		names = append(names, "func "+n)
	}
	for n := range cm.ExportedMemories() {
		names = append(names, "memory "+n)
	}
	slices.Sort(names)
	return names
}

// TestRunLoopsDoNotStall runs endless loops on every P while the garbage
// collector and a ticker run: machine code cannot be preempted, so
// without braid.tick's trips to Go a stop-the-world would wait for a loop
// that waits for its timer, forever.
func TestRunLoopsDoNotStall(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "loop")
	var ticks atomic.Int64
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				ticks.Add(1)
				runtime.GC()
			}
		}
	})
	within(t, 20*time.Second, func(ctx context.Context) {
		var wg sync.WaitGroup
		for range runtime.GOMAXPROCS(0) + 1 {
			wg.Go(func() {
				for range 3 {
					_, err := m.Run(ctx, "loop", nil, nil, Limits{Timeout: 200 * time.Millisecond})
					if re := runError(t, err); re.Reason != ReasonTimeout {
						t.Errorf("got %v, want a timeout", err)
					}
				}
			})
		}
		wg.Wait()
	})
	close(stop)
	bg.Wait()
	// Each tick waits for a stop-the-world; the loops hold the Ps until
	// the scheduler preempts them in braid.tick, so few ticks come.
	if ticks.Load() == 0 {
		t.Error("the ticker never ran while the loops ran")
	}
	checkCat(t, e)
}

// maxFuzzInput bounds the inputs FuzzInstrument tries. Each try
// compiles the input twice with wazero's interpreter, in time that grows
// with its size, and the fuzzer minimizes every new interesting input by
// trying it again thousands of times: with the test modules as they are
// (15-200 KiB with their debug sections) as seeds, it spent its time
// minimizing one (9,207 execs, then 0/s). The seeds are the test modules
// without custom sections, those that fit. The fuzzer still shows 0
// execs/s for seconds at a time (after 167,000 execs in 60 s, say): that
// is it minimizing a new interesting input of up to 8 KiB, up to
// -fuzzminimizetime (60 s) each, whose execs it counts only at the end
// (GODEBUG=fuzzdebug=1 logs "minimizing took: 15.7s" at each such
// burst); no input is slow, every one in the corpus rewrites and
// compiles in under 1 ms. Use -fuzzminimizetime 5s to fuzz more.
const maxFuzzInput = 8 << 10

// FuzzInstrument checks that instrument never panics and that what it
// returns, wazero accepts whenever it accepts the input.
func FuzzInstrument(f *testing.F) {
	for _, b := range builds {
		if code := withoutCustom(wasmCode(f, b.name)); len(code) <= maxFuzzInput {
			f.Add(code)
		}
	}
	// Small modules mutate fast: a loop, a call, a global.
	for _, m := range tinyModules {
		f.Add(m)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, code []byte) {
		if len(code) > maxFuzzInput {
			return
		}
		if _, err := parseImports(code); err != nil {
			return
		}
		inst, _, err := instrument(code)
		if err != nil {
			return
		}
		got, gerr := rt.CompileModule(ctx, inst)
		if gerr == nil {
			defer got.Close(ctx)
		}
		// The rewrite drops custom sections (names, debug info): judge
		// the module without them.
		orig, oerr := rt.CompileModule(ctx, withoutCustom(code))
		if oerr != nil {
			// The rewrite must never make an invalid module valid: code
			// that names what the rewrite adds could stop the countdown.
			if gerr == nil {
				t.Fatalf("wazero refuses the module (%v) but accepts its instrumented form", oerr)
			}
			return
		}
		defer orig.Close(ctx)
		if gerr != nil {
			t.Fatalf("wazero accepts the module but not its instrumented form: %v", gerr)
		}
		if o, g := slices.Sorted(maps.Keys(orig.ExportedFunctions())), slices.Sorted(maps.Keys(got.ExportedFunctions())); !slices.Equal(o, g) {
			t.Fatalf("exports %v, want %v", g, o)
		}
	})
}

// withoutCustom returns code without its custom sections, or code itself
// if its sections do not parse.
func withoutCustom(code []byte) []byte {
	if len(code) < len(wasmHeader) {
		return code
	}
	out := slices.Clone(code[:len(wasmHeader)])
	r := reader{b: code[len(wasmHeader):]}
	for len(r.b) > 0 {
		start := r.b
		id := r.byte()
		size := r.u32()
		r.bytes(int(size))
		if r.err != nil {
			return code
		}
		if id != 0 {
			out = append(out, start[:len(start)-len(r.b)]...)
		}
	}
	return out
}

// tinyModules are small hand-assembled modules for the fuzzer's seeds.
var tinyModules = [][]byte{
	{ // a function that loops forever
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00,
		0x03, 0x02, 0x01, 0x00,
		0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b,
	},
	{ // a mutable i32 global set in a loop, and a function calling itself
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00,
		0x03, 0x03, 0x02, 0x00, 0x00,
		0x06, 0x06, 0x01, 0x7f, 0x01, 0x41, 0x00, 0x0b,
		0x07, 0x05, 0x01, 0x01, 'f', 0x00, 0x01,
		0x0a, 0x12, 0x02,
		0x0b, 0x00, 0x03, 0x40, 0x41, 0x01, 0x24, 0x00, 0x0c, 0x00, 0x0b, 0x0b,
		0x04, 0x00, 0x10, 0x01, 0x0b,
	},
}

// TestInstrumentRefusesHiddenGlobal: a module whose code names a global
// past its own (invalid as written, valid once the countdown global is
// added) could reset the countdown and never stop. It is refused.
func TestInstrumentRefusesHiddenGlobal(t *testing.T) {
	mod := []byte{
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // header
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type 0: func() -> ()
		0x03, 0x02, 0x01, 0x00, // one function of type 0
		// loop; i32.const 1; global.set 0; br 0; end; end
		0x0a, 0x0d, 0x01, 0x0b, 0x00, 0x03, 0x40, 0x41, 0x01, 0x24, 0x00, 0x0c, 0x00, 0x0b, 0x0b,
	}
	_, _, err := instrument(mod)
	if !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), "global 0") {
		t.Fatalf("instrument: %v, want ErrBadModule naming global 0", err)
	}
	// The same module without the global.set is fine.
	ok := slices.Clone(mod)
	ok = append(ok[:len(ok)-15], 0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b)
	if _, _, err := instrument(ok); err != nil {
		t.Fatalf("a module with a bare loop: %v", err)
	}
}
