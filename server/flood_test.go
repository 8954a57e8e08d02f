package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/syncbuf"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/worker"
)

// floodChildEnv makes TestFDFlood run the cluster side of the test: the
// test binary re-runs itself with it set, so the low descriptor limit
// holds in that process only.
const floodChildEnv = "BRAID_FLOOD_CHILD"

// floodLimit is the child's RLIMIT_NOFILE: room for a server, a worker
// and their sessions, far less than the flood.
const floodLimit = 256

// TestFDFlood floods a server's control API and a worker's data-plane
// listener with idle connections, from another process, until the
// process that runs them has no file descriptors left. Once the flood
// ends, the server serves jobs again and the worker's listener accepts and
// handshakes new sessions.
func TestFDFlood(t *testing.T) {
	if os.Getenv(floodChildEnv) != "" {
		floodChild(t)
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("the flood test sets RLIMIT_NOFILE and counts on Linux's accept queue; it runs on Linux")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFDFlood$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), floodChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			lines <- sc.Text()
		}
	}()
	fail := func(format string, args ...any) {
		t.Helper()
		_ = cmd.Process.Kill()
		for range lines {
		}
		_ = cmd.Wait()
		t.Fatalf("%s\nchild stdout:\n%s\nchild stderr (tail):\n%s", fmt.Sprintf(format, args...), out.String(), tail(stderr.Bytes(), 4000))
	}
	expect := func(prefix string) string {
		t.Helper()
		for l := range lines {
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		}
		fail("the child ended before printing %q", prefix)
		return ""
	}

	var srvAddr, workerAddr string
	if _, err := fmt.Sscanf(expect("flood-targets "), "server=%s worker=%s", &srvAddr, &workerAddr); err != nil {
		fail("bad targets line: %v", err)
	}
	// Open idle connections to both until well past the child's limit.
	var flood []net.Conn
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	for i := 0; i < 6*floodLimit; i++ {
		addr := srvAddr
		if i%2 == 1 {
			addr = workerAddr
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue // the child's accept queue is full
		}
		flood = append(flood, c)
	}
	if len(flood) < 2*floodLimit {
		fail("only %d flood connections opened", len(flood))
	}
	time.Sleep(time.Second)
	fmt.Fprintln(stdin, "flooded")
	expect("flood-seen")
	for _, c := range flood {
		_ = c.Close()
	}
	fmt.Fprintln(stdin, "ended")
	expect("recovered")
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		fail("child: %v", err)
	}
	t.Logf("%d idle connections against a limit of %d descriptors; child:\n%s", len(flood), floodLimit, out.String())
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer = syncbuf.Buffer

// floodChild runs a server and a worker under floodLimit descriptors and
// talks with the parent over stdin and stdout.
func floodChild(t *testing.T) {
	lim := syscall.Rlimit{Cur: floodLimit, Max: floodLimit}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim.Max = old.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := newCluster(t, func(cfg *server.Config) { cfg.Logger = logger })
	w := c.addWorker(2, func(cfg *worker.Config) { cfg.Logger = logger })
	c.waitWorkers(1)
	img := ops.SamplePNG(200, 150)
	params := map[string]string{"radius": "2"}
	want := reference(t, ops.Blur(), img, params)
	in := c.put(img)
	blur := api.JobRequest{Op: "blur", Input: in, Params: params, Tile: api.Tile{W: 64, H: 64}}
	if st := c.run(blur); st.State != api.JobDone {
		t.Fatalf("job before the flood is %s: %s", st.State, st.Error)
	}
	stdin := bufio.NewScanner(os.Stdin)
	fmt.Printf("flood-targets server=%s worker=%s\n", strings.TrimPrefix(strings.TrimPrefix(c.srv.URL(), "https://"), "http://"), w.w.Addrs()[0])
	if !stdin.Scan() || stdin.Text() != "flooded" {
		t.Fatalf("parent said %q, want flooded", stdin.Text())
	}
	if !hasLine(logs.String(), "accept failed", "listener=transport", "too many open files") {
		t.Errorf("the transport listener never hit EMFILE: the flood did not exhaust the descriptors")
	}
	// The control API holds at most its connection cap (a quarter of the
	// descriptors): the flood waits in the kernel's backlog, unless the
	// descriptors ran out first, which its accept loop survives too.
	if !hasLine(logs.String(), "connection cap reached", "listener=\"control API\"") &&
		!hasLine(logs.String(), "accept failed", "listener=\"control API\"", "too many open files") {
		t.Errorf("the control API listener neither reached its connection cap nor hit EMFILE")
	}
	fmt.Println("flood-seen")
	if !stdin.Scan() || stdin.Text() != "ended" {
		t.Fatalf("parent said %q, want ended", stdin.Text())
	}

	// The server serves jobs again, once the worker is back.
	start := time.Now()
	c.waitWorkers(1)
	var st api.JobStatus
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		s, err := c.c.Submit(ctx, blur)
		if err == nil {
			st, err = c.c.Wait(ctx, s.Job, nil)
		}
		cancel()
		if err == nil && st.State == api.JobDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job done within 30s of the flood's end: %v (last status %+v)", err, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := c.get(st.Output); !bytes.Equal(got, want) {
		t.Error("the job after the flood gave a wrong output")
	}
	// The worker's listener accepts and handshakes a new session.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sess, err := transport.Dial(ctx, []transport.Path{{Remote: w.w.Addrs()[0]}}, &transport.Config{Key: testKey, Logger: logger})
	if err != nil {
		t.Fatalf("dial the worker after the flood: %v", err)
	}
	sess.Close()
	fmt.Printf("recovered after %v\n", time.Since(start).Round(time.Millisecond))
}

// hasLine reports whether a line of logs holds every part.
func hasLine(logs string, parts ...string) bool {
	for l := range strings.Lines(logs) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}
