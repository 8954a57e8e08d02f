// Package testwait is the one way braid's tests wait for something that
// happens on its own (a path coming up, a registration, goroutines ending):
// poll a condition, and fail the test naming what did not happen. Waits on
// timers alone use testing/synctest instead.
package testwait

import (
	"testing"
	"time"
)

// First and Most bound the pause between two polls: it starts at First and
// doubles up to Most, so that a condition that holds soon is seen soon,
// and one that is costly to check (an HTTP scrape, a command run) is not
// checked hundreds of times a second through a long wait, loading the
// very system the test waits on.
const (
	First = 5 * time.Millisecond
	Most  = 50 * time.Millisecond
)

// For polls cond until it holds, and fails the test, naming what, if it
// does not within d.
func For(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	if !Until(d, cond) {
		tb.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Until polls cond until it holds or d has passed, and reports whether it
// held: for a caller that reports the failure itself, with what it found.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for pause := First; !cond(); pause = min(2*pause, Most) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}
