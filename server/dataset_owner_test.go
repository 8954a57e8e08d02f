package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/worker"
)

// TestDatasetOwners: a client's datasets are its own like its blobs: a
// second client neither reads one nor makes one of the first's blobs; a
// job's output dataset is read, members too, by the job's owner.
func TestDatasetOwners(t *testing.T) {
	c := newCluster(t, nil)
	noop := noopOps(t)
	c.addWorker(1, func(cfg *worker.Config) { cfg.Ops = noop })
	c.waitWorkers(1)
	ctx := t.Context()
	a := newTenant(t, c, api.RoleClient, "a", "")
	b := newTenant(t, c, api.RoleClient, "b", "")
	files := map[string][]byte{"x": []byte("first member\n"), "y": []byte("second member\n")}
	ds := a.putDataset(files)
	b.expect(t, http.StatusNotFound, http.MethodGet, api.PathDatasets+"/"+ds, nil)
	blob := a.put([]byte("a's blob"))
	b.expect(t, http.StatusNotFound, http.MethodPost, api.PathDatasets,
		api.DatasetRequest{Members: []api.DatasetMember{{Name: "m", Size: 8, Blob: blob}}})
	b.expect(t, http.StatusNotFound, http.MethodPost, api.PathJobs, api.JobRequest{Op: "noop", Input: ds, Merge: "none"})

	// up's results are new blobs, which a reads through its output
	// dataset.
	c.addOp("up", wasmtest.Upper, client.OpOptions{})
	st := a.run(api.JobRequest{Op: "up", Input: ds, Merge: "none"})
	if st.State != api.JobDone {
		t.Fatalf("a's job over its dataset: %+v", st)
	}
	out, err := a.c.Dataset(ctx, st.Output)
	if err != nil {
		t.Fatalf("a reads its job's output dataset: %v", err)
	}
	for _, m := range out.Members {
		var got bytes.Buffer
		if _, err := a.c.GetMember(ctx, st.Output, m.Blob, &got); err != nil {
			t.Fatalf("a reads member %s of its output dataset: %v", m.Name, err)
		}
		if want := bytes.ToUpper(files[m.Name]); !bytes.Equal(got.Bytes(), want) {
			t.Errorf("member %s: %q, want %q", m.Name, got.Bytes(), want)
		}
		if _, err := a.c.Get(ctx, m.Blob, &got); err == nil {
			t.Errorf("a read member %s of its output dataset without naming the dataset", m.Name)
		}
		if _, err := b.c.GetMember(ctx, st.Output, m.Blob, &got); err == nil {
			t.Errorf("b read member %s of a's output dataset", m.Name)
		}
	}
}

// TestDatasetDelete: deleting a dataset deletes its members too, but
// those something else needs: another owner's upload, the owner's own
// upload of the same bytes on its own (before or after the dataset was
// made), another dataset, an unfinished job, a kept output. The rules for the dataset are a
// blob's (409 while an unfinished job uses it), and a client deletes only
// its own: the same dataset made by two clients stays for the other.
func TestDatasetDelete(t *testing.T) {
	c := newCluster(t, nil)
	noop := noopOps(t)
	// No worker runs modules: jobs of "up" wait, unfinished.
	c.addWorker(1, func(cfg *worker.Config) { cfg.Ops = noop; cfg.Modules = []string{} })
	c.waitWorkers(1)
	c.addOp("up", wasmtest.Upper, client.OpOptions{})
	ctx := t.Context()
	a := newTenant(t, c, api.RoleClient, "a", "")
	b := newTenant(t, c, api.RoleClient, "b", "")
	files := map[string][]byte{"only": []byte("only in the dataset\n"), "shared": []byte("b uploaded it too\n"),
		"twice": []byte("in another dataset\n"), "busy": []byte("an unfinished job's input\n"), "out": []byte("a kept output\n"),
		"before": []byte("a put it on its own first\n"), "after": []byte("a put it on its own later\n")}
	a.put(files["before"])
	ds := a.putDataset(files)
	a.put(files["after"])
	blob := map[string]string{}
	d, err := a.c.Dataset(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range d.Members {
		blob[m.Name] = m.Blob
	}
	b.put(files["shared"])
	other := a.putDataset(map[string][]byte{"twice": files["twice"]})
	kept := a.run(api.JobRequest{Op: "noop", Input: blob["out"]})
	if kept.State != api.JobDone || kept.Output != blob["out"] {
		t.Fatalf("noop job: %+v", kept)
	}
	busy := a.submit(api.JobRequest{Op: "up", Input: blob["busy"]})

	// A member alone cannot be deleted; b neither sees nor deletes a's
	// dataset; an unfinished job over it keeps it (409).
	if err := a.c.DeleteBlob(ctx, blob["only"]); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), ds) {
		t.Errorf("deleting a member alone: %v, want 409 naming the dataset", err)
	}
	if err := b.c.DeleteBlob(ctx, ds); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("b deleting a's dataset: %v, want 404", err)
	}
	over := a.submit(api.JobRequest{Op: "up", Input: ds})
	if err := a.c.DeleteBlob(ctx, ds); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("unfinished jobs %d", over.Job)) {
		t.Errorf("deleting a dataset an unfinished job reads: %v, want 409 naming job %d", err, over.Job)
	}
	if _, err := a.c.Cancel(ctx, over.Job); err != nil {
		t.Fatal(err)
	}

	if err := a.c.DeleteBlob(ctx, ds); err != nil {
		t.Fatalf("a deleting its dataset: %v", err)
	}
	var buf bytes.Buffer
	for _, id := range []string{ds, blob["only"]} {
		if _, err := c.c.Get(ctx, id, &buf); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("blob %.8s after its dataset was deleted: %v, want 404", id, err)
		}
	}
	// What something else needs stays.
	if got := b.get(blob["shared"]); !bytes.Equal(got, files["shared"]) {
		t.Errorf("b's upload: %q", got)
	}
	if _, err := a.c.Get(ctx, blob["shared"], &buf); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a reads b's upload of a member of its deleted dataset: %v, want 404", err)
	}
	buf.Reset()
	if _, err := a.c.GetMember(ctx, other, blob["twice"], &buf); err != nil || !bytes.Equal(buf.Bytes(), files["twice"]) {
		t.Errorf("a member of another dataset: %q, %v", buf.Bytes(), err)
	}
	if got := a.get(blob["busy"]); !bytes.Equal(got, files["busy"]) {
		t.Errorf("the input of an unfinished job: %q", got)
	}
	if got := a.get(blob["out"]); !bytes.Equal(got, files["out"]) {
		t.Errorf("a kept output: %q", got)
	}
	for _, name := range []string{"before", "after"} {
		if got := a.get(blob[name]); !bytes.Equal(got, files[name]) {
			t.Errorf("a's upload on its own (%s the dataset) of a member's bytes: %q", name, got)
		}
	}
	// Once the job is canceled, its input goes like any upload; the other
	// dataset goes with its member.
	if _, err := a.c.Cancel(ctx, busy.Job); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{blob["busy"], other} {
		if err := a.c.DeleteBlob(ctx, id); err != nil {
			t.Errorf("deleting %.8s: %v", id, err)
		}
	}
	if _, err := c.c.Get(ctx, blob["twice"], &buf); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the member of the other dataset after it was deleted: %v, want 404", err)
	}

	// The same dataset made by a and b: a's delete leaves it to b, whose
	// delete removes it with its member.
	both := map[string][]byte{"p": []byte("both made it\n")}
	same := a.putDataset(both)
	if id := b.putDataset(both); id != same {
		t.Fatalf("the same manifest: %s and %s", same, id)
	}
	if err := a.c.DeleteBlob(ctx, same); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Dataset(ctx, same); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a reads the dataset it deleted: %v, want 404", err)
	}
	sd, err := b.c.Dataset(ctx, same)
	if err != nil {
		t.Fatalf("b reads its dataset after a deleted its own: %v", err)
	}
	if got := b.get(sd.Members[0].Blob); !bytes.Equal(got, both["p"]) {
		t.Errorf("b's member: %q", got)
	}
	if err := b.c.DeleteBlob(ctx, same); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{same, sd.Members[0].Blob} {
		if _, err := c.c.Get(ctx, id, &buf); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("blob %.8s after both deleted the dataset: %v, want 404", id, err)
		}
	}
}

// TestFanInOwners: a client's fan-in job is its own (it waits for it
// and reads its output; another client sees none of it), and no client
// joins another's blob or job.
func TestFanInOwners(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(1, nil)
	c.waitWorkers(1)
	a := newTenant(t, c, api.RoleClient, "a", "")
	b := newTenant(t, c, api.RoleClient, "b", "")
	x, y := a.put([]byte("x\n")), a.put([]byte("y\n"))
	first := a.run(api.JobRequest{Op: "noop", Input: x})
	st := a.run(api.JobRequest{Op: "noop", Inputs: []string{x, fmt.Sprintf("job:%d", first.Job), y}})
	if st.State != api.JobDone || string(a.get(st.Output)) != "x\nx\ny\n" {
		t.Fatalf("a's join: %s %q", st.State, st.Error)
	}
	b.expect(t, http.StatusNotFound, http.MethodGet, fmt.Sprintf("%s/%d", api.PathJobs, st.Job), nil)
	mine := b.put([]byte("b\n"))
	msg := b.expect(t, http.StatusNotFound, http.MethodPost, api.PathJobs, api.JobRequest{Op: "noop", Inputs: []string{mine, x}})
	if !strings.Contains(msg, "input 2: no blob "+x) {
		t.Errorf("b joining a's blob: %s", msg)
	}
	msg = b.expect(t, http.StatusNotFound, http.MethodPost, api.PathJobs,
		api.JobRequest{Op: "noop", Inputs: []string{mine, fmt.Sprintf("job:%d", first.Job)}})
	if !strings.Contains(msg, fmt.Sprintf("input 2 (job:%d): no such job", first.Job)) {
		t.Errorf("b joining a's job: %s", msg)
	}
}

// TestForgedManifest: a blob is a dataset only if the server made it
// one. Bob uploads JSON that looks like a manifest naming alice's blob
// (braid put): it is a plain blob of his, through which no route reads
// alice's blob, and a job over it sees its bytes only; uploading the very
// bytes of alice's real dataset is refused. Alice's dataset still works
// for her and for a token of her group.
func TestForgedManifest(t *testing.T) {
	for name, backend := range bothStores() {
		t.Run(name, func(t *testing.T) { testForgedManifest(t, backend(t).Fresh(t)) })
	}
}

func testForgedManifest(t *testing.T, db string) {
	c := newCluster(t, func(cfg *server.Config) { cfg.DB = db })
	noop := noopOps(t)
	c.addWorker(1, func(cfg *worker.Config) { cfg.Ops = noop })
	c.waitWorkers(1)
	ctx := t.Context()
	alice := newTenant(t, c, api.RoleClient, "alice", "team")
	mate := newTenant(t, c, api.RoleClient, "mate", "team")
	bob := newTenant(t, c, api.RoleClient, "bob", "")
	secret := []byte("alice's secret\n")
	s := alice.put(secret)
	fake := []byte(fmt.Sprintf(`{"format":"braid-dataset/1","members":[{"name":"s","size":1,"blob":"%s"}]}`, s))
	f := bob.put(fake)

	bob.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+s+"?dataset="+f, nil)
	bob.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+s, nil)
	if msg := bob.expect(t, http.StatusBadRequest, http.MethodGet, api.PathDatasets+"/"+f, nil); strings.Contains(msg, s) {
		t.Errorf("bob's ls of his fake manifest names alice's blob: %s", msg)
	}
	st := bob.run(api.JobRequest{Op: "noop", Input: f})
	if st.State != api.JobDone {
		t.Fatalf("bob's job over his fake manifest: %+v", st)
	}
	if got := bob.get(st.Output); !bytes.Equal(got, fake) {
		t.Errorf("bob's job over his fake manifest output %q, want its own bytes", got)
	}
	bob.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+s+"?dataset="+st.Output, nil)
	bob.expect(t, http.StatusBadRequest, http.MethodPost, api.PathJobs, api.JobRequest{Op: "noop", Input: f, Merge: "none"})
	bob.expect(t, http.StatusNotFound, http.MethodPost, api.PathJobs, api.JobRequest{Op: "noop", Inputs: []string{s, f}})

	// Alice's real dataset: hers and her group's, not bob's, not even
	// when he uploads its very bytes.
	ds := alice.putDataset(map[string][]byte{"s": secret})
	d, err := alice.c.Dataset(ctx, ds)
	if err != nil {
		t.Fatalf("alice lists her dataset: %v", err)
	}
	for _, tn := range []tenant{alice, mate} {
		var got bytes.Buffer
		if _, err := tn.c.GetMember(ctx, ds, s, &got); err != nil || !bytes.Equal(got.Bytes(), secret) {
			t.Errorf("a token of alice's group reads her dataset's member: %q, %v", got.Bytes(), err)
		}
	}
	manifest, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.c.Put(ctx, bytes.NewReader(manifest)); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("bob uploads the bytes of alice's dataset: %v, want 404", err)
	}
	// Nor as his job's input: the fan-in of two halves of its bytes.
	half1, half2 := bob.put(manifest[:20]), bob.put(manifest[20:])
	bob.expect(t, http.StatusNotFound, http.MethodPost, api.PathJobs, api.JobRequest{Op: "noop", Inputs: []string{half1, half2}})
	bob.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+s+"?dataset="+ds, nil)
	bob.expect(t, http.StatusNotFound, http.MethodGet, api.PathDatasets+"/"+ds, nil)
	bob.expect(t, http.StatusNotFound, http.MethodPost, api.PathJobs, api.JobRequest{Op: "noop", Input: ds})
	if _, err := mate.c.Put(ctx, bytes.NewReader(manifest)); err != nil {
		t.Errorf("a token of alice's group uploads the bytes of her dataset: %v", err)
	}
}
