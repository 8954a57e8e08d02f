package cli

import (
	"path/filepath"
	"strings"
	"testing"
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
