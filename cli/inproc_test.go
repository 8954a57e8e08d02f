package cli

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/syncbuf"
	"github.com/braid-hpc/braid/internal/testwait"
)

// testKey is the cluster key of the in-process tests.
const testKey = "cli-test-cluster-key-0123456789"

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer

// bg is a braid command running in the background.
type bg struct {
	out, err syncBuffer
	cancel   context.CancelFunc
	done     chan int
}

// start runs braid with args in the background; the test's cleanup
// interrupts it and waits for it.
func start(t testing.TB, args ...string) *bg {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &bg{cancel: cancel, done: make(chan int, 1)}
	go func() { b.done <- Run(ctx, args, &b.out, &b.err) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			t.Errorf("braid %s did not stop within 10s of its interrupt", strings.Join(args, " "))
		}
	})
	return b
}

// wait waits for the command to exit by itself and returns its exit code.
func (b *bg) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case code := <-b.done:
		b.done <- code // for the cleanup
		return code
	case <-time.After(d):
		t.Fatalf("command still running after %v; stdout:\n%s\nstderr:\n%s", d, b.out.String(), b.err.String())
		return -1
	}
}

// listening waits for the "listening on A,B" line of a server and returns
// its addresses.
func (b *bg) listening(t testing.TB) string {
	t.Helper()
	var addrs string
	if !testwait.Until(10*time.Second, func() bool {
		for _, line := range strings.Split(b.out.String(), "\n") {
			if _, rest, ok := strings.Cut(line, "listening on "); ok {
				addrs, _, _ = strings.Cut(rest, " ")
				return true
			}
		}
		select {
		case code := <-b.done:
			b.done <- code
			t.Fatalf("server exited with %d before listening: %s", code, b.err.String())
		default:
		}
		return false
	}) {
		t.Fatalf("server not listening after 10s: %s", b.err.String())
	}
	return strings.TrimSuffix(addrs, ",")
}

// runCmd runs braid with args to completion within d.
func runCmd(t testing.TB, d time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb syncBuffer
	code = Run(ctx, args, &out, &errb)
	if ctx.Err() != nil {
		t.Fatalf("braid %s: still running after %v", strings.Join(args, " "), d)
	}
	return code, out.String(), errb.String()
}

// checkLeaks fails the test if goroutines of the transport or of the
// commands outlive it.
func checkLeaks(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		var leaked []string
		if !testwait.Until(5*time.Second, func() bool {
			leaked = leakedGoroutines()
			return len(leaked) == 0
		}) {
			t.Errorf("%d goroutines leaked, e.g.:\n%s", len(leaked), leaked[0])
		}
	})
}

func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*T).Run") {
			continue
		}
		if strings.Contains(g, "braid-hpc/braid/transport") || strings.Contains(g, "braid-hpc/braid/cli.") {
			out = append(out, g)
		}
	}
	return out
}
