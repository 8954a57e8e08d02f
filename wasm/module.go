package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// Limits bound one run of a module. Zero (or negative) fields mean the
// defaults.
type Limits struct {
	Memory  int64         // bytes of linear memory and tables (instrument) the module may use, at most MaxMemory; 0 = DefaultMemory
	Timeout time.Duration // wall-clock limit of one run; 0 = DefaultTimeout
	Output  int64         // bytes the module may write to stdout; 0 = DefaultOutput
}

// The defaults and bounds of Limits.
const (
	DefaultMemory  = 256 << 20
	DefaultTimeout = time.Minute
	DefaultOutput  = 256 << 20
	MaxMemory      = 4 << 30 // wasm32's whole address space
)

// withDefaults returns l with the defaults filled in and Memory clamped to
// MaxMemory.
func (l Limits) withDefaults() Limits {
	if l.Memory <= 0 {
		l.Memory = DefaultMemory
	}
	l.Memory = min(l.Memory, MaxMemory)
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.Output <= 0 {
		l.Output = DefaultOutput
	}
	return l
}

// errTimeout is the cause of a run's context when Limits.Timeout passes.
var errTimeout = errors.New("wasm: run timed out")

// Module is a compiled WASI command module. Its methods are safe for
// concurrent use; each Run is a fresh instance.
type Module struct {
	e        *Engine
	hash     string
	code     []byte // to compile again after an eviction
	compiled wazero.CompiledModule
	memMin   uint64 // bytes of memory the module starts with
	// tableBytes is what its tables may take at most; it counts toward
	// Limits.Memory (instrument bounds the tables).
	tableBytes uint64
	// compiledSize estimates the memory its machine code keeps
	// (compiledSize); it counts toward Config.MaxCompiledBytes.
	compiledSize int64

	used atomic.Uint64 // e.tick at the last use, for eviction
	refs atomic.Int64  // runs under way, plus evictedBit once evicted
}

// evictedBit marks Module.refs once the module left its Engine's cache.
const evictedBit = 1 << 62

// Hash returns the lowercase hex sha256 of the module's code.
func (m *Module) Hash() string { return m.hash }

// Size returns the size of the module's code in bytes.
func (m *Module) Size() int { return len(m.code) }

// touch records a use of m.
func (m *Module) touch() { m.used.Store(m.e.tick.Add(1)) }

// acquire counts a run of m, or returns false if m was evicted.
func (m *Module) acquire() bool {
	for {
		r := m.refs.Load()
		if r&evictedBit != 0 {
			return false
		}
		if m.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// release ends a run counted by acquire; the last run of an evicted module
// closes it.
func (m *Module) release() {
	if m.refs.Add(-1) == evictedBit {
		m.compiled.Close(context.Background())
	}
}

// evict marks m evicted, and closes it unless runs are under way.
func (m *Module) evict() {
	if m.markEvicted() {
		m.compiled.Close(context.Background())
	}
}

// markEvicted marks m evicted, and reports whether no run is under way:
// then the caller closes it, else the last run does.
func (m *Module) markEvicted() bool { return m.refs.Or(evictedBit) == 0 }

// runState is what one run needs besides the module, reused across runs.
type runState struct {
	in   bytes.Reader
	out  output
	errs tail
	mem  linearMemory
	rand hostRand
	// guard holds the run's context while it runs, for the host
	// functions that take none (hostcall.go).
	guard hostGuard
	cfg   wazero.ModuleConfig // Engine.base reading in, writing out and errs, with rand

	// The config of the last run, reused when the next has the same name
	// and env, as units of one operation do: each With* copies the config.
	lastName string
	lastEnv  map[string]string // a copy
	lastCfg  wazero.ModuleConfig
}

// config returns st.cfg with argv [name] and the environment env, or
// ErrBadEnv.
func (st *runState) config(name string, env map[string]string) (wazero.ModuleConfig, error) {
	if st.lastCfg != nil && name == st.lastName && maps.Equal(env, st.lastEnv) {
		return st.lastCfg, nil
	}
	cfg := st.cfg.WithArgs(name)
	if len(env) > 0 {
		keys := make([]string, 0, len(env))
		for k, v := range env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				return nil, fmt.Errorf("%w: %q", ErrBadEnv, k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			cfg = cfg.WithEnv(k, env[k])
		}
	}
	st.lastName, st.lastEnv, st.lastCfg = name, maps.Clone(env), cfg
	return cfg, nil
}

func (e *Engine) getState() *runState {
	if st, ok := e.pool.Get().(*runState); ok {
		return st
	}
	st := new(runState)
	st.rand.guard = &st.guard
	st.errs.guard = &st.guard
	st.cfg = e.base.WithStdin(&st.in).WithStdout(&st.out).WithStderr(&st.errs).WithRandSource(&st.rand)
	return st
}

func (e *Engine) putState(st *runState) {
	st.in.Reset(nil)
	st.out = output{}
	st.guard.ctx = nil
	st.mem.out = nil
	st.errs.reset()
	st.mem.recycle()
	e.pool.Put(st)
}

// Run runs the module once, as a new instance: stdin is its input, env its
// environment (NAME=VALUE each, sorted by name for determinism), and argv
// is [name]. It returns what the module wrote to stdout when it exits with
// code 0 (or returns from main); hand it to Recycle once done with it to
// save an allocation on later runs. Any other end returns a *RunError; a bad
// env returns ErrBadEnv and a closed Engine ErrClosed.
//
// If the module was evicted from its Engine (Config.MaxModules), Run
// compiles it again first.
func (m *Module) Run(ctx context.Context, name string, stdin []byte, env map[string]string, lim Limits) ([]byte, error) {
	return m.run(ctx, name, stdin, nil, env, lim)
}

// run is Run, with fsys (if not nil) mounted at FilesDir.
func (m *Module) run(ctx context.Context, name string, stdin []byte, fsys fs.FS, env map[string]string, lim Limits) ([]byte, error) {
	e := m.e
	if e.done.Load() {
		return nil, fmt.Errorf("wasm: run %s: %w", name, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, &RunError{Op: name, Reason: ReasonCanceled, Detail: context.Cause(ctx).Error(), err: err}
	}
	mod := m
	for !mod.acquire() {
		// Evicted: compile it again. Other runs may evict the new one
		// before we acquire it (MaxModules); then again. A closed
		// Engine fails compile.
		var err error
		if mod, err = e.compile(ctx, m.hash, m.code); err != nil {
			return nil, fmt.Errorf("wasm: run %s: %w", name, err)
		}
	}
	defer mod.release()
	mod.touch()

	lim = lim.withDefaults()
	in := inputCounted(len(stdin))
	if need := mod.memMin + mod.tableBytes + in; need > uint64(lim.Memory) {
		detail := fmt.Sprintf("limit %s, needs %s at start", formatBytes(lim.Memory), formatBytes(int64(need)))
		if mod.tableBytes >= pageSize {
			detail += fmt.Sprintf(": memory %s and tables of up to %s", formatBytes(int64(mod.memMin)), formatBytes(int64(mod.tableBytes)))
		}
		if note := inputNote(len(stdin)); note != "" {
			detail += "; " + note
		}
		return nil, &RunError{Op: name, Reason: ReasonMemory, Detail: detail}
	}
	st := e.getState()
	defer e.putState(st)
	cfg, err := st.config(name, env)
	if err != nil {
		return nil, fmt.Errorf("wasm: run %s: %w", name, err)
	}
	if mfs, ok := fsys.(*memFS); ok {
		mfs.guard = &st.guard
	}
	cfg = withFiles(cfg, fsys)

	runCtx, cancel := context.WithTimeoutCause(ctx, lim.Timeout, errTimeout)
	defer cancel()
	st.in.Reset(stdin)
	st.guard.ctx = runCtx
	memLimit := (uint64(lim.Memory) - mod.tableBytes - in) / pageSize * pageSize
	st.out = output{limit: lim.Output, cancel: cancel, guard: &st.guard, mem: &st.mem, memLimit: memLimit}
	st.mem.reset(memLimit)
	st.mem.out = &st.out
	ictx := experimental.WithMemoryAllocator(runCtx, &st.mem)

	inst, err := e.rt.InstantiateModule(ictx, mod.compiled, cfg)
	if inst != nil {
		inst.Close(ictx) // returned from _start without proc_exit
	}
	if e.done.Load() {
		// Closing the runtime ends a module as if it exited 0.
		return nil, fmt.Errorf("wasm: run %s: %w", name, ErrClosed)
	}
	if err == nil && !st.out.over && !st.out.memOver {
		out := st.out.buf
		st.out.buf = nil // the caller's now
		return out, nil
	}
	return nil, e.runError(ctx, runCtx, name, lim, len(stdin), st, err)
}

// inputCounted returns the bytes of a unit's input (stdin, which its
// files slice) that count toward Limits.Memory: the host holds them for
// the whole run, as it holds stdout's buffer, so beyond the same
// outputFree allowance they leave that much less for linear memory.
func inputCounted(n int) uint64 {
	return uint64(max(n-outputFree, 0))
}

// inputNote says, for a memory error, how much the unit's input counted.
func inputNote(n int) string {
	if inputCounted(n) == 0 {
		return ""
	}
	return fmt.Sprintf("the unit's input counts toward it: %s of input", formatBytes(int64(n)))
}

// runError explains why a run failed, err being what InstantiateModule
// returned. The checks go from the most to the least specific: a stop we
// caused (output, timeout), the caller's, then the module's own end.
func (e *Engine) runError(ctx, runCtx context.Context, name string, lim Limits, input int, st *runState, err error) error {
	re := &RunError{Op: name, Stderr: st.errs.String()}
	var exit *sys.ExitError
	var host *hostCallError
	inHost := errors.As(err, &host)
	switch {
	case st.out.over:
		re.Reason = ReasonOutput
		re.Detail = "limit " + formatBytes(lim.Output)
	case st.out.memOver:
		re.Reason = ReasonMemory
		re.Detail = fmt.Sprintf("limit %s, stdout's buffer counts toward it: %s written beside %s of linear memory",
			formatBytes(lim.Memory), formatBytes(int64(len(st.out.buf))), formatBytes(int64(st.out.memUsed())))
		if note := inputNote(input); note != "" {
			re.Detail += "; " + note
		}
	case errors.Is(context.Cause(runCtx), errTimeout):
		re.Reason = ReasonTimeout
		re.Detail = "limit " + lim.Timeout.String()
		if inHost {
			re.Detail += ", in a host call: " + host.Fn
		}
	case ctx.Err() != nil:
		re.Reason = ReasonCanceled
		re.err = ctx.Err()
		re.Detail = context.Cause(ctx).Error()
		if inHost {
			re.Detail += " (in a host call: " + host.Fn + ")"
		}
	case errors.Is(err, errBulkLate):
		re.Reason = ReasonTimeout
		re.Detail = "limit " + lim.Timeout.String() + ", stopped before a bulk instruction that would run past it"
	case errors.Is(err, ErrCallDepth):
		re.Reason = ReasonTrap
		re.Detail = strings.TrimPrefix(ErrCallDepth.Error(), "wasm: ")
	case st.mem.refused:
		re.Reason = ReasonMemory
		re.Detail = "limit " + formatBytes(lim.Memory)
		sep := ", "
		if n := len(st.out.buf); n > 0 {
			re.Detail += fmt.Sprintf(", with %s of stdout counted", formatBytes(int64(n)))
			sep = "; "
		}
		if note := inputNote(input); note != "" {
			re.Detail += sep + note
		}
	case errors.As(err, &exit):
		re.Reason = ReasonExit
		re.ExitCode = int(exit.ExitCode())
	default:
		re.Reason = ReasonTrap
		re.Detail = trapDetail(err)
	}
	return re
}

// trapDetail shortens wazero's error to its message: "module[] function[_start]
// failed: wasm error: unreachable\nwasm stack trace: ..." gives
// "wasm error: unreachable".
func trapDetail(err error) string {
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, "] failed: "); ok {
		msg = after
	}
	msg, _, _ = strings.Cut(msg, "\n")
	return msg
}
