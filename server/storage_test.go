package server_test

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/worker"
)

// blobPath is where the server of c keeps blob id.
func (c *cluster) blobPath(id string) string {
	return filepath.Join(c.cfg.Data, "blobs", id[:2], id)
}

// corruptBlob flips a byte of blob id on the server's disk.
func (c *cluster) corruptBlob(id string) {
	c.t.Helper()
	p := c.blobPath(id)
	b, err := os.ReadFile(p)
	if err != nil {
		c.t.Fatal(err)
	}
	b[len(b)/2] ^= 0x20
	if err := os.Chmod(p, 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o444); err != nil {
		c.t.Fatal(err)
	}
}

// wantCorrupt fails the test unless msg names blob id as corrupt.
func wantCorrupt(t testing.TB, what, msg, id string) {
	t.Helper()
	for _, want := range []string{"blob " + id, "does not match its sha256", "upload the same bytes again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q does not say %q", what, msg, want)
		}
	}
}

// TestCorruptBlob: a blob corrupted on disk is never taken as good: a job
// on it is refused or fails, naming the blob; a download of it fails; the
// same bytes uploaded again heal it.
func TestCorruptBlob(t *testing.T) {
	c := newCluster(t, nil)
	data := bytes.Repeat([]byte("braid integrity "), 40_000) // 640 KB
	in := c.put(data)
	req := api.JobRequest{Op: "checksum", Input: in, Params: map[string]string{"block": "4096"}, Units: 4}

	// A job accepted while the input was sound, which resumes after a
	// restart with a corrupt input, fails: it is not left running.
	queued := c.submit(req)
	c.stopServer()
	c.corruptBlob(in)
	c.startServer()
	c.addWorker(2, nil)
	c.waitWorkers(1)
	st := c.wait(queued.Job)
	if st.State != api.JobFailed {
		t.Fatalf("job on a corrupt input is %s, want failed", st.State)
	}
	wantCorrupt(t, "resumed job's error", st.Error, in)

	// A new job is refused with the same message.
	_, err := c.c.Submit(t.Context(), req)
	if err == nil {
		t.Fatal("a job on a corrupt input was accepted")
	}
	wantCorrupt(t, "submit", err.Error(), in)

	// A download stops short; the client says not to use the bytes.
	var buf bytes.Buffer
	if _, err := c.c.Get(t.Context(), in, &buf); !errors.Is(err, client.ErrIncomplete) {
		t.Errorf("download of a corrupt blob: %v, want ErrIncomplete", err)
	}
	if buf.Len() >= len(data) {
		t.Errorf("download of a corrupt blob gave all %d bytes", buf.Len())
	}

	// The same bytes again heal it.
	if id := c.put(data); id != in {
		t.Fatalf("re-upload gave id %s, want %s", id, in)
	}
	if got := c.get(in); !bytes.Equal(got, data) {
		t.Error("healed blob differs from the upload")
	}
	st = c.run(req)
	if st.State != api.JobDone {
		t.Fatalf("job after healing is %s: %s", st.State, st.Error)
	}
	if got, want := string(c.get(st.Output)), ops.ChecksumOf(data, 4096); got != want {
		t.Errorf("checksum %q, want %q", got, want)
	}
}

// TestCorruptOutput: a job's output corrupted on disk fails its download
// and the jobs that take it as input, naming the blob.
func TestCorruptOutput(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(1, nil)
	c.waitWorkers(1)
	data := bytes.Repeat([]byte("output integrity "), 10_000)
	st := c.run(api.JobRequest{Op: "checksum", Input: c.put(data), Params: map[string]string{"block": "4096"}, Units: 3})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	c.corruptBlob(st.Output)
	var buf bytes.Buffer
	if _, err := c.c.Get(t.Context(), st.Output, &buf); err == nil {
		t.Error("download of a corrupt output succeeded")
	}
	_, err := c.c.Submit(t.Context(), api.JobRequest{Op: "noop", Input: api.InputJobPrefix + strconv.FormatUint(st.Job, 10)})
	if err == nil {
		t.Fatal("a job on a corrupt output was accepted")
	}
	wantCorrupt(t, "submit on a corrupt output", err.Error(), st.Output)
}

// TestQuotas: an upload past --max-upload is refused with 413 and one
// past --max-data with 507, each saying the limit and what to do; a job
// submitted while the data limit is reached is refused with 507; deleting
// a blob makes room again.
func TestQuotas(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) {
		cfg.MaxBlob = 4 << 10
		cfg.MaxData = 10 << 10
	})
	ctx := t.Context()
	blob := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

	// One upload too large, streamed (the client sends no length) and
	// with its length announced.
	_, err := c.c.Put(ctx, bytes.NewReader(blob(5<<10, 'a')))
	if !errors.Is(err, client.ErrTooLarge) {
		t.Fatalf("upload of 5 KiB past a 4 KiB limit: %v, want 413", err)
	}
	for _, want := range []string{"4 KiB", "--max-upload", "split the data"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("413 message %q does not say %q", err, want)
		}
	}
	code, body := rawCall(t, c, http.MethodPost, api.PathBlobs, string(blob(5<<10, 'a')), api.Token(testKey))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "5 KiB") {
		t.Errorf("upload with a length of 5 KiB: %d %s", code, body)
	}

	a := c.put(blob(4<<10, 'a'))
	c.put(blob(4<<10, 'b'))
	// 8 KiB stored of 10: 4 KiB more does not fit.
	_, err = c.c.Put(ctx, bytes.NewReader(blob(4<<10, 'c')))
	if !errors.Is(err, client.ErrInsufficientStorage) {
		t.Fatalf("upload past the data limit: %v, want 507", err)
	}
	for _, want := range []string{"8 KiB of its 10 KiB limit", "--max-data", "DELETE /v1/blobs/ID", "--retain"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("507 message %q does not say %q", err, want)
		}
	}
	code, _ = rawCall(t, c, http.MethodPost, api.PathBlobs, string(blob(4<<10, 'c')), api.Token(testKey))
	if code != http.StatusInsufficientStorage {
		t.Errorf("upload past the data limit with its length: %d, want 507", code)
	}
	// Refused uploads leave nothing behind.
	if list, err := c.c.Blobs(ctx); err != nil || len(list) != 2 {
		t.Errorf("blobs after refused uploads: %v, %v; want the 2 accepted", list, err)
	}

	// At the limit, jobs are refused too.
	c.put(blob(2<<10, 'd'))
	_, err = c.c.Submit(ctx, api.JobRequest{Op: "noop", Input: a})
	if !errors.Is(err, client.ErrInsufficientStorage) || !strings.Contains(err.Error(), "--max-data") {
		t.Errorf("job at the data limit: %v, want 507 naming --max-data", err)
	}

	// Deleting a blob makes room.
	if err := c.c.DeleteBlob(ctx, a); err != nil {
		t.Fatal(err)
	}
	c.put(blob(3<<10, 'e'))
}

// blobSet lists the server's blobs.
func (c *cluster) blobSet() map[string]bool {
	c.t.Helper()
	list, err := c.c.Blobs(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	set := map[string]bool{}
	for _, b := range list {
		set[b.ID] = true
	}
	return set
}

// waitBlobs waits up to 10s until the server holds exactly the blobs
// want.
func (c *cluster) waitBlobs(what string, want ...string) {
	c.t.Helper()
	var got map[string]bool
	if !testwait.Until(10*time.Second, func() bool {
		got = c.blobSet()
		same := len(got) == len(want)
		for _, id := range want {
			same = same && got[id]
		}
		return same
	}) {
		c.t.Fatalf("%s: the server holds %d blobs %v, want %v", what, len(got), got, want)
	}
}

// TestIntermediatesRemoved: when a job ends, its units' results and tile
// data go; its input and output stay, also when a result is the same
// bytes as the input or the output.
func TestIntermediatesRemoved(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, func(cfg *worker.Config) {
		cfg.Ops = ops.NewRegistry(slowOp{ops.Blur(), 2 * time.Millisecond}, ops.Noop())
	})
	c.waitWorkers(1)
	img := ops.SamplePNG(320, 240)
	in := c.put(img)
	st := c.run(api.JobRequest{Op: "blur", Input: in, Tile: api.Tile{W: 40, H: 40}})
	if st.State != api.JobDone {
		t.Fatalf("blur job is %s: %s", st.State, st.Error)
	}
	c.waitBlobs("after a tiled blur (48 results and the tile data)", in, st.Output)

	// noop: its one result is its input and its output.
	st2 := c.run(api.JobRequest{Op: "noop", Input: in})
	if st2.State != api.JobDone || st2.Output != in {
		t.Fatalf("noop job is %s with output %s: %s", st2.State, st2.Output, st2.Error)
	}
	c.waitBlobs("after a noop whose result is its input", in, st.Output)

	// A canceled job's results go too.
	st3 := c.submit(api.JobRequest{Op: "blur", Input: in, Tile: api.Tile{W: 20, H: 20}, Params: map[string]string{"radius": "2"}})
	c.waitDone(st3.Job, 5)
	if _, err := c.c.Cancel(t.Context(), st3.Job); err != nil {
		t.Fatal(err)
	}
	c.waitBlobs("after a canceled job", in, st.Output)
	if !bytes.Equal(c.get(st.Output), reference(t, ops.Blur(), img, nil)) {
		t.Error("the kept output differs from the single-unit blur")
	}
}

// TestRetention: an output older than --retain is removed by the sweep;
// the job shows it expired and fetching it answers 410 Gone, saying why
// and what to do. Uploads stay, also when they are an output's bytes.
func TestRetention(t *testing.T) {
	const retain = 300 * time.Millisecond
	c := newCluster(t, func(cfg *server.Config) { cfg.Retain = retain })
	c.addWorker(2, nil)
	c.waitWorkers(1)
	in := c.put(ops.SamplePNG(64, 48))
	st := c.run(api.JobRequest{Op: "blur", Input: in})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	if want := st.Timings.Finished.Add(retain); !st.OutputExpires.Equal(want) {
		t.Errorf("output expires %v, want %v", st.OutputExpires, want)
	}
	noop := c.run(api.JobRequest{Op: "noop", Input: in}) // its output is the upload

	if !testwait.Until(10*time.Second, func() bool {
		var err error
		st, err = c.c.Status(t.Context(), st.Job)
		if err != nil {
			t.Fatal(err)
		}
		return !st.OutputExpired.IsZero()
	}) {
		t.Fatalf("output not expired 10s after a retention of %v: %+v", retain, st)
	}
	if st.State != api.JobDone || st.Output == "" || !st.OutputExpires.IsZero() {
		t.Errorf("expired job: %s, output %q, expires %v; want done with its output id and no expiry", st.State, st.Output, st.OutputExpires)
	}
	var buf bytes.Buffer
	_, err := c.c.Get(t.Context(), st.Output, &buf)
	if !errors.Is(err, client.ErrGone) {
		t.Fatalf("fetch of an expired output: %v, want 410", err)
	}
	for _, want := range []string{"output of job " + strconv.FormatUint(st.Job, 10), "retention period", "--retain", "submit the job again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("410 message %q does not say %q", err, want)
		}
	}
	_, err = c.c.Submit(t.Context(), api.JobRequest{Op: "noop", Input: api.InputJobPrefix + strconv.FormatUint(st.Job, 10)})
	if !errors.Is(err, client.ErrGone) {
		t.Errorf("job on an expired output: %v, want 410", err)
	}
	// The noop's output expired too, but its bytes are an upload.
	var s2 api.JobStatus
	if !testwait.Until(10*time.Second, func() bool {
		s2, err = c.c.Status(t.Context(), noop.Job)
		return err == nil && !s2.OutputExpired.IsZero()
	}) {
		t.Fatalf("noop output not expired: %+v, %v", s2, err)
	}
	c.waitBlobs("after the outputs expired", in)
}

// TestDeleteKeptOutput: a blob that is the output of a done job, kept
// until its retention ends, cannot be deleted, even when it is also an
// upload (a noop's output is its input): the answer is 409 naming the
// job, and the output stays fetchable. An upload no job keeps deletes.
func TestDeleteKeptOutput(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(1, nil)
	c.waitWorkers(1)
	data := []byte("kept by a job's output\n")
	in := c.put(data)
	st := c.run(api.JobRequest{Op: "noop", Input: in})
	if st.State != api.JobDone || st.Output != in {
		t.Fatalf("noop job: %s, output %q; want done with output %s", st.State, st.Output, in)
	}
	err := c.c.DeleteBlob(t.Context(), in)
	if !errors.Is(err, client.ErrConflict) {
		t.Fatalf("delete of a kept output: %v, want 409", err)
	}
	for _, want := range []string{"output of jobs " + strconv.FormatUint(st.Job, 10), "--retain"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("409 message %q does not say %q", err, want)
		}
	}
	if got := c.get(st.Output); !bytes.Equal(got, data) {
		t.Errorf("output after the refused delete: %q, want %q", got, data)
	}
	// Negative control: an upload nothing keeps is deleted.
	other := c.put([]byte("nobody keeps this\n"))
	if err := c.c.DeleteBlob(t.Context(), other); err != nil {
		t.Fatalf("delete of a plain upload: %v", err)
	}
}
