package worker

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/testwait"
)

// This file runs real braid processes (a server, workers in cgroups, the
// client commands) from the braid binary, built without -race: the
// race detector's shadow memory would swamp what a cgroup measures, and
// its slowdown what a heartbeat shows.

// braidBinEnv names a braid binary to use instead of building one (the
// guest of TestCgroupV2InVM gets the host's).
const braidBinEnv = "BRAID_BIN"

// braidBinary returns BRAID_BIN, or braid built from this module into a
// temporary directory of tb's.
func braidBinary(tb testing.TB) string {
	tb.Helper()
	if b := os.Getenv(braidBinEnv); b != "" {
		return b
	}
	return goBuild(tb, tb.TempDir(), "braid", "build", "github.com/braid-hpc/braid/cmd/braid")
}

// goBuild runs `go ARGS -o dir/name` (ARGS: build PKG, or test -c PKG)
// without -race and returns the file it made.
func goBuild(tb testing.TB, dir, name string, args ...string) string {
	tb.Helper()
	out := filepath.Join(dir, name)
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	cmd := exec.Command(goTool, append(append(args[:1:1], "-o", out), args[1:]...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// cluster is a braid server and workers, each a process of the braid
// binary, on loopback, with logs in dir. Its processes end with the test
// (SIGTERM, then SIGKILL), on failure too.
type cluster struct {
	tb  testing.TB
	bin string
	dir string
	env []string
	url string

	mu    sync.Mutex
	procs []*proc
}

// proc is a process the cluster started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when it exited
	err  error         // its exit, once done is closed
}

// alive reports whether p still runs.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// newCluster starts a braid server of bin.
func newCluster(tb testing.TB, bin string) *cluster {
	tb.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	c := &cluster{tb: tb, bin: bin, dir: tb.TempDir()}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "BRAID_") {
			c.env = append(c.env, e)
		}
	}
	c.env = append(c.env, "BRAID_KEY="+base64.StdEncoding.EncodeToString(key))
	tb.Cleanup(c.stop)
	srv := c.start("server", nil, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(c.dir, "data"))
	c.url = c.waitLog(srv, `(?m)^braid server listening on (\S+)`)
	return c
}

// start starts bin with args, its output in dir/name.log; prefix, if not
// nil, runs first and execs the binary (as a shell that joins a cgroup).
func (c *cluster) start(name string, prefix []string, args ...string) *proc {
	c.tb.Helper()
	log := filepath.Join(c.dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer f.Close()
	argv := append(append(append([]string(nil), prefix...), c.bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = c.env, f, f
	if err := cmd.Start(); err != nil {
		c.tb.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// stop ends every process, SIGTERM first, by PID.
func (c *cluster) stop() {
	c.mu.Lock()
	procs := c.procs
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if c.tb.Failed() {
		c.tb.Logf("logs:\n%s", c.logs())
	}
}

// logs returns the tail of every process's output.
func (c *cluster) logs() string {
	var b strings.Builder
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		out, _ := os.ReadFile(p.log)
		if len(out) > 6000 {
			out = out[len(out)-6000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", p.name, out)
	}
	return b.String()
}

// waitLog waits up to a minute for a line of p's output matching rx and
// returns its first group.
func (c *cluster) waitLog(p *proc, rx string) string {
	c.tb.Helper()
	re := regexp.MustCompile(rx)
	var m []string
	if !testwait.Until(time.Minute, func() bool {
		out, _ := os.ReadFile(p.log)
		m = re.FindStringSubmatch(string(out))
		return m != nil || !p.alive()
	}) || m == nil {
		out, _ := os.ReadFile(p.log)
		c.tb.Fatalf("%s printed no %q (running: %v):\n%s", p.name, rx, p.alive(), out)
	}
	return m[1]
}

// worker starts `braid worker` of threads threads; prefix as for start.
func (c *cluster) worker(name string, threads int, prefix []string, args ...string) *proc {
	c.tb.Helper()
	return c.start(name, prefix, append([]string{"worker", "--server", c.url, "--threads", fmt.Sprint(threads),
		"--name", name, "--module-dir", filepath.Join(c.dir, "mod-"+name)}, args...)...)
}

// braid runs a client command against the server and returns its
// standard output and its error (an *exec.ExitError for an exit code).
func (c *cluster) braid(args ...string) (string, error) {
	c.tb.Helper()
	cmd := exec.Command(c.bin, append(args, "--server", c.url)...)
	cmd.Env = c.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("braid %s: %w; stderr: %s", strings.Join(args, " "), err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.String(), err
}

// must is braid that fails the test on an error.
func (c *cluster) must(args ...string) string {
	c.tb.Helper()
	out, err := c.braid(args...)
	if err != nil {
		c.tb.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// workers returns `braid workers --json`'s live workers.
func (c *cluster) workers() []api.WorkerInfo {
	c.tb.Helper()
	var l api.WorkerList
	if err := json.Unmarshal([]byte(c.must("workers", "--json")), &l); err != nil {
		c.tb.Fatalf("braid workers --json: %v", err)
	}
	var live []api.WorkerInfo
	for _, w := range l.Workers {
		if w.Alive {
			live = append(live, w)
		}
	}
	return live
}

// waitWorkers waits up to a minute for n live workers and returns them.
func (c *cluster) waitWorkers(n int) []api.WorkerInfo {
	c.tb.Helper()
	var ws []api.WorkerInfo
	if !testwait.Until(time.Minute, func() bool {
		ws = c.workers()
		return len(ws) >= n
	}) {
		c.tb.Fatalf("%d live workers after a minute, want %d:\n%s", len(ws), n, c.logs())
	}
	return ws
}

// job is a job's final status as `braid submit --wait --json` prints it.
type job struct {
	Job   uint64       `json:"job"`
	State api.JobState `json:"state"`
	Error string       `json:"error"`
}

// run submits a job (submit's flags) and waits for its end.
func (c *cluster) run(args ...string) job {
	c.tb.Helper()
	out, err := c.braid(append([]string{"submit", "--wait", "--json"}, args...)...)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.tb.Fatal(err)
	}
	var j job
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		c.tb.Fatalf("braid submit %s: %v (%v): %q", strings.Join(args, " "), err, err, out)
	}
	return j
}

// addOp writes module to a file and adds it as operation name.
func (c *cluster) addOp(name string, module []byte) {
	c.tb.Helper()
	f := filepath.Join(c.dir, name+".wasm")
	if err := os.WriteFile(f, module, 0o644); err != nil {
		c.tb.Fatal(err)
	}
	c.must("op", "add", name, f)
}

// put uploads data and returns its blob id.
func (c *cluster) put(data []byte) string {
	c.tb.Helper()
	f, err := os.CreateTemp(c.dir, "put-*")
	if err != nil {
		c.tb.Fatal(err)
	}
	f.Write(data)
	f.Close()
	return c.must("put", f.Name())
}
