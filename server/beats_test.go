package server_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
)

// beatLog records the heartbeat batches the server writes. While held,
// a write waits for release; while failing, writes fail as if the
// database were down.
type beatLog struct {
	store.Jobs
	mu      sync.Mutex
	batches [][]store.Beat
	held    chan struct{} // closed to let writes through
	failing bool
}

func (l *beatLog) Heartbeats(ctx context.Context, beats []store.Beat) (int, error) {
	<-l.held
	l.mu.Lock()
	l.batches = append(l.batches, beats)
	failing := l.failing
	l.mu.Unlock()
	if failing {
		return 0, errors.New("store: heartbeats: database unreachable")
	}
	return l.Jobs.Heartbeats(ctx, beats)
}

func (l *beatLog) seen() [][]store.Beat {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]store.Beat(nil), l.batches...)
}

// TestHeartbeatsBatched: the heartbeats that arrive while a write is
// under way go to the store together, one beat per worker, in one
// write; a failed write keeps its beats for the next. (Writing each
// heartbeat as it comes, the second batch holds one beat.)
func TestHeartbeatsBatched(t *testing.T) {
	l := &beatLog{held: make(chan struct{}), failing: true}
	c := newCluster(t, func(cfg *server.Config) {
		server.InjectFaults(cfg, func(j store.Jobs) store.Jobs { l.Jobs = j; return l }, nil)
	})
	const workers = 6
	for range workers {
		c.addWorker(1, nil)
	}
	c.waitWorkers(workers)
	// The writer is stuck in its first write; every worker beats several
	// times meanwhile (every 50 ms).
	time.Sleep(500 * time.Millisecond)
	close(l.held)
	var b [][]store.Beat
	deadline := time.Now().Add(20 * time.Second)
	for b = l.seen(); len(b) < 3 && time.Now().Before(deadline); b = l.seen() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(b) < 3 {
		t.Fatalf("%d heartbeat writes in 20 s", len(b))
	}
	// b[0] is the write that was held; b[1] failed; b[2] holds what b[1]
	// held, since no beat replaced it, and what came since.
	if ids := workerSet(b[1]); len(ids) != workers || len(b[1]) != workers {
		t.Errorf("the batch written after the held one has %d beats of %d workers; want one of each of the %d workers",
			len(b[1]), len(ids), workers)
	}
	if ids := workerSet(b[2]); len(ids) != workers {
		t.Errorf("after a failed write, the next has beats of %d workers; want all %d", len(ids), workers)
	}
	l.mu.Lock()
	l.failing = false
	l.mu.Unlock()
	// Written beats reach the store: every worker shows as seen after
	// the failure ended.
	ended := time.Now()
	ok := false
	for !ok && time.Now().Before(ended.Add(20*time.Second)) {
		ws, err := c.c.Workers(context.Background())
		ok = err == nil && len(ws) == workers
		for _, w := range ws {
			ok = ok && w.LastSeen.After(ended)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !ok {
		t.Error("workers' last heartbeat in the store did not advance once writes succeeded")
	}
}

func workerSet(beats []store.Beat) map[string]bool {
	out := map[string]bool{}
	for _, b := range beats {
		out[b.Worker] = true
	}
	return out
}

// TestHeartbeatsScaleWithCluster: with more workers than MaxHeartbeats
// a second allow at the configured interval, the server asks each to
// beat less often and waits proportionally longer before declaring one
// dead, and the workers follow. (With the interval fixed, 4 workers
// beating every 50 ms send about 80 beats a second, not 10.)
func TestHeartbeatsScaleWithCluster(t *testing.T) {
	l := &beatLog{held: make(chan struct{})}
	close(l.held)
	c := newCluster(t, func(cfg *server.Config) {
		cfg.MaxHeartbeats = 10 // with 4 workers: one beat each 400 ms
		server.InjectFaults(cfg, func(j store.Jobs) store.Jobs { l.Jobs = j; return l }, nil)
	})
	const workers = 4
	for range workers {
		c.addWorker(1, nil)
	}
	c.waitWorkers(workers)
	ws, err := c.c.Workers(t.Context())
	if err != nil || len(ws) != workers {
		t.Fatalf("workers: %v, %v", ws, err)
	}
	reg, err := c.c.Heartbeat(t.Context(), ws[0].ID, api.Heartbeat{})
	if err != nil {
		t.Fatal(err)
	}
	if reg.HeartbeatMillis != 400 || reg.TimeoutMillis != 3200 {
		t.Errorf("a heartbeat's answer asks for one each %d ms, dead after %d ms; want 400 and 3200 (the configured 50 and 400, times 8)",
			reg.HeartbeatMillis, reg.TimeoutMillis)
	}
	// Every worker has had a beat answered by now or within 400 ms; count
	// the beats of the next 2 s: at most about 5 a worker.
	time.Sleep(time.Second)
	count := func() int {
		n := 0
		for _, b := range l.seen() {
			n += len(b)
		}
		return n
	}
	before := count()
	time.Sleep(2 * time.Second)
	if n := count() - before; n > workers*8 {
		t.Errorf("%d workers sent %d heartbeats in 2 s; want at most %d (one each 400 ms, and some slack)", workers, n, workers*8)
	}
	if h, err := c.c.Health(t.Context()); err != nil || h.Workers != workers {
		t.Errorf("after beating less often: %+v, %v; want %d live workers", h, err, workers)
	}
}
