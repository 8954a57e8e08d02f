package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/store"
)

// countingJobs counts the transactions that record results.
type countingJobs struct {
	store.Jobs
	mu      sync.Mutex
	batches []int
}

func (c *countingJobs) FinishUnits(ctx context.Context, rs []store.UnitResult) ([]bool, error) {
	c.mu.Lock()
	c.batches = append(c.batches, len(rs))
	c.mu.Unlock()
	return c.Jobs.FinishUnits(ctx, rs)
}

// TestRecorderGathersTrickles checks that results arriving one at a time
// share a transaction, that a flush ends the gathering at once, and that
// every result is recorded.
func TestRecorderGathersTrickles(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	units := []store.Unit{{ID: 0}, {ID: 1}, {ID: 2}}
	created, err := db.CreateJob(ctx, store.Job{Op: "noop", Input: "in", Policy: "dynamic"}, units)
	if err != nil {
		t.Fatal(err)
	}
	job := created.ID
	cj := &countingJobs{Jobs: db}
	r := newRecorder(cj, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.gather = time.Hour // only a flush or a full batch ends a gathering
	go r.run()
	defer r.close()

	for id := range uint64(3) {
		r.add(store.UnitResult{Job: job, ID: id, Worker: "w1", Result: "r", ComputeNanos: 1})
		time.Sleep(5 * time.Millisecond) // the recorder takes each as it comes
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.flush(fctx); err != nil {
		t.Fatalf("flush: %v (a flush must not wait for the gathering to time out)", err)
	}
	cj.mu.Lock()
	batches := append([]int(nil), cj.batches...)
	cj.mu.Unlock()
	if len(batches) != 1 || batches[0] != 3 {
		t.Errorf("transactions recorded batches %v, want one of 3", batches)
	}
	j, err := db.Job(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if j.Done != 3 {
		t.Errorf("job has %d units done, want 3", j.Done)
	}
}
