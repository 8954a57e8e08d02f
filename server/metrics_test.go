package server_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/metrics/metricstest"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/testbed/relay"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/worker"
)

// scrape GETs a Prometheus endpoint with the Authorization header auth
// (none if empty), lints the exposition with promlint and parses it.
func scrape(t *testing.T, hc *http.Client, url, auth string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET %s: Content-Type %q, want the text exposition format", url, ct)
	}
	return metricstest.Parse(t, body)
}

// TestMetrics runs a job on a server with one worker, then scrapes the
// server's /metrics (as a monitor token would) and the worker's metrics,
// and checks they count what happened.
func TestMetrics(t *testing.T) {
	c := newCluster(t, nil)
	tw := c.addWorker(2, nil)
	c.waitWorkers(1)
	data := bytes.Repeat([]byte("braid metrics "), 40_000)
	st := c.run(api.JobRequest{Op: "checksum", Input: c.put(data), Params: map[string]string{"block": "4096"}, Units: 7})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	units := float64(st.Units.Total)
	var wid string
	for _, id := range tw.w.IDs() {
		wid = id
	}
	mon, err := c.c.CreateToken(t.Context(), api.RoleMonitor, "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, c.hc, c.srv.URL()+api.PathMetrics, "Bearer "+mon.Token)

	for _, x := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"braid_units_completed_total", nil, units},
		{"braid_worker_units_completed_total", map[string]string{"worker": wid}, units},
		{"braid_jobs_submitted_total", nil, 1},
		{"braid_jobs_finished_total", map[string]string{"state": "done"}, 1},
		{"braid_jobs_finished_total", map[string]string{"state": "failed"}, 0},
		{"braid_jobs", map[string]string{"state": "done"}, 1},
		{"braid_jobs", map[string]string{"state": "running"}, 0},
		{"braid_queued_units", nil, 0},
		{"braid_units", map[string]string{"state": "running"}, 0},
		{"braid_workers", map[string]string{"state": "live"}, 1},
		{"braid_worker_up", map[string]string{"worker": wid}, 1},
		{"braid_worker_threads", map[string]string{"worker": wid}, 2},
		{"braid_http_request_duration_seconds", map[string]string{"route": api.PathJobs, "method": "post", "code": "202"}, 1},
		{"braid_path_up", map[string]string{"peer": wid, "path": "0"}, 1},
	} {
		got, ok := metricstest.Value(fams, x.name, x.labels)
		if !ok || got != x.want {
			t.Errorf("%s%v = %v (present %v), want %v", x.name, x.labels, got, ok, x.want)
		}
	}
	for _, x := range []struct {
		name    string
		labels  map[string]string
		atLeast float64
	}{
		// The units went out and their results came back on the path.
		{"braid_path_sent_bytes_total", map[string]string{"peer": wid}, float64(len(data))},
		{"braid_path_received_bytes_total", map[string]string{"peer": wid}, 1},
		{"braid_worker_result_bytes_total", map[string]string{"worker": wid}, 1},
		{"braid_worker_compute_seconds_total", map[string]string{"worker": wid}, 1e-9},
		// The input and the output are stored.
		{"braid_store_bytes", nil, float64(len(data))},
		{"go_goroutines", nil, 1},
	} {
		if got, ok := metricstest.Value(fams, x.name, x.labels); !ok || got < x.atLeast {
			t.Errorf("%s%v = %v (present %v), want at least %v", x.name, x.labels, got, ok, x.atLeast)
		}
	}

	// The worker's own metrics.
	ws := httptest.NewServer(tw.w.MetricsHandler())
	defer ws.Close()
	wf := scrape(t, ws.Client(), ws.URL, "")
	if got, _ := metricstest.Value(wf, "braid_units_run_total", nil); got != units {
		t.Errorf("worker braid_units_run_total = %v, want %v", got, units)
	}
	if got, _ := metricstest.Value(wf, "braid_threads", nil); got != 2 {
		t.Errorf("worker braid_threads = %v, want 2", got)
	}
	if got, ok := metricstest.Value(wf, "braid_path_received_bytes_total", map[string]string{"path": "0"}); !ok || got < float64(len(data)) {
		t.Errorf("worker braid_path_received_bytes_total = %v (present %v), want at least the input's %d bytes", got, ok, len(data))
	}
	if got, ok := metricstest.Value(wf, "braid_path_up", map[string]string{"path": "0"}); !ok || got != 1 {
		t.Errorf("worker braid_path_up = %v (present %v), want 1", got, ok)
	}
}

// TestMetricsAuth: /metrics answers only credentials that may see it.
func TestMetricsAuth(t *testing.T) {
	c := newCluster(t, nil)
	wk, err := c.c.CreateToken(t.Context(), api.RoleWorker, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer " + wk.Token, http.StatusForbidden},
		{"Bearer " + api.Token(testKey), http.StatusOK},
	} {
		code, body := call(t, c, http.MethodGet, request{path: api.PathMetrics}, x.auth)
		if code != x.want {
			t.Errorf("GET /metrics with %.20q: %d %s, want %d", x.auth, code, body, x.want)
		}
	}
	// The refusals are timed like any answer, by route and status.
	fams := scrape(t, c.hc, c.srv.URL()+api.PathMetrics, "Bearer "+api.Token(testKey))
	for _, code := range []string{"401", "403", "200"} {
		if n, _ := metricstest.Value(fams, "braid_http_request_duration_seconds", map[string]string{"route": api.PathMetrics, "method": "get", "code": code}); n != 1 {
			t.Errorf("braid_http_request_duration_seconds_count{route=/metrics,code=%s} = %v, want 1", code, n)
		}
	}
}

// TestMetricsPathDown: the server's path metrics follow a worker's path
// going down (its relay blackholed) and coming back.
func TestMetricsPathDown(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) {
		cfg.Transport = &transport.Config{PathTimeout: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond,
			HandshakeTimeout: 300 * time.Millisecond}
	})
	// Path 0 direct, path 1 through a relay.
	// Free ports for the worker: listen, note them, let them go.
	ln, err := transport.Listen(t.Context(), []string{"127.0.0.1:0", "127.0.0.1:0"}, &transport.Config{Key: testKey, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	direct, target := ln.Addrs()[0].String(), ln.Addrs()[1].String()
	ln.Close()
	r, err := relay.ListenTCP(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	tw := c.addWorker(1, func(cfg *worker.Config) {
		cfg.Listen = []string{direct, target}
		cfg.Advertise = []string{direct, r.Addr()}
	})
	c.waitWorkers(1)
	// The server lists the worker before the worker has read its ID from
	// the registration's answer.
	var wid string
	testwait.For(t, "the worker to learn its ID", 10*time.Second, func() bool {
		for _, id := range tw.w.IDs() {
			wid = id
		}
		return wid != ""
	})
	tok := "Bearer " + api.Token(testKey)
	wait := func(what string, ok func(fams map[string]*dto.MetricFamily) bool) {
		t.Helper()
		testwait.For(t, "metrics to show "+what, 10*time.Second, func() bool {
			return ok(scrape(t, c.hc, c.srv.URL()+api.PathMetrics, tok))
		})
	}
	// up is the path's braid_path_up, or -1 when the series is missing:
	// a down path is reported as 0, not left out. Checked by hand: a
	// collector that skips paths that are not up fails the "down" wait.
	up := func(fams map[string]*dto.MetricFamily, path string) float64 {
		v, ok := metricstest.Value(fams, "braid_path_up", map[string]string{"peer": wid, "path": path})
		if !ok {
			return -1
		}
		return v
	}
	wait("both paths up", func(f map[string]*dto.MetricFamily) bool { return up(f, "0") == 1 && up(f, "1") == 1 })
	r.Blackhole(true)
	wait("path 1 down (braid_path_up 0) and path 0 up", func(f map[string]*dto.MetricFamily) bool { return up(f, "0") == 1 && up(f, "1") == 0 })
	r.Blackhole(false)
	wait("path 1 back up after a reconnect", func(f map[string]*dto.MetricFamily) bool {
		n, _ := metricstest.Value(f, "braid_path_reconnects_total", map[string]string{"peer": wid, "path": "1"})
		return up(f, "1") == 1 && n >= 1
	})
}
