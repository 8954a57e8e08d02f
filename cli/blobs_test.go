package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/store"
)

// TestServerBlobsFlag: --blobs is explained in the help, and a spec the
// server cannot use, from the flag or BRAID_BLOBS, stops it with an error
// that says what to give.
func TestServerBlobsFlag(t *testing.T) {
	code, out, _ := runQuick(t, "server", "--help")
	for _, want := range []string{"--blobs", "s3://BUCKET/PREFIX?endpoint=", "AWS_ACCESS_KEY_ID", "--blob-cache", "BRAID_BLOBS"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("braid server --help (exit %d) does not say %q", code, want)
		}
	}
	t.Setenv("BRAID_KEY", strings.Repeat("k", 32))
	data := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		env  string
		args []string
	}{
		{"", []string{"--blobs", "gs://bucket/x"}},
		{"gs://bucket/x", nil},
	} {
		t.Setenv("BRAID_BLOBS", tc.env)
		args := append([]string{"server", "--listen", "127.0.0.1:0", "--data", data}, tc.args...)
		code, _, errs := runQuick(t, args...)
		if code == 0 || !strings.Contains(errs, "gs://bucket/x") || !strings.Contains(errs, "dir:PATH") {
			t.Errorf("braid %v with BRAID_BLOBS=%q: exit %d, %q; want an error naming the spec and what to give", tc.args, tc.env, code, errs)
		}
	}
	if code, _, errs := runQuick(t, "server", "--listen", "127.0.0.1:0", "--data", data, "--blob-cache", "lots"); code != 2 || !strings.Contains(errs, "--blob-cache") {
		t.Errorf("--blob-cache lots: exit %d, %q", code, errs)
	}
}

// TestBlobsCopy copies a data directory's blobs into another store, and
// reports a corrupt one without copying it.
func TestBlobsCopy(t *testing.T) {
	srcDir, dstDir := t.TempDir(), t.TempDir()
	src, err := store.OpenDisk(srcDir, &store.DiskConfig{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range []string{"one", "two", "three"} {
		id, _, err := src.Put(t.Context(), strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	bad := src.Path(ids[2])
	os.Chmod(bad, 0o644)
	if err := os.WriteFile(bad, []byte("thre3"), 0o444); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runQuick(t, "blobs", "copy", "--from", "dir:"+srcDir, "--to", "dir:"+dstDir)
	if code != 1 || !strings.Contains(out, "2 blobs copied") || !strings.Contains(out, "1 failed") ||
		!strings.Contains(errs, ids[2]) || !strings.Contains(errs, "does not match its sha256") {
		t.Errorf("blobs copy with a corrupt blob: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	dst, err := store.OpenDisk(dstDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		b, err := os.ReadFile(dst.Path(ids[i]))
		if (err == nil) != want || (want && !bytes.Equal(b, []byte([]string{"one", "two"}[i]))) {
			t.Errorf("blob %d in the copy: %q, %v; want it there: %v", i, b, err, want)
		}
	}
	code, out, _ = runQuick(t, "blobs", "copy", "--from", "dir:"+srcDir, "--to", "dir:"+dstDir)
	if code != 1 || !strings.Contains(out, "0 blobs copied") || !strings.Contains(out, "2 there already") {
		t.Errorf("blobs copy again: exit %d, %q", code, out)
	}
	if code, _, errs := runQuick(t, "blobs", "copy", "--from", "dir:"+srcDir); code != 2 || !strings.Contains(errs, "--to") {
		t.Errorf("blobs copy without --to: exit %d, %q", code, errs)
	}
}
