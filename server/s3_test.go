package server_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/s3test"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
)

// TestS3Blobs runs jobs on a server whose blobs are in a real
// S3-compatible store (BRAID_TEST_S3): a tiled blur (its tiles are one
// blob the units read by range, its output is assembled into the store)
// and a checksum DAG (its input is read at offsets). The blobs are in the
// bucket, not on the server's disk, and a restarted server finds them.
func TestS3Blobs(t *testing.T) {
	b := s3test.New(t)
	b.Setenv(t)
	c := newCluster(t, func(cfg *server.Config) {
		cfg.Blobs = b.Spec("braid")
		cfg.BlobCache = 1 << 20
	})
	c.addWorker(2, nil)
	c.waitWorkers(1)

	img := ops.SamplePNG(300, 200)
	params := map[string]string{"radius": "4"}
	want := reference(t, ops.Blur(), img, params)
	in := c.put(img)
	st := c.run(api.JobRequest{Op: "blur", Input: in, Params: params, Tile: api.Tile{W: 64, H: 48}})
	if st.State != api.JobDone || st.Units.Done != 25 {
		t.Fatalf("blur job is %s with %+v: %s", st.State, st.Units, st.Error)
	}
	if got := c.get(st.Output); !bytes.Equal(got, want) {
		t.Errorf("blur output differs from the single-unit output (%d vs %d bytes)", len(got), len(want))
	}
	data := bytes.Repeat([]byte("braid over S3 "), 80_000) // ~1.1 MB: larger than the cache
	sum := c.run(api.JobRequest{Op: "checksum", Input: c.put(data), Params: map[string]string{"block": "4096"}, Units: 5})
	if sum.State != api.JobDone {
		t.Fatalf("checksum job is %s: %s", sum.State, sum.Error)
	}
	if got, want := string(c.get(sum.Output)), ops.ChecksumOf(data, 4096); got != want {
		t.Errorf("checksum %q, want %q", got, want)
	}

	keys := b.Keys(t, "braid/")
	for _, id := range []string{in, st.Output, sum.Output} {
		if !slices.Contains(keys, "braid/"+id) {
			t.Errorf("blob %s is not in the bucket (keys %v)", id, keys)
		}
	}
	if slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, "braid/tmp/") }) {
		t.Errorf("uploads left behind in the bucket: %v", keys)
	}
	if _, err := os.Stat(filepath.Join(c.cfg.Data, "blobs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the server made a local blob directory: %v", err)
	}
	// The jobs' intermediate blobs (the tiles, the units' results) leave
	// the bucket once the jobs ended; the inputs and outputs stay.
	testwait.For(t, "the intermediate blobs to be removed", 10*time.Second, func() bool {
		list, err := c.c.Blobs(t.Context())
		return err == nil && len(list) == 4 && len(b.Keys(t, "braid/")) == 4
	})

	c.stopServer()
	c.startServer()
	if got := c.get(st.Output); !bytes.Equal(got, want) {
		t.Error("after a restart, the output differs")
	}
}

// TestS3BlobsBadBucket: a server told a bucket that does not exist does
// not start, and says so.
func TestS3BlobsBadBucket(t *testing.T) {
	b := s3test.New(t)
	b.Setenv(t)
	cfg := server.Config{Listen: "127.0.0.1:0", Data: t.TempDir(), Key: testKey, Logger: testLogger(),
		Blobs: strings.Replace(b.Spec("p"), b.Name, b.Name+"-gone", 1)}
	_, err := server.New(cfg)
	if !errors.Is(err, store.ErrNoBucket) || !strings.Contains(err.Error(), b.Name+"-gone") {
		t.Errorf("server.New: %v; want an error naming the missing bucket", err)
	}
}
