package cli

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/transport"
)

// TestWorkersForget: braid workers shows a dead worker as dead, with
// nothing running or queued; --forget removes it, and refuses a live
// one. The dead worker is a bare data-plane listener registered through
// the API that answers no heartbeat, so the server declares it dead after
// its worker timeout; the live one is a braid worker.
func TestWorkersForget(t *testing.T) {
	key := "workers-forget-test-key-0123456"
	t.Setenv("BRAID_KEY", key)
	dir := t.TempDir()
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--heartbeat", "100ms")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`))
	t.Setenv("BRAID_SERVER", url)
	wk := startBraid(t, "worker", "--threads", "1", "--listen", "127.0.0.1:0", "--name", "alive")
	wk.waitOutput(t, regexp.MustCompile(`data plane on (\S+)`))

	ln, err := transport.Listen(t.Context(), []string{"127.0.0.1:0"}, &transport.Config{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := client.New(url, client.WithKey([]byte(key)))
	reg, err := c.Register(t.Context(), api.Register{Name: "silent", Addresses: []string{ln.Addrs()[0].String()}, Threads: 1, Ops: []string{"noop"}})
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^` + reg.Worker + `\s+silent\s+dead\s+1\s+0\s+0\s+0\s`)
	var out string
	testwait.For(t, "braid workers to show the silent worker dead", 20*time.Second, func() bool {
		_, out, _ = runBraid(t, 10*time.Second, "workers")
		return row.MatchString(out) && strings.Contains(out, " live ")
	})
	live := regexp.MustCompile(`(?m)^(w\d+)\s+alive\s+live\s`).FindStringSubmatch(out)
	if live == nil {
		t.Fatalf("no live worker named alive:\n%s", out)
	}
	code, _, stderr := runBraid(t, 10*time.Second, "workers", "--forget", live[1])
	if code != 1 || !strings.Contains(stderr, "is live") {
		t.Errorf("workers --forget of the live worker %s: exit %d, %q; want 1 and a refusal", live[1], code, stderr)
	}
	code, out, stderr = runBraid(t, 10*time.Second, "workers", "--forget", reg.Worker)
	if code != 0 || !strings.Contains(out, "forgot dead worker "+reg.Worker) {
		t.Errorf("workers --forget %s: exit %d, %q %q", reg.Worker, code, out, stderr)
	}
	_, out, _ = runBraid(t, 10*time.Second, "workers")
	if strings.Contains(out, reg.Worker+" ") || !strings.Contains(out, live[1]+" ") {
		t.Errorf("after --forget %s, braid workers lists:\n%s", reg.Worker, out)
	}
}
