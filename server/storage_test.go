package server_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/ops"
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
