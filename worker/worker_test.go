package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/transport"
)

var testKey = []byte("worker-test-cluster-key-0123456789")

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		msg  string
	}{
		{"no server", Config{Key: testKey}, "no server"},
		{"no key", Config{Servers: []string{"http://x"}}, "Key is empty"},
		{"negative threads", Config{Servers: []string{"http://x"}, Key: testKey, Threads: -1}, "negative"},
		{"wildcard", Config{Servers: []string{"http://x"}, Key: testKey, Listen: []string{"0.0.0.0:0"}}, "wildcard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = quiet()
			w, err := New(tt.cfg)
			if err == nil {
				w.ln.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("New: %v, want an error saying %q", err, tt.msg)
			}
		})
	}
}

func TestChanged(t *testing.T) {
	a := api.Register{Name: "n", Addresses: []string{"a:1"}, Cores: 4, Memory: 8 << 30, Disk: 100 << 30, CPUMHz: 3000, Threads: 4, Ops: []string{"blur"}}
	b := a
	b.Disk = a.Disk * 102 / 100
	b.CPUMHz = 2900
	if changed(a, b) {
		t.Error("small drifts of disk and frequency count as a change")
	}
	for _, mod := range []func(*api.Register){
		func(r *api.Register) { r.Threads = 5 },
		func(r *api.Register) { r.Ops = []string{"blur", "noop"} },
		func(r *api.Register) { r.Disk = a.Disk / 2 },
		func(r *api.Register) { r.Addresses = []string{"b:1"} },
	} {
		c := a
		mod(&c)
		if !changed(a, c) {
			t.Errorf("%+v: change not seen", c)
		}
	}
}

// startWorker runs a worker whose server never answers (registration keeps
// retrying), so that a test can talk to its data plane directly.
func startWorker(t *testing.T, threads int, reg *ops.Registry) *Worker {
	t.Helper()
	w, err := New(Config{Servers: []string{"http://127.0.0.1:1"}, Key: testKey, Threads: threads, Ops: reg,
		Name: "test", Logger: quiet(), RetryInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runForTest(t, w)
	return w
}

// runForTest runs w until the end of the test, and fails the test if it
// does not stop within 10s of it.
func runForTest(t *testing.T, w *Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("worker did not stop")
		}
	})
}

func dial(t *testing.T, w *Worker, key []byte) (*transport.Session, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var paths []transport.Path
	for _, a := range w.Addrs() {
		paths = append(paths, transport.Path{Remote: a})
	}
	sess, err := transport.Dial(ctx, paths, &transport.Config{Key: key, Logger: quiet()})
	if err == nil {
		t.Cleanup(func() { sess.Close() })
	}
	return sess, err
}

// call sends u on st and returns the result.
func call(t *testing.T, st *transport.Stream, u api.Unit) api.Result {
	t.Helper()
	b, _ := u.MarshalBinary()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := st.WriteMessage(ctx, b); err != nil {
		t.Fatal(err)
	}
	m, err := st.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r api.Result
	if err := r.UnmarshalBinary(m); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDataPlane: units run and come back on their stream with their ID;
// an operation the worker lacks and a failing unit get error results; a
// figures request gets the figures; a server with another key is refused.
func TestDataPlane(t *testing.T) {
	w := startWorker(t, 2, ops.NewRegistry(ops.Noop(), ops.Sleep()))
	if _, err := dial(t, w, []byte("another cluster key entirely")); !errors.Is(err, transport.ErrAuth) {
		t.Errorf("dial with another key: %v, want ErrAuth", err)
	}
	sess, err := dial(t, w, testKey)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sess.OpenStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r := call(t, st, api.Unit{Job: 7, ID: 3, Attempt: 2, Op: "noop", Inputs: [][]byte{[]byte("payload")}})
	if r.Job != 7 || r.ID != 3 || r.Attempt != 2 || r.Err != "" || string(r.Output) != "payload" || r.ComputeNanos <= 0 {
		t.Errorf("noop result %+v", r)
	}
	r = call(t, st, api.Unit{Job: 7, ID: 4, Attempt: 1, Op: "blur", Inputs: [][]byte{nil}})
	if !strings.Contains(r.Err, `does not run operation "blur" (it runs noop, sleep, wasm)`) {
		t.Errorf("unknown op: %+v", r)
	}
	r = call(t, st, api.Unit{Job: 7, ID: 5, Attempt: 1, Op: "sleep", Params: map[string]string{"ms": "1", "fail": "0", "unit": "0"}})
	if r.Err != "sleep: unit 0 fails as the job asked (parameter fail)" {
		t.Errorf("failing unit: %q", r.Err)
	}
	r = call(t, st, api.Unit{ID: 1, Attempt: 1, Op: api.OpFigures})
	var fig api.Register
	if err := json.Unmarshal(r.Output, &fig); err != nil || fig.Threads != 2 || fig.Name != "test" || !slices.Equal(fig.Ops, []string{"noop", "sleep", api.ModuleOps}) || fig.Cores < 1 {
		t.Errorf("figures: %s, %v", r.Output, err)
	}
	if s := w.Stats(); s.Units != 2 || s.Failed != 2 || s.Sessions != 1 || s.Streams != 1 {
		t.Errorf("stats %+v", s)
	}
}

// holdOp is sleep with units that run until the test releases them, and
// count how many run at once.
type holdOp struct {
	ops.Op
	started chan struct{} // one value per unit that began
	release chan struct{} // one value lets one unit end
	active  atomic.Int32
	peak    atomic.Int32
}

func newHoldOp() *holdOp {
	return &holdOp{Op: ops.Sleep(), started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *holdOp) Name() string { return "hold" }

func (h *holdOp) Run(ctx context.Context, _ map[string]string, _ [][]byte) ([]byte, error) {
	n := h.active.Add(1)
	defer h.active.Add(-1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	h.started <- struct{}{}
	select {
	case <-h.release:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestThreadsGate: a worker lending one thread runs one unit at a time
// even when two streams have units; lending two, both run at once. The
// units run until released, so nothing depends on how long they take:
// with one thread the second unit is seen waiting at the gate while the
// first runs; with two, both are seen running. Checked by hand: a gate
// that lets every unit through fails the one-thread half (peak 2), one
// that ignores SetThreads fails the two-thread half.
func TestThreadsGate(t *testing.T) {
	hold := newHoldOp()
	w := startWorker(t, 1, ops.NewRegistry(hold))
	sess, err := dial(t, w, testKey)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() {
		if !t.Failed() {
			return
		}
		// On a failure, let the units end so that the calls return.
		for range 2 {
			select {
			case hold.release <- struct{}{}:
			case <-time.After(time.Second):
			}
		}
		wg.Wait()
	}()
	both := func() {
		for i := range 2 {
			st, err := sess.OpenStream(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				r := call(t, st, api.Unit{Job: 1, ID: uint64(i), Attempt: 1, Op: "hold"})
				if r.Err != "" {
					t.Error(r.Err)
				}
			})
		}
	}
	started := func(what string) {
		t.Helper()
		select {
		case <-hold.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
	}

	both()
	started("a unit to run on the one thread")
	testwait.ForBlocked(t, "the other unit to wait for the thread", 10*time.Second, "worker.(*gate).acquire")
	if n, s := hold.active.Load(), w.Stats(); n != 1 || s.Running != 1 {
		t.Fatalf("one thread: %d units running (stats: %d)", n, s.Running)
	}
	hold.release <- struct{}{}
	started("the second unit once the first ended")
	hold.release <- struct{}{}
	wg.Wait()
	if p := hold.peak.Load(); p != 1 {
		t.Fatalf("one thread ran %d units at once", p)
	}

	if err := w.SetThreads(2); err != nil {
		t.Fatal(err)
	}
	both()
	started("the first of two units on two threads")
	started("the second of two units on two threads, while the first runs")
	if p := hold.peak.Load(); p != 2 {
		t.Errorf("two threads ran at most %d units at once", p)
	}
	hold.release <- struct{}{}
	hold.release <- struct{}{}
	wg.Wait()
	if s := w.Stats(); s.ComputeFraction() <= 0 || s.Threads != 2 || s.Units != 4 {
		t.Errorf("stats %+v", s)
	}
}
