package server_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/metrics/metricstest"
	"github.com/braid-hpc/braid/internal/testwait"
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
	// The workers list shows the longest wait between two heartbeats:
	// about the 400 ms asked for, never the 50 ms configured.
	ws, err = c.c.Workers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if gap := time.Duration(w.MaxBeatGapNanos); gap < 300*time.Millisecond {
			t.Errorf("worker %s: longest gap between heartbeats %v, want about 400 ms (one each 400 ms)", w.ID, gap)
		}
	}
}

// TestHeartbeatsOnDataPlane: the server asks a live worker for its
// heartbeat on the worker's data-plane session, and a worker so asked
// sends none over HTTP, yet stays live. Checked by hand: with the
// worker's HTTP heartbeats never skipped, about one HTTP heartbeat came
// with each asked for, and the test fails.
func TestHeartbeatsOnDataPlane(t *testing.T) {
	c := newCluster(t, nil) // a heartbeat each 50 ms
	c.addWorker(1, nil)
	c.waitWorkers(1)
	mon, err := c.c.CreateToken(t.Context(), api.RoleMonitor, "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	beats := func(via string) float64 {
		v, _ := metricstest.Value(scrape(t, c.hc, c.srv.URL()+api.PathMetrics, "Bearer "+mon.Token),
			"braid_heartbeats_total", map[string]string{"via": via})
		return v
	}
	testwait.For(t, "a heartbeat on the data plane", 10*time.Second, func() bool { return beats("data_plane") > 0 })
	asked, sent := beats("data_plane"), beats("http")
	testwait.For(t, "20 more heartbeats on the data plane", 20*time.Second, func() bool { return beats("data_plane") >= asked+20 })
	asked, sent = beats("data_plane")-asked, beats("http")-sent
	// A request late by half an interval on a loaded machine lets one
	// HTTP heartbeat through; one a request would be the old way.
	if sent > asked/5 {
		t.Errorf("%v heartbeats over HTTP beside %v on the data plane; want at most %v", sent, asked, asked/5)
	}
	t.Logf("%v heartbeats on the data plane, %v over HTTP", asked, sent)
	if h, err := c.c.Health(t.Context()); err != nil || h.Workers != 1 {
		t.Errorf("health %+v, %v: want the worker live", h, err)
	}
}
