package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Failing commands say what failed in words: never "<nil>" (a nil error
// printed with %v) nor a fmt verb error such as "%!v(MISSING)".
func TestErrorsNeverNil(t *testing.T) {
	t.Setenv("BRAID_KEY", testKey)
	dir := t.TempDir()
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--heartbeat", "100ms")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`))
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	noBlob := strings.Repeat("ab", 32)
	dead := "127.0.0.1:1" // nothing listens on port 1
	for _, args := range [][]string{
		// usage errors
		{"perf", "-s", "--listen", ""},
		{"perf", "-s", "--listen", "a:b:c"},
		{"recv", "--listen", "", "--dir", dir},
		{"recv", "--listen", "127.0.0.1:99999", "--dir", dir},
		{"send", file, "--to", ""},
		{"perf", "-c", dead, "--length", "x"},
		{"server", "--listen", "127.0.0.1:0"},
		{"worker", "--threads", "0"},
		{"submit", "--server", url},
		{"local", "--size", "0"},
		// nothing at the other end
		{"perf", "-c", dead, "--time", "1"},
		{"perf", "-c", dead, "--tcp-baseline", "--time", "1"},
		{"perf", "-c", dead, "--mode", "pingpong", "--time", "1"},
		{"send", file, "--to", dead},
		{"get", noBlob, "-o", filepath.Join(dir, "out"), "--server", "http://" + dead},
		{"jobs", "--server", "http://" + dead},
		// the server says no
		{"get", noBlob, "-o", filepath.Join(dir, "out"), "--server", url},
		{"status", "999", "--server", url},
		{"wait", "999", "--server", url},
		{"cancel", "999", "--server", url},
		{"submit", "--op", "no-such-op", "--input", noBlob, "--server", url},
		{"submit", "--op", "blur", "--input", noBlob, "--server", url},
		{"op", "rm", "no-such-op", "--server", url},
		{"token", "revoke", "no-such-token", "--server", url},
		{"put", filepath.Join(dir, "no-such-file"), "--server", url},
		{"sample", "-o", filepath.Join(dir, "no-such-dir", "x.png")},
		{"op", "run", filepath.Join(dir, "no-such.wasm")},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := runCmd(t, 30*time.Second, args...)
			if code == 0 || strings.TrimSpace(errs) == "" {
				t.Fatalf("exit %d, want a failure with a message\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			if strings.Contains(errs, "<nil>") || strings.Contains(errs, "%!") {
				t.Errorf("stderr prints a nil error or a bad verb:\n%s", errs)
			}
			t.Logf("exit %d: %s", code, errs)
		})
	}
}
