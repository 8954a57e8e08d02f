package wasm

import (
	"context"
	"crypto/rand"
	"fmt"
)

// Host calls are bounded by the run's deadline. The countdown
// (interrupt.go) stops wasm code, but a WASI function runs in Go, where
// the countdown never looks: one random_get of 128 MiB takes about a
// second, and one fd_write of 5,000 iovecs of 128 MiB each hands the
// host 640 GB to look at. So every host function a unit can call does
// bounded work between checks of the run's context, and stops the run
// (a panic, which wazero turns into the call's error, as braid.tick
// does) once the context is done: the run then fails with ReasonTimeout
// ("timed out after 2s (in a host call: random_get)") or ReasonCanceled.
// A run stops within hostChunk bytes of work, some tens of microseconds,
// after its deadline.
//
// The WASI functions wazero gives a unit (Engine.base: no sockets, real
// clocks, no sleep), and what bounds each:
//   - random_get: hostRand, hostChunk bytes between checks.
//   - fd_write, fd_pwrite: stdout (output.Write) checks first and copies
//     at most Limits.Output bytes in all, in chunks; stderr (tail.Write)
//     checks every hostChunk bytes it scans; the preopened FilesDir is
//     read-only, so a write there fails at once.
//   - fd_read, fd_pread: stdin is bounded by the input's size (the reader
//     advances); a file of FilesDir checks before every read (memFile),
//     as 5,000 iovecs preading one large file would copy it 5,000 times.
//   - poll_oneoff: wazero sleeps through sys.Nanosleep, which braid never
//     sets, so a clock subscription of any length returns at once; a
//     stdin subscription is always ready (stdin is in memory).
//   - sched_yield: does nothing. clock_time_get, clock_res_get: read a
//     clock.
//   - args_*, environ_*, fd_prestat_*, fd_fdstat_*, fd_filestat_get,
//     path_filestat_get, path_open, fd_readdir, fd_seek, fd_tell,
//     fd_close: bounded by the few names and files a run has.
//   - proc_exit: ends the run. Everything else wazero exports fails at
//     once (ENOSYS, EBADF or EPERM: no sockets, no writable files).

// hostChunk is how many bytes a host function handles between checks of
// the run's context: at 1-10 GB/s, 6-60 µs.
const hostChunk = 64 << 10

// hostCallError stops a run from inside a host function whose run's
// context is done; Err is the context's cause.
type hostCallError struct {
	Fn  string // e.g. "random_get", "fd_write to stderr"
	Err error
}

func (e *hostCallError) Error() string {
	return fmt.Sprintf("wasm: stopped in a host call (%s): %v", e.Fn, e.Err)
}

func (e *hostCallError) Unwrap() error { return e.Err }

// hostGuard is the context of one run, for the host functions that wazero
// calls through io.Reader and io.Writer, which take none. The run sets it
// before it starts and clears it after; zero checks nothing.
type hostGuard struct {
	ctx context.Context
}

// check stops the run, by panicking with a *hostCallError, once its
// context is done.
func (g *hostGuard) check(fn string) {
	if g == nil || g.ctx == nil {
		return
	}
	if g.ctx.Err() != nil {
		panic(&hostCallError{Fn: fn, Err: context.Cause(g.ctx)})
	}
}

// hostRand is the run's random_get source: crypto/rand, hostChunk bytes
// at a time, checking the run's context before each.
type hostRand struct {
	guard *hostGuard
}

func (r *hostRand) Read(p []byte) (int, error) {
	r.guard.check("random_get")
	n := min(len(p), hostChunk)
	return rand.Read(p[:n])
}
