package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// DefaultMaxModules is the number of compiled modules an Engine keeps when
// Config.MaxModules is 0.
const DefaultMaxModules = 64

// DefaultMaxCompiledBytes is Config.MaxCompiledBytes when 0: room for 6
// compiled modules at the limits (about 140 MB each, estimated 152 MB),
// 15 Go programs of 8 MB, or hundreds of small modules.
const DefaultMaxCompiledBytes = 1 << 30

// The estimate of the memory a compiled module keeps while cached
// (compiledSize): a fixed part, a part per byte of instrumented code and
// a part per phi (MaxModulePhis), which wazero gives a slot of its own
// and much spill code. Measured with BenchmarkCompiledSize (RSS after a
// garbage collection, before the compile and after it with the module
// kept; docs/benchmarks.md): the cat example kept 0.75 MB for 1.5 KB of
// code; an 8 MB Go program 61 MB for 8.5 MB (7.2 bytes a byte) and
// 676,000 phis; 8 phi nests 36 MB for 134 KB and 1.0 million phis (270
// bytes a byte), 33 nests 138 MB for 4.1 million phis. One ratio to code
// size misses by a factor of up to 70 one way or the other; these parts
// overestimate each of them by 4-41%, so that the estimate errs on the
// safe side.
const (
	compiledFixed   = 1 << 20
	compiledPerByte = 5
	compiledPerPhi  = 36
)

// compiledSize estimates the memory a compiled module keeps from the size
// of its instrumented code and its phis.
func compiledSize(instrumented int, phis uint64) int64 {
	return compiledFixed + compiledPerByte*int64(instrumented) + compiledPerPhi*int64(phis)
}

// Config configures an Engine; the zero value works.
type Config struct {
	// CacheDir keeps compiled machine code on disk across restarts
	// (wazero.NewCompilationCacheWithDir), so a restarted Engine compiles
	// a module it saw before much faster. "" = in memory only.
	CacheDir string
	// MaxModules bounds the compiled modules kept; beyond it the least
	// recently used is closed (a *Module of it still runs: it is compiled
	// again). 0 or less = DefaultMaxModules.
	MaxModules int
	// MaxCompiledBytes bounds the machine code of the compiled modules
	// kept, as estimated from their size (compiledSize): beyond it the
	// least recently used are closed, as beyond MaxModules, though the
	// module just compiled is always kept. The code lives outside the Go
	// heap, so nothing else bounds it. 0 or less =
	// DefaultMaxCompiledBytes.
	MaxCompiledBytes int64
	// CompileWorkers is how many goroutines compile a module's functions
	// in parallel (wazero's experimental.WithCompilationWorkers). 0 or
	// less = GOMAXPROCS, at most DefaultCompileWorkers; at least 2 are
	// used, as wazero checks for a canceled compilation only then.
	CompileWorkers int
	// MaxCompiles bounds the modules the Engine compiles at once; more
	// wait for a turn, and the wait does not count toward
	// CompileTimeout. With CompileWorkers it bounds the memory that
	// compiling takes, whatever the modules and the threads asking for
	// them (see DefaultCompileWorkers). 0 or less = DefaultMaxCompiles.
	MaxCompiles int
	// CompileTimeout bounds one compilation; a module that takes longer
	// is refused with ErrCompileTimeout. The limits of limits.go bound
	// each function's share (about a second), so a compilation stops
	// within about that after its time is up, or after Close. 0 or less =
	// DefaultCompileTimeout.
	CompileTimeout time.Duration
}

// DefaultCompileTimeout is Config.CompileTimeout when 0: an 8 MB Go
// program compiles in some 30 s on a busy 2-core machine.
const DefaultCompileTimeout = 5 * time.Minute

// errCompileTimeout is the cause of a compilation's ctx when its time is
// up.
var errCompileTimeout = errors.New("compile timeout")

// DefaultCompileWorkers bounds the goroutines that compile one module by
// default, whatever the cores. Each goroutine holds the memory of the
// function it is compiling, and the costliest function the limits admit
// (a phi nest just under MaxFrame) takes some 150-190 MB: the module of
// 33 of them took a peak RSS of 0.56 GB with 2 goroutines, 0.83-0.86 GB
// with 4, 1.4 GB with 8 and 5.0 GB with 32 (BenchmarkCompileWorkers,
// docs/benchmarks.md). Compiled code is cached, so a large real program
// pays the slower compile on a big machine once.
const DefaultCompileWorkers = 4

// DefaultMaxCompiles is Config.MaxCompiles when 0: a worker compiles at
// most 2 modules at once whatever its threads, so hostile modules at the
// limits cost it at most 2 x 0.86 GB (measured: BenchmarkCompileWorkers),
// and one slow compilation does not hold up every other module.
const DefaultMaxCompiles = 2

// populate fills in the defaults of c.
func (c *Config) populate() {
	if c.MaxModules <= 0 {
		c.MaxModules = DefaultMaxModules
	}
	if c.MaxCompiledBytes <= 0 {
		c.MaxCompiledBytes = DefaultMaxCompiledBytes
	}
	if c.CompileWorkers <= 0 {
		c.CompileWorkers = min(runtime.GOMAXPROCS(0), DefaultCompileWorkers)
	}
	if c.MaxCompiles <= 0 {
		c.MaxCompiles = DefaultMaxCompiles
	}
	if c.CompileTimeout <= 0 {
		c.CompileTimeout = DefaultCompileTimeout
	}
}

// Engine compiles and runs WASI command modules. It keeps one wazero
// runtime with the wasi_snapshot_preview1 host functions, and the compiled
// modules by the sha256 of their code. Its methods are safe for concurrent
// use.
type Engine struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache // nil without CacheDir
	base  wazero.ModuleConfig     // the sandbox every run starts from
	tick  atomic.Uint64           // clock of Module.used
	done  atomic.Bool             // Close was called

	// stop ends when Close is called: compilations run under it.
	stop   context.Context
	cancel context.CancelFunc

	pool sync.Pool // of *runState

	mu      sync.Mutex
	closed  bool
	modules map[string]*compilation // by hex sha256
	// compiling counts compilations under way; Close waits for them
	// (wazero panics when its runtime closes under a compilation). Added
	// to under mu while not closed.
	compiling sync.WaitGroup
	// turns holds a token for each compilation compiling now, at most
	// Config.MaxCompiles.
	turns chan struct{}
	// building, if set (by tests, before the first Compile), is called
	// with a turn held, before the compilation starts.
	building func()
}

// compilation is one Compile of some code, done or under way; others
// asking for the same code wait on done.
type compilation struct {
	done chan struct{}
	mod  *Module // set before done is closed, unless err is
	err  error
}

// NewEngine returns an Engine configured by cfg.
func NewEngine(cfg Config) (*Engine, error) {
	cfg.populate()
	ctx := context.Background()
	// No WithCloseOnContextDone: Compile instruments modules so that
	// runs stop through braid.tick instead (interrupt.go).
	rc := wazero.NewRuntimeConfig()
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		var err error
		if cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("wasm: compilation cache in %s: %w", cfg.CacheDir, err)
		}
		rc = rc.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		if cache != nil {
			cache.Close(ctx)
		}
		return nil, fmt.Errorf("wasm: instantiate %s: %w", wasiModule, err)
	}
	e := &Engine{
		cfg:   cfg,
		rt:    rt,
		cache: cache,
		// Anonymous (WithName("")) so concurrent instances never collide;
		// no filesystem, no sockets; real clocks; no sleep (poll_oneoff
		// returns at once, hostcall.go). Each run's state adds crypto
		// randomness bounded by the run's deadline (hostRand).
		base: wazero.NewModuleConfig().
			WithName("").
			WithSysWalltime().
			WithSysNanotime(),
		modules: make(map[string]*compilation),
		turns:   make(chan struct{}, cfg.MaxCompiles),
	}
	e.stop, e.cancel = context.WithCancel(context.Background())
	if _, err := rt.NewHostModuleBuilder(tickModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(e.stopIfOver), []api.ValueType{api.ValueTypeI64}, nil).
		Export(tickName).
		Instantiate(ctx); err != nil {
		rt.Close(ctx)
		if cache != nil {
			cache.Close(ctx)
		}
		return nil, fmt.Errorf("wasm: instantiate %s: %w", tickModule, err)
	}
	return e, nil
}

// stopIfOver is the host function braid.tick that instrumented modules call
// every tickEvery loop iterations and calls, and before a bulk instruction
// longer than what is left of the countdown (interrupt.go): it stops the
// run, by panicking, once its ctx (which carries Limits.Timeout) ended or
// the Engine is closed, when the bulk instruction it is about to run
// (stack[0], its cost in countdown steps) could not end before the ctx's
// deadline, and when the call stack passed MaxStack (stack[0] is
// depthExceeded). ctx is the one Run passed to InstantiateModule.
func (e *Engine) stopIfOver(ctx context.Context, _ api.Module, stack []uint64) {
	if e.done.Load() {
		panic(ErrClosed)
	}
	if ctx.Err() != nil {
		panic(context.Cause(ctx))
	}
	steps := stack[0]
	if steps == depthExceeded {
		panic(ErrCallDepth)
	}
	if steps > 0 {
		if deadline, ok := ctx.Deadline(); ok && pastDeadline(time.Until(deadline), steps) {
			panic(errBulkLate)
		}
	}
}

// Close closes every compiled module and the runtime. Call it when no Run
// is under way: a run in flight fails with ErrClosed. After Close, Compile
// and Run return ErrClosed. Close is idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.done.Store(true)
	var mods []*Module
	for _, c := range e.modules {
		if c.mod != nil {
			mods = append(mods, c.mod)
		}
	}
	e.modules = nil
	e.mu.Unlock()
	e.cancel() // compilations stop after the function they are compiling
	e.compiling.Wait()

	ctx := context.Background()
	for _, m := range mods {
		m.evict()
	}
	err := e.rt.Close(ctx)
	if e.cache != nil {
		if cerr := e.cache.Close(ctx); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("wasm: close engine: %w", err)
	}
	return nil
}

// Compile validates code as a WASI preview 1 command module (see Validate)
// and compiles it to machine code, once per sha256: a second call with the
// same bytes returns the cached *Module at once, and concurrent calls with
// the same bytes share one compilation. A bad module's error wraps
// ErrBadModule. Compile keeps its own copy of code.
func (e *Engine) Compile(ctx context.Context, code []byte) (*Module, error) {
	sum := sha256.Sum256(code)
	return e.compile(ctx, hex.EncodeToString(sum[:]), code)
}

// compile is Compile of code whose hash is known. The compilation runs in
// its own goroutine, bounded by Config.CompileTimeout and Close: the
// caller waits for it or for its ctx, whichever ends first, and a caller
// whose ctx ends leaves the compilation to finish for others (or for the
// cache).
func (e *Engine) compile(ctx context.Context, hash string, code []byte) (*Module, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("wasm: compile: %w", ErrClosed)
	}
	c, ok := e.modules[hash]
	if !ok {
		c = &compilation{done: make(chan struct{})}
		e.modules[hash] = c
		e.compiling.Add(1)
		go e.compileBackground(c, hash, bytes.Clone(code))
	}
	e.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("wasm: compile %.12s: %w", hash, context.Cause(ctx))
	}
	if c.err != nil {
		return nil, c.err
	}
	c.mod.touch()
	return c.mod, nil
}

// compileBackground runs the compilation c and publishes its result.
func (e *Engine) compileBackground(c *compilation, hash string, code []byte) {
	defer e.compiling.Done()
	var m *Module
	var err error
	select {
	case e.turns <- struct{}{}:
		if e.building != nil {
			e.building()
		}
		ctx, cancel := context.WithTimeoutCause(e.stop, e.cfg.CompileTimeout, errCompileTimeout)
		m, err = e.build(ctx, hash, code)
		if err != nil && errors.Is(context.Cause(ctx), errCompileTimeout) {
			err = fmt.Errorf("wasm: compile %.12s: %w (%v); refused", hash, ErrCompileTimeout, e.cfg.CompileTimeout)
		}
		cancel()
		<-e.turns
	case <-e.stop.Done():
		err = fmt.Errorf("wasm: compile: %w", ErrClosed)
	}

	e.mu.Lock()
	if err == nil && e.closed {
		err = fmt.Errorf("wasm: compile: %w", ErrClosed)
	}
	var unused []*Module
	if err != nil {
		c.err = err
		if e.modules != nil {
			delete(e.modules, hash) // errors are not cached: a later call tries again
		}
	} else {
		c.mod = m
		unused = e.trimLocked(m)
	}
	close(c.done)
	e.mu.Unlock()

	for _, old := range unused {
		old.compiled.Close(context.Background())
	}
	if err != nil && m != nil {
		m.evict()
	}
}

// build compiles code and checks it is a command module.
func (e *Engine) build(ctx context.Context, hash string, code []byte) (*Module, error) {
	if len(code) == 0 {
		return nil, fmt.Errorf("%w: empty code", ErrBadModule)
	}
	if _, err := parseImports(code); err != nil {
		return nil, err
	}
	inst, tableBytes, phis, err := instrumentPhis(code)
	if err != nil {
		return nil, err
	}
	// wazero looks at ctx between functions only when it compiles with
	// more than one goroutine: always do.
	cm, err := e.rt.CompileModule(experimental.WithCompilationWorkers(ctx, max(e.cfg.CompileWorkers, 2)), inst)
	if err != nil {
		if e.done.Load() {
			return nil, fmt.Errorf("wasm: compile: %w", ErrClosed)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("wasm: compile: %w", context.Cause(ctx))
		}
		return nil, badModule(err)
	}
	memMin, err := checkCommand(cm, code)
	if err != nil {
		cm.Close(ctx)
		return nil, err
	}
	m := &Module{
		e:            e,
		hash:         hash,
		code:         code, // compile cloned it
		compiled:     cm,
		memMin:       memMin,
		tableBytes:   tableBytes,
		compiledSize: compiledSize(len(inst), phis),
	}
	m.touch()
	return m, nil
}

// trimLocked removes the least recently used modules beyond MaxModules,
// or beyond MaxCompiledBytes of estimated machine code, from the map
// (never keep, the module just compiled) and marks them evicted, so that a
// Run after the Compile that pushed them out compiles them again. It
// returns those that no run uses, to be closed without e.mu held (a run
// under way closes its module when it ends).
func (e *Engine) trimLocked(keep *Module) []*Module {
	var out []*Module
	var kept int64
	for _, c := range e.modules {
		if c.mod != nil {
			kept += c.mod.compiledSize
		}
	}
	// Each turn removes one module or stops: at most len(e.modules) turns.
	for len(e.modules) > e.cfg.MaxModules || kept > e.cfg.MaxCompiledBytes {
		var oldest string
		var oldestUse uint64
		for h, c := range e.modules {
			if c.mod == nil || c.mod == keep {
				continue // still compiling, or just compiled
			}
			if u := c.mod.used.Load(); oldest == "" || u < oldestUse {
				oldest, oldestUse = h, u
			}
		}
		if oldest == "" {
			break
		}
		m := e.modules[oldest].mod
		if m.markEvicted() {
			out = append(out, m)
		}
		kept -= m.compiledSize
		delete(e.modules, oldest)
	}
	return out
}

// Lookup returns the compiled module whose code has this hex sha256, if the
// engine has it.
func (e *Engine) Lookup(hash string) (*Module, bool) {
	hash = strings.ToLower(hash)
	e.mu.Lock()
	c, ok := e.modules[hash]
	e.mu.Unlock()
	if !ok {
		return nil, false
	}
	select {
	case <-c.done:
	default:
		return nil, false // still compiling
	}
	if c.mod == nil {
		return nil, false
	}
	c.mod.touch()
	return c.mod, true
}
