package storetest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/store"
)

// testSharedDatabase gives two handles on one database, as two servers
// have, the same results at once, one by one and in batches, while one
// handle requeues the worker: each unit counts once, and the job's
// counters and the worker's credit agree with the units.
func testSharedDatabase(t *testing.T, h *harness) {
	ctx := t.Context()
	a, b := h.open(t), h.open(t)
	w := must[store.Worker](t)(a.RegisterWorker(ctx, store.Worker{Name: "w", Threads: 1}))
	const n = 64
	units := make([]store.Unit, n)
	for i := range units {
		units[i].ID = uint64(i)
	}
	j := must[store.Job](t)(a.CreateJob(ctx, store.Job{Op: "noop"}, units))
	for i := range n / 2 {
		must[int](t)(b.StartUnit(ctx, j.ID, uint64(i), w.ID))
	}
	var counted atomic.Int32
	var wg sync.WaitGroup
	for k, s := range []store.Meta{a, b, a, b} {
		wg.Go(func() {
			if k == 2 {
				if _, err := s.RequeueWorker(ctx, w.ID); err != nil {
					t.Error(err)
				}
			}
			for i := range n {
				if k%2 == 0 {
					c, err := s.FinishUnit(ctx, j.ID, uint64(i), w.ID, "r", 1)
					if err != nil {
						t.Error(err)
					}
					if c {
						counted.Add(1)
					}
					continue
				}
				cs, err := s.FinishUnits(ctx, []store.UnitResult{{Job: j.ID, ID: uint64(i), Worker: w.ID, Result: "r", ComputeNanos: 1}})
				if err != nil {
					t.Error(err)
				}
				if len(cs) == 1 && cs[0] {
					counted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if c := counted.Load(); c != n {
		t.Errorf("%d results counted, want %d", c, n)
	}
	got := must[store.Job](t)(b.Job(ctx, j.ID))
	if got.Done != n || got.Running != 0 || got.ComputeNanos != n {
		t.Errorf("job counters: done %d running %d compute %d; want %d, 0, %d", got.Done, got.Running, got.ComputeNanos, n, n)
	}
	if w := must[store.Worker](t)(a.Worker(ctx, w.ID)); w.Done != n {
		t.Errorf("worker credited %d units, want %d", w.Done, n)
	}
	if err := b.FinishJob(ctx, j.ID, "out"); err != nil {
		t.Fatal(err)
	}
	// Both hand out new IDs from one sequence.
	j2 := must[store.Job](t)(b.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}}))
	j3 := must[store.Job](t)(a.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}}))
	w2 := must[store.Worker](t)(b.RegisterWorker(ctx, store.Worker{Name: "w2"}))
	if j2.ID != j.ID+1 || j3.ID != j.ID+2 || w2.ID != "w2" {
		t.Errorf("IDs after a first job and worker: jobs %d, %d, worker %s; want %d, %d, w2", j2.ID, j3.ID, w2.ID, j.ID+1, j.ID+2)
	}
}

// testRetryAndTries retries a unit, records tries, and reads them back.
func testRetryAndTries(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}, {ID: 1}, {ID: 2}}))
	must[int](t)(s.StartUnit(ctx, j.ID, 1, "w1"))
	if err := s.RetryUnit(ctx, j.ID, 1, "w1", "trap"); err != nil {
		t.Fatal(err)
	}
	u := must[store.Unit](t)(s.Unit(ctx, j.ID, 1))
	got := must[store.Job](t)(s.Job(ctx, j.ID))
	if u.State != store.UnitPending || u.Error != "trap" || got.Retries != 1 || got.Running != 0 {
		t.Errorf("after a retry: unit %+v, job retries %d running %d", u, got.Retries, got.Running)
	}
	if err := s.RetryUnit(ctx, j.ID, 9, "w1", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("retry of an unknown unit: %v", err)
	}
	if _, total, err := s.Tries(ctx, j.ID, 10); err != nil || total != 0 {
		t.Errorf("tries before any: %d, %v", total, err)
	}
	if err := s.SaveTries(ctx, j.ID, []store.UnitTries{{Unit: 1, Fails: 2, Lost: 1, Error: "oom"}, {Unit: 2, Lost: 3}}); err != nil {
		t.Fatal(err)
	}
	// Counts replaced; an empty error keeps the one before.
	if err := s.SaveTries(ctx, j.ID, []store.UnitTries{{Unit: 1, Fails: 3, Lost: 1}}); err != nil {
		t.Fatal(err)
	}
	tries, total := func() ([]store.UnitTries, int) {
		tr, n, err := s.Tries(ctx, j.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		return tr, n
	}()
	if total != 2 || len(tries) != 1 || tries[0] != (store.UnitTries{Unit: 1, Fails: 3, Lost: 1, Error: "oom"}) {
		t.Errorf("Tries(limit 1) = %+v of %d", tries, total)
	}
	if err := s.CancelJob(ctx, j.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	if err := s.RetryUnit(ctx, j.ID, 0, "w1", "late"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("retry in a canceled job: %v", err)
	}
}

// testSetUnits creates a job that waits for its input and gives it
// units later, once only.
func testSetUnits(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	first := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop", Input: "in"}, []store.Unit{{ID: 0}}))
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop", Spec: store.JobSpec{InputJob: first.ID}}, nil))
	if j.Total != 0 || j.Spec.InputJob != first.ID {
		t.Fatalf("waiting job: %+v", j)
	}
	if err := s.SetUnits(ctx, j.ID, "out1", []store.Unit{{ID: 0, Blob: "out1", Len: 5}, {ID: 1, Deps: []uint64{0}}}); err != nil {
		t.Fatal(err)
	}
	got := must[store.Job](t)(s.Job(ctx, j.ID))
	us := must[[]store.Unit](t)(s.Units(ctx, j.ID))
	if got.Input != "out1" || got.Total != 2 || len(us) != 2 || us[0].Len != 5 || !slices.Equal(us[1].Deps, []uint64{0}) {
		t.Errorf("after SetUnits: job %+v, units %+v", got, us)
	}
	if err := s.SetUnits(ctx, j.ID, "again", []store.Unit{{ID: 0}}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second SetUnits: %v", err)
	}
	if err := s.SetUnits(ctx, 999, "x", []store.Unit{{ID: 0}}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetUnits of an unknown job: %v", err)
	}
}

// testOps adds versions of operations, lists the newest, removes one.
func testOps(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	m1, m2, m3 := strings.Repeat("1", 64), strings.Repeat("2", 64), strings.Repeat("3", 64)
	a1 := must[store.UserOp](t)(s.AddOp(ctx, store.UserOp{Name: "cat", Hash: m1, Size: 10, Doc: "concatenates",
		Params: []store.UserParam{{Name: "sep", Default: ",", Doc: "separator"}}}))
	a2 := must[store.UserOp](t)(s.AddOp(ctx, store.UserOp{Name: "cat", Hash: m2, Size: 11, Split: "none"}))
	b1 := must[store.UserOp](t)(s.AddOp(ctx, store.UserOp{Name: "add", Hash: m3, Size: 12, Merge: "concat"}))
	if a1.Version != 1 || a2.Version != 2 || b1.Version != 1 || a1.Added.IsZero() {
		t.Errorf("versions %d %d %d", a1.Version, a2.Version, b1.Version)
	}
	ops := must[[]store.UserOp](t)(s.Ops(ctx))
	if len(ops) != 2 || ops[0].Name != "add" || ops[1].Name != "cat" || ops[1].Version != 2 || ops[1].Hash != m2 ||
		ops[1].Split != "none" || ops[0].Merge != "concat" || !ops[1].Added.Equal(a2.Added) || ops[1].Params == nil {
		t.Errorf("Ops = %+v", ops)
	}
	if used := must[bool](t)(s.ModuleUsed(ctx, m1)); used {
		t.Error("the module of an older version counts as used")
	}
	if used := must[bool](t)(s.ModuleUsed(ctx, m2)); !used {
		t.Error("the module of the newest version does not count as used")
	}
	if err := s.RemoveOp(ctx, "cat"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveOp(ctx, "cat"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second removal: %v", err)
	}
	if ops := must[[]store.UserOp](t)(s.Ops(ctx)); len(ops) != 1 || ops[0].Name != "add" {
		t.Errorf("Ops after removal = %+v", ops)
	}
	if used := must[bool](t)(s.ModuleUsed(ctx, m2)); used {
		t.Error("the module of a removed operation counts as used")
	}
	// The name can be used again, with the next version.
	if a3 := must[store.UserOp](t)(s.AddOp(ctx, store.UserOp{Name: "cat", Hash: m1})); a3.Version != 3 {
		t.Errorf("version after removal %d, want 3", a3.Version)
	}
	if ops := must[[]store.UserOp](t)(s.Ops(ctx)); len(ops) != 2 || ops[1].Version != 3 || ops[1].Hash != m1 {
		t.Errorf("Ops after re-adding = %+v", ops)
	}
	// Versions added at once by two handles are all distinct.
	other := h.open(t)
	var wg sync.WaitGroup
	vs := make([]int, 8)
	for i := range vs {
		s := []store.Meta{s, other}[i%2]
		wg.Go(func() {
			op, err := s.AddOp(ctx, store.UserOp{Name: "race", Hash: m3})
			if err != nil {
				t.Error(err)
			}
			vs[i] = op.Version
		})
	}
	wg.Wait()
	slices.Sort(vs)
	if !slices.Equal(vs, []int{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("versions added at once: %v", vs)
	}
}

// testPipelines stores a pipeline, records its steps' jobs, reads it.
func testPipelines(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	p := must[store.Pipeline](t)(s.CreatePipeline(ctx, store.Pipeline{Name: "etl", Steps: []store.PipelineStep{{Name: "a"}, {Name: "b"}}}))
	q := must[store.Pipeline](t)(s.CreatePipeline(ctx, store.Pipeline{Name: "other"}))
	if p.ID != 1 || q.ID != 2 || p.Submitted.IsZero() {
		t.Errorf("pipelines %+v, %+v", p, q)
	}
	steps := []store.PipelineStep{{Name: "a", Job: 7}, {Name: "b", Job: 8}}
	if err := s.SetPipelineSteps(ctx, p.ID, steps); err != nil {
		t.Fatal(err)
	}
	got := must[store.Pipeline](t)(s.Pipeline(ctx, p.ID))
	if got.Name != "etl" || !slices.Equal(got.Steps, steps) || !got.Submitted.Equal(p.Submitted) {
		t.Errorf("Pipeline = %+v", got)
	}
	if _, err := s.Pipeline(ctx, 99); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown pipeline: %v", err)
	}
	if _, err := s.Pipeline(ctx, 1<<63); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("pipeline id past int64: %v", err)
	}
}

// testRetention walks a blob through the reasons to keep it, and an
// output through its expiry.
func testRetention(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	up, in, data, mod, out := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64),
		strings.Repeat("d", 64), strings.Repeat("e", 64)
	if err := s.AddUpload(ctx, up, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.AddUpload(ctx, up, ""); err != nil {
		t.Errorf("adding an upload twice: %v", err)
	}
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "cat", Input: in, Spec: store.JobSpec{Module: mod}},
		[]store.Unit{{ID: 0, Blob: data, Len: 1}}))
	for blob, want := range map[string]string{up: "an upload", in: "the input of an unfinished job",
		data: "data of an unfinished job", mod: "the module of an unfinished job", out: ""} {
		if why := must[string](t)(s.BlobKept(ctx, blob, 0)); why != want {
			t.Errorf("BlobKept(%s...) = %q, want %q", blob[:4], why, want)
		}
	}
	must[int](t)(s.StartUnit(ctx, j.ID, 0, "w"))
	must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w", out, 1))
	if err := s.FinishJob(ctx, j.ID, out); err != nil {
		t.Fatal(err)
	}
	if why := must[string](t)(s.BlobKept(ctx, out, 0)); why != "the output of another job" {
		t.Errorf("BlobKept(output) = %q", why)
	}
	if why := must[string](t)(s.BlobKept(ctx, out, j.ID)); why != "" {
		t.Errorf("BlobKept(output, except its job) = %q", why)
	}
	// KeptOutputs names the done job whose unexpired output it is; an
	// unfinished job's input is not an output.
	if kept := must[[]uint64](t)(s.KeptOutputs(ctx, out)); len(kept) != 1 || kept[0] != j.ID {
		t.Errorf("KeptOutputs(output) = %v, want [%d]", kept, j.ID)
	}
	if kept := must[[]uint64](t)(s.KeptOutputs(ctx, in)); len(kept) != 0 {
		t.Errorf("KeptOutputs(input) = %v, want none", kept)
	}
	if why := must[string](t)(s.BlobKept(ctx, in, 0)); why != "" {
		t.Errorf("BlobKept(input of a done job) = %q", why)
	}
	if err := s.RemoveUpload(ctx, up, ""); err != nil {
		t.Fatal(err)
	}
	if why := must[string](t)(s.BlobKept(ctx, up, 0)); why != "" {
		t.Errorf("BlobKept(removed upload) = %q", why)
	}
	done := must[store.Job](t)(s.Job(ctx, j.ID))
	if due := must[[]store.Job](t)(s.DueOutputs(ctx, done.Finished, 10)); len(due) != 0 {
		t.Errorf("due before the job finished: %+v", due)
	}
	due := must[[]store.Job](t)(s.DueOutputs(ctx, done.Finished.Add(time.Second), 10))
	if len(due) != 1 || due[0].ID != j.ID {
		t.Fatalf("DueOutputs = %+v", due)
	}
	if _, err := s.ExpiredOutput(ctx, out); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("expired output before expiry: %v", err)
	}
	if err := s.ExpireOutput(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	exp := must[store.Job](t)(s.ExpiredOutput(ctx, out))
	if exp.ID != j.ID || exp.Expired.IsZero() {
		t.Errorf("ExpiredOutput = %+v", exp)
	}
	if due := must[[]store.Job](t)(s.DueOutputs(ctx, done.Finished.Add(time.Hour), 10)); len(due) != 0 {
		t.Errorf("due after expiry: %+v", due)
	}
	if why := must[string](t)(s.BlobKept(ctx, out, 0)); why != "" {
		t.Errorf("BlobKept(expired output) = %q", why)
	}
	if kept := must[[]uint64](t)(s.KeptOutputs(ctx, out)); len(kept) != 0 {
		t.Errorf("KeptOutputs(expired output) = %v, want none", kept)
	}
}

// testSchemaNewerThanBuild: a database a newer braid migrated is refused
// with an error that says what to do.
func testSchemaNewerThanBuild(t *testing.T, h *harness) {
	s := h.open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	h.b.SetVersion(t, h.url, 99)
	s, err := store.OpenMeta(t.Context(), h.url, nil)
	if err == nil {
		s.Close()
		t.Fatal("opened a database of schema version 99")
	}
	if !strings.Contains(err.Error(), "schema version 99 is newer") || !strings.Contains(err.Error(), "upgrade braid") {
		t.Errorf("opening a newer schema: %v", err)
	}
}

// testOwners checks that jobs, pipelines, operations, uploads and tokens
// keep who made them, that listings select by owner, and that a blob
// two owners uploaded stays visible to the one that did not delete it.
func testOwners(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	const a, b = "0123456789abcdef", "group:lab"
	shared, onlyA, outB := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	ja := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop", Input: onlyA, Owner: a}, []store.Unit{{ID: 0}}))
	jb := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop", Input: shared, Owner: b}, []store.Unit{{ID: 0}}))
	legacy := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}}))
	if got := must[store.Job](t)(s.Job(ctx, jb.ID)); got.Owner != b {
		t.Errorf("job %d owner %q, want %q", jb.ID, got.Owner, b)
	}
	ids := func(jobs []store.Job) []uint64 {
		var out []uint64
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	for _, c := range []struct {
		f    store.JobFilter
		want []uint64
	}{
		{store.JobFilter{Owner: a}, []uint64{ja.ID}},
		{store.JobFilter{Owner: b, State: store.JobQueued}, []uint64{jb.ID}},
		{store.JobFilter{Owner: b, State: store.JobDone}, nil},
		{store.JobFilter{}, []uint64{legacy.ID, jb.ID, ja.ID}},
	} {
		if got := ids(must[[]store.Job](t)(s.ListJobs(ctx, c.f))); !slices.Equal(got, c.want) {
			t.Errorf("ListJobs(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	for _, u := range []struct{ id, owner string }{{shared, a}, {shared, b}, {shared, b}, {onlyA, a}} {
		if err := s.AddUpload(ctx, u.id, u.owner); err != nil {
			t.Fatal(err)
		}
	}
	if got := must[[]string](t)(s.Uploaders(ctx, shared)); !slices.Equal(got, []string{a, b}) {
		t.Errorf("Uploaders = %q, want %q", got, []string{a, b})
	}
	if err := s.RemoveUpload(ctx, shared, a); err != nil {
		t.Fatal(err)
	}
	if got := must[[]string](t)(s.Uploaders(ctx, shared)); !slices.Equal(got, []string{b}) {
		t.Errorf("Uploaders after a removed its upload = %q, want %q", got, []string{b})
	}
	if why := must[string](t)(s.BlobKept(ctx, shared, 0)); why == "" {
		t.Error("a blob another owner still uploaded is not kept")
	}
	for _, u := range must[[]store.Unit](t)(s.Units(ctx, jb.ID)) {
		must[int](t)(s.StartUnit(ctx, jb.ID, u.ID, "w1"))
		must[bool](t)(s.FinishUnit(ctx, jb.ID, u.ID, "w1", outB, 1))
	}
	if err := s.FinishJob(ctx, jb.ID, outB); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id, owner string
		want      bool
	}{
		{shared, a, false}, // removed its upload, and no job of a reads it
		{shared, b, true},
		{onlyA, a, true},
		{onlyA, b, false},
		{outB, b, true}, // its job's output
		{outB, a, false},
		{strings.Repeat("f", 64), a, false},
	} {
		if got := must[bool](t)(s.BlobVisible(ctx, c.id, c.owner)); got != c.want {
			t.Errorf("BlobVisible(%.4s..., %s) = %v, want %v", c.id, c.owner, got, c.want)
		}
	}
	if got := must[[]string](t)(s.OwnedBlobs(ctx, b)); !slices.Equal(got, []string{shared, outB}) {
		t.Errorf("OwnedBlobs(b) = %q, want %q", got, []string{shared, outB})
	}
	if got := must[[]string](t)(s.OwnedBlobs(ctx, "nobody")); len(got) != 0 {
		t.Errorf("OwnedBlobs(nobody) = %q", got)
	}
	p := must[store.Pipeline](t)(s.CreatePipeline(ctx, store.Pipeline{Name: "etl", Owner: b}))
	if got := must[store.Pipeline](t)(s.Pipeline(ctx, p.ID)); got.Owner != b {
		t.Errorf("pipeline owner %q, want %q", got.Owner, b)
	}
	must[store.UserOp](t)(s.AddOp(ctx, store.UserOp{Name: "x", Hash: onlyA, Size: 1, Owner: a}))
	if ops := must[[]store.UserOp](t)(s.Ops(ctx)); len(ops) != 1 || ops[0].Owner != a {
		t.Errorf("Ops = %+v, want x owned by %s", ops, a)
	}
	must[store.Token](t)(s.AddToken(ctx, store.Token{ID: "aa", Hash: "h", Name: "lab1", Role: "client", Group: "lab"}))
	if toks := must[[]store.Token](t)(s.Tokens(ctx)); len(toks) != 1 || toks[0].Group != "lab" {
		t.Errorf("Tokens = %+v, want lab1 in group lab", toks)
	}
}
