package server_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/worker"
)

// TestDatasetBackfill: the members of a dataset made before the store's
// index of members (a database migrated from then) are kept once the
// server started on it indexed them: deleting one alone is refused. A
// missing and a corrupt manifest are skipped, and the server serves. A
// client's upload that looks like a manifest of another owner's blob is
// not made a dataset.
func TestDatasetBackfill(t *testing.T) {
	for name, backend := range bothStores() {
		t.Run(name, func(t *testing.T) {
			b := backend(t)
			url := b.Fresh(t)
			c := newCluster(t, func(cfg *server.Config) { cfg.DB = url })
			ctx := t.Context()
			ds := c.putDataset(map[string][]byte{"x": []byte("first member\n"), "y": []byte("second member\n")})
			d, err := c.c.Dataset(ctx, ds)
			if err != nil {
				t.Fatal(err)
			}
			member := d.Members[0].Blob
			missing := c.putDataset(map[string][]byte{"m": []byte("its manifest goes\n")})
			corrupt := c.putDataset(map[string][]byte{"c": []byte("its manifest rots\n")})
			// A client's upload that looks like a manifest of another
			// owner's blob is not made a dataset.
			bob := newTenant(t, c, api.RoleClient, "bob", "")
			fake := bob.put(fmt.Appendf(nil, `{"format":"braid-dataset/1","members":[{"name":"s","size":1,"blob":"%s"}]}`, member))
			c.stopServer()

			// As a database whose datasets were made before the index.
			b.Exec(t, url, "DELETE FROM dataset_members")
			b.Unindex(t, url)
			blob := func(id string) string { return filepath.Join(c.cfg.Data, "blobs", id[:2], id) }
			if err := os.Remove(blob(missing)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(blob(corrupt), []byte(`{"format":"braid-dataset/1","members":[]} rotten`), 0o644); err != nil {
				t.Fatal(err)
			}

			c.startServer()
			select {
			case <-server.Backfilled(c.srv):
			case <-time.After(30 * time.Second):
				t.Fatal("the server did not index the datasets within 30s")
			}
			err = c.c.DeleteBlob(ctx, member)
			if !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), ds) {
				t.Errorf("deleting a member of a dataset made before the index: %v, want 409 naming dataset %s", err, ds)
			}
			bob.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+member+"?dataset="+fake, nil)
			if got := string(c.get(member)); got != "first member\n" {
				t.Errorf("the member: %q", got)
			}
		})
	}
}

// TestBackfillOutputs: an output dataset that a job assembled before the
// store's index of members is indexed by the backfill, with the job's
// owner as its creator (before, outputs were left out: an assembled one
// could not be told from a module's bytes), as an upload is with its
// uploader; a job output that is a manifest of another owner's blob is
// not, nor is that owner's upload of it.
func TestBackfillOutputs(t *testing.T) {
	for name, backend := range bothStores() {
		t.Run(name, func(t *testing.T) {
			b := backend(t)
			url := b.Fresh(t)
			c := newCluster(t, func(cfg *server.Config) { cfg.DB = url })
			noop := noopOps(t)
			c.addWorker(1, func(cfg *worker.Config) { cfg.Ops = noop })
			c.waitWorkers(1)
			ctx := t.Context()
			alice := newTenant(t, c, api.RoleClient, "alice", "")
			bob := newTenant(t, c, api.RoleClient, "bob", "")
			ds := alice.putDataset(map[string][]byte{"x": []byte("first member\n"), "y": []byte("second member\n")})
			c.addOp("up", wasmtest.Upper, client.OpOptions{})
			st := alice.run(api.JobRequest{Op: "up", Input: ds, Merge: "none"})
			if st.State != api.JobDone {
				t.Fatalf("alice's job over her dataset: %+v", st)
			}
			out, err := alice.c.Dataset(ctx, st.Output)
			if err != nil {
				t.Fatal(err)
			}
			member := out.Members[0].Blob
			// bob's job writes a manifest of alice's member.
			fake := bob.put(fmt.Appendf(nil, `{"format":"braid-dataset/1","members":[{"name":"s","size":1,"blob":"%s"}]}`, member))
			if st := bob.run(api.JobRequest{Op: "noop", Input: fake}); st.State != api.JobDone || st.Output != fake {
				t.Fatalf("bob's job copying his bytes: %+v", st)
			}
			c.stopServer()

			// As a database whose datasets were made before the index.
			b.Exec(t, url, "DELETE FROM dataset_members")
			b.Unindex(t, url)
			c.startServer()
			select {
			case <-server.Backfilled(c.srv):
			case <-time.After(30 * time.Second):
				t.Fatal("the server did not index the datasets within 30s")
			}
			if _, err := alice.c.Dataset(ctx, st.Output); err != nil {
				t.Errorf("alice's output dataset after the backfill: %v", err)
			}
			err = c.c.DeleteBlob(ctx, member)
			if want := fmt.Sprintf("output dataset, of jobs %d,", st.Job); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), want) {
				t.Errorf("deleting a member of an output dataset made before the index: %v, want 409 naming job %d", err, st.Job)
			}
			upload, err := server.DatasetCreator(c.srv, ds)
			if err != nil || upload == "" {
				t.Fatalf("creator of alice's upload: %q, %v", upload, err)
			}
			if got, err := server.DatasetCreator(c.srv, st.Output); err != nil || got != upload {
				t.Errorf("creator of alice's output dataset: %q, %v; want her upload's, %q", got, err, upload)
			}
			if _, err := server.DatasetCreator(c.srv, fake); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("bob's manifest of alice's member was indexed (%v)", err)
			}
			bob.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+member+"?dataset="+fake, nil)
		})
	}
}
