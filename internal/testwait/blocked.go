package testwait

import (
	"bytes"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Blocked reports whether some goroutine is parked in fn (see Parked).
//
// It lets a test know that a call is blocked before it does what must
// wake it (Close, a release), instead of sleeping and hoping: a goroutine
// parked inside fn cannot be about to enter it.
func Blocked(fn string) bool { return Parked(fn) > 0 }

// Parked counts the goroutines that are parked (waiting on a channel, a
// lock, a condition, the network poller or a system call; not running or
// runnable) with a frame of function fn on their stack; fn is matched as a
// substring of the qualified name, e.g. "worker.(*gate).acquire".
func Parked(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		if len(buf) >= 64<<20 {
			break // a truncated dump: the goroutines it shows still count
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		header, frames, _ := bytes.Cut(g, []byte("\n"))
		// "goroutine 7 [chan receive, 2 minutes]:"
		_, state, ok := bytes.Cut(header, []byte(" ["))
		if !ok {
			continue
		}
		if s := string(state); strings.HasPrefix(s, "running") || strings.HasPrefix(s, "runnable") {
			continue
		}
		for line := range bytes.SplitSeq(frames, []byte("\n")) {
			if !bytes.HasPrefix(line, []byte("\t")) && bytes.Contains(line, []byte(fn+"(")) {
				count++
				break
			}
		}
	}
	return count
}

// ForBlocked waits until a goroutine is parked in fn (see Blocked), and
// fails the test, naming what, if none is within d.
func ForBlocked(tb testing.TB, what string, d time.Duration, fn string) {
	tb.Helper()
	For(tb, what+" (a goroutine parked in "+fn+")", d, func() bool { return Blocked(fn) })
}

// ParkedRead and ParkedWrite call io.ReadFull or Write from a frame of
// their own, "testwait.ParkedRead" and "testwait.ParkedWrite", for a test
// to wait on with Blocked or Parked before it closes what they block on.
//
//go:noinline
func ParkedRead(r io.Reader, b []byte) error {
	_, err := io.ReadFull(r, b)
	return err
}

// ParkedWrite: see ParkedRead.
//
//go:noinline
func ParkedWrite(w io.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}
