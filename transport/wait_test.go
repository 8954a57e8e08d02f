package transport

import (
	"testing"
	"time"
)

// waitFor is the one way the tests of this package wait for something
// that happens on its own (a path coming up, data in flight, a channel
// handshaking): it polls cond every few milliseconds and fails the test,
// naming what, if cond does not hold within d. Tests whose waits are on
// timers only use testing/synctest instead.
func waitFor(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
