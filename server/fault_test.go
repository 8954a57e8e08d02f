package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/testbed/relay"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/worker"
)

// slowOp runs an operation after a pause, so that a test can act while
// a job is half done.
type slowOp struct {
	ops.Op
	d time.Duration
}

func (s slowOp) Run(ctx context.Context, params map[string]string, inputs [][]byte) ([]byte, error) {
	t := time.NewTimer(s.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	return s.Op.Run(ctx, params, inputs)
}

// slowBlur is a worker registry whose blur takes d longer per unit.
func slowBlur(d time.Duration) func(*worker.Config) {
	return func(cfg *worker.Config) { cfg.Ops = ops.NewRegistry(slowOp{ops.Blur(), d}) }
}

// waitDone waits until a job has at least n units done.
func (c *cluster) waitDone(id uint64, n int) api.JobStatus {
	c.t.Helper()
	var st api.JobStatus
	if !testwait.Until(15*time.Second, func() bool {
		var err error
		st, err = c.c.Status(context.Background(), id)
		if err != nil {
			c.t.Fatal(err)
		}
		return st.Units.Done >= n || st.State.Final()
	}) {
		c.t.Fatalf("job %d: %d units done after 15s, want %d", id, st.Units.Done, n)
	}
	return st
}

// checkExactlyOnce opens the stopped server's store and checks that every
// unit of the job is done with one result, and that the workers still
// registered were credited with at most one result per unit (exactly one
// if none deregistered).
func checkExactlyOnce(t *testing.T, dir string, job uint64, allRegistered bool) {
	t.Helper()
	db, err := store.OpenMeta(t.Context(), "sqlite:"+filepath.Join(dir, "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	j, err := db.Job(t.Context(), job)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.JobDone || j.Done != j.Total || j.Running != 0 || j.Failed != 0 {
		t.Errorf("stored job: %s, %d of %d done, %d running, %d failed", j.State, j.Done, j.Total, j.Running, j.Failed)
	}
	units, err := db.Units(t.Context(), job)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		if u.State != store.UnitDone || u.Result == "" {
			t.Errorf("unit %d: %s, result %q", u.ID, u.State, u.Result)
		}
	}
	ws, err := db.Workers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var credited uint64
	for _, w := range ws {
		credited += w.Done
	}
	if credited > uint64(j.Total) || allRegistered && credited != uint64(j.Total) {
		t.Errorf("workers credited with %d results for %d units", credited, j.Total)
	}
}

// TestCorruptImage: an image whose header is sound but whose pixels are
// not fails its unit on the worker, and the job's error names the unit
// and the cause.
func TestCorruptImage(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(1, nil)
	c.waitWorkers(1)
	img := ops.SamplePNG(64, 64)
	st := c.run(api.JobRequest{Op: "blur", Input: c.put(img[:len(img)/2])})
	if st.State != api.JobFailed {
		t.Fatalf("job is %s, want failed", st.State)
	}
	for _, want := range []string{"unit 0 failed on worker w1", "blur: corrupt png image"} {
		if !strings.Contains(st.Error, want) {
			t.Errorf("error %q does not say %q", st.Error, want)
		}
	}
	if st.Output != "" || st.Timings.Finished.IsZero() {
		t.Errorf("failed job: output %q, finished %v", st.Output, st.Timings.Finished)
	}
}

// TestUnitFails: a unit whose operation fails runs again, up to the
// job's tries (counted in the status), then fails the job, naming the
// unit, the worker, the tries and the cause; the other units stop being
// sent.
func TestUnitFails(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	st := c.run(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 20, MaxTries: 2,
		Params: map[string]string{"ms": "5", "fail": "3"}})
	if st.State != api.JobFailed || !strings.Contains(st.Error, "unit 3 failed on worker w1 (try 2 of 2): sleep: unit 3 fails as the job asked") {
		t.Errorf("job %s: %q", st.State, st.Error)
	}
	if st.Units.Retries != 1 {
		t.Errorf("retries %d, want 1", st.Units.Retries)
	}
	// The finished job's status (from the store) lists the unit's tries.
	if st.Units.Retried != 1 || len(st.RetriedUnits) != 1 {
		t.Fatalf("retried units: %d, %+v; want unit 3 alone", st.Units.Retried, st.RetriedUnits)
	}
	if u := st.RetriedUnits[0]; u.Unit != 3 || u.Failed != 2 || u.Lost != 0 || !strings.Contains(u.Error, "sleep: unit 3 fails as the job asked") {
		t.Errorf("unit tries %+v; want unit 3 with 2 failed tries and the operation's error", u)
	}
	if st.Units.Done >= 20 {
		t.Errorf("%d units done after the failure", st.Units.Done)
	}
	// One try: no retry.
	st = c.run(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 4, MaxTries: 1,
		Params: map[string]string{"fail": "0"}})
	if st.State != api.JobFailed || !strings.Contains(st.Error, "unit 0 failed on worker w1: sleep") || st.Units.Retries != 0 {
		t.Errorf("one try: job %s, %d retries: %q", st.State, st.Units.Retries, st.Error)
	}
}

// TestCancel: a canceled job stops; canceling again is a conflict.
func TestCancel(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(1, nil)
	c.waitWorkers(1)
	st := c.submit(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 50, Params: map[string]string{"ms": "20"}})
	c.waitDone(st.Job, 1)
	got, err := c.c.Cancel(t.Context(), st.Job)
	if err != nil || got.State != api.JobCanceled || got.Error != "canceled by a client" {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	if _, err := c.c.Cancel(t.Context(), st.Job); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "already canceled") {
		t.Errorf("second cancel: %v", err)
	}
	// The worker is free for the next job.
	st = c.run(api.JobRequest{Op: "noop", Input: c.put([]byte("after"))})
	if st.State != api.JobDone {
		t.Errorf("next job %s: %s", st.State, st.Error)
	}
}

// TestCancelDropsWorkersUnits: canceling a job whose long units fill a
// worker's thread and queue frees the worker at once: the server tells
// it to drop the job's units (api.OpDrop), it empties its queue and
// interrupts the running unit, and the next job runs. Each of the 17
// units held would take a minute: without the drop, the worker's queue
// stays full and the next job does not finish within c.wait's 20s (the
// test failed so before the drop request existed).
func TestCancelDropsWorkersUnits(t *testing.T) {
	c := newCluster(t, nil)
	tw := c.addWorker(1, nil)
	c.waitWorkers(1)
	st := c.submit(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 40, Params: map[string]string{"ms": "60000"}})
	testwait.For(t, "the worker to run one unit with more queued", 20*time.Second, func() bool {
		s := tw.w.Stats()
		return s.Running == 1 && s.Queued > 0
	})
	if _, err := c.c.Cancel(t.Context(), st.Job); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the worker to drop the canceled job's units", 20*time.Second, func() bool {
		s := tw.w.Stats()
		return s.Running == 0 && s.Queued == 0
	})
	if next := c.run(api.JobRequest{Op: "noop", Input: c.put([]byte("next"))}); next.State != api.JobDone {
		t.Errorf("next job %s: %s", next.State, next.Error)
	}
}

// TestWrongKey: a worker with another cluster key is rejected with a
// clear error, and the server keeps serving.
func TestWrongKey(t *testing.T) {
	c := newCluster(t, nil)
	bad := c.addWorker(1, func(cfg *worker.Config) { cfg.Key = []byte("not the cluster key at all") })
	select {
	case err := <-bad.done:
		bad.done <- err
		if err == nil || !strings.Contains(err.Error(), "cluster key differs") {
			t.Errorf("worker with the wrong key: Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker with the wrong key still running after 10s")
	}

	// A registration that holds the HTTP token but whose data plane
	// expects another key: the server cannot open the session.
	ln, err := transport.Listen(t.Context(), []string{"127.0.0.1:0"},
		&transport.Config{Key: []byte("the worker's own wrong key"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = c.c.Register(t.Context(), api.Register{Addresses: []string{ln.Addrs()[0].String()}, Threads: 1, Ops: []string{"blur"}})
	if client.StatusOf(err) != 403 || !strings.Contains(err.Error(), "cannot authenticate to the worker's data plane") ||
		!strings.Contains(err.Error(), "same cluster key") {
		t.Errorf("registering a data plane with another key: %v", err)
	}

	// The server still works.
	c.addWorker(1, nil)
	c.waitWorkers(1)
	if st := c.run(api.JobRequest{Op: "noop", Input: c.put([]byte("still serving"))}); st.State != api.JobDone {
		t.Errorf("job after the rejections: %s %s", st.State, st.Error)
	}
}

// TestWorkerDies: a worker stopped mid-job (its listener and sessions
// close) leaves its units to the other, and the output is right.
func TestWorkerDies(t *testing.T) {
	c := newCluster(t, nil)
	doomed := c.addWorker(2, slowBlur(15*time.Millisecond))
	c.addWorker(1, slowBlur(15*time.Millisecond))
	c.waitWorkers(2)
	img := ops.SamplePNG(320, 240)
	want := reference(t, ops.Blur(), img, nil)
	st := c.submit(api.JobRequest{Op: "blur", Input: c.put(img), Tile: api.Tile{W: 40, H: 40}, Policy: api.PolicyProportional})
	c.waitDone(st.Job, 8)
	if err := doomed.stop(); err != nil {
		t.Fatal(err)
	}
	st = c.wait(st.Job)
	if st.State != api.JobDone || st.Units.Done != 48 {
		t.Fatalf("job %s, %+v: %s", st.State, st.Units, st.Error)
	}
	if !bytes.Equal(c.get(st.Output), want) {
		t.Error("output differs from the single-unit output")
	}
	c.stopServer()
	checkExactlyOnce(t, c.cfg.Data, st.Job, false)
}

// addRelayedWorker adds a worker whose data plane the server reaches
// through a TCP relay on loopback, closed at the end of the test.
func (c *cluster) addRelayedWorker(threads int, mod func(*worker.Config)) *relay.TCP {
	c.t.Helper()
	// A free port for the worker: listen, note it, let it go.
	ln, err := transport.Listen(context.Background(), []string{"127.0.0.1:0"}, &transport.Config{Key: testKey, Logger: testLogger()})
	if err != nil {
		c.t.Fatal(err)
	}
	target := ln.Addrs()[0].String()
	ln.Close()
	r, err := relay.ListenTCP(target, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { r.Close() })
	c.addWorker(threads, func(cfg *worker.Config) {
		mod(cfg)
		cfg.Listen = []string{target}
		cfg.Advertise = []string{r.Addr()}
	})
	return r
}

// TestWorkerCutOff: a worker whose data plane goes silent (a blackholed
// relay) while its heartbeats go on loses its session; its units run on
// the other worker.
func TestWorkerCutOff(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) {
		cfg.Transport = &transport.Config{SessionTimeout: time.Second, PathTimeout: 300 * time.Millisecond,
			HeartbeatInterval: 50 * time.Millisecond, HandshakeTimeout: 300 * time.Millisecond}
	})
	// The cut-off worker's data plane is reached through a relay.
	r := c.addRelayedWorker(2, slowBlur(15*time.Millisecond))
	c.addWorker(1, slowBlur(15*time.Millisecond))
	c.waitWorkers(2)
	img := ops.SamplePNG(320, 240)
	want := reference(t, ops.Blur(), img, nil)
	// Equal shares and no backup copies: the job finishes only if the
	// cut-off worker's units are taken back and run elsewhere.
	st := c.submit(api.JobRequest{Op: "blur", Input: c.put(img), Tile: api.Tile{W: 40, H: 40}, Policy: api.PolicyEqual})
	c.waitDone(st.Job, 8)
	r.Blackhole(true)
	st = c.wait(st.Job)
	if st.State != api.JobDone || st.Units.Done != 48 {
		t.Fatalf("job %s, %+v: %s", st.State, st.Units, st.Error)
	}
	// The units in flight on the cut-off worker were lost and ran again:
	// each says so.
	if st.Units.Retried == 0 || len(st.RetriedUnits) != st.Units.Retried {
		t.Errorf("retried units: %d, %+v; want the cut-off worker's units in flight", st.Units.Retried, st.RetriedUnits)
	}
	for _, u := range st.RetriedUnits {
		if u.Lost < 1 || !strings.Contains(u.Error, "lost") {
			t.Errorf("unit tries %+v; want a lost copy", u)
		}
	}
	if !bytes.Equal(c.get(st.Output), want) {
		t.Error("output differs from the single-unit output")
	}
	c.stopServer() // first, so that the workers cannot deregister
	checkExactlyOnce(t, c.cfg.Data, st.Job, true)
}

// TestServerRestart: a server stopped mid-job and started again on the
// same data directory finishes the job; the workers register again.
func TestServerRestart(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, slowBlur(15*time.Millisecond))
	c.addWorker(1, slowBlur(15*time.Millisecond))
	c.waitWorkers(2)
	img := ops.SamplePNG(320, 240)
	want := reference(t, ops.Blur(), img, nil)
	st := c.submit(api.JobRequest{Op: "blur", Input: c.put(img), Tile: api.Tile{W: 40, H: 40}})
	mid := c.waitDone(st.Job, 8)
	c.stopServer()
	if mid.State.Final() {
		t.Fatalf("job finished before the restart: %+v", mid)
	}
	c.startServer()
	st = c.wait(st.Job)
	if st.State != api.JobDone || st.Units.Done != 48 {
		t.Fatalf("job %s, %+v: %s", st.State, st.Units, st.Error)
	}
	if !bytes.Equal(c.get(st.Output), want) {
		t.Error("output differs from the single-unit output")
	}
	ws, err := c.c.Workers(t.Context())
	if err != nil || len(ws) != 2 || !ws[0].Alive || !ws[1].Alive {
		t.Errorf("workers after the restart: %+v, %v; want w1 and w2 back", ws, err)
	}
	c.stopServer() // first, so that the workers cannot deregister
	checkExactlyOnce(t, c.cfg.Data, st.Job, true)
}

// TestHeartbeatTimeout: a registered worker that sends no heartbeat is
// declared dead; its heartbeat then gets 404.
func TestHeartbeatTimeout(t *testing.T) {
	c := newCluster(t, nil)
	ln, err := transport.Listen(t.Context(), []string{"127.0.0.1:0"}, &transport.Config{Key: testKey, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reg, err := c.c.Register(t.Context(), api.Register{Addresses: []string{ln.Addrs()[0].String()}, Threads: 1, Ops: []string{"noop"}})
	if err != nil {
		t.Fatal(err)
	}
	if reg.HeartbeatMillis != 50 || reg.TimeoutMillis != 400 {
		t.Errorf("registration %+v", reg)
	}
	c.waitWorkers(1)
	c.waitWorkers(0)
	w, err := c.c.Worker(t.Context(), reg.Worker, false)
	if err != nil || w.Alive {
		t.Errorf("silent worker: %+v, %v", w, err)
	}
	if _, err := c.c.Heartbeat(t.Context(), reg.Worker, api.Heartbeat{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("heartbeat of a dead worker: %v", err)
	}
}

// TestFigures: the server asks a worker for fresh figures over the data
// plane, and a worker announces a change of threads by itself.
func TestFigures(t *testing.T) {
	c := newCluster(t, nil)
	tw := c.addWorker(2, func(cfg *worker.Config) { cfg.Name = "figures-test" })
	c.waitWorkers(1)
	w, err := c.c.Worker(t.Context(), "w1", true)
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "figures-test" || w.Threads != 2 || w.Cores < 1 || len(w.Ops) != 8 || w.Ops[7] != api.ModuleOps || !w.Alive || len(w.Addresses) != 1 {
		t.Errorf("fresh figures: %+v", w)
	}
	if err := tw.w.SetThreads(3); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(10*time.Second, func() bool {
		w, err = c.c.Worker(t.Context(), "w1", false)
		return err == nil && w.Threads == 3
	}) {
		t.Fatalf("server sees %+v, %v; want 3 threads", w, err)
	}
	// A stream reaches the worker with its first unit, so run jobs with
	// more units than two streams keep in flight until all three are seen.
	for attempt := 0; ; attempt++ {
		st := c.run(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 48, Params: map[string]string{"ms": "5"}})
		if st.State != api.JobDone {
			t.Fatalf("job %s: %s", st.State, st.Error)
		}
		s := tw.w.Stats()
		if s.Streams == 3 && s.Threads == 3 {
			break
		}
		if attempt == 4 {
			t.Fatalf("worker has %d streams and %d threads after %d jobs, want 3 each", s.Streams, s.Threads, attempt+1)
		}
	}
}

// TestSilentWorker: a worker that takes units but never answers and sends
// no heartbeat is declared dead after the timeout; its units run on the
// other worker.
func TestSilentWorker(t *testing.T) {
	c := newCluster(t, nil)
	ln, err := transport.Listen(t.Context(), []string{"127.0.0.1:0"}, &transport.Config{Key: testKey, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Accept the session and swallow every unit.
	go func() {
		sess, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		for {
			st, err := sess.AcceptStream(context.Background())
			if err != nil {
				return
			}
			go func() {
				for {
					if _, err := st.ReadMessage(context.Background()); err != nil {
						return
					}
				}
			}()
		}
	}()
	reg, err := c.c.Register(t.Context(), api.Register{Addresses: []string{ln.Addrs()[0].String()}, Threads: 2, Ops: []string{"blur"}})
	if err != nil {
		t.Fatal(err)
	}
	// It sends heartbeats until both workers are live (however long the
	// other takes to start on a busy machine), then falls silent.
	hbStop, hbDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(hbDone)
		for {
			_, _ = c.c.Heartbeat(context.Background(), reg.Worker, api.Heartbeat{})
			select {
			case <-hbStop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	c.addWorker(1, nil)
	c.waitWorkers(2)
	close(hbStop)
	<-hbDone
	img := ops.SamplePNG(160, 160)
	st := c.run(api.JobRequest{Op: "blur", Input: c.put(img), Tile: api.Tile{W: 40, H: 40}, Policy: api.PolicyEqual})
	if st.State != api.JobDone || st.Units.Done != 16 {
		t.Fatalf("job %s, %+v: %s", st.State, st.Units, st.Error)
	}
	if !bytes.Equal(c.get(st.Output), reference(t, ops.Blur(), img, nil)) {
		t.Error("output differs from the single-unit output")
	}
	// The silent worker is declared dead (the job may finish before, on
	// backup copies of its units), with no unit done; the other did all
	// 16, under one ID or several if it re-registered (its heartbeats
	// late on a loaded machine). Checked by hand: with reap() never
	// declaring a worker dead, the job never finishes and the test fails.
	var ws []api.WorkerInfo
	testwait.For(t, "the silent worker to be declared dead", 10*time.Second, func() bool {
		l, err := c.c.Workers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		ws = l
		i := slices.IndexFunc(ws, func(w api.WorkerInfo) bool { return w.ID == reg.Worker })
		return i >= 0 && !ws[i].Alive
	})
	var others uint64
	for _, w := range ws {
		if w.ID == reg.Worker {
			if w.Done != 0 {
				t.Errorf("the silent worker is credited with %d units", w.Done)
			}
			continue
		}
		others += w.Done
	}
	if others != 16 {
		t.Errorf("workers %+v: the others did %d units, want 16", ws, others)
	}
}

// TestTwoServers: one worker registers with two servers and runs jobs of
// both.
func TestTwoServers(t *testing.T) {
	a := newCluster(t, nil)
	b := newCluster(t, nil)
	a.addWorker(2, func(cfg *worker.Config) { cfg.Servers = []string{a.srv.URL(), b.srv.URL()} })
	a.waitWorkers(1)
	b.waitWorkers(1)
	done := make(chan api.JobStatus, 2)
	for _, c := range []*cluster{a, b} {
		in := c.put([]byte("two servers"))
		go func() {
			st, err := c.c.Submit(context.Background(), api.JobRequest{Op: "sleep", Input: in, Units: 6, Params: map[string]string{"ms": "20"}})
			if err != nil {
				t.Error(err)
				done <- st
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err = c.c.Wait(ctx, st.Job, nil)
			if err != nil {
				t.Error(err)
			}
			done <- st
		}()
	}
	for range 2 {
		if st := <-done; st.State != api.JobDone {
			t.Errorf("job %+v", st)
		}
	}
	ids := a.workers[0].w.IDs()
	if len(ids) != 2 {
		t.Errorf("worker IDs by server: %v", ids)
	}
}

// TestTamperedDataPlane: a relay in front of one worker keeps flipping
// bits in both directions while a job runs. Every altered channel fails
// its integrity check; the job still finishes with exactly the right
// output, from the reconnected channels or the other worker.
func TestTamperedDataPlane(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) {
		cfg.Transport = &transport.Config{PathTimeout: 300 * time.Millisecond,
			HeartbeatInterval: 50 * time.Millisecond, ReconnectInterval: 20 * time.Millisecond}
	})
	r := c.addRelayedWorker(2, slowBlur(10*time.Millisecond))
	c.addWorker(1, slowBlur(10*time.Millisecond))
	c.waitWorkers(2)
	img := ops.SamplePNG(320, 240)
	want := reference(t, ops.Blur(), img, nil)
	st := c.submit(api.JobRequest{Op: "blur", Input: c.put(img), Tile: api.Tile{W: 40, H: 40}, Policy: api.PolicyEqual})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			dir := relay.ToTarget
			if i%2 == 1 {
				dir = relay.ToClient
			}
			r.Tamper(dir, relay.TamperFlip)
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	st = c.wait(st.Job)
	close(stop)
	wg.Wait()
	if st.State != api.JobDone || st.Units.Done != 48 {
		t.Fatalf("job %s, %+v: %s", st.State, st.Units, st.Error)
	}
	if !bytes.Equal(c.get(st.Output), want) {
		t.Fatal("output differs from the single-unit output")
	}
	if r.Tampered() == 0 {
		t.Fatal("the relay altered nothing: the test proved nothing")
	}
	t.Logf("the relay altered %d chunks; %d units ran again: %+v", r.Tampered(), st.Units.Retried, st.RetriedUnits)
}

// TestDeadWorkerNoticedByDataPlane: with the default transport settings
// and heartbeats that would keep a worker alive for a minute, a worker
// whose data plane falls silent is declared dead by its session (within
// DataPlaneTimeout after its paths time out, 2s by default), and its job
// finishes on the other worker. Before DataPlaneTimeout the session
// waited the transport's 30s SessionTimeout: this test then failed.
func TestDeadWorkerNoticedByDataPlane(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) { cfg.WorkerTimeout, cfg.DataPlaneTimeout = time.Minute, 0 })
	r := c.addRelayedWorker(1, slowBlur(15*time.Millisecond))
	c.addWorker(1, slowBlur(15*time.Millisecond))
	c.waitWorkers(2)
	st := c.submit(api.JobRequest{Op: "blur", Input: c.put(ops.SamplePNG(160, 120)), Tile: api.Tile{W: 40, H: 40}, Policy: api.PolicyEqual})
	c.waitDone(st.Job, 2)
	r.Blackhole(true)
	cut := time.Now()
	// Bounded well above the 2s default and far below both the minute
	// of heartbeats and the transport's own 30s.
	if !testwait.Until(10*time.Second, func() bool {
		ws, err := c.c.Workers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, w := range ws {
			if w.Alive {
				live++
			}
		}
		return live == 1
	}) {
		t.Fatalf("the cut-off worker is still live %v after its data plane went silent", time.Since(cut).Round(time.Millisecond))
	}
	t.Logf("cut-off worker declared dead after %v", time.Since(cut).Round(time.Millisecond))
	if st = c.wait(st.Job); st.State != api.JobDone {
		t.Fatalf("job %s: %s", st.State, st.Error)
	}
}

// waitHolding waits until the worker reached through relay r has
// delivered units and holds more (running or queued), and returns it.
func (c *cluster) waitHolding(r *relay.TCP) api.WorkerInfo {
	c.t.Helper()
	var held api.WorkerInfo
	testwait.For(c.t, "the relayed worker to deliver units and hold more", 30*time.Second, func() bool {
		ws, err := c.c.Workers(context.Background())
		if err != nil {
			c.t.Fatal(err)
		}
		// The relayed worker's ID is the one at the relay's address.
		for _, w := range ws {
			if slices.Contains(w.Addresses, r.Addr()) {
				held = w
				return w.Alive && w.Done > 0 && w.ComputeNanos > 0 && w.Running+w.Queued > 0
			}
		}
		return false
	})
	return held
}

// kill kills worker id, reached through relay r, as kill -9 would as
// far as the server can tell (the relay closes: the channels are reset
// and new ones refused), waits until the server declares it dead, and
// returns it.
func (c *cluster) kill(r *relay.TCP, id string) api.WorkerInfo {
	c.t.Helper()
	r.Close()
	var dead api.WorkerInfo
	testwait.For(c.t, "the killed worker to be declared dead", 20*time.Second, func() bool {
		w, err := c.c.Worker(context.Background(), id, false)
		if err != nil {
			c.t.Fatal(err)
		}
		dead = w
		return !w.Alive
	})
	return dead
}

// TestKilledWorkerDeadAtOnce: a worker whose process ends mid-job (its
// relay closes: the kernel resets the channels and refuses new ones, as
// for kill -9) is declared dead as soon as the server's redial of its path
// is refused, with heartbeats and DataPlaneTimeout that would keep it a
// minute. The bound of the wait (20s) is below that minute, so reaching
// it proves the mechanism: the death comes a transport ReconnectInterval
// (0.1s) after the reset, plus scheduling. The dead worker then shows no
// units running or queued (they were taken back and run on the other
// worker) and keeps the compute time and units it delivered.
func TestKilledWorkerDeadAtOnce(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) {
		cfg.WorkerTimeout, cfg.DataPlaneTimeout = time.Minute, time.Minute
	})
	r := c.addRelayedWorker(1, func(*worker.Config) {})
	c.addWorker(1, nil)
	c.waitWorkers(2)
	st := c.submit(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 40, Params: map[string]string{"ms": "100"}, Policy: api.PolicyEqual})
	doomed := c.waitHolding(r)
	killed := time.Now()
	dead := c.kill(r, doomed.ID)
	t.Logf("declared dead %v after the kill: %s", dead.Died.Sub(killed).Round(time.Millisecond), dead.DiedOf)
	if dead.Died.Before(killed) || !strings.Contains(dead.DiedOf, "refuses a new channel") {
		t.Errorf("the killed worker died at %v (killed at %v) of %q; want after the kill, of refused redials", dead.Died, killed, dead.DiedOf)
	}
	if dead.Running != 0 || dead.Queued != 0 {
		t.Errorf("the dead worker shows %d running, %d queued; want 0 and 0", dead.Running, dead.Queued)
	}
	if dead.Done < doomed.Done || dead.ComputeNanos < doomed.ComputeNanos || dead.LentNanos < doomed.LentNanos {
		t.Errorf("the dead worker shows %d done, %v computed of %v lent; before its death %d, %v of %v",
			dead.Done, time.Duration(dead.ComputeNanos), time.Duration(dead.LentNanos), doomed.Done, time.Duration(doomed.ComputeNanos), time.Duration(doomed.LentNanos))
	}
	if st = c.wait(st.Job); st.State != api.JobDone {
		t.Fatalf("job %s: %s", st.State, st.Error)
	}
}

// TestLostWorkerLogCounts: the server's log line for a worker killed
// mid-job counts the units it held. Its stream loops let go of most of
// them before the scheduler is asked, and the line said "units=0".
func TestLostWorkerLogCounts(t *testing.T) {
	var logs lockedBuffer
	c := newCluster(t, func(cfg *server.Config) {
		cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		cfg.WorkerTimeout, cfg.DataPlaneTimeout = time.Minute, time.Minute
	})
	r := c.addRelayedWorker(2, func(*worker.Config) {})
	c.waitWorkers(1)
	c.submit(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 2, Params: map[string]string{"ms": "60000"}})
	var id string
	testwait.For(t, "both units to run on the worker", 20*time.Second, func() bool {
		ws, err := c.c.Workers(t.Context())
		if err != nil || len(ws) != 1 {
			return false
		}
		id = ws[0].ID
		return ws[0].Running == 2
	})
	c.kill(r, id)
	var line map[string]any
	testwait.For(t, "the server to log the lost worker", 10*time.Second, func() bool {
		for l := range bytes.Lines(logs.Bytes()) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil && m["msg"] == "worker lost; its units run elsewhere" {
				line = m
				return true
			}
		}
		return false
	})
	if line["worker"] != id || line["units"] != float64(2) {
		t.Errorf("logged %v, want worker %s with units 2", line, id)
	}
}

// TestStoppedWorkerRemoved: a worker that stops (its context ends, as on
// SIGTERM) deregisters before its data-plane session closes, so the
// server logs it removed, not lost, and keeps no death for it.
func TestStoppedWorkerRemoved(t *testing.T) {
	var logs lockedBuffer
	c := newCluster(t, func(cfg *server.Config) { cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	c.addWorker(1, nil)
	c.waitWorkers(1)
	ws, err := c.c.Workers(t.Context())
	if err != nil || len(ws) != 1 {
		t.Fatalf("workers: %v %v", ws, err)
	}
	if err := c.workers[0].stop(); err != nil {
		t.Fatalf("worker stop: %v", err)
	}
	msgs := func() []string {
		var out []string
		for l := range bytes.Lines(logs.Bytes()) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil {
				out = append(out, fmt.Sprint(m["msg"]))
			}
		}
		return out
	}
	testwait.For(t, "the server to log the worker removed", 10*time.Second, func() bool {
		return slices.Contains(msgs(), "worker removed")
	})
	if got := msgs(); slices.Contains(got, "worker lost; its units run elsewhere") {
		t.Errorf("a worker that stopped was logged lost: %q", got)
	}
	if _, err := c.c.Worker(t.Context(), ws[0].ID, false); !errors.Is(err, client.ErrNotFound) {
		w, _ := c.c.Worker(t.Context(), ws[0].ID, false)
		t.Errorf("the stopped worker is still listed (%v): died %v of %q", err, w.Died, w.DiedOf)
	}
}

// TestDeadWorkersForgotten: dead workers do not pile up. A worker that
// registers anew with the name and addresses of a dead one (the same
// worker restarted) replaces it at once; and a dead worker is forgotten
// ForgetWorkers after it was last seen, with its braid_worker_up series.
// The "workers" are bare data-plane listeners that answer no heartbeat,
// so the reaper declares each dead after WorkerTimeout.
func TestDeadWorkersForgotten(t *testing.T) {
	listen := func(t *testing.T) *transport.Listener {
		ln, err := transport.Listen(t.Context(), []string{"127.0.0.1:0"}, &transport.Config{Key: testKey, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	// dead registers a worker at ln's address and waits for its death.
	dead := func(t *testing.T, c *cluster, ln *transport.Listener, name string) string {
		reg, err := c.c.Register(t.Context(), api.Register{Name: name, Addresses: []string{ln.Addrs()[0].String()}, Threads: 1, Ops: []string{"noop"}})
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the silent worker to be declared dead", 20*time.Second, func() bool {
			w, err := c.c.Worker(t.Context(), reg.Worker, false)
			return err == nil && !w.Alive || errors.Is(err, client.ErrNotFound) // dead, or dead and forgotten
		})
		return reg.Worker
	}
	listed := func(t *testing.T, c *cluster, id string) bool {
		ws, err := c.c.Workers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ws, func(w api.WorkerInfo) bool { return w.ID == id })
	}
	t.Run("restarted", func(t *testing.T) {
		c := newCluster(t, func(cfg *server.Config) { cfg.ForgetWorkers = -1 })
		ln, other := listen(t), listen(t)
		old := dead(t, c, ln, "w-restarted")
		kept := dead(t, c, other, "w-restarted") // same name, other address: another worker
		reg, err := c.c.Register(t.Context(), api.Register{Name: "w-restarted", Addresses: []string{ln.Addrs()[0].String()}, Threads: 1, Ops: []string{"noop"}})
		if err != nil {
			t.Fatal(err)
		}
		if listed(t, c, old) || !listed(t, c, reg.Worker) || !listed(t, c, kept) {
			t.Errorf("after worker %s registered anew as %s: %s listed %v (want false), %s listed %v (want true)",
				old, reg.Worker, old, listed(t, c, old), kept, listed(t, c, kept))
		}
	})
	t.Run("forgotten", func(t *testing.T) {
		c := newCluster(t, func(cfg *server.Config) { cfg.ForgetWorkers = time.Second })
		mon, err := c.c.CreateToken(t.Context(), api.RoleMonitor, "prometheus")
		if err != nil {
			t.Fatal(err)
		}
		var id string
		// up reports whether /metrics has a braid_worker_up series of id.
		up := func() bool {
			fams := scrape(t, c.hc, c.srv.URL()+api.PathMetrics, "Bearer "+mon.Token)
			for _, m := range fams["braid_worker_up"].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "worker" && l.GetValue() == id {
						return true
					}
				}
			}
			return false
		}
		id = dead(t, c, listen(t), "w-gone")
		if !up() && listed(t, c, id) {
			t.Errorf("the dead worker %s, still listed, has no braid_worker_up series", id)
		}
		testwait.For(t, "the dead worker to be forgotten", 20*time.Second, func() bool { return !listed(t, c, id) })
		if up() {
			t.Errorf("the forgotten worker %s still has a braid_worker_up series", id)
		}
	})
}
