package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/worker"
)

// tenant is one token's view of a test cluster.
type tenant struct {
	*cluster
	auth string // the Authorization header
}

func newTenant(t *testing.T, c *cluster, role, name, group string) tenant {
	t.Helper()
	tok, err := c.c.NewToken(t.Context(), api.TokenRequest{Role: role, Name: name, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	return tenant{c.as(client.New(c.srv.URL(), client.WithToken(tok.Join))), "Bearer " + tok.Token}
}

// status calls the route as tn and returns the status and body.
func (tn tenant) status(t *testing.T, method, path string, body any) (int, string) {
	t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	return call(t, tn.cluster, method, request{path: path, body: b}, tn.auth)
}

// expect fails unless tn's call answers want.
func (tn tenant) expect(t *testing.T, want int, method, path string, body any) string {
	t.Helper()
	code, msg := tn.status(t, method, path, body)
	if code != want {
		t.Errorf("%s %s: %d %s, want %d", method, path, code, strings.TrimSpace(msg), want)
	}
	return msg
}

// TestOwnerMatrix is the owner axis of TestRoleMatrix: a client token
// cannot see, read, delete, list or use as input another client's job,
// blob or pipeline, nor replace or remove its operation; the tokens of
// one group share all of that; admin tokens see everything; and what the
// cluster key made (as rows from before owners) only admins see.
func TestOwnerMatrix(t *testing.T) {
	c := newCluster(t, nil)
	noop, err := ops.Builtin().Subset("noop", "checksum")
	if err != nil {
		t.Fatal(err)
	}
	c.addWorker(1, func(cfg *worker.Config) { cfg.Ops = noop; cfg.Modules = []string{} })
	c.waitWorkers(1)
	ctx := t.Context()
	a := newTenant(t, c, api.RoleClient, "a", "")
	b := newTenant(t, c, api.RoleClient, "b", "")
	lab1 := newTenant(t, c, api.RoleClient, "lab1", "lab")
	lab2 := newTenant(t, c, api.RoleClient, "lab2", "lab")
	adm := newTenant(t, c, api.RoleAdmin, "adm", "")
	mon := newTenant(t, c, api.RoleMonitor, "mon", "")

	// A's records: a blob, a done job (its output), a pipeline and an
	// operation.
	blob := a.put([]byte("a's data"))
	job := a.run(api.JobRequest{Op: "noop", Input: blob})
	if job.State != api.JobDone {
		t.Fatalf("a's job: %+v", job)
	}
	pipe, err := a.c.SubmitPipeline(ctx, api.PipelineRequest{Steps: []api.PipelineStep{
		{Name: "s", JobRequest: api.JobRequest{Op: "noop", Input: blob}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.AddOp(ctx, "aop", bytes.NewReader(tinyModule), client.OpOptions{}); err != nil {
		t.Fatal(err)
	}
	jobPath := fmt.Sprintf("%s/%d", api.PathJobs, job.Job)
	pipePath := fmt.Sprintf("%s/%d", api.PathPipelines, pipe.Pipeline)
	fromJob := api.JobRequest{Op: "noop", Input: fmt.Sprintf("job:%d", job.Job)}
	listed := func(tn tenant, path, id string) bool {
		t.Helper()
		return strings.Contains(tn.expect(t, http.StatusOK, http.MethodGet, path, nil), id)
	}

	t.Run("other client", func(t *testing.T) {
		for _, r := range []struct{ method, path string }{
			{http.MethodGet, api.PathBlobs + "/" + blob},
			{http.MethodHead, api.PathBlobs + "/" + blob},
			{http.MethodGet, api.PathBlobs + "/" + job.Output},
			{http.MethodDelete, api.PathBlobs + "/" + blob},
			{http.MethodGet, jobPath},
			{http.MethodGet, jobPath + "/units"},
			{http.MethodPost, jobPath + "/cancel"},
			{http.MethodGet, pipePath},
		} {
			b.expect(t, http.StatusNotFound, r.method, r.path, nil)
		}
		b.expect(t, http.StatusNotFound, http.MethodPost, api.PathJobs, api.JobRequest{Op: "noop", Input: blob})
		b.expect(t, http.StatusNotFound, http.MethodPost, api.PathJobs, fromJob)
		b.expect(t, http.StatusNotFound, http.MethodPost, api.PathPipelines, api.PipelineRequest{Steps: []api.PipelineStep{
			{Name: "s", JobRequest: fromJob}}})
		if listed(b, api.PathJobs, fmt.Sprintf(`"job":%d,`, job.Job)) {
			t.Errorf("b lists a's job %d", job.Job)
		}
		if listed(b, api.PathBlobs, blob) || listed(b, api.PathBlobs, job.Output) {
			t.Error("b lists a's blobs")
		}
		// Operation names are global: b runs a's operation, but cannot
		// replace or remove it.
		if code, msg := b.status(t, http.MethodPut, api.PathOps+"/aop", nil); code != http.StatusForbidden || !strings.Contains(msg, "belongs to another client") {
			t.Errorf("b replacing a's operation: %d %s, want 403", code, msg)
		}
		b.expect(t, http.StatusForbidden, http.MethodDelete, api.PathOps+"/aop", nil)
		st := b.submit(api.JobRequest{Op: "aop", Input: b.put([]byte("b's data"))})
		b.expect(t, http.StatusOK, http.MethodPost, fmt.Sprintf("%s/%d/cancel", api.PathJobs, st.Job), nil)
		// Who added an operation is for workers (which share their
		// prefetching among tenants) and admins, not other clients.
		if msg := b.expect(t, http.StatusOK, http.MethodGet, api.PathOps, nil); strings.Contains(msg, `"tenant"`) {
			t.Errorf("b's operation list names tenants: %s", msg)
		}
		for _, tn := range []tenant{adm, newTenant(t, c, api.RoleWorker, "w", "")} {
			if msg := tn.expect(t, http.StatusOK, http.MethodGet, api.PathOps, nil); !strings.Contains(msg, `"tenant":"`) {
				t.Errorf("an admin's or worker's operation list does not say whose aop is: %s", msg)
			}
		}
	})

	t.Run("owner", func(t *testing.T) {
		a.expect(t, http.StatusOK, http.MethodGet, api.PathBlobs+"/"+blob, nil)
		a.expect(t, http.StatusOK, http.MethodGet, api.PathBlobs+"/"+job.Output, nil)
		a.expect(t, http.StatusOK, http.MethodGet, jobPath+"/units", nil)
		a.expect(t, http.StatusOK, http.MethodGet, pipePath, nil)
		if !listed(a, api.PathJobs, fmt.Sprintf(`"job":%d,`, job.Job)) || !listed(a, api.PathBlobs, blob) {
			t.Error("a does not list its own job and blob")
		}
		if next := a.run(fromJob); next.State != api.JobDone {
			t.Errorf("a's job on its own job's output: %+v", next)
		}
		if _, err := a.c.AddOp(ctx, "aop", bytes.NewReader(tinyModule), client.OpOptions{}); err != nil {
			t.Errorf("a adding a version of its operation: %v", err)
		}
	})

	t.Run("admin and monitor", func(t *testing.T) {
		adm.expect(t, http.StatusOK, http.MethodGet, api.PathBlobs+"/"+blob, nil)
		adm.expect(t, http.StatusOK, http.MethodGet, pipePath, nil)
		adm.expect(t, http.StatusAccepted, http.MethodPost, api.PathJobs, fromJob)
		mon.expect(t, http.StatusOK, http.MethodGet, jobPath, nil)
		if !listed(adm, api.PathJobs, fmt.Sprintf(`"job":%d,`, job.Job)) || !listed(mon, api.PathJobs, fmt.Sprintf(`"job":%d,`, job.Job)) {
			t.Error("an admin or monitor token does not list a's job")
		}
	})

	t.Run("group", func(t *testing.T) {
		shared := lab1.put([]byte("the lab's data"))
		lj := lab1.run(api.JobRequest{Op: "noop", Input: shared})
		lab2.expect(t, http.StatusOK, http.MethodGet, fmt.Sprintf("%s/%d", api.PathJobs, lj.Job), nil)
		if next := lab2.run(api.JobRequest{Op: "noop", Input: fmt.Sprintf("job:%d", lj.Job)}); next.State != api.JobDone {
			t.Errorf("lab2's job on lab1's job: %+v", next)
		}
		b.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+shared, nil)
		notes := lab1.put([]byte("the lab's notes"))
		lab2.expect(t, http.StatusOK, http.MethodGet, api.PathBlobs+"/"+notes, nil)
		lab2.expect(t, http.StatusNoContent, http.MethodDelete, api.PathBlobs+"/"+notes, nil)
		lab1.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+notes, nil)
	})

	t.Run("same bytes", func(t *testing.T) {
		// Blobs are named by content: b uploading a's bytes makes b an
		// owner too, and b deleting them takes only b's upload.
		data := []byte("bytes both upload")
		id := a.put(data)
		if got := b.put(data); got != id {
			t.Fatalf("same bytes, ids %s and %s", id, got)
		}
		b.expect(t, http.StatusNoContent, http.MethodDelete, api.PathBlobs+"/"+id, nil)
		b.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+id, nil)
		a.expect(t, http.StatusOK, http.MethodGet, api.PathBlobs+"/"+id, nil)

		// The same for the kept output of a's job, which a never
		// uploaded: b's delete neither removes it nor names a's job.
		sum := a.run(api.JobRequest{Op: "checksum", Input: id})
		if sum.State != api.JobDone {
			t.Fatalf("a's checksum job: %+v", sum)
		}
		if got := b.put(a.get(sum.Output)); got != sum.Output {
			t.Fatalf("same bytes, ids %s and %s", sum.Output, got)
		}
		if msg := b.expect(t, http.StatusNoContent, http.MethodDelete, api.PathBlobs+"/"+sum.Output, nil); msg != "" {
			t.Errorf("b's delete answered %q", msg)
		}
		a.expect(t, http.StatusOK, http.MethodGet, api.PathBlobs+"/"+sum.Output, nil)
	})

	t.Run("no owner", func(t *testing.T) {
		// The cluster key's records have no owner, as rows from before
		// owners: admins see them, clients do not.
		k := c.put([]byte("the cluster key's data"))
		kj := c.run(api.JobRequest{Op: "noop", Input: k})
		a.expect(t, http.StatusNotFound, http.MethodGet, api.PathBlobs+"/"+k, nil)
		a.expect(t, http.StatusNotFound, http.MethodGet, fmt.Sprintf("%s/%d", api.PathJobs, kj.Job), nil)
		adm.expect(t, http.StatusOK, http.MethodGet, api.PathBlobs+"/"+k, nil)
		adm.expect(t, http.StatusOK, http.MethodGet, fmt.Sprintf("%s/%d", api.PathJobs, kj.Job), nil)
	})
}
