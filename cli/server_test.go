package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseRetention(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"7d", 7 * 24 * time.Hour, true},
		{"1.5d", 36 * time.Hour, true},
		{"36h", 36 * time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{"", 0, false},
		{"-1h", 0, false},
		{"-2d", 0, false},
		{"d", 0, false},
		{"7 days", 0, false},
		{"1e9d", 0, false},
	} {
		got, err := parseRetention(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestServerQuotaFlags: braid server --max-upload and --max-data refuse
// uploads, and braid put says which limit and what to do.
func TestServerQuotaFlags(t *testing.T) {
	t.Setenv("BRAID_KEY", "quota-flags-test-key-0123456789")
	dir := t.TempDir()
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"),
		"--max-upload", "4K", "--max-data", "6K", "--retain", "7d")
	t.Setenv("BRAID_SERVER", srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`)))
	file := func(name string, n int, b byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Repeat(string(b), n)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	code, _, stderr := runBraid(t, 10*time.Second, "put", file("big", 5<<10, 'a'))
	if code != 2 || !strings.Contains(stderr, "limit of 4 KiB for one upload (braid server --max-upload)") || !strings.Contains(stderr, "HTTP 413") {
		t.Errorf("put past --max-upload: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runBraid(t, 10*time.Second, "put", file("a", 4<<10, 'a')); code != 0 {
		t.Fatalf("put: exit %d: %s", code, stderr)
	}
	code, _, stderr = runBraid(t, 10*time.Second, "put", file("b", 3<<10, 'b'))
	if code != 1 || !strings.Contains(stderr, "of its 6 KiB limit (braid server --max-data)") || !strings.Contains(stderr, "HTTP 507") {
		t.Errorf("put past --max-data: exit %d, %q", code, stderr)
	}
	for _, bad := range [][]string{{"--retain", "soon"}, {"--max-data", "lots"}, {"--max-upload", "0"}} {
		args := append([]string{"server", "--data", filepath.Join(dir, "x")}, bad...)
		if code, _, stderr := runBraid(t, 10*time.Second, args...); code != 2 || !strings.Contains(stderr, bad[0]) {
			t.Errorf("braid server %s: exit %d, %q", strings.Join(bad, " "), code, stderr)
		}
	}
}
