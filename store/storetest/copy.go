package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/store"
)

// fill stores one of every kind of record in s, and some that were
// deleted, so that the ID sequences are ahead of the largest IDs.
func fill(t *testing.T, s store.Meta) {
	t.Helper()
	ctx := t.Context()
	in, mod := strings.Repeat("a", 64), strings.Repeat("b", 64)
	w1 := must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{Name: "n1", Addresses: []string{"10.0.0.1:7420"},
		Cores: 4, Memory: 1 << 30, Disk: 2 << 30, CPUMHz: 2500, Threads: 2, Ops: []string{"blur"}}))
	w2 := must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{Name: "n2"}))
	must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{Name: "gone"}))
	if err := s.DeleteWorker(ctx, "w3"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeats(ctx, []store.Beat{{Worker: w1.ID, Running: 1, Queued: 2, Load: 0.625}}); err != nil {
		t.Fatal(err)
	}
	j, units := sampleJob()
	j.Spec = store.JobSpec{Module: mod, MaxTries: 5, UnitMem: 1 << 20}
	units[3].Reduce = true
	done := must[store.Job](t)(s.CreateJob(ctx, j, units))
	for _, u := range units {
		must[int](t)(s.StartUnit(ctx, done.ID, u.ID, w1.ID))
		must[bool](t)(s.FinishUnit(ctx, done.ID, u.ID, w1.ID, strings.Repeat("c", 64), 1000+int64(u.ID)))
	}
	if err := s.FinishJob(ctx, done.ID, strings.Repeat("d", 64)); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTimeline(ctx, done.ID, []byte{0, 1, 2, 255}); err != nil {
		t.Fatal(err)
	}
	if err := s.ExpireOutput(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	running := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop", Input: in, Params: map[string]string{"k": "v"}, Owner: "group:lab"},
		[]store.Unit{{ID: 0, Blob: in, Len: 3}, {ID: 1, Params: map[string]string{"k": "w"}}}))
	must[int](t)(s.StartUnit(ctx, running.ID, 0, w2.ID))
	must[int](t)(s.StartUnit(ctx, running.ID, 1, w2.ID))
	if err := s.RetryUnit(ctx, running.ID, 1, w2.ID, "trap"); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTries(ctx, running.ID, []store.UnitTries{{Unit: 1, Fails: 1, Lost: 2, Error: "trap"}}); err != nil {
		t.Fatal(err)
	}
	last := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop"}, []store.Unit{{ID: 0}}))
	if err := s.CancelJob(ctx, last.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteJob(ctx, last.ID); err != nil {
		t.Fatal(err)
	}
	must[store.UserOp](t)(s.AddOp(ctx, store.UserOp{Name: "cat", Hash: mod, Size: 9, Doc: "d",
		Params: []store.UserParam{{Name: "sep", Default: ","}}}))
	must[store.UserOp](t)(s.AddOp(ctx, store.UserOp{Name: "cat", Hash: mod, Size: 9, Owner: "aa"}))
	must[store.UserOp](t)(s.AddOp(ctx, store.UserOp{Name: "old", Hash: mod, Size: 1}))
	if err := s.RemoveOp(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	p := must[store.Pipeline](t)(s.CreatePipeline(ctx, store.Pipeline{Name: "p", Steps: []store.PipelineStep{{Name: "a", Job: done.ID}}}))
	must[store.Pipeline](t)(s.CreatePipeline(ctx, store.Pipeline{Name: "q", Owner: "aa"}))
	if err := s.SetPipelineSteps(ctx, p.ID, []store.PipelineStep{{Name: "a", Job: done.ID}, {Name: "b", Job: running.ID}}); err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"group:lab", "aa"} {
		if err := s.AddUpload(ctx, in, owner); err != nil {
			t.Fatal(err)
		}
	}
	// A dataset, an upload, whose members are the input and a blob of
	// its own.
	if err := s.AddDataset(ctx, copiedDataset, "", []string{in, strings.Repeat("7", 64)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddUpload(ctx, copiedDataset, "aa"); err != nil {
		t.Fatal(err)
	}
	must[store.Token](t)(s.AddToken(ctx, store.Token{ID: "aa", Hash: "h1", Name: "ci", Role: "client", Group: "lab"}))
	must[store.Token](t)(s.AddToken(ctx, store.Token{ID: "bb", Hash: "h2", Name: "ops", Role: "admin"}))
	must[store.Token](t)(s.RevokeToken(ctx, "ops"))
}

// copiedDataset is the dataset fill records.
var copiedDataset = strings.Repeat("9", 64)

// snapshot is what a reader sees of a store through Meta.
type snapshot struct {
	Jobs      []store.Job
	Units     map[uint64][]store.Unit
	Timelines map[uint64]string
	Tries     map[uint64][]store.UnitTries
	Workers   []store.Worker
	Ops       []store.UserOp
	Modules   map[string]bool
	Pipelines []store.Pipeline
	Tokens    []store.Token
	Kept      map[string]string
	Uploaders map[string][]string
	Owned     map[string][]string
	// Members are the members of copiedDataset; Holders the datasets
	// that keep each of them.
	Members []string
	Holders map[string][]string
}

func snap(t *testing.T, s store.Meta) snapshot {
	t.Helper()
	ctx := t.Context()
	sn := snapshot{Units: map[uint64][]store.Unit{}, Timelines: map[uint64]string{}, Tries: map[uint64][]store.UnitTries{},
		Modules: map[string]bool{}, Kept: map[string]string{}, Uploaders: map[string][]string{}, Owned: map[string][]string{}}
	sn.Jobs = must[[]store.Job](t)(s.ListJobs(ctx, store.JobFilter{Limit: 1000}))
	for _, j := range sn.Jobs {
		sn.Units[j.ID] = must[[]store.Unit](t)(s.Units(ctx, j.ID))
		if tl, err := s.Timeline(ctx, j.ID); err == nil {
			sn.Timelines[j.ID] = string(tl)
		}
		tries, _, err := s.Tries(ctx, j.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		sn.Tries[j.ID] = tries
		for _, blob := range []string{j.Input, j.Output, j.Spec.Module} {
			sn.Kept[blob] = must[string](t)(s.BlobKept(ctx, blob, 0))
			sn.Uploaders[blob] = must[[]string](t)(s.Uploaders(ctx, blob))
		}
		sn.Owned[j.Owner] = must[[]string](t)(s.OwnedBlobs(ctx, j.Owner))
	}
	sn.Workers = must[[]store.Worker](t)(s.Workers(ctx))
	sn.Ops = must[[]store.UserOp](t)(s.Ops(ctx))
	for _, h := range []string{strings.Repeat("b", 64), strings.Repeat("f", 64)} {
		sn.Modules[h] = must[bool](t)(s.IsModule(ctx, h))
	}
	for id := uint64(1); ; id++ {
		p, err := s.Pipeline(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sn.Pipelines = append(sn.Pipelines, p)
	}
	sn.Tokens = must[[]store.Token](t)(s.Tokens(ctx))
	sn.Members = must[[]string](t)(s.DatasetMembers(ctx, copiedDataset))
	sn.Holders = map[string][]string{}
	for _, m := range sn.Members {
		sn.Holders[m] = must[[]string](t)(s.DatasetsOf(ctx, m))
		sn.Kept[m] = must[string](t)(s.BlobKept(ctx, m, 0))
	}
	return sn
}

// RunCopy fills a database of from with every kind of record, copies it
// into a fresh one of to, and checks that the copy reads the same, that
// new IDs continue where the source's left off, and that a target with
// records is refused unless replacing is asked for.
func RunCopy(t *testing.T, from, to Backend) {
	ctx := t.Context()
	hf := &harness{b: from, url: from.Fresh(t)}
	ht := &harness{b: to, url: to.Fresh(t)}
	src, dst := hf.open(t), ht.open(t)
	fill(t, src)
	stats, err := store.Copy(ctx, src, dst, false)
	if err != nil {
		t.Fatal(err)
	}
	if stats["jobs"] != 2 || stats["units"] != 6 || stats["workers"] != 2 || stats["user_ops"] != 3 ||
		stats["pipelines"] != 2 || stats["uploads"] == 0 || stats["api_tokens"] != 2 || stats["timelines"] != 1 ||
		stats["dataset_members"] != 2 {
		t.Errorf("copied %v", stats)
	}
	want, got := snap(t, src), snap(t, dst)
	if len(want.Members) != 2 || len(want.Holders[want.Members[1]]) != 1 {
		t.Errorf("the source's dataset: members %.4q, holders %.4q", want.Members, want.Holders)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the copy differs:\nsource %+v\ncopy   %+v", want, got)
	}

	// Refused while the target holds records; replaced when asked.
	if _, err := store.Copy(ctx, src, dst, false); !errors.Is(err, store.ErrNotEmpty) || !strings.Contains(err.Error(), "rows of jobs") {
		t.Errorf("copy into a full target: %v", err)
	}
	if _, err := store.Copy(ctx, src, dst, true); err != nil {
		t.Fatalf("copy replacing the target: %v", err)
	}
	if again := snap(t, dst); !reflect.DeepEqual(want, again) {
		t.Errorf("the replacing copy differs:\nsource %+v\ncopy   %+v", want, again)
	}

	// New records continue the source's sequences: job 3 was deleted,
	// worker w3 too.
	for name, s := range map[string]store.Meta{"source": src, "copy": dst} {
		j := must[store.Job](t)(s.CreateJob(context.WithoutCancel(ctx), store.Job{Op: "noop"}, []store.Unit{{ID: 0}}))
		w := must[store.Worker](t)(s.RegisterWorker(ctx, store.Worker{Name: "new"}))
		p := must[store.Pipeline](t)(s.CreatePipeline(ctx, store.Pipeline{Name: "new"}))
		if j.ID != 4 || w.ID != "w4" || p.ID != 3 {
			t.Errorf("%s: new job %d, worker %s, pipeline %d; want 4, w4, 3", name, j.ID, w.ID, p.ID)
		}
	}
}
