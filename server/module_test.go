package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/worker"
)

// addOp uploads a module built from C source src as operation name.
func (c *cluster) addOp(name, src string, o client.OpOptions) api.OpInfo {
	c.t.Helper()
	info, err := c.c.AddOp(context.Background(), name, bytes.NewReader(wasmtest.C(c.t, src)), o)
	if err != nil {
		c.t.Fatalf("add %s: %v", name, err)
	}
	return info
}

func lines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "line %d of the input\n", i)
	}
	return b.Bytes()
}

// TestModuleJob: an uploaded module runs on a worker that started before
// it existed; a map over lines with a reduce gives the right answer;
// listings show the module; a job keeps the version it was submitted
// with.
func TestModuleJob(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	info := c.addOp("count", wasmtest.Lines, client.OpOptions{Doc: "counts lines", Split: "lines:1K", Merge: "reduce:sum"})
	if info.Version != 1 || len(info.Hash) != 64 || info.Kind != api.OpModule || info.Split != "lines:1K" {
		t.Errorf("op info %+v", info)
	}
	c.addOp("sum", wasmtest.Sum, client.OpOptions{})
	list, err := c.c.Ops(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, op := range list {
		names = append(names, op.Name+":"+op.Kind)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "blur:builtin") || !strings.Contains(got, "count:wasm") || !strings.Contains(got, "sum:wasm") {
		t.Errorf("ops: %s", got)
	}

	in := c.put(lines(1000))
	st := c.run(api.JobRequest{Op: "count", Input: in}) // the op's default split and merge
	if st.State != api.JobDone || string(c.get(st.Output)) != "1000\n" {
		t.Fatalf("count job %s: %q, output %q", st.State, st.Error, c.get(st.Output))
	}
	if st.Module != info.Hash || st.Split != "lines:1K" || st.Merge != "reduce:sum" || st.Units.Total < 20 {
		t.Errorf("status %+v", st)
	}
	// Explicit split and merge override the defaults; concat keeps every
	// unit's count in order.
	st = c.run(api.JobRequest{Op: "count", Input: in, Split: "lines:10K", Merge: "concat"})
	if st.State != api.JobDone || !strings.HasSuffix(string(c.get(st.Output)), "\n") || st.Units.Total != 3 {
		t.Errorf("concat job %s %q, %d units: %q", st.State, st.Error, st.Units.Total, c.get(st.Output))
	}
	// A repeated module job's output is one copy.
	st = c.run(api.JobRequest{Op: "sum", Input: c.put([]byte("2\n3\n")), Repeat: 5})
	if st.State != api.JobDone || string(c.get(st.Output)) != "5\n" {
		t.Errorf("repeated module job: %s %q: %q", st.State, st.Error, c.get(st.Output))
	}
	// A built-in operation splits and merges the same way.
	st = c.run(api.JobRequest{Op: "noop", Input: in, Split: "bytes:4K", Merge: "reduce:count"})
	if st.State != api.JobDone || string(c.get(st.Output)) != "1000\n" {
		t.Errorf("noop + reduce: %s %q: %q", st.State, st.Error, c.get(st.Output))
	}

	// A new version of "up": jobs submitted before keep the old one.
	v1 := c.addOp("up", wasmtest.Cat, client.OpOptions{})
	w := c.workers[0]
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	c.waitWorkers(0)
	old := c.submit(api.JobRequest{Op: "up", Input: c.put([]byte("abc"))})
	v2 := c.addOp("up", wasmtest.Upper, client.OpOptions{})
	if v2.Version != 2 || v2.Hash == v1.Hash {
		t.Errorf("second upload: %+v", v2)
	}
	c.addWorker(1, nil)
	c.waitWorkers(1)
	if st := c.wait(old.Job); st.State != api.JobDone || string(c.get(st.Output)) != "abc" || st.Module != v1.Hash {
		t.Errorf("old job ran %s: %s %q", st.Module, st.State, c.get(st.Output))
	}
	st = c.run(api.JobRequest{Op: "up", Input: c.put([]byte("abc")), Params: map[string]string{"PREFIX": "> "}})
	if st.State != api.JobDone || string(c.get(st.Output)) != "> ABC" {
		t.Errorf("new job: %s %q %q", st.State, st.Error, c.get(st.Output))
	}
	// Removed: no new jobs; the module's blob stays while it is listed.
	if err := c.c.DeleteBlob(t.Context(), v2.Hash); !errors.Is(err, client.ErrConflict) {
		t.Errorf("delete a listed module's blob: %v", err)
	}
	if err := c.c.RemoveOp(t.Context(), "up"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "up", Input: c.put([]byte("x"))}); err == nil ||
		!strings.Contains(err.Error(), `unknown operation "up"`) {
		t.Errorf("submit after rm: %v", err)
	}
}

// TestModuleFailures: every way a module can fail fails its unit with a
// message saying why, after the job's tries; the worker serves on.
func TestModuleFailures(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	in := c.put([]byte("input\n"))
	cases := []struct {
		name, src string
		code      []byte // instead of src: a module assembled in Go
		req       api.JobRequest
		want      string
	}{
		{"fail", wasmtest.Fail, nil, api.JobRequest{MaxTries: 2}, `exit code 3; stderr: "cannot parse record 7"`},
		{"trap", wasmtest.Trap, nil, api.JobRequest{MaxTries: 1}, "trap"},
		{"loop", wasmtest.Loop, nil, api.JobRequest{MaxTries: 1, UnitTimeout: "300ms"}, "timed out after 300ms"},
		{"bomb", wasmtest.Bomb, nil, api.JobRequest{MaxTries: 1, UnitMem: 16 << 20}, "memory limit of 16 MiB"},
		{"flood", wasmtest.Flood, nil, api.JobRequest{MaxTries: 1, UnitOutput: 1 << 20}, "more than 1 MiB to stdout"},
		// Frames of 2,000 spilled values a million deep: 136 MB of call
		// stack outside --unit-mem before the frame bound.
		{"spilled", "", wasmtest.Spilled(1_000_000, 50, 40), api.JobRequest{MaxTries: 1, UnitMem: 64 << 10}, "trap: call stack limit of 32 MiB exceeded"},
	}
	c.addOp("cat", wasmtest.Cat, client.OpOptions{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.code != nil {
				if _, err := c.c.AddOp(t.Context(), tc.name, bytes.NewReader(tc.code), client.OpOptions{}); err != nil {
					t.Fatal(err)
				}
			} else {
				c.addOp(tc.name, tc.src, client.OpOptions{})
			}
			req := tc.req
			req.Op, req.Input = tc.name, in
			start := time.Now()
			st := c.run(req)
			if st.State != api.JobFailed || !strings.Contains(st.Error, "unit 0 failed on worker w1") || !strings.Contains(st.Error, tc.want) {
				t.Errorf("job %s: %q, want it to say %q", st.State, st.Error, tc.want)
			}
			if want := max(req.MaxTries, 1) - 1; st.Units.Retries != want {
				t.Errorf("%d retries, want %d", st.Units.Retries, want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			if st := c.run(api.JobRequest{Op: "cat", Input: in}); st.State != api.JobDone {
				t.Errorf("the worker did not serve on: %s %q", st.State, st.Error)
			}
		})
	}
	// Limits out of range are refused at submit.
	for _, req := range []api.JobRequest{{UnitMem: -1}, {UnitMem: 8 << 30}, {UnitTimeout: "forever"}, {UnitTimeout: "-1s"}, {MaxTries: 1000}} {
		req.Op, req.Input = "cat", in
		if _, err := c.c.Submit(t.Context(), req); client.StatusOf(err) != http.StatusBadRequest {
			t.Errorf("submit %+v: %v, want 400", req, err)
		}
	}
}

// TestOpUploadErrors: what the server refuses to register, and why.
func TestOpUploadErrors(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) { cfg.MaxModule = 1 << 20 })
	cat := wasmtest.C(t, wasmtest.Cat)
	cases := []struct {
		name   string
		code   []byte
		o      client.OpOptions
		status int
		want   string
	}{
		{"garbage", []byte("not a module"), client.OpOptions{}, 400, "not a WASI preview 1 command module"},
		{"blur", cat, client.OpOptions{}, 409, "built in"},
		{"wasm", cat, client.OpOptions{}, 400, "reserved"},
		{"bad name", cat, client.OpOptions{}, 400, "operation name"},
		{"big", make([]byte, 2<<20), client.OpOptions{}, 413, "limit"},
		{"badsplit", cat, client.OpOptions{Split: "lines:0"}, 400, "split"},
		{"badmerge", cat, client.OpOptions{Merge: "glue"}, 400, "merge"},
		{"badparam", cat, client.OpOptions{Params: map[string]string{"A-B": "1"}}, 400, "parameter"},
		// Each function under the frame limit, together over the phis a
		// module may have: minutes of compiling on every worker.
		{"phis", wasmtest.PhiNests(34), client.OpOptions{}, 400, "at most 4194304 are allowed in a module"},
	}
	for _, tc := range cases {
		_, err := c.c.AddOp(t.Context(), tc.name, bytes.NewReader(tc.code), tc.o)
		if client.StatusOf(err) != tc.status || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("add %q: %v, want %d saying %q", tc.name, err, tc.status, tc.want)
		}
	}
	if err := c.c.RemoveOp(t.Context(), "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("remove unknown: %v", err)
	}
	// Declared parameters: unknown ones are refused at submit.
	c.addOp("p", wasmtest.Upper, client.OpOptions{Params: map[string]string{"PREFIX": ""}})
	in := c.put([]byte("x"))
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "p", Input: in, Params: map[string]string{"OTHER": "1"}}); err == nil ||
		!strings.Contains(err.Error(), `unknown parameter "OTHER"`) {
		t.Errorf("undeclared parameter: %v", err)
	}
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "p", Input: in, Merge: "reduce:nothing"}); err == nil ||
		!strings.Contains(err.Error(), `unknown operation "nothing"`) {
		t.Errorf("unknown reduce op: %v", err)
	}
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "blur", Input: in, Split: "lines:4K"}); err == nil ||
		!strings.Contains(err.Error(), "takes an image") {
		t.Errorf("image op split by lines: %v", err)
	}
}

// TestModuleHashMismatch: a worker refuses a module whose bytes do not
// match its hash (a relay altered them) and serves on; the unit runs on
// a worker that got the module intact.
func TestModuleHashMismatch(t *testing.T) {
	c := newCluster(t, nil)
	target, _ := url.Parse(c.srv.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = c.hc.Transport
	rp.ModifyResponse = func(r *http.Response) error {
		if !strings.HasPrefix(r.Request.URL.Path, api.PathBlobs+"/") || r.StatusCode != 200 {
			return nil
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		if len(b) > 100 {
			b[100] ^= 0xff
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	relay := httptest.NewServer(rp)
	defer relay.Close()
	c.addWorker(1, func(cfg *worker.Config) {
		cfg.Servers = []string{relay.URL}
		cfg.InsecureHTTP = true
		cfg.Name = "behind-relay"
	})
	c.waitWorkers(1)
	info := c.addOp("cat", wasmtest.Cat, client.OpOptions{})
	in := c.put([]byte("payload"))
	st := c.run(api.JobRequest{Op: "cat", Input: in, MaxTries: 2})
	if st.State != api.JobFailed || !strings.Contains(st.Error, "sha256") || !strings.Contains(st.Error, "refused") ||
		!strings.Contains(st.Error, info.Hash[:12]) {
		t.Errorf("job %s: %q", st.State, st.Error)
	}
	if st := c.run(api.JobRequest{Op: "noop", Input: in}); st.State != api.JobDone {
		t.Errorf("the worker did not serve on: %s %q", st.State, st.Error)
	}
	// With an honest worker too, the job gets done: the unit avoids the
	// worker it failed on.
	c.addWorker(1, nil)
	c.waitWorkers(2)
	for range 3 {
		st = c.run(api.JobRequest{Op: "cat", Input: in, MaxTries: 2})
		if st.State != api.JobDone || string(c.get(st.Output)) != "payload" {
			t.Errorf("with an honest worker: %s %q", st.State, st.Error)
		}
	}
}

// TestPipeline: a three-step pipeline runs in order, its steps reading
// each other's outputs; bad pipelines are refused naming the step; a
// job whose input job fails fails; a server restart mid-pipeline resumes
// it.
func TestPipeline(t *testing.T) {
	c := newCluster(t, nil)
	c.addOp("up", wasmtest.Upper, client.OpOptions{})
	c.addOp("count", wasmtest.Lines, client.OpOptions{})
	in := c.put(lines(100))
	req := api.PipelineRequest{Name: "three", Steps: []api.PipelineStep{
		{Name: "total", JobRequest: api.JobRequest{Op: "count", Input: "step:upper"}},
		{Name: "upper", JobRequest: api.JobRequest{Op: "up", Input: "step:first", Split: "lines:512"}},
		{Name: "first", JobRequest: api.JobRequest{Op: "noop", Input: in}},
	}}
	ps, err := c.c.SubmitPipeline(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Steps) != 3 || ps.Steps[0].Step != "total" || ps.Steps[0].InputJob == 0 || ps.State.Final() {
		t.Fatalf("submitted: %+v", ps)
	}
	if !strings.Contains(ps.Steps[0].Error, "waiting for job") {
		t.Errorf("waiting step says %q", ps.Steps[0].Error)
	}
	// No worker yet: restart the server mid-pipeline, then add one.
	c.stopServer()
	c.startServer()
	c.addWorker(2, nil)
	c.waitWorkers(1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ps, err = c.c.WaitPipeline(ctx, ps.Pipeline, nil)
	if err != nil || ps.State != api.JobDone {
		t.Fatalf("pipeline %+v: %v", ps, err)
	}
	if got := string(c.get(ps.Steps[0].Output)); got != "100\n" {
		t.Errorf("total = %q", got)
	}
	if got := c.get(ps.Steps[1].Output); !bytes.Equal(got, bytes.ToUpper(lines(100))) {
		t.Errorf("upper step gave %q...", got[:min(40, len(got))])
	}

	bad := []struct {
		steps []api.PipelineStep
		want  string
	}{
		{[]api.PipelineStep{{Name: "a", JobRequest: api.JobRequest{Op: "noop", Input: "step:b"}},
			{Name: "b", JobRequest: api.JobRequest{Op: "noop", Input: "step:a"}}}, `cycle: "a" reads "b" reads "a"`},
		{[]api.PipelineStep{{Name: "a", JobRequest: api.JobRequest{Op: "noop", Input: "step:zz"}}}, `step "a": input "step:zz" names no step`},
		{[]api.PipelineStep{{Name: "a", JobRequest: api.JobRequest{Op: "noop", Input: in}},
			{Name: "b", JobRequest: api.JobRequest{Op: "nosuch", Input: "step:a"}}}, `step "b": unknown operation "nosuch"`},
		{[]api.PipelineStep{{Name: "a", JobRequest: api.JobRequest{Op: "noop", Input: in}},
			{Name: "a", JobRequest: api.JobRequest{Op: "noop", Input: in}}}, `step "a" appears twice`},
		{nil, "0 steps"},
	}
	for _, b := range bad {
		_, err := c.c.SubmitPipeline(t.Context(), api.PipelineRequest{Steps: b.steps})
		if client.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), b.want) {
			t.Errorf("bad pipeline: %v, want 400 saying %s", err, b.want)
		}
	}

	// job:ID inputs: a failed input job fails the jobs that wait for it.
	failing := c.submit(api.JobRequest{Op: "sleep", Input: in, Units: 2, MaxTries: 1,
		Params: map[string]string{"ms": "200", "fail": "1"}})
	after := c.submit(api.JobRequest{Op: "noop", Input: fmt.Sprintf("job:%d", failing.Job)})
	then := c.submit(api.JobRequest{Op: "noop", Input: fmt.Sprintf("job:%d", after.Job)})
	if st := c.wait(then.Job); st.State != api.JobFailed || !strings.Contains(st.Error, fmt.Sprintf("input job %d is failed", after.Job)) {
		t.Errorf("job after a failed chain: %s %q", st.State, st.Error)
	}
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "noop", Input: fmt.Sprintf("job:%d", failing.Job)}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("input from a failed job: %v", err)
	}
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "noop", Input: "job:9999"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("input from no job: %v", err)
	}
	// A waiting job can be canceled.
	slow := c.submit(api.JobRequest{Op: "sleep", Input: in, Units: 1, Params: map[string]string{"ms": "300"}})
	w := c.submit(api.JobRequest{Op: "noop", Input: fmt.Sprintf("job:%d", slow.Job)})
	if st, err := c.c.Cancel(t.Context(), w.Job); err != nil || st.State != api.JobCanceled {
		t.Errorf("cancel a waiting job: %+v, %v", st, err)
	}
	if st := c.wait(slow.Job); st.State != api.JobDone {
		t.Errorf("input job: %s", st.State)
	}
}

// TestUnitMemBeyondWorkers: a job whose units ask for more memory than
// any live worker allows (braid worker --max-unit-mem, announced at
// registration) is refused at submit, naming both numbers, instead of
// failing on every worker.
func TestUnitMemBeyondWorkers(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(1, func(cfg *worker.Config) { cfg.MaxUnitMem = 64 << 20 })
	c.waitWorkers(1)
	if ws, err := c.c.Workers(t.Context()); err != nil || len(ws) != 1 || ws[0].MaxUnitMem != 64<<20 {
		t.Fatalf("the workers list: %+v, %v; want one worker allowing 64 MiB a unit (max_unit_mem)", ws, err)
	}
	c.addOp("cat", wasmtest.Cat, client.OpOptions{})
	in := c.put([]byte("abc"))
	_, err := c.c.Submit(t.Context(), api.JobRequest{Op: "cat", Input: in, UnitMem: 1 << 30})
	if client.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "unit_mem 1073741824") || !strings.Contains(err.Error(), "67108864") {
		t.Fatalf("submit asking 1 GiB of workers allowing 64 MiB: %v, want 400 naming both", err)
	}
	// The server's default (256 MiB) is more than the worker allows too.
	if _, err := c.c.Submit(t.Context(), api.JobRequest{Op: "cat", Input: in}); client.StatusOf(err) != http.StatusBadRequest {
		t.Fatalf("submit with the default 256 MiB: %v, want 400", err)
	}
	if st := c.run(api.JobRequest{Op: "cat", Input: in, UnitMem: 32 << 20}); st.State != api.JobDone || string(c.get(st.Output)) != "abc" {
		t.Fatalf("a job within the cap: %s %q", st.State, st.Error)
	}
}

// fillsModule is a hostile module without loops: memory.fill over 16
// MiB 2,400 times (38 GiB of native memset, tens of seconds), which
// nothing preempts but the sandbox's charge of bulk instructions.
func fillsModule() []byte {
	fill := wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), 1), 16<<20)
	fill = append(fill, wasmtest.MemoryFill...)
	return wasmtest.Module{MemPages: 256, Funcs: [][]byte{wasmtest.Repeat(fill, 10)}, Start: wasmtest.Repeat([]byte{0x10, 1}, 240)}.Bytes()
}

// TestHostileBulkModuleBesideGoodJob: a module with no loops that runs
// memory.fill over 16 MiB 2,400 times (tens of seconds of native memset,
// which nothing preempts) stops at its unit timeout, its workers stay
// alive (heartbeats on time: the test cluster declares a worker dead
// after 500 ms of silence), and another client's cat job beside it is
// served at once.
func TestHostileBulkModuleBesideGoodJob(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.addWorker(2, nil)
	c.waitWorkers(2)
	if _, err := c.c.AddOp(t.Context(), "fills", bytes.NewReader(fillsModule()), client.OpOptions{}); err != nil {
		t.Fatal(err)
	}
	c.addOp("cat", wasmtest.Cat, client.OpOptions{})
	in := c.put([]byte("abc\n"))
	if st := c.run(api.JobRequest{Op: "cat", Input: in}); st.State != api.JobDone { // compiled, warm
		t.Fatalf("cat: %s %q", st.State, st.Error)
	}

	bad := c.submit(api.JobRequest{Op: "fills", Input: c.put([]byte("xx")), Split: "bytes:1", UnitTimeout: "500ms", MaxTries: 1, UnitMem: 16 << 20})
	start := time.Now()
	good := c.run(api.JobRequest{Op: "cat", Input: in})
	// A generous bound, to catch a worker held by the fills (tens of
	// seconds before), not a measurement.
	if d := time.Since(start); good.State != api.JobDone || d > 5*time.Second {
		t.Errorf("cat beside the fills: %s %q in %v", good.State, good.Error, d)
	}
	st := c.wait(bad.Job)
	if st.State != api.JobFailed || !strings.Contains(st.Error, "timed out after 500ms") || strings.Contains(st.Error, "lost") {
		t.Errorf("the fills job: %s %q, want it timed out, on a live worker", st.State, st.Error)
	}
	c.waitWorkers(2)
}
