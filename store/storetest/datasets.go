package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/store"
)

// testDatasets walks the members of datasets through the reasons to
// keep them: a member is kept while a dataset that lists it is an
// upload, the unexpired output of a job (other than the one asking), or
// the input of an unfinished job, and not once the dataset is gone.
func testDatasets(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	id := func(c string) string { return strings.Repeat(c, 64) }
	m1, m2, m3, in := id("1"), id("2"), id("3"), id("4")
	up, out := id("a"), id("b") // an uploaded dataset, an output dataset
	const member = "a member of a dataset"
	kept := func(blob string, except uint64, want string) {
		t.Helper()
		if why := must[string](t)(s.BlobKept(ctx, blob, except)); why != want {
			t.Errorf("BlobKept(%.4s..., except %d) = %q, want %q", blob, except, why, want)
		}
	}
	holders := func(blob string, want ...string) {
		t.Helper()
		if got := must[[]string](t)(s.DatasetsOf(ctx, blob)); !slices.Equal(got, append([]string{}, want...)) {
			t.Errorf("DatasetsOf(%.4s...) = %.4q, want %.4q", blob, got, want)
		}
	}
	outputs := func(blob string, want ...uint64) {
		t.Helper()
		if got := must[[]uint64](t)(s.KeptOutputs(ctx, blob)); !slices.Equal(got, want) {
			t.Errorf("KeptOutputs(%.4s...) = %v, want %v", blob, got, want)
		}
	}

	// Recorded, but no upload yet: the dataset does not live.
	if err := s.AddDataset(ctx, up, "", []string{m1, m2, m1}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddDataset(ctx, up, "", []string{m2}); err != nil {
		t.Errorf("adding a member twice: %v", err)
	}
	if got := must[[]string](t)(s.DatasetMembers(ctx, up)); !slices.Equal(got, []string{m1, m2}) {
		t.Errorf("DatasetMembers = %.4q, want %.4q", got, []string{m1, m2})
	}
	kept(m1, 0, "")
	holders(m1)
	if err := s.AddUpload(ctx, up, "someone"); err != nil {
		t.Fatal(err)
	}
	kept(m1, 0, member)
	kept(m2, 0, member)
	kept(m3, 0, "")
	holders(m1, up)
	outputs(m1)

	// A job writes an output dataset: its members are kept as its output
	// is, but not for the job itself (it removes its own output when it
	// expires).
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "up", Input: in}, []store.Unit{{ID: 0, Blob: in, Len: 1}}))
	must[int](t)(s.StartUnit(ctx, j.ID, 0, "w"))
	must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w", m3, 1))
	if err := s.AddDataset(ctx, out, "", []string{m2, m3}); err != nil {
		t.Fatal(err)
	}
	kept(m3, 0, "data of an unfinished job")
	if err := s.FinishJob(ctx, j.ID, out); err != nil {
		t.Fatal(err)
	}
	kept(m3, 0, member)
	kept(m3, j.ID, "")
	kept(m2, j.ID, member) // the upload still lists it
	holders(m2, up, out)
	holders(m3, out)
	outputs(m3, j.ID)
	outputs(m2, j.ID)
	outputs(out, j.ID)

	// The upload goes: only the output lists m2 now.
	if err := s.RemoveUpload(ctx, up, "someone"); err != nil {
		t.Fatal(err)
	}
	kept(m1, 0, "")
	kept(m2, j.ID, "")
	holders(m2, out)
	// An unfinished job over the dataset keeps it alive.
	k := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "noop", Input: up}, []store.Unit{{ID: 0}}))
	kept(m1, 0, member)
	holders(m1, up)
	if err := s.CancelJob(ctx, k.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	kept(m1, 0, "")

	// The output expires.
	if err := s.ExpireOutput(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	kept(m3, 0, "")
	holders(m3)
	outputs(m3)

	// Removed with its manifest: uploading the same manifest again keeps
	// nothing until its members are recorded again.
	if err := s.RemoveDataset(ctx, up); err != nil {
		t.Fatal(err)
	}
	if got := must[[]string](t)(s.DatasetMembers(ctx, up)); len(got) != 0 {
		t.Errorf("DatasetMembers after RemoveDataset = %.4q", got)
	}
	if err := s.AddUpload(ctx, up, "someone"); err != nil {
		t.Fatal(err)
	}
	kept(m1, 0, "")
	if got := must[[]string](t)(s.DatasetMembers(ctx, out)); !slices.Equal(got, []string{m2, m3}) {
		t.Errorf("the other dataset's members after RemoveDataset = %.4q", got)
	}

	// A large dataset, in one call.
	big := make([]string, 1000)
	for i := range big {
		big[i] = fmt.Sprintf("%064x", i)
	}
	if err := s.AddDataset(ctx, id("c"), "", big); err != nil {
		t.Fatal(err)
	}
	if got := must[[]string](t)(s.DatasetMembers(ctx, id("c"))); !slices.Equal(got, big) {
		t.Errorf("DatasetMembers of 1000: %d members", len(got))
	}
}

// Unindex takes the (closed) database at url back to the schema before
// the backfill of datasets' members (store.UnindexedDatasets) and
// uploads made on their own (store.Meta.AddMemberUpload): as a database
// holding datasets made before the index of members, which have no rows
// in it, was left. Opening it migrates it again.
func (b Backend) Unindex(t testing.TB, url string) {
	t.Helper()
	_, to, err := store.Migrate(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	b.Exec(t, url, "ALTER TABLE dataset_members DROP COLUMN creator")
	b.Exec(t, url, "DROP TABLE dataset_backfill")
	b.Exec(t, url, "ALTER TABLE uploads DROP COLUMN alone")
	b.SetVersion(t, url, to-2)
}

// Uncreate takes the (closed) database at url back to the schema before
// datasets' creators: as a database whose backfill ran before it was
// left.
func (b Backend) Uncreate(t testing.TB, url string) {
	t.Helper()
	_, to, err := store.Migrate(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	b.Exec(t, url, "ALTER TABLE dataset_members DROP COLUMN creator")
	b.SetVersion(t, url, to-1)
}

// testDatasetCreators: the index records who made each dataset
// (DatasetCreator), OutputJobs names the jobs whose unexpired output a
// blob is, and the migration that adds creators lists
// again for the backfill the unexpired outputs that are not indexed
// (the backfill before it left them out), with "" as the creator of the
// datasets indexed before it.
func testDatasetCreators(t *testing.T, h *harness) {
	ctx := t.Context()
	id := func(c string) string { return strings.Repeat(c, 64) }
	made, out, old, expired, m1 := id("a"), id("b"), id("c"), id("d"), id("1")
	s := h.open(t)
	if err := s.AddDataset(ctx, made, "alice", []string{m1}); err != nil {
		t.Fatal(err)
	}
	if err := s.IndexDataset(ctx, old, "bob", []string{m1}); err != nil {
		t.Fatal(err)
	}
	for blob, want := range map[string]string{made: "alice", old: "bob"} {
		if got := must[string](t)(s.DatasetCreator(ctx, blob)); got != want {
			t.Errorf("DatasetCreator(%.4s...) = %q, want %q", blob, got, want)
		}
	}
	if _, err := s.DatasetCreator(ctx, out); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DatasetCreator of a blob the index does not list: %v, want ErrNotFound", err)
	}
	done := func(owner, output string) uint64 {
		j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "cat", Input: id("f"), Owner: owner}, []store.Unit{{ID: 0, Blob: id("f"), Len: 1}}))
		must[int](t)(s.StartUnit(ctx, j.ID, 0, "w"))
		must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w", output, 1))
		if err := s.FinishJob(ctx, j.ID, output); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	jobs := []uint64{done("carol", out), done("alice", out)}
	if err := s.ExpireOutput(ctx, done("dave", expired)); err != nil {
		t.Fatal(err)
	}
	if got := must[[]uint64](t)(s.OutputJobs(ctx, out)); !slices.Equal(got, jobs) {
		t.Errorf("OutputJobs = %v, want %v", got, jobs)
	}
	if got := must[[]uint64](t)(s.OutputJobs(ctx, expired)); len(got) != 0 {
		t.Errorf("OutputJobs of an expired output = %v, want none", got)
	}
	if got := must[[]string](t)(s.UnindexedDatasets(ctx, "", 10)); len(got) != 0 {
		t.Errorf("UnindexedDatasets of a database made at this version = %.4q, want none", got)
	}
	s.Close()
	h.b.Uncreate(t, h.url)

	s = h.open(t)
	if got := must[[]string](t)(s.UnindexedDatasets(ctx, "", 10)); !slices.Equal(got, []string{out}) {
		t.Errorf("UnindexedDatasets after the migration = %.4q, want only the unexpired output that is not indexed", got)
	}
	if got := must[string](t)(s.DatasetCreator(ctx, made)); got != "" {
		t.Errorf("DatasetCreator of a dataset indexed before creators = %q, want \"\"", got)
	}
	if err := s.IndexDataset(ctx, out, "carol", []string{m1}); err != nil {
		t.Fatal(err)
	}
	if got := must[string](t)(s.DatasetCreator(ctx, out)); got != "carol" {
		t.Errorf("DatasetCreator of the output indexed by the backfill = %q, want carol", got)
	}
	if got := must[[]string](t)(s.UnindexedDatasets(ctx, "", 10)); len(got) != 0 {
		t.Errorf("UnindexedDatasets after indexing the output = %.4q, want none", got)
	}
}

// testDatasetBackfill: a database migrated from before the index of
// members lists the blobs that may be datasets (uploads, unexpired
// outputs, inputs of unfinished jobs, but those indexed already) for
// the server to index; indexing one records its members, so they are
// kept, and drops it from the list, also across a reopen.
func testDatasetBackfill(t *testing.T, h *harness) {
	ctx := t.Context()
	id := func(c string) string { return strings.Repeat(c, 64) }
	up, out, in, expired, indexed, m1, m2 := id("a"), id("b"), id("c"), id("d"), id("e"), id("1"), id("2")
	s := h.open(t)
	for _, u := range []string{up, indexed} {
		if err := s.AddUpload(ctx, u, "someone"); err != nil {
			t.Fatal(err)
		}
	}
	done := func(output string) uint64 {
		j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "cat", Input: id("f")}, []store.Unit{{ID: 0, Blob: id("f"), Len: 1}}))
		must[int](t)(s.StartUnit(ctx, j.ID, 0, "w"))
		must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w", output, 1))
		if err := s.FinishJob(ctx, j.ID, output); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	done(out)
	if err := s.ExpireOutput(ctx, done(expired)); err != nil {
		t.Fatal(err)
	}
	must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "cat", Input: in}, []store.Unit{{ID: 0, Blob: in, Len: 1}}))
	// indexed stands for a dataset made after the index began; the
	// others for datasets made before.
	if err := s.AddDataset(ctx, indexed, "", []string{m2}); err != nil {
		t.Fatal(err)
	}
	if got := must[[]string](t)(s.UnindexedDatasets(ctx, "", 10)); len(got) != 0 {
		t.Errorf("UnindexedDatasets of a database made at this version = %.4q, want none", got)
	}
	s.Close()
	h.b.Unindex(t, h.url)

	s = h.open(t)
	want := []string{up, out, in}
	slices.Sort(want)
	if got := must[[]string](t)(s.UnindexedDatasets(ctx, "", 10)); !slices.Equal(got, want) {
		t.Errorf("UnindexedDatasets = %.4q, want %.4q (an upload, an output and an input, not the expired output or the indexed dataset)", got, want)
	}
	if got := must[[]string](t)(s.UnindexedDatasets(ctx, want[0], 1)); !slices.Equal(got, want[1:2]) {
		t.Errorf("UnindexedDatasets after %.4s, 1 = %.4q, want %.4q", want[0], got, want[1:2])
	}
	if why := must[string](t)(s.BlobKept(ctx, m1, 0)); why != "" {
		t.Fatalf("BlobKept(member) before its dataset is indexed = %q", why)
	}
	if err := s.IndexDataset(ctx, up, "", []string{m1, m2}); err != nil {
		t.Fatal(err)
	}
	if err := s.IndexDataset(ctx, in, "", nil); err != nil {
		t.Fatal(err)
	}
	if got := must[[]string](t)(s.DatasetMembers(ctx, up)); !slices.Equal(got, []string{m1, m2}) {
		t.Errorf("DatasetMembers of the indexed dataset = %.4q", got)
	}
	if why := must[string](t)(s.BlobKept(ctx, m1, 0)); why != "a member of a dataset" {
		t.Errorf("BlobKept(member) after its dataset was indexed = %q", why)
	}
	s.Close()
	s = h.open(t)
	if got := must[[]string](t)(s.UnindexedDatasets(ctx, "", 10)); !slices.Equal(got, []string{out}) {
		t.Errorf("UnindexedDatasets after a reopen = %.4q, want only the output left", got)
	}
	// An upload from before counts as a member's.
	if err := s.RemoveMemberUploads(ctx, []string{indexed}, []string{"someone"}); err != nil {
		t.Fatal(err)
	}
	if got := must[[]string](t)(s.Uploaders(ctx, indexed)); len(got) != 0 {
		t.Errorf("Uploaders of an upload from before the migration after RemoveMemberUploads = %q, want none", got)
	}
}

// testKeptBlobs: KeptBlobs answers for many blobs at once (more than
// one query's worth) what BlobKept answers for each, BusyBlobs names
// those an unfinished job uses, and RemoveMemberUploads forgets the
// uploads of many blobs made as members by the owners given, and no
// other's: not those made on their own, before or after.
func testKeptBlobs(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.open(t)
	id := func(i int) string { return fmt.Sprintf("%064x", i) }
	ids := make([]string, 1200)
	for i := range ids {
		ids[i] = id(i)
	}
	for i := range 200 {
		owner := "a"
		if i >= 100 {
			owner = "b"
		}
		if i >= 60 && i < 70 { // on its own first
			if err := s.AddUpload(ctx, ids[i], owner); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.AddMemberUpload(ctx, ids[i], owner); err != nil {
			t.Fatal(err)
		}
		if i >= 50 && i < 60 { // on its own after
			if err := s.AddUpload(ctx, ids[i], owner); err != nil {
				t.Fatal(err)
			}
		}
	}
	must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "cat", Input: ids[200], Spec: store.JobSpec{Module: ids[202]}},
		[]store.Unit{{ID: 0, Blob: ids[201], Len: 1}}))
	j := must[store.Job](t)(s.CreateJob(ctx, store.Job{Op: "cat", Input: id(5000)}, []store.Unit{{ID: 0, Blob: id(5000), Len: 1}}))
	must[int](t)(s.StartUnit(ctx, j.ID, 0, "w"))
	must[bool](t)(s.FinishUnit(ctx, j.ID, 0, "w", ids[203], 1))
	if err := s.FinishJob(ctx, j.ID, ids[203]); err != nil {
		t.Fatal(err)
	}
	if err := s.AddDataset(ctx, id(5001), "", []string{ids[204], ids[1100]}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddUpload(ctx, id(5001), "a"); err != nil {
		t.Fatal(err)
	}
	check := func(when string, want map[int]string) {
		t.Helper()
		kept := must[map[string]string](t)(s.KeptBlobs(ctx, ids, 0))
		for i, b := range ids {
			if kept[b] != want[i] {
				t.Errorf("%s: KeptBlobs[%d] = %q, want %q", when, i, kept[b], want[i])
			}
		}
		for _, i := range []int{0, 99, 100, 199, 200, 201, 202, 203, 204, 205, 1100, 1199} {
			if why := must[string](t)(s.BlobKept(ctx, ids[i], 0)); why != want[i] {
				t.Errorf("%s: BlobKept(%d) = %q, want %q", when, i, why, want[i])
			}
		}
		if len(kept) != len(want) {
			t.Errorf("%s: KeptBlobs holds %d blobs, want %d", when, len(kept), len(want))
		}
	}
	want := map[int]string{200: "the input of an unfinished job", 201: "data of an unfinished job",
		202: "the module of an unfinished job", 203: "the output of another job",
		204: "a member of a dataset", 1100: "a member of a dataset"}
	for i := range 200 {
		want[i] = "an upload"
	}
	check("before RemoveUploads", want)
	busy := must[map[string]string](t)(s.BusyBlobs(ctx, ids))
	if len(busy) != 3 || busy[ids[200]] != want[200] || busy[ids[201]] != want[201] || busy[ids[202]] != want[202] {
		t.Errorf("BusyBlobs = %v, want the input, data and module of the unfinished job", busy)
	}
	if err := s.RemoveMemberUploads(ctx, ids[:150], []string{"a"}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if i < 50 || i >= 70 {
			delete(want, i)
		}
	}
	check("after RemoveMemberUploads of a's", want)
	if got := must[[]string](t)(s.Uploaders(ctx, ids[120])); !slices.Equal(got, []string{"b"}) {
		t.Errorf("Uploaders of b's upload after RemoveMemberUploads of a's = %q", got)
	}
	if got := must[[]string](t)(s.Uploaders(ctx, ids[55])); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Uploaders of a's upload on its own after RemoveMemberUploads = %q", got)
	}
}
