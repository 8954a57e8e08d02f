package server_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/worker"
)

// TestDatasetOwners: a client's datasets are its own like its blobs: a
// second client neither reads one nor makes one of the first's blobs; a
// job's output dataset is read, members too, by the job's owner.
func TestDatasetOwners(t *testing.T) {
	c := newCluster(t, nil)
	noop, err := ops.Builtin().Subset("noop")
	if err != nil {
		t.Fatal(err)
	}
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
