package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
)

// braidProc is a braid command running in the background.
type braidProc struct {
	out, err syncBuffer
	cancel   context.CancelFunc
	done     chan int
}

// startBraid runs braid with args in the background; the test's cleanup
// interrupts it and waits up to 15s for it to end.
func startBraid(t testing.TB, args ...string) *braidProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &braidProc{cancel: cancel, done: make(chan int, 1)}
	go func() { p.done <- Run(ctx, args, &p.out, &p.err) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			t.Errorf("braid %s did not stop within 15s of its interrupt", strings.Join(args, " "))
		}
	})
	return p
}

// waitOutput waits until the command printed a line matching re and
// returns the first submatch.
func (p *braidProc) waitOutput(t testing.TB, re *regexp.Regexp) string {
	t.Helper()
	// A server starts in about a second; under the race detector on a
	// loaded 2-core machine it took over 10.
	var m []string
	if !testwait.Until(60*time.Second, func() bool {
		if m = re.FindStringSubmatch(p.out.String()); m != nil {
			return true
		}
		select {
		case code := <-p.done:
			p.done <- code
			t.Fatalf("command exited with %d: %s", code, p.err.String())
		default:
		}
		return false
	}) {
		t.Fatalf("no output matching %v after 60s: %s", re, p.err.String())
	}
	return m[1]
}

// TestClientCommands drives a server and a worker, both started with
// cli.Run, through the client commands.
func TestClientCommands(t *testing.T) {
	t.Setenv("BRAID_KEY", "client-commands-test-key-0123")
	dir := t.TempDir()
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--heartbeat", "100ms")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`))
	t.Setenv("BRAID_SERVER", url)
	wk := startBraid(t, "worker", "--threads", "2", "--listen", "127.0.0.1:0")
	wk.waitOutput(t, regexp.MustCompile(`data plane on (\S+)`))
	var out string
	if !testwait.Until(10*time.Second, func() bool {
		_, out, _ = runBraid(t, 10*time.Second, "workers")
		return strings.Contains(out, "w1") && strings.Contains(out, " live ")
	}) {
		t.Fatalf("worker did not register: %s", out)
	}

	img := filepath.Join(dir, "in.png")
	if err := os.WriteFile(img, ops.SamplePNG(200, 150), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runBraid(t, 10*time.Second, "put", img)
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 64 {
		t.Fatalf("put: exit %d, %q, %s", code, out, stderr)
	}
	code, out, _ = runBraid(t, 10*time.Second, "put", img, "--json")
	if code != 0 || !strings.Contains(out, `"id":"`+id+`"`) {
		t.Errorf("put --json: %d %s", code, out)
	}
	// Progress on stderr only when it is a terminal, or with --progress.
	if stderr != "" {
		t.Errorf("put drew on a stderr that is not a terminal: %q", stderr)
	}
	size := formatBytes(int64(len(ops.SamplePNG(200, 150))))
	code, out, stderr = runBraid(t, 10*time.Second, "put", img, "--progress")
	if code != 0 || strings.TrimSpace(out) != id || !strings.Contains(stderr, size+" / "+size) || !strings.Contains(stderr, "100%") {
		t.Errorf("put --progress: exit %d, stdout %q, stderr %q; want %s / %s and 100%%", code, out, stderr, size, size)
	}
	code, _, stderr = runBraid(t, 10*time.Second, "get", id, "-o", filepath.Join(dir, "copy.png"), "--progress")
	if code != 0 || !strings.Contains(stderr, size) || !strings.Contains(stderr, " in ") {
		t.Errorf("get --progress: exit %d, stderr %q", code, stderr)
	}

	code, out, stderr = runBraid(t, 30*time.Second, "submit", "--op", "blur", "--input", id, "--param", "radius=3",
		"--tile", "64x64", "--wait", "--json")
	var job struct {
		Job    uint64 `json:"job"`
		State  string `json:"state"`
		Output string `json:"output"`
		Units  struct {
			Total, Done int
		} `json:"units"`
		Error *string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &job); err != nil || code != 0 {
		t.Fatalf("submit --wait --json: exit %d, %v: %q %s", code, err, out, stderr)
	}
	if job.State != "done" || job.Units.Total != 12 || job.Units.Done != 12 || job.Output == "" || job.Error == nil {
		t.Errorf("job %+v", job)
	}
	if !strings.Contains(stderr, "12/12 units") {
		t.Errorf("no progress on stderr: %q", stderr)
	}

	code, out, _ = runBraid(t, 10*time.Second, "status", "1", "--json")
	if code != 0 || !strings.Contains(out, `"state":"done"`) || !strings.Contains(out, `"error":""`) {
		t.Errorf("status --json: %d %s", code, out)
	}
	code, out, _ = runBraid(t, 10*time.Second, "status", "1")
	if code != 0 || !strings.Contains(out, "12 done of 12, 0 running, 0 in flight, 0 failed") {
		t.Errorf("status: %d %s", code, out)
	}
	got := filepath.Join(dir, "out.png")
	if code, _, stderr := runBraid(t, 10*time.Second, "get", job.Output, "-o", got); code != 0 {
		t.Fatalf("get: %d %s", code, stderr)
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := os.ReadFile(img)
	want := localBlur(t, in, "3")
	if string(b) != string(want) {
		t.Error("downloaded output differs from the single-unit blur")
	}

	// A long job, followed with wait and canceled. Its units would run a
	// minute each, so none ends before the cancel (the worker list below
	// counts the blur's 12 units done, no more), and the cancel's drop
	// frees the worker at once.
	code, out, _ = runBraid(t, 10*time.Second, "submit", "--op", "sleep", "--input", id, "--units", "100", "--param", "ms=60000")
	if code != 0 || strings.TrimSpace(out) != "2" {
		t.Fatalf("submit: %d %q", code, out)
	}
	code, out, _ = runBraid(t, 10*time.Second, "cancel", "2")
	if code != 0 || !strings.Contains(out, "canceled") {
		t.Errorf("cancel: %d %s", code, out)
	}
	code, _, stderr = runBraid(t, 10*time.Second, "wait", "2")
	if code != 1 || !strings.Contains(stderr, "canceled") {
		t.Errorf("wait on a canceled job: exit %d, %s", code, stderr)
	}
	code, _, stderr = runBraid(t, 10*time.Second, "cancel", "2")
	if code != 1 || !strings.Contains(stderr, "already canceled") {
		t.Errorf("second cancel: exit %d, %s", code, stderr)
	}

	code, out, _ = runBraid(t, 10*time.Second, "jobs")
	if code != 0 || !regexp.MustCompile(`(?m)^1\s+done\s+blur\s+12/12`).MatchString(out) || !strings.Contains(out, "canceled") {
		t.Errorf("jobs: %d\n%s", code, out)
	}
	// The worker list names the dashboard's figures as the page does
	// (State, Units done, Tries, Compute share), and the bytes on its one
	// path. Its one worker computed the 12 units, and perhaps backup
	// copies of them.
	code, out, _ = runBraid(t, 10*time.Second, "workers")
	tries := regexp.MustCompile(`(?m)^w1\s+\S+\s+live\s+\d+\s+\d+\s+\d+\s+12\s+(\d+)\s+\d+\.\d%\s.*127\.0\.0\.1:\d+\s+\d+\.\d\s+blur`).FindStringSubmatch(out)
	if code != 0 || !strings.Contains(out, "MB PER PATH") || !regexp.MustCompile(`STATE\s+THREADS\s+RUNNING\s+QUEUED\s+UNITS DONE\s+TRIES\s+COMPUTE SHARE`).MatchString(out) ||
		tries == nil || atoi(t, tries[1]) < 12 {
		t.Errorf("workers: %d\n%s", code, out)
	}
	code, out, _ = runBraid(t, 10*time.Second, "ops")
	if code != 0 || !strings.Contains(out, "--param radius=") {
		t.Errorf("ops: %d\n%s", code, out)
	}

	// Errors say what is wrong and exit non-zero.
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"submit", "--op", "bluur", "--input", id}, 2, `unknown operation "bluur"`},
		{[]string{"submit", "--op", "blur", "--input", strings.Repeat("0", 64)}, 1, "upload the data first"},
		{[]string{"submit", "--op", "blur", "--input", id, "--tile", "0x0"}, 2, "at least 1 pixel"},
		{[]string{"submit", "--op", "blur"}, 2, "--input ID"},
		{[]string{"status", "99"}, 1, "no job 99"},
		{[]string{"status", "x"}, 2, "not a job id"},
		{[]string{"get", id}, 2, "-o FILE"},
		{[]string{"jobs", "--key-file", writeKey(t, dir, "some-other-cluster-key")}, 2, "cluster key differs"},
	} {
		code, _, stderr := runBraid(t, 10*time.Second, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.msg) {
			t.Errorf("braid %s: exit %d %q; want %d with %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.msg)
		}
	}
}

func writeKey(t testing.TB, dir, key string) string {
	t.Helper()
	p := filepath.Join(dir, "other.key")
	if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func localBlur(t testing.TB, in []byte, radius string) []byte {
	t.Helper()
	out, err := ops.Execute(t.Context(), ops.Blur(), strings.NewReader(string(in)), int64(len(in)),
		map[string]string{"radius": radius}, ops.Hint{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJobCommandsHelp: every command explains itself.
func TestJobCommandsHelp(t *testing.T) {
	for _, cmd := range []string{"server", "worker", "put", "get", "submit", "status", "wait", "jobs", "workers", "cancel", "ops", "local", "sample", "token create", "token list", "token revoke"} {
		code, stdout, _ := runBraid(t, 10*time.Second, append(strings.Fields(cmd), "--help")...)
		if code != 0 || !strings.Contains(stdout, "Usage: braid "+cmd) || !strings.Contains(stdout, "Flags:") {
			t.Errorf("braid %s --help: exit %d\n%s", cmd, code, stdout)
		}
	}
	if code, _, stderr := runBraid(t, 10*time.Second, "server", "--listen", "127.0.0.1:0"); code != 2 || !strings.Contains(stderr, "--data DIR") {
		t.Errorf("server without --data: %d %s", code, stderr)
	}
	t.Setenv("BRAID_SERVER", "")
	if code, _, stderr := runBraid(t, 10*time.Second, "worker", "--key-file", writeKey(t, t.TempDir(), "a-key-for-the-test")); code != 2 || !strings.Contains(stderr, "--server URL") {
		t.Errorf("worker without --server: %d %s", code, stderr)
	}
}

// TestNoKey: every role started without BRAID_KEY or --key-file stops
// at once and says how to give the cluster key.
func TestNoKey(t *testing.T) {
	t.Setenv("BRAID_KEY", "")
	for _, args := range [][]string{
		{"worker", "--server", "http://127.0.0.1:1", "--listen", "127.0.0.1:0"},
		{"server", "--listen", "127.0.0.1:0", "--data", t.TempDir()},
		{"put", "-", "--server", "http://127.0.0.1:1"},
		{"submit", "--op", "blur", "--input", strings.Repeat("0", 64), "--server", "http://127.0.0.1:1"},
	} {
		code, _, stderr := runBraid(t, 10*time.Second, args...)
		if code != 2 || !strings.Contains(stderr, "no cluster key: set BRAID_KEY or pass --key-file FILE") {
			t.Errorf("braid %s without a key: exit %d, %q", strings.Join(args, " "), code, stderr)
		}
	}
}

// TestTokenCommands: an admin makes tokens; a worker joins with a worker
// token's join token, a client works with a client token and no cluster
// key; a revoked token fails at once; roles are enforced.
func TestTokenCommands(t *testing.T) {
	key := writeKey(t, t.TempDir(), "token-commands-test-key-0123")
	t.Setenv("BRAID_KEY", "")
	t.Setenv("BRAID_TOKEN", "")
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--heartbeat", "100ms", "--key-file", key)
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (https://\S+)`))
	fp := srv.waitOutput(t, regexp.MustCompile(`certificate fingerprint (sha256:[0-9a-f]{64})`))
	t.Setenv("BRAID_SERVER", url)
	create := func(role, name string) (tok, join string) {
		t.Helper()
		code, out, stderr := runBraid(t, 10*time.Second, "token", "create", "--role", role, "--name", name, "--key-file", key)
		if code != 0 {
			t.Fatalf("token create: %d %s", code, stderr)
		}
		tok = regexp.MustCompile(`token: +(\S+)`).FindStringSubmatch(out)[1]
		join = regexp.MustCompile(`join token: +(\S+)`).FindStringSubmatch(out)[1]
		if !strings.Contains(out, "fingerprint: "+fp) {
			t.Errorf("token create prints no fingerprint %s: %s", fp, out)
		}
		return tok, join
	}
	_, workerJoin := create("worker", "node1")
	clientTok, clientJoin := create("client", "ci")
	wk := startBraid(t, "worker", "--threads", "1", "--listen", "127.0.0.1:0", "--key-file", key, "--token", workerJoin)
	wk.waitOutput(t, regexp.MustCompile(`data plane on (\S+)`))
	var out string
	if !testwait.Until(10*time.Second, func() bool {
		_, out, _ = runBraid(t, 10*time.Second, "workers", "--token", clientJoin)
		return strings.Contains(out, "w1") && strings.Contains(out, " live ")
	}) {
		t.Fatalf("worker did not register with its token: %s %s", out, wk.err.String())
	}
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		// A client token with the fingerprint given apart.
		{[]string{"jobs", "--token", clientTok, "--server-fingerprint", fp}, 0, ""},
		// A token alone cannot check the server.
		{[]string{"jobs", "--token", clientTok}, 2, "no way to check the server's certificate"},
		{[]string{"jobs", "--token", clientTok, "--server-fingerprint", "sha256:" + strings.Repeat("0", 64)}, 2, "not the pinned"},
		{[]string{"token", "list", "--token", clientJoin}, 2, "a client credential may not GET /v1/tokens"},
		{[]string{"token", "create", "--role", "root", "--key-file", key}, 2, `--role "root"`},
		{[]string{"jobs"}, 2, "no cluster key"},
	} {
		code, _, stderr := runBraid(t, 10*time.Second, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.msg) {
			t.Errorf("braid %s: exit %d %q; want %d with %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.msg)
		}
	}
	// A token of a group shares its jobs, blobs and pipelines with the
	// group's other tokens (server.TestOwnerMatrix); the group is shown.
	if code, out, stderr := runBraid(t, 10*time.Second, "token", "create", "--role", "client", "--name", "alice", "--group", "lab", "--key-file", key); code != 0 || !strings.Contains(out, "role client, group lab") {
		t.Errorf("token create --group lab: %d %s %s", code, out, stderr)
	}
	if code, _, stderr := runBraid(t, 10*time.Second, "token", "create", "--role", "client", "--group", "a b", "--key-file", key); code != 2 || !strings.Contains(stderr, `token group "a b"`) {
		t.Errorf("token create --group 'a b': %d %s", code, stderr)
	}
	code, out, _ := runBraid(t, 10*time.Second, "token", "list", "--key-file", key)
	if code != 0 || !strings.Contains(out, "node1") || !strings.Contains(out, "ci") || !strings.Contains(out, "worker") ||
		!regexp.MustCompile(`alice +client +lab `).MatchString(out) {
		t.Errorf("token list: %d %s", code, out)
	}
	if code, _, stderr := runBraid(t, 10*time.Second, "token", "revoke", "ci", "--key-file", key); code != 0 || !strings.Contains(stderr, "revoked token") {
		t.Errorf("token revoke: %d %s", code, stderr)
	}
	if code, _, stderr := runBraid(t, 10*time.Second, "jobs", "--token", clientJoin); code != 2 || !strings.Contains(stderr, "was revoked at") {
		t.Errorf("revoked token: %d %s", code, stderr)
	}
}

// TestInsecureHTTP: a server started with --insecure-http says so; clients
// reach it only with --insecure-http.
func TestInsecureHTTP(t *testing.T) {
	t.Setenv("BRAID_KEY", "insecure-http-test-key-0123")
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--insecure-http")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (http://\S+)`))
	if !strings.Contains(srv.err.String(), "WARNING: --insecure-http") {
		t.Errorf("no warning: %s", srv.err.String())
	}
	t.Setenv("BRAID_SERVER", url)
	if code, _, stderr := runBraid(t, 10*time.Second, "jobs", "--insecure-http"); code != 0 {
		t.Errorf("jobs --insecure-http: %d %s", code, stderr)
	}
	if code, _, _ := runBraid(t, 10*time.Second, "jobs"); code == 0 {
		t.Error("an HTTPS client reached a plain HTTP server")
	}
}
