package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/server"
)

// putDataset uploads files (name: bytes) and makes a dataset of them.
func (c *cluster) putDataset(files map[string][]byte) string {
	c.t.Helper()
	var members []api.DatasetMember
	for name, b := range files {
		info, err := c.c.PutMember(c.t.Context(), bytes.NewReader(b))
		if err != nil {
			c.t.Fatalf("upload member %s: %v", name, err)
		}
		members = append(members, api.DatasetMember{Name: name, Size: info.Size, Blob: info.ID})
	}
	info, err := c.c.PutDataset(c.t.Context(), members)
	if err != nil {
		c.t.Fatalf("make dataset: %v", err)
	}
	return info.ID
}

// TestDatasetJobs: a job over a dataset maps the operation over every
// member in name order and merges by concat, by a reduce tree, or per
// member into a new dataset of the same names; a module finds its
// member's name as a file.
func TestDatasetJobs(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	c.addOp("files", wasmtest.Files, client.OpOptions{})
	c.addOp("up", wasmtest.Upper, client.OpOptions{})
	c.addOp("count", wasmtest.Lines, client.OpOptions{})
	c.addOp("sum", wasmtest.Sum, client.OpOptions{})

	id := c.putDataset(map[string][]byte{"c.txt": []byte("three\n"), "a.txt": []byte("one\n"), "b.txt": []byte("two\n")})
	d, err := c.c.Dataset(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Members) != 3 || d.Members[0].Name != "a.txt" || d.Members[2].Name != "c.txt" || d.Members[1].Size != 4 {
		t.Errorf("manifest %+v", d)
	}
	if !bytes.HasPrefix(c.get(id), []byte(api.DatasetMagic)) {
		t.Errorf("the manifest blob begins %q", c.get(id)[:20])
	}
	st := c.run(api.JobRequest{Op: "files", Input: id})
	if want := "a.txt: 4 bytes\none\nb.txt: 4 bytes\ntwo\nc.txt: 6 bytes\nthree\n"; st.State != api.JobDone || string(c.get(st.Output)) != want {
		t.Errorf("concat: %s %q: %q, want %q", st.State, st.Error, c.get(st.Output), want)
	}

	// 40 members of 10 lines each, split by lines: 400 units, reduced
	// in a tree of sums.
	many := map[string][]byte{}
	for i := range 40 {
		many[fmt.Sprintf("part-%02d", i)] = lines(10)
	}
	big := c.putDataset(many)
	st = c.run(api.JobRequest{Op: "count", Input: big, Split: "lines:1", Merge: "reduce:sum"})
	if st.State != api.JobDone || string(c.get(st.Output)) != "400\n" || st.Units.Total <= 400+1 {
		t.Errorf("reduce tree: %s %q: %q over %d units", st.State, st.Error, c.get(st.Output), st.Units.Total)
	}

	// Per member: a dataset of the same names; members with the same
	// bytes and an empty one keep their places.
	src := map[string][]byte{"x": []byte("same\n"), "y": []byte("same\n"), "z": nil, "w": []byte("first\nsecond\n")}
	st = c.run(api.JobRequest{Op: "up", Input: c.putDataset(src), Split: "lines:1", Merge: "none"})
	if st.State != api.JobDone {
		t.Fatalf("merge none: %s %q", st.State, st.Error)
	}
	out, err := c.c.Dataset(t.Context(), st.Output)
	if err != nil {
		t.Fatalf("output of merge none: %v", err)
	}
	var got []string
	for _, m := range out.Members {
		got = append(got, fmt.Sprintf("%s=%q", m.Name, c.get(m.Blob)))
	}
	if want := `[w="FIRST\nSECOND\n" x="SAME\n" y="SAME\n" z=""]`; fmt.Sprint(got) != want {
		t.Errorf("merge none: %v, want %s", got, want)
	}
	// Its output is a dataset, usable as the next job's input.
	st = c.run(api.JobRequest{Op: "count", Input: fmt.Sprintf("job:%d", st.Job), Merge: "reduce:sum"})
	if st.State != api.JobDone || string(c.get(st.Output)) != "4\n" {
		t.Errorf("a job over an output dataset: %s %q: %q", st.State, st.Error, c.get(st.Output))
	}
	// In a pipeline: a step maps over a dataset into a dataset, the next
	// maps over that one and reduces.
	ps, err := c.c.SubmitPipeline(t.Context(), api.PipelineRequest{Steps: []api.PipelineStep{
		{Name: "per", JobRequest: api.JobRequest{Op: "count", Input: big, Merge: "none"}},
		{Name: "total", JobRequest: api.JobRequest{Op: "sum", Input: "step:per", Merge: "reduce:sum"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if ps, err = c.c.WaitPipeline(ctx, ps.Pipeline, nil); err != nil || ps.State != api.JobDone {
		t.Fatalf("pipeline over datasets: %+v, %v", ps, err)
	}
	if per, err := c.c.Dataset(t.Context(), ps.Steps[0].Output); err != nil || len(per.Members) != 40 || string(c.get(per.Members[7].Blob)) != "10\n" {
		t.Errorf("step per: %v, %+v", err, per)
	}
	if got := string(c.get(ps.Steps[1].Output)); got != "400\n" {
		t.Errorf("step total: %q", got)
	}
	// The members of the input are still there after the jobs.
	for _, m := range out.Members {
		if _, err := c.c.Get(t.Context(), m.Blob, &bytes.Buffer{}); err != nil {
			t.Errorf("member %s after a job over it: %v", m.Name, err)
		}
	}
}

// TestDatasetRefused: bad datasets and jobs that cannot run over one are
// refused, naming what is wrong, and nothing is stored or started.
func TestDatasetRefused(t *testing.T) {
	c := newCluster(t, nil)
	a, b := c.put([]byte("alpha\n")), c.put([]byte("beta\n"))
	ds := c.putDataset(map[string][]byte{"one": []byte("alpha\n")})
	missing := strings.Repeat("cd", 32)
	m := func(name string, size int64, blob string) api.DatasetMember {
		return api.DatasetMember{Name: name, Size: size, Blob: blob}
	}
	for _, x := range []struct {
		members []api.DatasetMember
		status  int
		want    string
	}{
		{nil, http.StatusBadRequest, "no members"},
		{[]api.DatasetMember{m("a", 6, a), m("a", 5, b)}, http.StatusBadRequest, `member name "a" appears twice`},
		{[]api.DatasetMember{m("a/b", 6, a)}, http.StatusBadRequest, `no '/'`},
		{[]api.DatasetMember{m("..", 6, a)}, http.StatusBadRequest, `want a file name`},
		{[]api.DatasetMember{m("a", 6, a), m("b", 5, missing)}, http.StatusNotFound, `member "b": no blob ` + missing},
		{[]api.DatasetMember{m("a", 7, a)}, http.StatusBadRequest, `member "a": blob ` + a + ` has 6 bytes, not 7`},
		{[]api.DatasetMember{m("a", 6, a), m("d", int64(len(c.get(ds))), ds)}, http.StatusBadRequest, "datasets do not nest"},
	} {
		before, _ := c.c.Blobs(t.Context())
		_, err := c.c.PutDataset(t.Context(), x.members)
		if client.StatusOf(err) != x.status || !strings.Contains(err.Error(), x.want) {
			t.Errorf("%v: %v; want %d saying %q", x.members, err, x.status, x.want)
		}
		if after, _ := c.c.Blobs(t.Context()); len(after) != len(before) {
			t.Errorf("%v: %d blobs before, %d after", x.members, len(before), len(after))
		}
	}
	if _, err := c.c.Dataset(t.Context(), a); client.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "is not a dataset") {
		t.Errorf("a blob as a dataset: %v", err)
	}

	// Jobs.
	gone := c.putDataset(map[string][]byte{"keep": []byte("kept\n"), "lost": []byte("lost\n")})
	// A member cannot be deleted alone (409): one lost from the disk.
	lost := c.put([]byte("lost\n"))
	if err := c.c.DeleteBlob(t.Context(), lost); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "member of datasets "+gone) {
		t.Errorf("deleting a member of a dataset: %v, want 409 naming the dataset", err)
	}
	if err := os.Remove(c.blobPath(lost)); err != nil {
		t.Fatal(err)
	}
	bad := c.putDataset(map[string][]byte{"ok": []byte("fine\n"), "rot": []byte("rotten bytes\n")})
	c.corruptBlob(c.put([]byte("rotten bytes\n")))
	for _, x := range []struct {
		req    api.JobRequest
		status int
		want   string
	}{
		{api.JobRequest{Op: "noop", Input: a, Merge: "none"}, http.StatusBadRequest, "merge none keeps a dataset's members apart"},
		{api.JobRequest{Op: "noop", Inputs: []string{a, ds}}, http.StatusBadRequest, "input 2 (" + ds + ") is a dataset"},
		{api.JobRequest{Op: "blur", Input: ds}, http.StatusBadRequest, "takes an image"},
		{api.JobRequest{Op: "checksum", Input: ds, Merge: "none"}, http.StatusBadRequest, "splits its input itself"},
		{api.JobRequest{Op: "noop", Input: ds, Repeat: 3}, http.StatusBadRequest, "not units, tiles or repeat"},
		{api.JobRequest{Op: "noop", Input: gone}, http.StatusNotFound, `dataset member "lost": its blob ` + lost + ` is missing`},
		{api.JobRequest{Op: "noop", Input: bad}, 0, `dataset member "rot"`},
	} {
		before, _ := c.c.Jobs(t.Context(), "", 0)
		_, err := c.c.Submit(t.Context(), x.req)
		if err == nil || (x.status != 0 && client.StatusOf(err) != x.status) || !strings.Contains(err.Error(), x.want) {
			t.Errorf("%+v: %v; want %d saying %q", x.req, err, x.status, x.want)
		}
		if after, _ := c.c.Jobs(t.Context(), "", 0); len(after) != len(before) {
			t.Errorf("%+v: %d jobs before, %d after", x.req, len(before), len(after))
		}
	}
}

// TestDatasetRetention: while a job over a dataset runs and after it
// ends, the dataset and its members stay; an output dataset (merge none)
// stays whole until its retention ends, then goes with its members, and
// fetching it answers 410. The input dataset, an upload, stays.
func TestDatasetRetention(t *testing.T) {
	const retain = 500 * time.Millisecond
	c := newCluster(t, func(cfg *server.Config) { cfg.Retain = retain })
	c.addWorker(2, nil)
	c.waitWorkers(1)
	mod := c.addOp("up", wasmtest.Upper, client.OpOptions{})
	one, two := c.put([]byte("one\n")), c.put([]byte("two\n"))
	info, err := c.c.PutDataset(t.Context(), []api.DatasetMember{{Name: "1", Size: 4, Blob: one}, {Name: "2", Size: 4, Blob: two}})
	if err != nil {
		t.Fatal(err)
	}
	st := c.run(api.JobRequest{Op: "up", Input: info.ID, Merge: "none"})
	if st.State != api.JobDone {
		t.Fatalf("job: %s %q", st.State, st.Error)
	}
	out, err := c.c.Dataset(t.Context(), st.Output)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Members) != 2 || string(c.get(out.Members[1].Blob)) != "TWO\n" {
		t.Fatalf("output dataset %+v", out)
	}
	if !testwait.Until(10*time.Second, func() bool {
		st, err = c.c.Status(t.Context(), st.Job)
		return err == nil && !st.OutputExpired.IsZero()
	}) {
		t.Fatalf("output not expired 10s after a retention of %v: %+v, %v", retain, st, err)
	}
	c.waitBlobs("after the output dataset expired", mod.Hash, one, two, info.ID)
	if _, err := c.c.Dataset(t.Context(), st.Output); !errors.Is(err, client.ErrGone) {
		t.Errorf("an expired output dataset: %v, want 410", err)
	}
}

// TestDatasetMembersKept: the members of an output dataset stay while
// the output is kept, also when an unrelated job's intermediate results
// have their very bytes (blobs are content-addressed), and none can be
// deleted on its own meanwhile.
func TestDatasetMembersKept(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	ctx := t.Context()
	mod := c.addOp("up", wasmtest.Upper, client.OpOptions{})
	ds := c.putDataset(map[string][]byte{"x": []byte("a\nb\n")})
	in, err := c.c.Dataset(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	// Split into lines, so the member's output "A\nB\n" is a new blob,
	// none of the job's own results.
	a := c.run(api.JobRequest{Op: "up", Input: ds, Split: "lines:1", Merge: "none"})
	if a.State != api.JobDone {
		t.Fatalf("job over the dataset: %s %q", a.State, a.Error)
	}
	out, err := c.c.Dataset(ctx, a.Output)
	if err != nil {
		t.Fatal(err)
	}
	member := out.Members[0].Blob
	// Another job's first unit gives the same bytes as an intermediate
	// result, which goes when that job ends.
	plain := c.put([]byte("a\nb\nc\n"))
	b := c.run(api.JobRequest{Op: "up", Input: plain, Split: "lines:4"})
	if b.State != api.JobDone || string(c.get(b.Output)) != "A\nB\nC\n" {
		t.Fatalf("the other job: %s %q", b.State, b.Error)
	}
	c.waitBlobs("after the other job's intermediates went", mod.Hash, in.Members[0].Blob, ds, a.Output, member, plain, b.Output)
	if got := string(c.get(member)); got != "A\nB\n" {
		t.Errorf("member x of the output dataset: %q", got)
	}
	// Deleting the member alone is refused while the output is kept,
	// naming the job.
	err = c.c.DeleteBlob(ctx, member)
	if !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("member of the output dataset, of jobs %d", a.Job)) {
		t.Errorf("deleting a member of a kept output dataset: %v, want 409 naming job %d", err, a.Job)
	}
	c.get(member)
}
