package wasm

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrBadModule means the code is not a WASI preview 1 command module this
// package can run: not a valid WebAssembly binary, no "_start" or no exported
// memory, or an import other than a function of "wasi_snapshot_preview1".
// Validate and Compile wrap it with the reason; rebuild the module for
// wasm32-wasi (preview 1) as a command, with nothing imported from "env".
var ErrBadModule = errors.New("wasm: not a WASI preview 1 command module")

// ErrCompileTimeout means a module took longer to compile than the
// Engine's Config.CompileTimeout, and was refused. It is a property of the
// module (and the machine): compiling it again takes as long.
var ErrCompileTimeout = errors.New("wasm: compilation took too long")

// ErrClosed is returned by Compile and Run once the Engine is closed; make a
// new Engine.
var ErrClosed = errors.New("wasm: engine closed")

// ErrBadEnv is returned by Run for an environment variable WASI cannot
// carry: an empty name, a name with '=', or a NUL byte in the name or value.
var ErrBadEnv = errors.New("wasm: invalid environment variable")

// Reason says why a run failed.
type Reason string

// The reasons of a RunError.
const (
	ReasonExit     Reason = "exit"     // exited with a non-zero code
	ReasonTrap     Reason = "trap"     // unreachable, out-of-bounds access, division by zero, stack overflow...
	ReasonTimeout  Reason = "timeout"  // ran past Limits.Timeout
	ReasonMemory   Reason = "memory"   // needed more linear memory than Limits.Memory
	ReasonOutput   Reason = "output"   // wrote more than Limits.Output to stdout
	ReasonCanceled Reason = "canceled" // the caller's ctx ended (not a fault of the module)
)

// RunError is why a run failed. Only a RunError with ReasonCanceled unwraps:
// to the ctx's error (context.Canceled or context.DeadlineExceeded), so
// errors.Is(err, context.Canceled) is true only when the caller canceled.
type RunError struct {
	Op       string // the name passed to Run
	Reason   Reason
	ExitCode int    // for ReasonExit
	Detail   string // e.g. the trap message, "limit 64 MiB", "limit 2s", "limit 32 MiB, needs 40 MiB at start"
	Stderr   string // the last <= 2 KiB the module wrote to stderr, valid UTF-8 (invalid bytes replaced)

	err error // what Unwrap returns: the ctx's error for ReasonCanceled, else nil
}

// stderrInError bounds how much of Stderr Error repeats.
const stderrInError = 512

// Error implements error, e.g. `wordcount: exit code 3; stderr: "bad line 7"`.
func (e *RunError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	// Limits come as "limit 64 MiB", maybe followed by ", more".
	limit, more, _ := strings.Cut(strings.TrimPrefix(e.Detail, "limit "), ", ")
	switch e.Reason {
	case ReasonExit:
		fmt.Fprintf(&b, "exit code %d", e.ExitCode)
	case ReasonTrap:
		b.WriteString("trap: ")
		b.WriteString(e.Detail)
	case ReasonTimeout:
		b.WriteString("timed out after ")
		b.WriteString(limit)
		if more != "" {
			fmt.Fprintf(&b, " (%s)", more)
		}
	case ReasonMemory:
		fmt.Fprintf(&b, "memory limit of %s reached", limit)
		if more != "" {
			fmt.Fprintf(&b, " (%s)", more)
		}
	case ReasonOutput:
		fmt.Fprintf(&b, "wrote more than %s to stdout (the unit output cap)", limit)
	case ReasonCanceled:
		b.WriteString("canceled")
		if e.Detail != "" {
			b.WriteString(": ")
			b.WriteString(e.Detail)
		}
	default:
		b.WriteString(string(e.Reason))
		if e.Detail != "" {
			b.WriteString(": ")
			b.WriteString(e.Detail)
		}
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		if len(s) > stderrInError {
			s = "..." + validTail(s, stderrInError)
		}
		fmt.Fprintf(&b, "; stderr: %q", s)
	}
	return b.String()
}

// Unwrap returns the ctx's error for ReasonCanceled and nil otherwise.
func (e *RunError) Unwrap() error { return e.err }

// validTail returns the last at most n bytes of s, starting on a rune
// boundary, with invalid UTF-8 replaced by U+FFFD.
func validTail(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
		// Drop the continuation bytes of a rune cut in two.
		for i := 0; i < utf8.UTFMax-1 && len(s) > 0 && !utf8.RuneStart(s[0]); i++ {
			s = s[1:]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// formatBytes writes n as "64 MiB", "1.5 MiB", "512 KiB" or "100 bytes".
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
