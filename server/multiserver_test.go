package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/store/storetest"
	"github.com/braid-hpc/braid/worker"
)

// sharedConfig is a server of a cluster sharing one PostgreSQL database
// and one blob directory.
type sharedConfig struct {
	DB, Blobs, Data, Name string
	Takeover              time.Duration
	// Relaxed gives the server the timers of a large cluster (see
	// relaxed), instead of a test's quick ones.
	Relaxed bool
}

func (sc sharedConfig) config(log *slog.Logger) server.Config {
	cfg := server.Config{
		Listen: "127.0.0.1:0", Data: sc.Data, DB: sc.DB, Blobs: sc.Blobs, Key: testKey, Name: sc.Name,
		TakeoverAfter: sc.Takeover, HeartbeatInterval: 50 * time.Millisecond, WorkerTimeout: 2 * time.Second,
		DataPlaneTimeout: 5 * time.Second, Logger: log,
	}
	if sc.Relaxed {
		cfg.HeartbeatInterval, cfg.WorkerTimeout, cfg.DataPlaneTimeout = time.Second, 30*time.Second, 30*time.Second
		cfg.Transport = relaxed()
	}
	return cfg
}

// startShared runs a server of the shared cluster in this process until
// the test ends; it returns the server and a client of it.
func startShared(t *testing.T, sc sharedConfig) (*server.Server, *client.Client) {
	t.Helper()
	sc.Data = t.TempDir()
	srv, err := server.New(sc.config(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server %s: %v", sc.Name, err)
		}
	})
	return srv, client.New(srv.URL(), client.WithKey(testKey))
}

// childServerEnv, set to a sharedConfig in JSON, makes this test binary
// run that server instead of the tests (see TestMain): a server in a
// process of its own, which a test can SIGKILL or SIGSTOP. It prints
// its URL on the first line of its standard output and logs to its
// standard error.
const childServerEnv = "BRAID_TEST_CHILD_SERVER"

func runChildServer(spec string) int {
	var sc sharedConfig
	if err := json.Unmarshal([]byte(spec), &sc); err != nil {
		fmt.Fprintln(os.Stderr, "child server:", err)
		return 1
	}
	srv, err := server.New(sc.config(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child server:", err)
		return 1
	}
	fmt.Println(srv.URL())
	var (
		profileMu sync.Mutex
		profile   *os.File // the CPU profile being written, if any
	)
	defer func() {
		profileMu.Lock()
		defer profileMu.Unlock()
		if profile != nil {
			pprof.StopCPUProfile()
			profile.Close()
		}
	}()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	go func() {
		// Each line "heap" is answered with the heap in use after a
		// collection, for BenchmarkManyWorkers; "cpu PATH" starts a CPU
		// profile into PATH.NAME and "cpu" ends it, answering "ok"; the
		// end of the input stops the server.
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if f, ok := strings.CutPrefix(in.Text(), "cpu"); ok {
				profileMu.Lock()
				if profile != nil {
					pprof.StopCPUProfile()
					profile.Close()
					profile = nil
				}
				if f = strings.TrimSpace(f); f != "" {
					out, err := os.Create(f + "." + sc.Name)
					if err == nil && pprof.StartCPUProfile(out) == nil {
						profile = out
					}
				}
				profileMu.Unlock()
				fmt.Println("ok")
			}
			if in.Text() == "heap" {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if f := os.Getenv("BRAID_BENCH_HEAP_PROFILE"); f != "" {
					writeHeapProfile(f + "." + sc.Name)
				}
				fmt.Println(m.HeapAlloc)
			}
		}
		cancel()
	}()
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child server:", err)
		return 1
	}
	return 0
}

// writeHeapProfile writes the process's heap profile to path, for a
// look at what a server holds per worker (go tool pprof -sample_index
// inuse_space).
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child server:", err)
		return
	}
	defer f.Close()
	pprof.Lookup("heap").WriteTo(f, 0)
}

// childServer is a server process of the shared cluster.
type childServer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its standard output after the URL
	url   string
	mu    sync.Mutex
	log   bytes.Buffer
}

func (cs *childServer) logged(s string) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return strings.Contains(cs.log.String(), s)
}

func (cs *childServer) Write(p []byte) (int, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.log.Write(p)
}

// startChildServer starts a server process; the test's cleanup kills it.
func startChildServer(t testing.TB, sc sharedConfig) *childServer {
	t.Helper()
	sc.Data = t.TempDir()
	spec, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cs := &childServer{}
	cs.cmd = exec.Command(self, "-test.run", "^$")
	cs.cmd.Env = append(os.Environ(), childServerEnv+"="+string(spec))
	cs.cmd.Stderr = cs
	out, err := cs.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if cs.stdin, err = cs.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cs.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.cmd.Process.Signal(syscall.SIGCONT)
		cs.stdin.Close() // asks it to stop
		exited := make(chan struct{})
		go func() {
			cs.cmd.Wait()
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cs.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("server %s's log:\n%s", sc.Name, cs.log.String())
		}
	})
	cs.lines = make(chan string, 16)
	go func() {
		defer close(cs.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case cs.lines <- sc.Text():
			default: // nobody asked
			}
		}
	}()
	select {
	case cs.url = <-cs.lines:
	case <-time.After(30 * time.Second):
	}
	if !strings.HasPrefix(cs.url, "http") {
		t.Fatalf("server process %s did not start: %s", sc.Name, cs.log.String())
	}
	return cs
}

// heap returns the bytes of heap the server process holds after a
// collection.
func (cs *childServer) heap(t testing.TB) uint64 {
	t.Helper()
	if _, err := io.WriteString(cs.stdin, "heap\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-cs.lines:
		n, err := strconv.ParseUint(l, 10, 64)
		if err != nil {
			t.Fatalf("server process answered %q to heap", l)
		}
		return n
	case <-time.After(30 * time.Second):
		t.Fatal("server process did not answer heap in 30 s")
	}
	return 0
}

// profile starts (path not empty) or ends (path empty) a CPU profile of
// the server process into path.NAME.
func (cs *childServer) profile(t testing.TB, path string) {
	t.Helper()
	if _, err := io.WriteString(cs.stdin, strings.TrimSpace("cpu "+path)+"\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cs.lines:
	case <-time.After(30 * time.Second):
		t.Fatal("server process did not answer cpu in 30 s")
	}
}

// sharedWorker runs a worker registered with every server in urls,
// whose noop units take d each.
func sharedWorker(t *testing.T, threads int, d time.Duration, urls ...string) {
	t.Helper()
	runWorker(t, worker.Config{
		Servers: urls, Key: testKey, Threads: threads, Listen: []string{"127.0.0.1:0"}, Logger: testLogger(),
		RetryInterval: 20 * time.Millisecond, Ops: ops.NewRegistry(slowOp{ops.Noop(), d}),
	})
}

// runWorker runs a worker of cfg until the test ends.
func runWorker(t testing.TB, cfg worker.Config) {
	t.Helper()
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// TestServersShareTheirWork runs three servers over one PostgreSQL
// database and one blob directory, with workers registered with all
// three: a job submitted to one is seen, waited for and fetched through
// the others; a token made on one works on the others; a job one runs
// is canceled through another, which it obeys.
func TestServersShareTheirWork(t *testing.T) {
	url := storetest.Postgres(t).Fresh(t)
	sc := sharedConfig{DB: url, Blobs: "dir:" + t.TempDir(), Takeover: 3 * time.Second}
	var srvs []*server.Server
	var cls []*client.Client
	for _, name := range []string{"a", "b", "c"} {
		sc.Name = name
		s, c := startShared(t, sc)
		srvs, cls = append(srvs, s), append(cls, c)
	}
	sharedWorker(t, 2, 2*time.Millisecond, srvs[0].URL(), srvs[1].URL(), srvs[2].URL())
	ctx := t.Context()
	in := make([]byte, 40<<10)
	rand.Read(in)
	id, err := cls[0].Put(ctx, bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		// Submitted to server k, waited for on k+1, fetched from k+2.
		st, err := cls[k].Submit(ctx, api.JobRequest{Op: "noop", Input: id, Units: 8})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		done, err := cls[(k+1)%3].Wait(wctx, st.Job, nil)
		cancel()
		if err != nil || done.State != api.JobDone {
			t.Fatalf("job %d submitted to server %d, waited for on %d: %+v, %v", st.Job, k, (k+1)%3, done, err)
		}
		var out bytes.Buffer
		if _, err := cls[(k+2)%3].Get(ctx, done.Output, &out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), in) {
			t.Errorf("job %d: output fetched from server %d differs from the input", st.Job, (k+2)%3)
		}
	}

	// A server with another cluster key is refused.
	other := sc.config(testLogger())
	other.Name, other.Data, other.Key = "d", t.TempDir(), []byte("another-cluster-key-0123456789abcdef")
	if srv, err := server.New(other); err == nil || !strings.Contains(err.Error(), "another cluster key") {
		if srv != nil {
			srv.Run(canceled())
		}
		t.Errorf("a server with another key over the shared database: %v; want a refusal naming the key", err)
	}

	// A client given several servers goes past one that is down.
	dead := "https://127.0.0.1:1"
	g := client.New(dead+","+srvs[1].URL()+","+srvs[2].URL(), client.WithKey(testKey))
	st, err := g.Submit(ctx, api.JobRequest{Op: "noop", Input: id, Units: 2})
	if err != nil {
		t.Fatalf("submit through a list whose first server is down: %v", err)
	}
	if g.URL() != srvs[1].URL() {
		t.Errorf("after failing over, the client uses %s, want %s", g.URL(), srvs[1].URL())
	}
	if _, err := client.New(dead+",https://127.0.0.1:2", client.WithKey(testKey)).Health(ctx); err == nil ||
		!strings.Contains(err.Error(), "no server could be reached") || !strings.Contains(err.Error(), "127.0.0.1:2") {
		t.Errorf("every server down: %v; want an error naming each", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if done, err := g.Wait(wctx, st.Job, nil); err != nil || done.State != api.JobDone {
		t.Errorf("job through the failover client: %+v, %v", done, err)
	}
	cancel()

	// A token made on a is taken by c.
	tok, err := cls[0].CreateToken(ctx, "client", "shared")
	if err != nil {
		t.Fatal(err)
	}
	tc := client.New(srvs[2].URL(), client.WithToken(tok.Token), client.WithFingerprint(srvs[2].Fingerprint()))
	testwait.For(t, "server c to take a token made on a", 10*time.Second, func() bool {
		_, err := tc.Jobs(ctx, "", 1)
		return err == nil
	})

	// A long job on a, canceled through b.
	st, err = cls[0].Submit(ctx, api.JobRequest{Op: "noop", Input: id, Units: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cls[1].Cancel(ctx, st.Job); err != nil {
		t.Fatalf("canceling through b a job that a runs: %v", err)
	}
	testwait.For(t, "server a to let go of the canceled job", 10*time.Second, func() bool {
		st, err := cls[0].Status(ctx, st.Job)
		return err == nil && st.State == api.JobCanceled && st.Units.Running == 0
	})
	db, err := store.OpenMeta(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	j, err := db.Job(ctx, st.Job)
	if err != nil || j.State != store.JobCanceled || j.Done == j.Total {
		t.Errorf("the canceled job in the database: %+v, %v", j, err)
	}
}

// TestServerTakeover kills (SIGKILL) or stalls (SIGSTOP) the server
// that runs a job, in a cluster of three over one PostgreSQL database:
// another server takes the job over within the takeover time and
// finishes it with the right output, every unit counted once; a stalled
// server that wakes up lets go of what it held.
func TestServerTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes; not in -short")
	}
	url := storetest.Postgres(t).Fresh(t)
	const takeover = 2 * time.Second
	sc := sharedConfig{DB: url, Blobs: "dir:" + t.TempDir(), Takeover: takeover}
	sc.Name = "b"
	b, cb := startShared(t, sc)
	sc.Name = "c"
	c, _ := startShared(t, sc)
	db, err := store.OpenMeta(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(strings.ToUpper(sig.String()[:4]), func(t *testing.T) {
			ctx := t.Context()
			sc.Name = "a-" + fmt.Sprint(int(sig))
			a := startChildServer(t, sc)
			sharedWorker(t, 2, 10*time.Millisecond, a.url, b.URL(), c.URL())
			ca := client.New(a.url, client.WithKey(testKey))
			in := make([]byte, 64<<10)
			rand.Read(in)
			id, err := ca.Put(ctx, bytes.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			const units = 200
			st, err := ca.Submit(ctx, api.JobRequest{Op: "noop", Input: id, Units: units})
			if err != nil {
				t.Fatal(err)
			}
			testwait.For(t, "the first units recorded", 30*time.Second, func() bool {
				j, err := db.Job(ctx, st.Job)
				return err == nil && j.Done >= 10
			})
			if err := a.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var owner string
			testwait.For(t, "another server to take the job over", 30*time.Second, func() bool {
				j, err := db.Job(ctx, st.Job)
				owner = j.Server
				return err == nil && (j.Server == "b" || j.Server == "c" || j.State.Final())
			})
			took := time.Since(start)
			t.Logf("after %s, server %s took the job over in %s (takeover after %s)", sig, owner, took.Round(time.Millisecond), takeover)
			if took > 10*time.Second {
				t.Errorf("takeover took %s, more than the 10s promised", took)
			}
			// A client of all three waits: past a killed server, it moves
			// on; a stalled one it cannot tell from a slow one.
			waiter := client.New(a.url+","+b.URL()+","+c.URL(), client.WithKey(testKey))
			if sig == syscall.SIGSTOP {
				waiter = cb
			}
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			done, err := waiter.Wait(wctx, st.Job, nil)
			cancel()
			if err != nil || done.State != api.JobDone {
				t.Fatalf("job after the takeover: %+v, %v", done, err)
			}
			var out bytes.Buffer
			if _, err := cb.Get(ctx, done.Output, &out); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), in) {
				t.Error("output after the takeover differs from the input")
			}
			j, err := db.Job(ctx, st.Job)
			if err != nil || j.Done != units || j.Total != units || j.Running != 0 {
				t.Errorf("stored job: %+v, %v; want %d units done, counted once", j, err, units)
			}
			if sig == syscall.SIGSTOP {
				a.cmd.Process.Signal(syscall.SIGCONT)
				testwait.For(t, "the stalled server to let go", 30*time.Second, func() bool {
					return a.logged("lease ran out")
				})
				again, err := cb.Status(ctx, st.Job)
				if err != nil || again.State != api.JobDone || again.Output != done.Output {
					t.Errorf("after the stalled server woke: %+v, %v", again, err)
				}
			}
		})
	}
}

// canceled returns a context that is done.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
