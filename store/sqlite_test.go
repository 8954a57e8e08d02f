package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a fake time source that advances a second per reading.
type clock struct{ n atomic.Int64 }

func (c *clock) now() time.Time {
	return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(c.n.Add(1)) * time.Second)
}

func openDB(t testing.TB, path string) *SQLite {
	t.Helper()
	c := &clock{}
	s, err := OpenSQLite(t.Context(), path, &SQLiteConfig{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// sampleJob is a checksum-like DAG: three chunk units and a reduce unit
// that depends on them.
func sampleJob() (Job, []Unit) {
	j := Job{Op: "checksum", Input: strings.Repeat("a", 64), Params: map[string]string{"block": "4096"},
		Units: 3, Repeat: 1, Policy: "dynamic", InFlight: 2}
	units := []Unit{
		{ID: 0, Params: map[string]string{"block": "4096", "step": "chunk"}, Blob: j.Input, Off: 0, Len: 100},
		{ID: 1, Params: map[string]string{"block": "4096", "step": "chunk"}, Blob: j.Input, Off: 100, Len: 100},
		{ID: 2, Params: map[string]string{"block": "4096", "step": "chunk"}, Blob: j.Input, Off: 200, Len: 50},
		{ID: 3, Params: map[string]string{"block": "4096", "step": "reduce"}, Deps: []uint64{0, 1, 2}},
	}
	return j, units
}

func TestJobLifecycle(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, ":memory:")
	j, units := sampleJob()
	j = must[Job](t)(s.CreateJob(ctx, j, units))
	if j.ID != 1 || j.State != JobQueued || j.Total != 4 || j.Submitted.IsZero() {
		t.Fatalf("created %+v", j)
	}
	got := must[[]Unit](t)(s.Units(ctx, j.ID))
	for i, u := range got {
		if u.State != UnitPending || !maps.Equal(u.Params, units[i].Params) || u.Off != units[i].Off || !slices.Equal(u.Deps, units[i].Deps) {
			t.Errorf("unit %d stored as %+v", i, u)
		}
	}

	if a := must[int](t)(s.StartUnit(ctx, j.ID, 0, "w1")); a != 1 {
		t.Errorf("attempt %d", a)
	}
	j = must[Job](t)(s.Job(ctx, j.ID))
	if j.State != JobRunning || j.Started.IsZero() || j.Running != 1 {
		t.Errorf("after first start: %+v", j)
	}
	// A backup copy of a running unit is a second attempt.
	if a := must[int](t)(s.StartUnit(ctx, j.ID, 0, "w2")); a != 2 {
		t.Errorf("backup attempt %d", a)
	}
	if c := must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w2", "r0", 500)); !c {
		t.Error("first result not counted")
	}
	if c := must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w1", "r0-late", 700)); c {
		t.Error("second result counted")
	}
	u := must[Unit](t)(s.Unit(ctx, j.ID, 0))
	if u.State != UnitDone || u.Result != "r0" || u.Worker != "w2" || u.ComputeNanos != 500 || u.Attempts != 2 {
		t.Errorf("unit 0: %+v", u)
	}
	for id := uint64(1); id < 4; id++ {
		must[int](t)(s.StartUnit(ctx, j.ID, id, "w1"))
		must[bool](t)(s.FinishUnit(ctx, j.ID, id, "w1", fmt.Sprintf("r%d", id), 100))
	}
	j = must[Job](t)(s.Job(ctx, j.ID))
	if j.Done != 4 || j.Running != 0 || j.ComputeNanos != 800 {
		t.Errorf("counts: %+v", j)
	}
	if err := s.FinishJob(ctx, j.ID, "out"); err != nil {
		t.Fatal(err)
	}
	j = must[Job](t)(s.Job(ctx, j.ID))
	if j.State != JobDone || j.Output != "out" || !j.Finished.After(j.Started) {
		t.Errorf("finished: %+v", j)
	}
	if err := s.FinishJob(ctx, j.ID, "out"); !errors.Is(err, ErrConflict) {
		t.Errorf("finishing twice: %v", err)
	}
	if _, err := s.StartUnit(ctx, j.ID, 1, "w1"); !errors.Is(err, ErrConflict) {
		t.Errorf("start in a done job: %v", err)
	}
	if len(must[[]Job](t)(s.Unfinished(ctx))) != 0 {
		t.Error("done job listed as unfinished")
	}
	if err := s.DeleteJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Job(ctx, j.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted job: %v", err)
	}
	if _, err := s.Units(ctx, j.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("units of a deleted job: %v", err)
	}
}

// TestRestartMidJob closes the database while a job is half done, opens
// it again and finishes the job: nothing accepted is lost.
func TestRestartMidJob(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "braid.db")
	s := openDB(t, path)
	j, units := sampleJob()
	j = must[Job](t)(s.CreateJob(ctx, j, units))
	other := must[Job](t)(s.CreateJob(ctx, Job{Op: "noop", Input: "x"}, []Unit{{ID: 0}}))
	must[int](t)(s.StartUnit(ctx, j.ID, 0, "w1"))
	must[int](t)(s.StartUnit(ctx, j.ID, 1, "w2"))
	must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w1", "r0", 10))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Job(ctx, j.ID); !errors.Is(err, ErrClosed) {
		t.Errorf("use after Close: %v", err)
	}

	s = openDB(t, path)
	todo := must[[]Job](t)(s.Unfinished(ctx))
	if len(todo) != 2 || todo[0].ID != j.ID || todo[1].ID != other.ID || todo[0].State != JobRunning || todo[0].Done != 1 {
		t.Fatalf("unfinished after restart: %+v", todo)
	}
	if n := must[int](t)(s.ResetRunning(ctx)); n != 1 {
		t.Errorf("ResetRunning = %d, want 1", n)
	}
	us := must[[]Unit](t)(s.Units(ctx, j.ID))
	states := []UnitState{us[0].State, us[1].State, us[2].State, us[3].State}
	if !slices.Equal(states, []UnitState{UnitDone, UnitPending, UnitPending, UnitPending}) || us[0].Result != "r0" {
		t.Fatalf("units after restart: %v", states)
	}
	for _, u := range us[1:] {
		must[int](t)(s.StartUnit(ctx, j.ID, u.ID, "w3"))
		must[bool](t)(s.FinishUnit(ctx, j.ID, u.ID, "w3", "r", 10))
	}
	if err := s.FinishJob(ctx, j.ID, "out"); err != nil {
		t.Fatal(err)
	}
	if j := must[Job](t)(s.Job(ctx, j.ID)); j.State != JobDone || j.Done != 4 || j.Running != 0 || j.ComputeNanos != 40 {
		t.Errorf("job after restart: %+v", j)
	}
}

func TestFailCancelRequeue(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, ":memory:")
	j, units := sampleJob()
	a := must[Job](t)(s.CreateJob(ctx, j, units))
	b := must[Job](t)(s.CreateJob(ctx, j, units))

	must[int](t)(s.StartUnit(ctx, a.ID, 0, "w1"))
	must[int](t)(s.StartUnit(ctx, a.ID, 1, "w2"))
	must[int](t)(s.StartUnit(ctx, b.ID, 2, "w1"))
	keys := must[[]UnitKey](t)(s.RequeueWorker(ctx, "w1"))
	if !slices.Equal(keys, []UnitKey{{a.ID, 0}, {b.ID, 2}}) {
		t.Errorf("RequeueWorker = %v", keys)
	}
	if j := must[Job](t)(s.Job(ctx, a.ID)); j.Running != 1 {
		t.Errorf("running after requeue: %d", j.Running)
	}
	if err := s.RequeueUnit(ctx, a.ID, 1); err != nil {
		t.Fatal(err)
	}
	if u := must[Unit](t)(s.Unit(ctx, a.ID, 1)); u.State != UnitPending || u.Attempts != 1 {
		t.Errorf("requeued unit: %+v", u)
	}

	// A failing unit fails the job; its other units are canceled.
	must[int](t)(s.StartUnit(ctx, a.ID, 2, "w2"))
	if err := s.FailUnit(ctx, a.ID, 2, "w2", "corrupt chunk"); err != nil {
		t.Fatal(err)
	}
	if err := s.FailJob(ctx, a.ID, "unit 2: corrupt chunk"); err != nil {
		t.Fatal(err)
	}
	ja := must[Job](t)(s.Job(ctx, a.ID))
	if ja.State != JobFailed || ja.Failed != 1 || ja.Running != 0 || ja.Error != "unit 2: corrupt chunk" {
		t.Errorf("failed job: %+v", ja)
	}
	if u := must[Unit](t)(s.Unit(ctx, a.ID, 0)); u.State != UnitCanceled {
		t.Errorf("unit of a failed job: %s", u.State)
	}
	if c := must[bool](t)(s.FinishUnit(ctx, a.ID, 0, "w1", "late", 1)); c {
		t.Error("result for a failed job counted")
	}
	if err := s.CancelJob(ctx, a.ID, "by user"); !errors.Is(err, ErrConflict) {
		t.Errorf("cancel a failed job: %v", err)
	}

	if err := s.CancelJob(ctx, b.ID, "by user"); err != nil {
		t.Fatal(err)
	}
	if jb := must[Job](t)(s.Job(ctx, b.ID)); jb.State != JobCanceled || jb.Finished.IsZero() {
		t.Errorf("canceled: %+v", jb)
	}
	if _, err := s.StartUnit(ctx, b.ID, 0, "w1"); !errors.Is(err, ErrConflict) {
		t.Errorf("start in a canceled job: %v", err)
	}
	if got := must[[]Job](t)(s.ListJobs(ctx, JobFilter{State: JobCanceled})); len(got) != 1 || got[0].ID != b.ID {
		t.Errorf("ListJobs(canceled) = %v", got)
	}
	if got := must[[]Job](t)(s.ListJobs(ctx, JobFilter{Limit: 1})); len(got) != 1 || got[0].ID != b.ID {
		t.Errorf("ListJobs(limit 1) = %v", got)
	}
}

func TestCreateJobValidates(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, ":memory:")
	for name, units := range map[string][]Unit{
		"none":      nil,
		"duplicate": {{ID: 1}, {ID: 1}},
		"dangling":  {{ID: 1, Deps: []uint64{7}}},
		"self":      {{ID: 1, Deps: []uint64{1}}},
		"huge id":   {{ID: 1 << 63}},
	} {
		if _, err := s.CreateJob(ctx, Job{Op: "noop"}, units); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if jobs := must[[]Job](t)(s.ListJobs(ctx, JobFilter{})); len(jobs) != 0 {
		t.Errorf("a rejected job was stored: %v", jobs)
	}
	j := must[Job](t)(s.CreateJob(ctx, Job{Op: "noop"}, []Unit{{ID: 0}, {ID: 1}}))
	if err := s.FinishJob(ctx, j.ID, "x"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "2 of 2 units are not done") {
		t.Errorf("finishing an unfinished job: %v", err)
	}
	if _, err := s.StartUnit(ctx, j.ID, 9, "w"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown unit: %v", err)
	}
	if _, err := s.StartUnit(ctx, 99, 0, "w"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if err := s.DeleteJob(ctx, j.ID); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "cancel it first") {
		t.Errorf("deleting an unfinished job: %v", err)
	}
}

// TestFirstResultCountsOnce races results for the same unit.
func TestFirstResultCountsOnce(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, filepath.Join(t.TempDir(), "race.db"))
	j := must[Job](t)(s.CreateJob(ctx, Job{Op: "noop"}, []Unit{{ID: 0}, {ID: 1}}))
	var counted atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			w := fmt.Sprintf("w%d", i)
			if _, err := s.StartUnit(ctx, j.ID, 0, w); err != nil && !errors.Is(err, ErrConflict) {
				t.Error(err)
			}
			c, err := s.FinishUnit(ctx, j.ID, 0, w, "r", 1)
			if err != nil {
				t.Error(err)
			}
			if c {
				counted.Add(1)
			}
		})
	}
	wg.Wait()
	if n := counted.Load(); n != 1 {
		t.Errorf("%d results counted, want 1", n)
	}
	if j := must[Job](t)(s.Job(ctx, j.ID)); j.Done != 1 || j.ComputeNanos != 1 {
		t.Errorf("job: %+v", j)
	}
}

func TestBlobUsers(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, ":memory:")
	in, data, res := strings.Repeat("1", 64), strings.Repeat("2", 64), strings.Repeat("3", 64)
	a := must[Job](t)(s.CreateJob(ctx, Job{Op: "blur", Input: in}, []Unit{{ID: 0, Blob: data}, {ID: 1, Blob: data}}))
	b := must[Job](t)(s.CreateJob(ctx, Job{Op: "blur", Input: data}, []Unit{{ID: 0}}))
	must[int](t)(s.StartUnit(ctx, b.ID, 0, "w"))
	must[bool](t)(s.FinishUnit(ctx, b.ID, 0, "w", res, 1))
	for blob, want := range map[string][]uint64{in: {a.ID}, data: {a.ID, b.ID}, res: {b.ID}, strings.Repeat("4", 64): nil} {
		if got := must[[]uint64](t)(s.BlobUsers(ctx, blob)); !slices.Equal(got, want) {
			t.Errorf("BlobUsers(%s...) = %v, want %v", blob[:4], got, want)
		}
	}
	if err := s.CancelJob(ctx, a.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := must[[]uint64](t)(s.BlobUsers(ctx, in)); len(got) != 0 {
		t.Errorf("a canceled job still uses its input: %v", got)
	}
}

func TestWorkers(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, ":memory:")
	w1 := must[Worker](t)(s.RegisterWorker(ctx, Worker{Name: "c1", Addresses: []string{"10.0.0.1:7420", "10.1.0.1:7420"},
		Cores: 2, Memory: 1 << 30, Disk: 10 << 30, CPUMHz: 2530, Threads: 2, Ops: []string{"blur", "noop"}}))
	w2 := must[Worker](t)(s.RegisterWorker(ctx, Worker{Name: "c3", Threads: 1, Ops: []string{"blur"}}))
	if w1.ID != "w1" || w2.ID != "w2" || w1.Registered.IsZero() || !slices.Equal(w1.Addresses, []string{"10.0.0.1:7420", "10.1.0.1:7420"}) {
		t.Fatalf("registered %+v and %+v", w1, w2)
	}
	if err := s.Heartbeat(ctx, "w1", 2, 1, 0.75); err != nil {
		t.Fatal(err)
	}
	got := must[Worker](t)(s.Worker(ctx, "w1"))
	if got.Running != 2 || got.Queued != 1 || got.Load != 0.75 || !got.LastSeen.After(w1.LastSeen) {
		t.Errorf("after heartbeat: %+v", got)
	}
	// Re-registration updates what the worker said, keeping its history.
	j := must[Job](t)(s.CreateJob(ctx, Job{Op: "noop"}, []Unit{{ID: 0}}))
	must[int](t)(s.StartUnit(ctx, j.ID, 0, "w1"))
	must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w1", "r", 1))
	up := must[Worker](t)(s.RegisterWorker(ctx, Worker{ID: "w1", Name: "c1", Threads: 3, Ops: []string{"blur"}}))
	if up.Threads != 3 || up.Done != 1 || !up.Registered.Equal(w1.Registered) {
		t.Errorf("updated: %+v", up)
	}
	if _, err := s.RegisterWorker(ctx, Worker{ID: "w9"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of an unknown worker: %v", err)
	}
	if err := s.Heartbeat(ctx, "w9", 0, 0, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("heartbeat of an unknown worker: %v", err)
	}
	if err := s.DeleteWorker(ctx, "w2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorker(ctx, "w2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	// IDs are never reused.
	w3 := must[Worker](t)(s.RegisterWorker(ctx, Worker{Name: "new"}))
	if ws := must[[]Worker](t)(s.Workers(ctx)); w3.ID != "w3" || len(ws) != 2 || ws[0].ID != "w1" {
		t.Errorf("workers: %+v", ws)
	}
}

func TestSchemaNewerThanBuild(t *testing.T) {
	path := filepath.Join(t.TempDir(), "future.db")
	s := openDB(t, path)
	if _, err := s.db.ExecContext(t.Context(), "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := OpenSQLite(context.Background(), path, nil)
	if err == nil || !strings.Contains(err.Error(), "upgrade braid") {
		t.Errorf("opening a newer schema: %v", err)
	}
}

func BenchmarkFinishUnit(b *testing.B) {
	ctx := b.Context()
	s := openDB(b, filepath.Join(b.TempDir(), "bench.db"))
	units := make([]Unit, 1<<14)
	for i := range units {
		units[i].ID = uint64(i)
	}
	var j Job
	i := len(units)
	for b.Loop() {
		if i == len(units) {
			j = must[Job](b)(s.CreateJob(ctx, Job{Op: "noop"}, units))
			i = 0
		}
		must[int](b)(s.StartUnit(ctx, j.ID, uint64(i), "w1"))
		must[bool](b)(s.FinishUnit(ctx, j.ID, uint64(i), "w1", "r", 1))
		i++
	}
}

// TestFinishUnits checks the batch against FinishUnit's rules: the first
// result counts, finished jobs and unknown units do not, and the counters
// and credits add up.
func TestFinishUnits(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, filepath.Join(t.TempDir(), "batch.db"))
	w := must[Worker](t)(s.RegisterWorker(ctx, Worker{Addresses: []string{"a:1"}, Threads: 1, Ops: []string{"noop"}}))
	j := must[Job](t)(s.CreateJob(ctx, Job{Op: "noop"}, []Unit{{ID: 0}, {ID: 1}, {ID: 2}}))
	gone := must[Job](t)(s.CreateJob(ctx, Job{Op: "noop"}, []Unit{{ID: 0}}))
	if err := s.CancelJob(ctx, gone.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	must[int](t)(s.StartUnit(ctx, j.ID, 1, w.ID))
	counted, err := s.FinishUnits(ctx, []UnitResult{
		{Job: j.ID, ID: 0, Worker: w.ID, Result: "r0", ComputeNanos: 5},
		{Job: j.ID, ID: 1, Worker: w.ID, Result: "r1", ComputeNanos: 7},
		{Job: j.ID, ID: 0, Worker: "w9", Result: "dup", ComputeNanos: 100}, // second result
		{Job: j.ID, ID: 42, Worker: w.ID, Result: "x"},                     // unknown unit
		{Job: gone.ID, ID: 0, Worker: w.ID, Result: "x"},                   // canceled job
		{Job: 999, ID: 0, Worker: w.ID, Result: "x"},                       // unknown job
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, false, false, false, false}; !slices.Equal(counted, want) {
		t.Errorf("counted = %v, want %v", counted, want)
	}
	got := must[Job](t)(s.Job(ctx, j.ID))
	if got.Done != 2 || got.Running != 0 || got.ComputeNanos != 12 {
		t.Errorf("job counters: done %d running %d compute %d; want 2, 0, 12", got.Done, got.Running, got.ComputeNanos)
	}
	if u := must[Unit](t)(s.Unit(ctx, j.ID, 0)); u.State != UnitDone || u.Result != "r0" || u.Worker != w.ID {
		t.Errorf("unit 0: %+v", u)
	}
	if w := must[Worker](t)(s.Worker(ctx, w.ID)); w.Done != 2 {
		t.Errorf("worker credited %d units, want 2", w.Done)
	}
	// The last unit through the batch lets the job finish.
	if _, err := s.FinishUnits(ctx, []UnitResult{{Job: j.ID, ID: 2, Worker: w.ID, Result: "r2"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishJob(ctx, j.ID, "out"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFinishUnits records results in batches of 256, as a busy
// server does.
func BenchmarkFinishUnits(b *testing.B) {
	ctx := b.Context()
	s := openDB(b, filepath.Join(b.TempDir(), "bench.db"))
	units := make([]Unit, 1<<14)
	for i := range units {
		units[i].ID = uint64(i)
	}
	const batch = 256
	var j Job
	i := len(units)
	rs := make([]UnitResult, 0, batch)
	for b.Loop() {
		if i == len(units) {
			j = must[Job](b)(s.CreateJob(ctx, Job{Op: "noop"}, units))
			i = 0
		}
		rs = rs[:0]
		for k := range batch {
			rs = append(rs, UnitResult{Job: j.ID, ID: uint64(i + k), Worker: "w1", Result: "r", ComputeNanos: 1})
		}
		must[[]bool](b)(s.FinishUnits(ctx, rs))
		i += batch
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "units/s")
}

func TestCreateJobManyUnitsRoundTrip(t *testing.T) {
	// More units than one INSERT carries, and not a multiple of it: every
	// unit must come back as given, in order.
	ctx := t.Context()
	s := openDB(t, ":memory:")
	n := 2*unitInsertBatch + 37
	j := Job{Op: "checksum", Input: strings.Repeat("b", 64), Params: map[string]string{"block": "4096"}}
	units := make([]Unit, n)
	for i := range units {
		units[i] = Unit{ID: uint64(i), Blob: j.Input, Off: int64(i) * 10, Len: int64(i%7 + 1)}
		if i%3 == 0 {
			units[i].Params = map[string]string{"block": "4096", "i": fmt.Sprint(i)}
		}
		if i > 0 && i%50 == 0 {
			units[i].Deps = []uint64{uint64(i - 1), uint64(i - 2)}
		}
	}
	j = must[Job](t)(s.CreateJob(ctx, j, units))
	if j.Total != n {
		t.Fatalf("job total %d, want %d", j.Total, n)
	}
	got := must[[]Unit](t)(s.Units(ctx, j.ID))
	if len(got) != n {
		t.Fatalf("%d units stored, want %d", len(got), n)
	}
	for i, u := range got {
		want := units[i]
		if u.ID != want.ID || u.Off != want.Off || u.Len != want.Len || u.Blob != want.Blob ||
			!maps.Equal(u.Params, want.Params) || !slices.Equal(u.Deps, want.Deps) || u.State != UnitPending {
			t.Fatalf("unit %d stored as %+v, want %+v", i, u, want)
		}
	}
}

// TestJobCounts counts jobs by state as they move.
func TestJobCounts(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, filepath.Join(t.TempDir(), "braid.db"))
	if c := must[map[JobState]int](t)(s.JobCounts(ctx)); len(c) != 0 {
		t.Errorf("empty store: %v", c)
	}
	var ids []uint64
	for range 4 {
		ids = append(ids, must[Job](t)(s.CreateJob(ctx, Job{Op: "noop", Input: "x"}, []Unit{{ID: 0}})).ID)
	}
	must[int](t)(s.StartUnit(ctx, ids[0], 0, "w1"))
	if err := s.FailJob(ctx, ids[1], "broken"); err != nil {
		t.Fatal(err)
	}
	if err := s.CancelJob(ctx, ids[2], "stop"); err != nil {
		t.Fatal(err)
	}
	got := must[map[JobState]int](t)(s.JobCounts(ctx))
	want := map[JobState]int{JobRunning: 1, JobFailed: 1, JobCanceled: 1, JobQueued: 1}
	if !maps.Equal(got, want) {
		t.Errorf("JobCounts = %v, want %v", got, want)
	}
}
