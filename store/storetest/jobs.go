package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/braid-hpc/braid/store"
)

// The behaviour every store.Meta shares, from store's own tests of
// SQLite: each runs on a fresh database of every backend.

func testJobLifecycle(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	j, units := sampleJob()
	j = must[store.Job](t)(s.CreateJob(ctx, j, units))
	if j.ID != 1 || j.State != store.JobQueued || j.Total != 4 || j.Submitted.IsZero() {
		t.Fatalf("created %+v", j)
	}
	got := must[[]store.Unit](t)(s.Units(ctx, j.ID))
	for i, u := range got {
		if u.State != store.UnitPending || !maps.Equal(u.Params, units[i].Params) || u.Off != units[i].Off || !slices.Equal(u.Deps, units[i].Deps) {
			t.Errorf("unit %d stored as %+v", i, u)
		}
	}

	if a := must[int](t)(s.StartUnit(ctx, j.ID, 0, "w1")); a != 1 {
		t.Errorf("attempt %d", a)
	}
	j = must[store.Job](t)(s.Job(ctx, j.ID))
	if j.State != store.JobRunning || j.Started.IsZero() || j.Running != 1 {
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
	u := must[store.Unit](t)(s.Unit(ctx, j.ID, 0))
	if u.State != store.UnitDone || u.Result != "r0" || u.Worker != "w2" || u.ComputeNanos != 500 || u.Attempts != 2 {
		t.Errorf("unit 0: %+v", u)
	}
	for id := uint64(1); id < 4; id++ {
		must[int](t)(s.StartUnit(ctx, j.ID, id, "w1"))
		must[bool](t)(s.FinishUnit(ctx, j.ID, id, "w1", fmt.Sprintf("r%d", id), 100))
	}
	j = must[store.Job](t)(s.Job(ctx, j.ID))
	if j.Done != 4 || j.Running != 0 || j.ComputeNanos != 800 {
		t.Errorf("counts: %+v", j)
	}
	if err := s.FinishJob(ctx, j.ID, "out"); err != nil {
		t.Fatal(err)
	}
	j = must[store.Job](t)(s.Job(ctx, j.ID))
	if j.State != store.JobDone || j.Output != "out" || !j.Finished.After(j.Started) {
		t.Errorf("finished: %+v", j)
	}
	if err := s.FinishJob(ctx, j.ID, "out"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("finishing twice: %v", err)
	}
	if _, err := s.StartUnit(ctx, j.ID, 1, "w1"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("start in a done job: %v", err)
	}
	if len(must[[]store.Job](t)(s.Unfinished(ctx))) != 0 {
		t.Error("done job listed as unfinished")
	}
	if err := s.DeleteJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Job(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted job: %v", err)
	}
	if _, err := s.Units(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("units of a deleted job: %v", err)
	}
}

// testRestartMidJob closes the database while a job is half done, opens
// it again and finishes the job: nothing accepted is lost.
func testRestartMidJob(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	j, units := sampleJob()
	j = must[store.Job](t)(s.CreateJob(ctx, j, units))
	other := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop", Input: "x"}, []store.Unit{{ID: 0}}))
	must[int](t)(s.StartUnit(ctx, j.ID, 0, "w1"))
	must[int](t)(s.StartUnit(ctx, j.ID, 1, "w2"))
	must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w1", "r0", 10))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Job(ctx, j.ID); !errors.Is(err, store.ErrClosed) {
		t.Errorf("use after Close: %v", err)
	}

	s = h.open(t)
	todo := must[[]store.Job](t)(s.Unfinished(ctx))
	if len(todo) != 2 || todo[0].ID != j.ID || todo[1].ID != other.ID || todo[0].State != store.JobRunning || todo[0].Done != 1 {
		t.Fatalf("unfinished after restart: %+v", todo)
	}
	if n := must[int](t)(s.ResetRunning(ctx)); n != 1 {
		t.Errorf("ResetRunning = %d, want 1", n)
	}
	us := must[[]store.Unit](t)(s.Units(ctx, j.ID))
	states := []store.UnitState{us[0].State, us[1].State, us[2].State, us[3].State}
	if !slices.Equal(states, []store.UnitState{store.UnitDone, store.UnitPending, store.UnitPending, store.UnitPending}) || us[0].Result != "r0" {
		t.Fatalf("units after restart: %v", states)
	}
	for _, u := range us[1:] {
		must[int](t)(s.StartUnit(ctx, j.ID, u.ID, "w3"))
		must[bool](t)(s.FinishUnit(ctx, j.ID, u.ID, "w3", "r", 10))
	}
	if err := s.FinishJob(ctx, j.ID, "out"); err != nil {
		t.Fatal(err)
	}
	if j := must[store.Job](t)(s.Job(ctx, j.ID)); j.State != store.JobDone || j.Done != 4 || j.Running != 0 || j.ComputeNanos != 40 {
		t.Errorf("job after restart: %+v", j)
	}
}

func testFailCancelRequeue(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	j, units := sampleJob()
	a := must[store.Job](t)(s.CreateJob(ctx, j, units))
	b := must[store.Job](t)(s.CreateJob(ctx, j, units))

	must[int](t)(s.StartUnit(ctx, a.ID, 0, "w1"))
	must[int](t)(s.StartUnit(ctx, a.ID, 1, "w2"))
	must[int](t)(s.StartUnit(ctx, b.ID, 2, "w1"))
	keys := must[[]store.UnitKey](t)(s.RequeueWorker(ctx, "w1"))
	if !slices.Equal(keys, []store.UnitKey{{Job: a.ID, ID: 0}, {Job: b.ID, ID: 2}}) {
		t.Errorf("RequeueWorker = %v", keys)
	}
	if j := must[store.Job](t)(s.Job(ctx, a.ID)); j.Running != 1 {
		t.Errorf("running after requeue: %d", j.Running)
	}
	if err := s.RequeueUnit(ctx, a.ID, 1); err != nil {
		t.Fatal(err)
	}
	if u := must[store.Unit](t)(s.Unit(ctx, a.ID, 1)); u.State != store.UnitPending || u.Attempts != 1 {
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
	ja := must[store.Job](t)(s.Job(ctx, a.ID))
	if ja.State != store.JobFailed || ja.Failed != 1 || ja.Running != 0 || ja.Error != "unit 2: corrupt chunk" {
		t.Errorf("failed job: %+v", ja)
	}
	if u := must[store.Unit](t)(s.Unit(ctx, a.ID, 0)); u.State != store.UnitCanceled {
		t.Errorf("unit of a failed job: %s", u.State)
	}
	if c := must[bool](t)(s.FinishUnit(ctx, a.ID, 0, "w1", "late", 1)); c {
		t.Error("result for a failed job counted")
	}
	if err := s.CancelJob(ctx, a.ID, "by user"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("cancel a failed job: %v", err)
	}

	if err := s.CancelJob(ctx, b.ID, "by user"); err != nil {
		t.Fatal(err)
	}
	if jb := must[store.Job](t)(s.Job(ctx, b.ID)); jb.State != store.JobCanceled || jb.Finished.IsZero() {
		t.Errorf("canceled: %+v", jb)
	}
	if _, err := s.StartUnit(ctx, b.ID, 0, "w1"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("start in a canceled job: %v", err)
	}
	if got := must[[]store.Job](t)(s.ListJobs(ctx, store.JobFilter{State: store.JobCanceled})); len(got) != 1 || got[0].ID != b.ID {
		t.Errorf("ListJobs(canceled) = %v", got)
	}
	if got := must[[]store.Job](t)(s.ListJobs(ctx, store.JobFilter{Limit: 1})); len(got) != 1 || got[0].ID != b.ID {
		t.Errorf("ListJobs(limit 1) = %v", got)
	}
}

func testCreateJobValidates(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	for name, units := range map[string][]store.Unit{
		"none":      nil,
		"duplicate": {{ID: 1}, {ID: 1}},
		"dangling":  {{ID: 1, Deps: []uint64{7}}},
		"self":      {{ID: 1, Deps: []uint64{1}}},
		"huge id":   {{ID: 1 << 63}},
	} {
		if _, err := s.CreateJob(ctx, store.Job{Op: "noop"}, units); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if jobs := must[[]store.Job](t)(s.ListJobs(ctx, store.JobFilter{})); len(jobs) != 0 {
		t.Errorf("a rejected job was stored: %v", jobs)
	}
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}, {ID: 1}}))
	if err := s.FinishJob(ctx, j.ID, "x"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "2 of 2 units are not done") {
		t.Errorf("finishing an unfinished job: %v", err)
	}
	if _, err := s.StartUnit(ctx, j.ID, 9, "w"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown unit: %v", err)
	}
	if _, err := s.StartUnit(ctx, 99, 0, "w"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if err := s.DeleteJob(ctx, j.ID); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "cancel it first") {
		t.Errorf("deleting an unfinished job: %v", err)
	}
}

// testFirstResultCountsOnce races results for the same unit.
func testFirstResultCountsOnce(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}, {ID: 1}}))
	var counted atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			w := fmt.Sprintf("w%d", i)
			if _, err := s.StartUnit(ctx, j.ID, 0, w); err != nil && !errors.Is(err, store.ErrConflict) {
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
	if j := must[store.Job](t)(s.Job(ctx, j.ID)); j.Done != 1 || j.ComputeNanos != 1 {
		t.Errorf("job: %+v", j)
	}
}

func testBlobUsers(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	in, data, res := strings.Repeat("1", 64), strings.Repeat("2", 64), strings.Repeat("3", 64)
	a := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "blur", Input: in}, []store.Unit{{ID: 0, Blob: data}, {ID: 1, Blob: data}}))
	b := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "blur", Input: data}, []store.Unit{{ID: 0}}))
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

func testWorkers(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	w1 := must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{Name: "c1", Addresses: []string{"10.0.0.1:7420", "10.1.0.1:7420"},
		Cores: 2, Memory: 1 << 30, Disk: 10 << 30, CPUMHz: 2530, Threads: 2, Ops: []string{"blur", "noop"}}))
	w2 := must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{Name: "c3", Threads: 1, Ops: []string{"blur"}}))
	if w1.ID != "w1" || w2.ID != "w2" || w1.Registered.IsZero() || !slices.Equal(w1.Addresses, []string{"10.0.0.1:7420", "10.1.0.1:7420"}) {
		t.Fatalf("registered %+v and %+v", w1, w2)
	}
	// One batch of beats updates each worker named, and skips a worker
	// no longer stored.
	if n, err := s.Heartbeats(ctx, []store.Beat{{Worker: "w1", Running: 2, Queued: 1, Load: 0.75},
		{Worker: "w9", Running: 5}, {Worker: "w2", Queued: 3, Load: 0.5}}); n != 2 || err != nil {
		t.Fatalf("heartbeats of w1, w9 and w2: %d updated, %v", n, err)
	}
	got := must[store.Worker](t)(s.Worker(ctx, "w1"))
	if got.Running != 2 || got.Queued != 1 || got.Load != 0.75 || !got.LastSeen.After(w1.LastSeen) {
		t.Errorf("after heartbeat: %+v", got)
	}
	if got := must[store.Worker](t)(s.Worker(ctx, "w2")); got.Running != 0 || got.Queued != 3 || got.Load != 0.5 || !got.LastSeen.After(w2.LastSeen) {
		t.Errorf("w2 after heartbeat: %+v", got)
	}
	if n, err := s.Heartbeats(ctx, nil); n != 0 || err != nil {
		t.Errorf("no heartbeats: %d, %v", n, err)
	}
	// Re-registration updates what the worker said, keeping its history.
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}}))
	must[int](t)(s.StartUnit(ctx, j.ID, 0, "w1"))
	must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w1", "r", 1))
	up := must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{ID: "w1", Name: "c1", Threads: 3, Ops: []string{"blur"}}))
	if up.Threads != 3 || up.Done != 1 || !up.Registered.Equal(w1.Registered) {
		t.Errorf("updated: %+v", up)
	}
	if _, err := s.RegisterWorker(ctx, store.Worker{ID: "w9"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update of an unknown worker: %v", err)
	}
	if n, err := s.Heartbeats(ctx, []store.Beat{{Worker: "w9"}}); n != 0 || err != nil {
		t.Errorf("heartbeat of an unknown worker: %d updated, %v", n, err)
	}
	if err := s.DeleteWorker(ctx, "w2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorker(ctx, "w2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	// IDs are never reused.
	w3 := must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{Name: "new"}))
	if ws := must[[]store.Worker](t)(s.Workers(ctx)); w3.ID != "w3" || len(ws) != 2 || ws[0].ID != "w1" {
		t.Errorf("workers: %+v", ws)
	}
}

// testFinishUnits checks the batch against FinishUnit's rules: the first
// result counts, finished jobs and unknown units do not, and the counters
// and credits add up.
func testFinishUnits(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	w := must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{Addresses: []string{"a:1"}, Threads: 1, Ops: []string{"noop"}}))
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}, {ID: 1}, {ID: 2}}))
	gone := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}}))
	if err := s.CancelJob(ctx, gone.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	must[int](t)(s.StartUnit(ctx, j.ID, 1, w.ID))
	counted, err := s.FinishUnits(ctx, []store.UnitResult{
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
	got := must[store.Job](t)(s.Job(ctx, j.ID))
	if got.Done != 2 || got.Running != 0 || got.ComputeNanos != 12 {
		t.Errorf("job counters: done %d running %d compute %d; want 2, 0, 12", got.Done, got.Running, got.ComputeNanos)
	}
	if u := must[store.Unit](t)(s.Unit(ctx, j.ID, 0)); u.State != store.UnitDone || u.Result != "r0" || u.Worker != w.ID {
		t.Errorf("unit 0: %+v", u)
	}
	if w := must[store.Worker](t)(s.Worker(ctx, w.ID)); w.Done != 2 {
		t.Errorf("worker credited %d units, want 2", w.Done)
	}
	// The last unit through the batch lets the job finish.
	if _, err := s.FinishUnits(ctx, []store.UnitResult{{Job: j.ID, ID: 2, Worker: w.ID, Result: "r2"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishJob(ctx, j.ID, "out"); err != nil {
		t.Fatal(err)
	}
}

func testCreateJobManyUnitsRoundTrip(t *testing.T, h *harness) {
	// More units than one INSERT carries, and not a multiple of it: every
	// unit must come back as given, in order.
	ctx := t.Context()
	s := h.open(t)
	n := 2*8192 + 37 // past the batches of both stores (128 and 8192 units)
	j := store.Job{Op: "checksum", Input: strings.Repeat("b", 64), Params: map[string]string{"block": "4096"}}
	units := make([]store.Unit, n)
	for i := range units {
		units[i] = store.Unit{ID: uint64(i), Blob: j.Input, Off: int64(i) * 10, Len: int64(i%7 + 1)}
		if i%3 == 0 {
			units[i].Params = map[string]string{"block": "4096", "i": fmt.Sprint(i)}
		}
		if i > 0 && i%50 == 0 {
			units[i].Deps = []uint64{uint64(i - 1), uint64(i - 2)}
		}
	}
	j = must[store.Job](t)(s.CreateJob(ctx, j, units))
	if j.Total != n {
		t.Fatalf("job total %d, want %d", j.Total, n)
	}
	got := must[[]store.Unit](t)(s.Units(ctx, j.ID))
	if len(got) != n {
		t.Fatalf("%d units stored, want %d", len(got), n)
	}
	for i, u := range got {
		want := units[i]
		if u.ID != want.ID || u.Off != want.Off || u.Len != want.Len || u.Blob != want.Blob ||
			!maps.Equal(u.Params, want.Params) || !slices.Equal(u.Deps, want.Deps) || u.State != store.UnitPending {
			t.Fatalf("unit %d stored as %+v, want %+v", i, u, want)
		}
	}
}

// testJobCounts counts jobs by state as they move.
func testJobCounts(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	if c := must[map[store.JobState]int](t)(s.JobCounts(ctx)); len(c) != 0 {
		t.Errorf("empty store: %v", c)
	}
	var ids []uint64
	for range 4 {
		ids = append(ids, must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop", Input: "x"}, []store.Unit{{ID: 0}})).ID)
	}
	must[int](t)(s.StartUnit(ctx, ids[0], 0, "w1"))
	if err := s.FailJob(ctx, ids[1], "broken"); err != nil {
		t.Fatal(err)
	}
	if err := s.CancelJob(ctx, ids[2], "stop"); err != nil {
		t.Fatal(err)
	}
	got := must[map[store.JobState]int](t)(s.JobCounts(ctx))
	want := map[store.JobState]int{store.JobRunning: 1, store.JobFailed: 1, store.JobCanceled: 1, store.JobQueued: 1}
	if !maps.Equal(got, want) {
		t.Errorf("JobCounts = %v, want %v", got, want)
	}
}

func testTokens(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	a := must[store.Token](t)(s.AddToken(ctx, store.Token{ID: "00000000000000aa", Hash: "h1", Name: "ci", Role: "client"}))
	if a.Created.IsZero() || !a.LastUsed.IsZero() || !a.Revoked.IsZero() {
		t.Errorf("new token %+v", a)
	}
	b := must[store.Token](t)(s.AddToken(ctx, store.Token{ID: "00000000000000bb", Hash: "h2", Name: "node7", Role: "worker"}))
	for _, dup := range []store.Token{
		{ID: "00000000000000cc", Hash: "h3", Name: "ci", Role: "admin"},          // name
		{ID: "00000000000000cc", Hash: "h1", Name: "other", Role: "admin"},       // hash
		{ID: "00000000000000aa", Hash: "h4", Name: "other-again", Role: "admin"}, // id
	} {
		if _, err := s.AddToken(ctx, dup); !errors.Is(err, store.ErrConflict) {
			t.Errorf("duplicate %+v: %v", dup, err)
		}
	}
	used := b.Created.Add(90 * 1e9)
	if err := s.TouchToken(ctx, b.ID, used); err != nil {
		t.Fatal(err)
	}
	// An older use does not move it back.
	if err := s.TouchToken(ctx, b.ID, b.Created); err != nil {
		t.Fatal(err)
	}
	// Revoke by name, then by ID; a second revocation is a conflict.
	r := must[store.Token](t)(s.RevokeToken(ctx, "ci"))
	if r.ID != a.ID || r.Revoked.IsZero() {
		t.Errorf("revoked %+v", r)
	}
	if _, err := s.RevokeToken(ctx, a.ID); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "was revoked at") {
		t.Errorf("second revocation: %v", err)
	}
	if _, err := s.RevokeToken(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoking a missing token: %v", err)
	}
	list := must[[]store.Token](t)(s.Tokens(ctx))
	if len(list) != 2 || list[0].ID != a.ID || list[0].Revoked.IsZero() || list[1].ID != b.ID ||
		!list[1].LastUsed.Equal(used) || !list[1].Revoked.IsZero() || list[1].Hash != "h2" || list[1].Role != "worker" {
		t.Errorf("tokens %+v", list)
	}
}

// testTimeline keeps a job's timeline, replaces it, reads it after the
// database is reopened, and checks that it goes with the job.
func testTimeline(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "checksum", Input: "in"}, []store.Unit{{ID: 0, Blob: "in", Len: 1}}))
	if _, err := s.Timeline(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("timeline before any was saved: %v, want store.ErrNotFound", err)
	}
	if err := s.SaveTimeline(ctx, j.ID, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTimeline(ctx, j.ID, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTimeline(ctx, 999, []byte("x")); err == nil {
		t.Error("saved the timeline of a job that does not exist")
	}
	if err := s.SaveTimeline(ctx, j.ID, make([]byte, store.MaxTimeline+1)); err == nil {
		t.Error("saved a timeline over the limit")
	}
	s.Close()
	s = h.open(t)
	if got := must[[]byte](t)(s.Timeline(ctx, j.ID)); string(got) != "second" {
		t.Errorf("timeline after reopening = %q, want %q", got, "second")
	}
	if err := s.CancelJob(ctx, j.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Timeline(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("timeline of a deleted job: %v, want store.ErrNotFound", err)
	}
}

// testIsModule: a module stays a module after its operation is removed;
// other hashes are not.
func testIsModule(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	mod, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	if _, err := s.AddOp(ctx, store.UserOp{Name: "cat", Hash: mod, Size: 10}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveOp(ctx, "cat"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.IsModule(ctx, mod); !ok || err != nil {
		t.Errorf("IsModule(module of a removed op) = %v, %v", ok, err)
	}
	if ok, err := s.IsModule(ctx, other); ok || err != nil {
		t.Errorf("IsModule(other) = %v, %v", ok, err)
	}
}

// sampleJob is a checksum-like DAG: three chunk units and a reduce unit
// that depends on them.
func sampleJob() (store.Job, []store.Unit) {
	j := store.Job{Op: "checksum", Input: strings.Repeat("a", 64), Params: map[string]string{"block": "4096"},
		Units: 3, Repeat: 1, Policy: "dynamic", InFlight: 2}
	units := []store.Unit{
		{ID: 0, Params: map[string]string{"block": "4096", "step": "chunk"}, Blob: j.Input, Off: 0, Len: 100},
		{ID: 1, Params: map[string]string{"block": "4096", "step": "chunk"}, Blob: j.Input, Off: 100, Len: 100},
		{ID: 2, Params: map[string]string{"block": "4096", "step": "chunk"}, Blob: j.Input, Off: 200, Len: 50},
		{ID: 3, Params: map[string]string{"block": "4096", "step": "reduce"}, Deps: []uint64{0, 1, 2}},
	}
	return j, units
}
