package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/testbed"
)

// Cluster runs a braid job cluster as separate processes of the braid
// binary on a testbed: a server in one host's namespace, workers in
// others, and client commands (put, submit, get, workers) wherever asked.
// Every process it starts is stopped by Stop, by PID. Methods are safe for
// concurrent use.
type Cluster struct {
	// Bed holds the hosts.
	Bed *testbed.Bed
	// Bin is the path of the braid binary.
	Bin string
	// Dir holds the server's data, the processes' logs and whatever
	// files the caller puts there.
	Dir string
	// Key is the cluster key, given to every process in BRAID_KEY.
	Key string

	mu     sync.Mutex
	procs  []*Proc
	url    string // the server's control API
	host   string // the server's host
	nextID int
	// clientCPU is the user+system CPU time of the client commands
	// (Braid) that ended.
	clientCPU time.Duration
}

// Proc is a long-running braid process of a Cluster.
type Proc struct {
	Name string // e.g. "server", "worker f1"
	Host string
	Log  string // file holding its stdout and stderr
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	err  error         // Wait's answer, once done is closed
}

// PID returns the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited, and with what.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// tail returns the end of the process's log, for error messages.
func (p *Proc) tail() string {
	b, _ := os.ReadFile(p.Log)
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return strings.TrimSpace(string(b))
}

// ServerPort is the control API port of a Cluster's server; each host
// has its own namespace, so a fixed port cannot clash.
const ServerPort = 7400

// WorkerPort is the data-plane port of a Cluster's workers.
const WorkerPort = 7420

// start starts a braid process in host, with its output in a log file.
// ready, if not empty, is a line prefix the process prints on stdout
// once it is listening; start waits for it.
func (c *Cluster) start(ctx context.Context, name, host, ready string, args ...string) (*Proc, error) {
	c.mu.Lock()
	c.nextID++
	logName := filepath.Join(c.Dir, "logs", fmt.Sprintf("%02d-%s.log", c.nextID, strings.ReplaceAll(name, " ", "-")))
	c.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(logName), 0o755); err != nil {
		return nil, err
	}
	// The process's stderr goes straight to the log; its stdout is copied
	// there line by line, watching for the ready line. O_APPEND keeps the
	// two writers from overwriting each other.
	log, err := os.OpenFile(logName, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The process outlives ctx: Stop ends it.
	cmd := c.Bed.Exec(context.WithoutCancel(ctx), host, c.Bin, args...)
	cmd.Env = c.env()
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s in %s: %w", name, host, err)
	}
	p := &Proc{Name: name, Host: host, Log: logName, cmd: cmd, done: make(chan struct{})}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	saw := make(chan struct{})
	watch := ready
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if watch != "" && strings.HasPrefix(sc.Text(), watch) {
				close(saw)
				watch = ""
			}
		}
		io.Copy(io.Discard, out) // a line past 1 MiB: drain the rest
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	if ready == "" {
		return p, nil
	}
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-saw:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s in %s exited before it was ready (%v): %s", name, host, p.err, p.tail())
	case <-t.C:
		return nil, fmt.Errorf("%s in %s printed no %q line within 15s: %s", name, host, ready, p.tail())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Cluster) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BRAID_") {
			env = append(env, kv)
		}
	}
	return append(env, "BRAID_KEY="+c.Key)
}

// StartServer starts `braid server` in host, listening on its address on
// network net, and returns the control API's URL.
func (c *Cluster) StartServer(ctx context.Context, host string, net int, extra ...string) (string, error) {
	listen := joinHostPort(c.Bed.Addr(host, net), ServerPort)
	args := append([]string{"server", "--listen", listen, "--data", filepath.Join(c.Dir, "server")}, extra...)
	if _, err := c.start(ctx, "server", host, "braid server listening on", args...); err != nil {
		return "", err
	}
	c.mu.Lock()
	c.url, c.host = "https://"+listen, host
	c.mu.Unlock()
	return "https://" + listen, nil
}

// StartWorker starts `braid worker` in host lending threads, with one
// data-plane address per network in nets.
func (c *Cluster) StartWorker(ctx context.Context, host string, nets []int, threads int, extra ...string) (*Proc, error) {
	c.mu.Lock()
	url := c.url
	c.mu.Unlock()
	if url == "" {
		return nil, errors.New("bench: start the server before the workers")
	}
	var listen []string
	for _, n := range nets {
		listen = append(listen, joinHostPort(c.Bed.Addr(host, n), WorkerPort))
	}
	args := append([]string{"worker", "--server", url, "--threads", strconv.Itoa(threads),
		"--listen", strings.Join(listen, ","), "--name", host}, extra...)
	return c.start(ctx, "worker "+host, host, "braid worker:", args...)
}

// Braid runs a client command (put, submit, get, workers, ...) in the
// server's host against the server and returns its standard output. A
// non-zero exit is an error carrying the command's standard error.
func (c *Cluster) Braid(ctx context.Context, args ...string) ([]byte, error) {
	c.mu.Lock()
	url, host := c.url, c.host
	c.mu.Unlock()
	cmd := c.Bed.Exec(ctx, host, c.Bin, append(args, "--server", url)...)
	cmd.Env = c.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ps := cmd.ProcessState; ps != nil {
		c.mu.Lock()
		c.clientCPU += ps.UserTime() + ps.SystemTime()
		c.mu.Unlock()
	}
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("braid %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// ClientCPU returns the user+system CPU time of the client commands
// (Braid and what calls it) that ended so far.
func (c *Cluster) ClientCPU() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientCPU
}

// Server returns the server process, or nil before StartServer.
func (c *Cluster) Server() *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.Name == "server" {
			return p
		}
	}
	return nil
}

// Workers returns the server's workers (braid workers --json).
func (c *Cluster) Workers(ctx context.Context) ([]api.WorkerInfo, error) {
	out, err := c.Braid(ctx, "workers", "--json")
	if err != nil {
		return nil, err
	}
	var list api.WorkerList
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("braid workers --json: %w: %q", err, out)
	}
	return list.Workers, nil
}

// WaitWorkers waits until the server lists n live workers.
func (c *Cluster) WaitWorkers(ctx context.Context, n int) ([]api.WorkerInfo, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ws, err := c.Workers(ctx)
		live := 0
		for _, w := range ws {
			if w.Alive {
				live++
			}
		}
		if err == nil && live == n {
			return ws, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d live workers after 20s, want %d (%v)%s", live, n, err, c.exitedProcs())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exitedProcs describes the processes that exited, for error messages.
func (c *Cluster) exitedProcs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, p := range c.procs {
		if gone, err := p.Exited(); gone {
			fmt.Fprintf(&b, "; %s exited (%v): %s", p.Name, err, p.tail())
		}
	}
	return b.String()
}

// Put uploads a file of Dir (braid put) and returns its blob id.
func (c *Cluster) Put(ctx context.Context, file string) (string, error) {
	out, err := c.Braid(ctx, "put", "--json", file)
	if err != nil {
		return "", err
	}
	var info api.BlobInfo
	if err := json.Unmarshal(out, &info); err != nil || info.ID == "" {
		return "", fmt.Errorf("braid put --json printed %q (%v)", out, err)
	}
	return info.ID, nil
}

// JobResult is what braid submit --wait --json prints.
type JobResult struct {
	Job     uint64         `json:"job"`
	State   api.JobState   `json:"state"`
	Output  string         `json:"output"`
	Units   api.UnitCounts `json:"units"`
	Error   string         `json:"error"`
	Policy  string         `json:"policy"`
	Timings api.Timings    `json:"timings"`
}

// Elapsed is the job's time on the server, from submission to output.
func (j JobResult) Elapsed() time.Duration {
	return j.Timings.Finished.Sub(j.Timings.Submitted)
}

// Submit runs braid submit ARGS --wait --json and returns the finished
// job; a job that did not end done is an error.
func (c *Cluster) Submit(ctx context.Context, args ...string) (JobResult, error) {
	out, err := c.Braid(ctx, append(append([]string{"submit"}, args...), "--wait", "--json")...)
	var j JobResult
	if jerr := json.Unmarshal(out, &j); jerr != nil {
		return j, errors.Join(err, fmt.Errorf("braid submit --json printed %q: %w", out, jerr))
	}
	if err != nil || j.State != api.JobDone {
		return j, fmt.Errorf("job %d %s: %s (%v)", j.Job, j.State, j.Error, err)
	}
	return j, nil
}

// Stop ends every process the cluster started, by PID: SIGTERM, then
// SIGKILL for those still running after 5s. It waits for them to exit.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	// Workers first, so they deregister from a live server.
	for i := len(procs) - 1; i >= 0; i-- {
		StopProc(procs[i])
	}
}

// StopProc ends one process by PID: SIGTERM, then SIGKILL after 5s.
func StopProc(p *Proc) {
	if gone, _ := p.Exited(); gone {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// NetBytes reads host's interface byte counters, received plus sent, one
// per network, inside its namespace.
func (c *Cluster) NetBytes(ctx context.Context, host string) ([]int64, error) {
	out := make([]int64, c.Bed.Networks())
	for j := range out {
		dev := c.Bed.Dev(host, j)
		for _, dir := range []string{"rx_bytes", "tx_bytes"} {
			b, err := c.Bed.Exec(ctx, host, "cat", "/sys/class/net/"+dev+"/statistics/"+dir).Output()
			if err != nil {
				return nil, fmt.Errorf("read %s of %s in %s: %w", dir, dev, host, err)
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s of %s in %s: %q: %w", dir, dev, host, b, err)
			}
			out[j] += v
		}
	}
	return out, nil
}

func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
