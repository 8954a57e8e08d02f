package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/testenv"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
)

// disk is a fault switch: while a kind is full, writes of that kind fail
// with ENOSPC, as on a full disk.
type disk struct {
	blobsFull, dbFull atomic.Bool
	// putFails, if positive, fails that many more result stores.
	putFails atomic.Int64
}

func enospc(op string) error {
	return &os.PathError{Op: op, Path: "/data/blobs/tmp/put-1", Err: syscall.ENOSPC}
}

// fullBlobs stores unit results, failing while the disk is full.
type fullBlobs struct {
	store.Blobs
	d *disk
}

func (f fullBlobs) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	if f.d.blobsFull.Load() || f.d.putFails.Add(-1) >= 0 {
		return "", 0, fmt.Errorf("store: put: %w", enospc("write"))
	}
	return f.Blobs.Put(ctx, r)
}

// fullState writes unit results and job ends, failing while the
// database's disk is full.
type fullState struct {
	store.Jobs
	d *disk
}

func (f fullState) refuse(what string) error {
	if f.d.dbFull.Load() {
		return fmt.Errorf("store: %s: database or disk is full: %w", what, syscall.ENOSPC)
	}
	return nil
}

func (f fullState) FinishUnits(ctx context.Context, rs []store.UnitResult) ([]bool, error) {
	if err := f.refuse("finish units"); err != nil {
		return nil, err
	}
	return f.Jobs.FinishUnits(ctx, rs)
}

func (f fullState) FinishJob(ctx context.Context, id uint64, output string) error {
	if err := f.refuse("finish job"); err != nil {
		return err
	}
	return f.Jobs.FinishJob(ctx, id, output)
}

func (f fullState) FailJob(ctx context.Context, id uint64, msg string) error {
	if err := f.refuse("fail job"); err != nil {
		return err
	}
	return f.Jobs.FailJob(ctx, id, msg)
}

func (f fullState) CancelJob(ctx context.Context, id uint64, msg string) error {
	if err := f.refuse("cancel job"); err != nil {
		return err
	}
	return f.Jobs.CancelJob(ctx, id, msg)
}

// storedState opens the stopped server's database and returns the job's
// stored state.
func storedState(t testing.TB, dir string, job uint64) store.Job {
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
	return j
}

// TestDiskFull: when the disk fills while results are recorded, a unit
// whose result cannot be stored runs again (counted in the job's
// retries), and a job that cannot go on fails with an error that says
// so; no job stays running, in its status or, once there is room again,
// in the store.
func TestDiskFull(t *testing.T) {
	img := ops.SamplePNG(320, 240)
	want := reference(t, ops.Blur(), img, nil)
	req := api.JobRequest{Op: "blur", Tile: api.Tile{W: 40, H: 40}} // 48 units
	for _, tc := range []struct {
		name string
		// fill makes the disk full (or, with putFails, briefly so).
		fill func(d *disk)
		// done: the job still finishes, after retries.
		done bool
		// say is in the error of a job that fails.
		say string
	}{
		{"results refused twice", func(d *disk) { d.putFails.Store(2) }, true, ""},
		{"results disk full", func(d *disk) { d.blobsFull.Store(true) }, false, "storing its result failed"},
		{"database full", func(d *disk) { d.dbFull.Store(true) }, false, "no space left on device"},
		{"both full", func(d *disk) { d.blobsFull.Store(true); d.dbFull.Store(true) }, false, "no space left on device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &disk{}
			c := newCluster(t, func(cfg *server.Config) {
				server.InjectFaults(cfg,
					func(j store.Jobs) store.Jobs { return fullState{j, d} },
					func(b store.Blobs) store.Blobs { return fullBlobs{b, d} })
			})
			c.addWorker(2, slowBlur(5*time.Millisecond))
			c.waitWorkers(1)
			req.Input = c.put(img)
			st := c.submit(req)
			c.waitDone(st.Job, 6)
			tc.fill(d)

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			st, err := c.c.Wait(ctx, st.Job, nil)
			if err != nil {
				t.Fatalf("job %d not final 30s after the disk filled: %v (status %+v)", st.Job, err, st)
			}
			if tc.done {
				if st.State != api.JobDone || st.Units.Retries < 2 {
					t.Fatalf("job %s with %d retries (%s); want done after at least 2 retries", st.State, st.Units.Retries, st.Error)
				}
				if got := c.get(st.Output); string(got) != string(want) {
					t.Error("output differs from the single-unit blur")
				}
				return
			}
			if st.State != api.JobFailed || !strings.Contains(st.Error, tc.say) {
				t.Fatalf("job %s: %q; want failed saying %q", st.State, st.Error, tc.say)
			}
			if d.dbFull.Load() && !strings.Contains(st.Error, "not yet recorded in the job database") {
				t.Errorf("error %q does not say that the failure is not recorded yet", st.Error)
			}
			running, err := c.c.Jobs(t.Context(), api.JobRunning, 0)
			if err != nil || len(running) != 0 {
				t.Errorf("jobs running: %+v, %v; want none", running, err)
			}
			// Room again: the end reaches the store.
			d.blobsFull.Store(false)
			d.dbFull.Store(false)
			if !testwait.Until(15*time.Second, func() bool {
				st, err = c.c.Status(t.Context(), st.Job)
				return err == nil && !strings.Contains(st.Error, "not yet recorded")
			}) {
				t.Fatalf("the job's end was not recorded 15s after the disk had room: %+v, %v", st, err)
			}
			c.stopServer()
			if j := storedState(t, c.cfg.Data, st.Job); j.State != store.JobFailed || j.Running != 0 {
				t.Errorf("stored job: %s with %d running; want failed, none running", j.State, j.Running)
			}
		})
	}
}

// TestDiskFullTmpfs fills a real file system (a small tmpfs holding the
// server's whole data directory, database included) while jobs run: every
// job ends, done or failed with a reason, none stays running; once there
// is room again a new job is done. It needs root to mount the tmpfs.
func TestDiskFullTmpfs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=48m"); err != nil {
		testenv.Missing(t, testenv.Root, fmt.Sprintf("cannot mount a tmpfs here (%v): needs root", err))
	}
	// Cleanups run last in, first out: unmount after the cluster stopped.
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	c := newCluster(t, func(cfg *server.Config) { cfg.Data = dir })
	c.addWorker(2, slowBlur(5*time.Millisecond))
	c.waitWorkers(1)
	img := ops.SamplePNG(320, 240)
	want := reference(t, ops.Blur(), img, nil)
	in := c.put(img)
	req := api.JobRequest{Op: "blur", Input: in, Tile: api.Tile{W: 40, H: 40}} // 48 units
	var jobs []uint64
	for range 4 {
		jobs = append(jobs, c.submit(req).Job)
	}
	c.waitDone(jobs[0], 4)

	// Fill what is left of the file system.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := 0; i < 64; i++ {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			break
		}
	}
	f.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var done, failed int
	for _, id := range jobs {
		st, err := c.c.Wait(ctx, id, nil)
		if err != nil {
			t.Fatalf("job %d not final 60s after the disk filled: %v (status %+v)", id, err, st)
		}
		switch st.State {
		case api.JobDone:
			done++
			if got := c.get(st.Output); string(got) != string(want) {
				t.Errorf("job %d is done with wrong output", id)
			}
		case api.JobFailed:
			failed++
			if st.Error == "" {
				t.Errorf("job %d failed without a reason", id)
			}
			t.Logf("job %d failed: %s", id, st.Error)
		default:
			t.Errorf("job %d is %s", id, st.State)
		}
	}
	t.Logf("with the disk full: %d jobs done, %d failed", done, failed)
	if running, err := c.c.Jobs(t.Context(), api.JobRunning, 0); err != nil || len(running) != 0 {
		t.Errorf("jobs running: %+v, %v; want none", running, err)
	}

	// Room again: the server serves a new job.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	st := c.run(api.JobRequest{Op: "blur", Input: in, Tile: api.Tile{W: 80, H: 60}})
	if st.State != api.JobDone {
		t.Fatalf("job after the disk had room: %s: %s", st.State, st.Error)
	}
	if got := c.get(st.Output); string(got) != string(want) {
		t.Error("output after the disk had room differs from the single-unit blur")
	}
}
