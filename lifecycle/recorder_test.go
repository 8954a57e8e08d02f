package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"syscall"
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
	db, err := store.OpenMeta(ctx, "sqlite:"+filepath.Join(t.TempDir(), "jobs.db"), nil)
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

// fullJobs refuses FinishUnits with ENOSPC the first fails times (all
// times if fails < 0).
type fullJobs struct {
	store.Jobs
	mu    sync.Mutex
	fails int
	calls int
}

func (f *fullJobs) FinishUnits(ctx context.Context, rs []store.UnitResult) ([]bool, error) {
	f.mu.Lock()
	f.calls++
	refuse := f.fails < 0 || f.calls <= f.fails
	f.mu.Unlock()
	if refuse {
		return nil, fmt.Errorf("store: finish %d units: %w", len(rs), syscall.ENOSPC)
	}
	return f.Jobs.FinishUnits(ctx, rs)
}

// TestRecorderDiskFull: a batch the store refuses is written again after
// a backoff; one it refuses every time is handed to lost, and the flush
// after it reports the error, so its jobs do not wait for ever.
func TestRecorderDiskFull(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fails    int
		recorded bool
	}{
		{"full for a while", 2, true},
		{"full for good", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			db, err := store.OpenMeta(ctx, "sqlite:"+filepath.Join(t.TempDir(), "jobs.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			created, err := db.CreateJob(ctx, store.Job{Op: "noop", Input: "in", Policy: "dynamic"}, []store.Unit{{ID: 0}, {ID: 1}})
			if err != nil {
				t.Fatal(err)
			}
			fj := &fullJobs{Jobs: db, fails: tc.fails}
			r := newRecorder(fj, slog.New(slog.NewTextHandler(io.Discard, nil)))
			r.backoff = time.Millisecond
			var lost []store.UnitResult
			var lostErr error
			r.lost = func(rs []store.UnitResult, err error) { lost, lostErr = rs, err }
			go r.run()
			defer r.close()
			for id := range uint64(2) {
				r.add(store.UnitResult{Job: created.ID, ID: id, Worker: "w1", Result: "r"})
			}
			ferr := r.flush(ctx)
			j, err := db.Job(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			if tc.recorded {
				if ferr != nil || j.Done != 2 || lost != nil {
					t.Errorf("flush %v, %d units done, lost %v; want the batch recorded on a later try", ferr, j.Done, lost)
				}
				return
			}
			if !errors.Is(ferr, syscall.ENOSPC) {
				t.Errorf("flush after a refused batch: %v, want ENOSPC", ferr)
			}
			if len(lost) != 2 || !errors.Is(lostErr, syscall.ENOSPC) {
				t.Errorf("lost %v with %v; want both results and ENOSPC", lost, lostErr)
			}
			if fj.calls != r.tries {
				t.Errorf("store asked %d times, want %d", fj.calls, r.tries)
			}
		})
	}
}

// downJobs is a store whose database cannot be reached for its first
// fails calls.
type downJobs struct {
	store.Jobs
	mu    sync.Mutex
	fails int
	calls int
}

func (d *downJobs) FinishUnits(ctx context.Context, rs []store.UnitResult) ([]bool, error) {
	d.mu.Lock()
	d.calls++
	down := d.calls <= d.fails
	d.mu.Unlock()
	if down {
		return nil, fmt.Errorf("store: finish %d units: %w", len(rs),
			&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	}
	return d.Jobs.FinishUnits(ctx, rs)
}

// TestRecorderDatabaseDown: a database that cannot be reached for far
// more tries than a full disk is given loses nothing: the results are
// recorded once it answers, and no job is failed. A shutdown ends the
// retries.
func TestRecorderDatabaseDown(t *testing.T) {
	ctx := t.Context()
	db, err := store.OpenMeta(ctx, "sqlite:"+filepath.Join(t.TempDir(), "jobs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	created, err := db.CreateJob(ctx, store.Job{Op: "noop", Input: "in", Policy: "dynamic"}, []store.Unit{{ID: 0}, {ID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	dj := &downJobs{Jobs: db, fails: 2 * recordTries}
	r := newRecorder(dj, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.backoff = time.Millisecond
	r.lost = func(rs []store.UnitResult, err error) {
		t.Errorf("results given up while the database was down: %v", err)
	}
	go r.run()
	for id := range uint64(2) {
		r.add(store.UnitResult{Job: created.ID, ID: id, Worker: "w1", Result: "r"})
	}
	if err := r.flush(ctx); err != nil {
		t.Fatalf("flush once the database is back: %v", err)
	}
	r.close()
	if j, err := db.Job(ctx, created.ID); err != nil || j.Done != 2 {
		t.Errorf("job after the outage: %+v, %v; want both units done", j, err)
	}
	if dj.calls <= recordTries {
		t.Errorf("store asked %d times; the outage outlasted %d", dj.calls, recordTries)
	}

	// Down for good: a shutdown stops the retries.
	stop := make(chan struct{})
	r = newRecorder(&downJobs{Jobs: db, fails: 1 << 30}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.backoff, r.stop = time.Millisecond, stop
	go r.run()
	r.add(store.UnitResult{Job: created.ID, ID: 0, Worker: "w1", Result: "r"})
	close(stop)
	if err := r.flush(ctx); err == nil {
		t.Error("flush with the database down for good and the recorder stopped: no error")
	}
	r.close()
}
