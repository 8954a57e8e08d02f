// Package wasm runs user operations as sandboxed WebAssembly modules.
//
// An operation is a WASI preview 1 command module (for example C built with
// `clang --target=wasm32-wasi`, Rust for wasm32-wasip1, TinyGo with
// -target=wasi), run with wazero, a pure Go runtime that compiles it to
// machine code once and instantiates it afresh for every unit.
//
//	eng, err := wasm.NewEngine(wasm.Config{})
//	mod, err := eng.Compile(ctx, code)          // once per sha256
//	out, err := mod.Run(ctx, "wordcount", in, env, wasm.Limits{Timeout: 2 * time.Second})
//
// # Contract
//
// A run gives the module the unit's input on stdin (then EOF), the
// environment env (NAME=VALUE, sorted by name) and argv = [name]. What it
// writes to stdout is the output. It succeeds when it exits with code 0 (or
// returns 0 from main); stderr is kept only for diagnostics: its last 2 KiB
// go into the RunError of a failed run, except for a Go program's crash
// (out of memory, panic), whose message is kept and its goroutine dump
// left out (gocrash.go). Every run is a new instance with
// fresh memory: nothing carries over from one unit to the next.
//
// # Sandbox
//
// A module sees only what WASI preview 1 gives it, and of that:
//   - stdin, stdout and stderr as above;
//   - its arguments and environment, exactly as given;
//   - the wall clock and a monotonic clock (clock_time_get) and
//     cryptographically random bytes (random_get);
//   - no files: nothing is preopened, so path_open fails (ENOTCAPABLE or
//     EBADF) and a module cannot read or write the host's filesystem;
//     RunFiles alone preopens FilesDir (/in), a read-only directory of
//     the files it is given, in memory;
//   - no network: no sockets are preopened;
//   - sleeping (poll_oneoff on a clock) returns at once.
//
// Only functions of "wasi_snapshot_preview1" can be imported; Validate and
// Compile refuse a module that imports anything else (such as "env"), that
// has no "_start" (a reactor or library), or that exports no memory, with an
// error wrapping ErrBadModule.
//
// # Limits
//
// Each run is bounded by its Limits; a zero field means its default:
//
//	Memory   DefaultMemory  (256 MiB)  linear memory and tables; memory.grow past it fails (malloc returns NULL)
//	Timeout  DefaultTimeout (1 min)    wall clock; the module is stopped within 65536 loop iterations or calls, and before a bulk instruction that would pass it
//	Output   DefaultOutput  (256 MiB)  stdout; a write past it fails and the module is stopped
//
// On Linux, linear memory is a region of address space reserved once per
// pooled run state (MaxMemory, with no access) and made writable as the
// module grows it: a grow never moves or copies it, so the host holds only
// the pages the module touched. Elsewhere it is a Go slice that doubles (a
// grow copies: up to 1.5 times Limits.Memory for a moment). Either way a
// small memory is reused, zeroed, by later runs. Tables are bounded to
// MaxTableEntries each and their maxima count toward Limits.Memory at 16
// bytes an entry. Apart from them, wazero grows a run's call stack on the
// Go heap; the rewrite counts each call's frame by a bound of what wazero
// may give it (every value the function defines, phis included: wazero
// spills each to a slot of its own), so that the stack stays under
// MaxStack (32 MiB) and what wazero allocates for it under StackReserve
// (depth.go). A run whose stack would pass it fails with "call stack
// limit of 32 MiB exceeded", and a function whose frame alone may pass
// MaxFrame (1 MiB) is refused at Validate and Compile.
//
// Compile rewrites each module so that it stops itself: every loop
// header and function entry counts down a counter, every bulk memory and
// table instruction is charged to it by its length, and every 65536
// counts (or before a bulk instruction longer than what is left) the
// module calls back into Go, which stops the run once its time is up,
// its ctx ended or the Engine closed, or when the bulk instruction would
// not end before the deadline at 1 GB/s (see interrupt.go). That costs a few
// instructions per loop iteration, where wazero's WithCloseOnContextDone
// left the machine code for Go at every one (5-7x slower on loops), and
// the call back is also where the Go scheduler can preempt the run.
//
// # Compile limits
//
// wazero's compiler takes time that grows with the square of a function's
// blocks and branches, and faster than the number of its phis. Validate
// and Compile refuse, with ErrBadModule naming the limit, a module beyond
// the limits of limits.go (code size, functions, function size, locals,
// nesting, br_table targets, branch weight, the frame of a function, the
// phis of the whole module, globals, tables); a compilation runs under
// Config.CompileTimeout, after which it stops between two functions and
// the module is refused with ErrCompileTimeout.
//
// A run that ends otherwise than by exit code 0 returns a *RunError whose
// Reason says why: ReasonExit (non-zero exit code), ReasonTrap (unreachable,
// out-of-bounds access, division by zero, stack overflow, ...),
// ReasonTimeout, ReasonMemory (the module failed after a refused
// memory.grow, or starts with more memory than the limit), ReasonOutput, or
// ReasonCanceled when the caller's ctx ended (only this one unwraps to the
// ctx's error). A module that survives a refused memory.grow and exits 0
// succeeds. No run can harm the Engine or other runs.
//
// # Engine
//
// An Engine keeps one wazero runtime and up to Config.MaxModules compiled
// modules by the sha256 of their code, and up to Config.MaxCompiledBytes of
// their machine code (estimated from their size, which it is proportional
// to), evicting the least recently used;
// with Config.CacheDir the machine code also survives restarts on disk.
// Compile, Lookup and Run are safe for concurrent use; concurrent Compiles of
// the same code compile once. Close the Engine when nothing runs. The only
// lock, Engine.mu, guards the module map and is never held while compiling
// or running.
//
// A run instantiates the compiled module afresh (a command cannot be entered
// twice), with stdio, memory and config reused from a pool, and its stdout
// buffer too when the caller hands it back with Recycle: on a small unit it
// costs some 30 µs of CPU (BenchmarkRunCat).
package wasm
