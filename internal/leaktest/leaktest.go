// Package leaktest fails a test binary that leaves braid goroutines
// running after its tests.
package leaktest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs the tests, then fails the run if goroutines started by braid
// code are still alive after wait.
//
//	func TestMain(m *testing.M) { leaktest.Main(m, time.Second) }
func Main(m *testing.M, wait time.Duration) {
	code := m.Run()
	if code == 0 {
		if leaked := Leaked(wait); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// Leaked waits up to wait for goroutines running braid code to end and
// describes those that remain.
func Leaked(wait time.Duration) string {
	var leaked []string
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = leaked[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "braid-hpc/braid/") && !strings.Contains(g, "leaktest.") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
	}
}
