//go:build unix

package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// withUmask runs the rest of the test under umask mask. The umask is the
// process's: tests that use it must not run in parallel.
func withUmask(t *testing.T, mask int) {
	t.Helper()
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

func checkPerm(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %04o, want %04o", path, got, want)
	}
}

// Files braid writes for the user are 0666 less the umask (0644 under the
// usual 022), as cp and the shell make them; the server's data directory
// and a worker's module directory are 0700.
func TestOutputFileModes(t *testing.T) {
	t.Setenv("BRAID_KEY", testKey)
	dir := t.TempDir()
	withUmask(t, 0o022)
	data := filepath.Join(dir, "data")
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", data, "--heartbeat", "100ms")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`))
	t.Setenv("BRAID_SERVER", url)
	for _, d := range []string{data, filepath.Join(data, "blobs"), filepath.Join(data, "blobs", "tmp")} {
		checkPerm(t, d, 0o700)
	}

	// So is a worker's module directory, parents it creates included.
	mods := filepath.Join(dir, "cache", "modules")
	wk := startBraid(t, "worker", "--threads", "1", "--listen", "127.0.0.1:0", "--module-dir", mods)
	wk.waitOutput(t, regexp.MustCompile(`data plane on (\S+)`))
	for _, d := range []string{filepath.Join(dir, "cache"), mods, filepath.Join(mods, "compiled")} {
		checkPerm(t, d, 0o700)
	}

	in := filepath.Join(dir, "in.bin")
	if err := os.WriteFile(in, []byte("some bytes to store"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runBraid(t, 10*time.Second, "put", in)
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("put: exit %d: %s", code, errs)
	}
	// A stored blob's fan-out directory is private too.
	checkPerm(t, filepath.Join(data, "blobs", id[:2]), 0o700)

	for _, tt := range []struct {
		umask int
		want  fs.FileMode
	}{{0o022, 0o644}, {0o077, 0o600}, {0o002, 0o664}} {
		syscall.Umask(tt.umask)
		got := filepath.Join(dir, "got-"+strings.TrimLeft(tt.want.String(), "-"))
		if code, _, errs := runBraid(t, 10*time.Second, "get", id, "-o", got); code != 0 {
			t.Fatalf("get: exit %d: %s", code, errs)
		}
		checkPerm(t, got, tt.want)
		png := got + ".png"
		if code, _, errs := runBraid(t, 10*time.Second, "sample", "--size", "16", "-o", png); code != 0 {
			t.Fatalf("sample: exit %d: %s", code, errs)
		}
		checkPerm(t, png, tt.want)
	}
	syscall.Umask(0o022)

	// get -o --force over an existing file replaces it with the new mode.
	old := filepath.Join(dir, "old")
	if err := os.WriteFile(old, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runBraid(t, 10*time.Second, "get", id, "-o", old, "--force"); code != 0 {
		t.Fatalf("get: exit %d: %s", code, errs)
	}
	checkPerm(t, old, 0o644)
}

// recv gives each file the sender's permission bits less the umask.
func TestRecvFileModes(t *testing.T) {
	t.Setenv("BRAID_KEY", testKey)
	withUmask(t, 0o022)
	src, dst := t.TempDir(), t.TempDir()
	modes := map[string]fs.FileMode{"rw-r--r--": 0o644, "rwxr-xr-x": 0o755, "rw-------": 0o600, "rw-rw-rw-": 0o666, "r--r--r--": 0o444}
	want := map[string]fs.FileMode{"rw-r--r--": 0o644, "rwxr-xr-x": 0o755, "rw-------": 0o600, "rw-rw-rw-": 0o644, "r--r--r--": 0o444}
	var files []string
	for name, m := range modes {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	rx := start(t, "recv", "--listen", "127.0.0.1:0", "--dir", dst, "--once")
	addrs := rx.listening(t)
	code, _, errs := runCmd(t, 30*time.Second, append(append([]string{"send"}, files...), "--to", addrs)...)
	if code != 0 {
		t.Fatalf("send: exit %d: %s", code, errs)
	}
	if code := rx.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("recv --once: exit %d: %s", code, rx.err.String())
	}
	for name, m := range want {
		checkPerm(t, filepath.Join(dst, name), m)
	}
}
