package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
)

// TestDatasetCommands: put of a directory makes a dataset, ls lists it,
// a job over it merges in name order or per member, get fetches an
// output dataset into a directory, and submit joins repeated --input.
func TestDatasetCommands(t *testing.T) {
	t.Setenv("BRAID_KEY", "dataset-commands-test-key-0123")
	dir := t.TempDir()
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--heartbeat", "100ms")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`))
	t.Setenv("BRAID_SERVER", url)
	wk := startBraid(t, "worker", "--threads", "2", "--listen", "127.0.0.1:0")
	wk.waitOutput(t, regexp.MustCompile(`data plane on (\S+)`))
	if !testwait.Until(10*time.Second, func() bool {
		_, out, _ := runBraid(t, 10*time.Second, "workers")
		return strings.Contains(out, " live ")
	}) {
		t.Fatal("worker did not register")
	}
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in := filepath.Join(dir, "in")
	write(filepath.Join(in, "b.txt"), "bee\n")
	write(filepath.Join(in, "a.txt"), "ay\n")
	code, out, stderr := runBraid(t, 30*time.Second, "put", in)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	ds := lines[len(lines)-1]
	if code != 0 || len(ds) != 64 || !strings.Contains(stderr, "2 members, 7 bytes") {
		t.Fatalf("put DIR: exit %d, %q, %s", code, out, stderr)
	}
	code, out, _ = runBraid(t, 10*time.Second, "ls", ds)
	if code != 0 || !regexp.MustCompile(`(?s)NAME +SIZE +BLOB\na\.txt +3 +[0-9a-f]{64}\nb\.txt +4 `).MatchString(out) {
		t.Errorf("ls: exit %d:\n%s", code, out)
	}
	submit := func(args ...string) (state, output string) {
		t.Helper()
		code, out, stderr := runBraid(t, 30*time.Second, append([]string{"submit", "--wait", "--json"}, args...)...)
		var st struct{ State, Output, Error string }
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("submit %v: exit %d, %v: %q %s", args, code, err, out, stderr)
		}
		return st.State, st.Output
	}
	get := func(id string) string {
		t.Helper()
		code, out, stderr := runBraid(t, 10*time.Second, "get", id, "-o", "-")
		if code != 0 {
			t.Fatalf("get %s: exit %d: %s", id, code, stderr)
		}
		return out
	}
	if state, output := submit("--op", "noop", "--input", ds); state != "done" || get(output) != "ay\nbee\n" {
		t.Errorf("job over the dataset: %s, %q", state, get(output))
	}
	state, output := submit("--op", "noop", "--input", ds, "--merge", "none")
	if state != "done" {
		t.Fatalf("merge none: %s", state)
	}
	got := filepath.Join(dir, "got")
	if code, _, stderr := runBraid(t, 10*time.Second, "get", output, "-o", got); code != 0 || !strings.Contains(stderr, "wrote 2 files") {
		t.Fatalf("get DATASET: exit %d: %s", code, stderr)
	}
	for name, want := range map[string]string{"a.txt": "ay\n", "b.txt": "bee\n"} {
		if b, err := os.ReadFile(filepath.Join(got, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	// Fan-in from the command line: two blobs joined in order.
	_, a, _ := runBraid(t, 10*time.Second, "put", filepath.Join(in, "a.txt"))
	_, b, _ := runBraid(t, 10*time.Second, "put", filepath.Join(in, "b.txt"))
	if state, output := submit("--op", "noop", "--input", strings.TrimSpace(b), "--input", strings.TrimSpace(a)); state != "done" || get(output) != "bee\nay\n" {
		t.Errorf("join: %s, %q", state, get(output))
	}

	// rm: a member alone is refused, naming its dataset; the dataset goes
	// with its members. (ds is also the output of the job of merge none
	// above, whose noop made the same bytes: kept.)
	write(filepath.Join(dir, "rm", "c.txt"), "sea\n")
	_, out, _ = runBraid(t, 10*time.Second, "put", filepath.Join(dir, "rm"))
	ds = strings.TrimSpace(out)
	_, out, _ = runBraid(t, 10*time.Second, "ls", ds, "--json")
	var member struct{ Blob string }
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &member); err != nil || len(member.Blob) != 64 {
		t.Fatalf("ls --json: %q, %v", out, err)
	}
	if code, _, stderr := runBraid(t, 10*time.Second, "rm", member.Blob); code != 1 || !strings.Contains(stderr, "is a member of datasets "+ds) {
		t.Errorf("rm MEMBER: exit %d, %q; want 1 naming the dataset", code, stderr)
	}
	if code, out, stderr := runBraid(t, 10*time.Second, "rm", ds); code != 0 || out != "deleted "+ds+"\n" {
		t.Errorf("rm DATASET: exit %d, %q, %s", code, out, stderr)
	}
	for _, id := range []string{ds, member.Blob} {
		if code, _, stderr := runBraid(t, 10*time.Second, "get", id, "-o", "-"); code != 1 || !strings.Contains(stderr, "no blob") {
			t.Errorf("get %s after rm of its dataset: exit %d, %s", id, code, stderr)
		}
	}
	if code, _, stderr := runBraid(t, 10*time.Second, "rm", "nonsense"); code != 2 || !strings.Contains(stderr, "not a blob id") {
		t.Errorf("rm nonsense: exit %d, %s", code, stderr)
	}

	// What put refuses, before uploading anything.
	write(filepath.Join(dir, "nested", "sub", "x"), "x")
	write(filepath.Join(dir, "other", "a.txt"), "another a\n")
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{filepath.Join(dir, "nested")}, "is a directory: a dataset is flat"},
		{[]string{filepath.Join(dir, "empty")}, "no files"},
		{[]string{in, filepath.Join(dir, "other")}, `have the same name "a.txt"`},
	} {
		code, _, stderr := runBraid(t, 10*time.Second, append([]string{"put"}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("put %v: exit %d, %q; want it to say %q", c.args, code, stderr, c.want)
		}
	}
}
