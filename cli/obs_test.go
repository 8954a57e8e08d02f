package cli

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/braid-hpc/braid/internal/metrics/metricstest"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/perf"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// scrapeMetrics GETs a metrics endpoint, lints and parses it.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	return metricstest.Parse(t, body)
}

// TestPerfServerMetrics runs braid perf -s with --metrics and --pprof
// (a port alone: loopback), scrapes the paths of a test while it runs and
// the counters after it, and reads a profile.
func TestPerfServerMetrics(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	mport, pport := freePort(t), freePort(t)
	srv := start(t, "perf", "-s", "--listen", "127.0.0.1:0,127.0.0.2:0",
		"--metrics", "127.0.0.1:"+strconv.Itoa(mport), "--pprof", strconv.Itoa(pport))
	addrs := srv.listening(t)
	murl := "http://127.0.0.1:" + strconv.Itoa(mport) + "/metrics"

	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb syncBuffer
		code := Run(t.Context(), []string{"perf", "-c", addrs, "--json", "--time", "2"}, &out, &errb)
		done <- result{code, out.String(), errb.String()}
	}()
	// While the test runs, both of its paths are up and carry bytes.
	live := testwait.Until(5*time.Second, func() bool {
		fams := scrapeMetrics(t, murl)
		// A test is two sessions: its control session and the data
		// session that carries the bytes.
		p0 := metricstest.Max(fams, "braid_path_received_bytes_total", map[string]string{"path": "0"})
		p1 := metricstest.Max(fams, "braid_path_received_bytes_total", map[string]string{"path": "1"})
		up := metricstest.Max(fams, "braid_path_up", map[string]string{"path": "1"})
		n, _ := metricstest.Value(fams, "braid_perf_sessions", nil)
		return p0 > 0 && p1 > 0 && up == 1 && n == 2
	})
	if !live {
		t.Error("no scrape during the test showed its two sessions, with two paths up and receiving")
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("perf client still running after 30s")
	}
	if r.code != 0 {
		t.Fatalf("perf client: exit %d: %s", r.code, r.err)
	}
	var rep perf.IperfReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil || rep.End.SumReceived == nil {
		t.Fatalf("perf client output: %v: %s", err, r.out)
	}
	// The server books the test once its result is sent.
	var fams map[string]*dto.MetricFamily
	testwait.Until(5*time.Second, func() bool {
		fams = scrapeMetrics(t, murl)
		n, _ := metricstest.Value(fams, "braid_perf_tests_total", map[string]string{"mode": "bulk", "result": "ok"})
		return n == 1
	})
	if n, _ := metricstest.Value(fams, "braid_perf_tests_total", map[string]string{"mode": "bulk", "result": "ok"}); n != 1 {
		t.Errorf("braid_perf_tests_total{mode=bulk,result=ok} = %v, want 1", n)
	}
	if got, _ := metricstest.Value(fams, "braid_perf_payload_bytes_total", map[string]string{"direction": "received"}); got != float64(rep.End.SumReceived.Bytes) {
		t.Errorf("braid_perf_payload_bytes_total{direction=received} = %v, want the test's %d bytes", got, rep.End.SumReceived.Bytes)
	}

	code, body := httpGet(t, "http://127.0.0.1:"+strconv.Itoa(pport)+"/debug/pprof/heap?debug=1")
	if code != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Errorf("pprof heap: %d %.200s", code, body)
	}
}

// TestObsFlagErrors: bad values of the observability flags are usage
// errors that name the flag.
func TestObsFlagErrors(t *testing.T) {
	t.Setenv("BRAID_KEY", testKey)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"server", "--data", t.TempDir(), "--log-format", "xml"}, 2, `"xml": want text or json`},
		{[]string{"worker", "--server", "http://127.0.0.1:1", "--log-level", "loud"}, 2, `want debug, info, warn or error`},
		{[]string{"perf", "-c", "127.0.0.1:1", "--metrics", ":0"}, 2, "--metrics goes with -s"},
		{[]string{"perf", "-s", "--listen", "127.0.0.1:0", "--pprof", busy.Addr().String()}, 1, "pprof: listen on " + busy.Addr().String()},
	} {
		code, _, stderr := runCmd(t, 20*time.Second, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.msg) {
			t.Errorf("braid %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.msg)
		}
	}
}

// TestServerWorkerObsFlags runs braid server and braid worker with
// --metrics and --log-format json: both endpoints serve what the
// commands do, and every log line is a JSON object.
func TestServerWorkerObsFlags(t *testing.T) {
	t.Setenv("BRAID_KEY", testKey)
	sport, wport := freePort(t), freePort(t)
	srv := startBraid(t, "server", "--listen", "127.0.0.1:0", "--data", t.TempDir(),
		"--metrics", strconv.Itoa(sport), "--log-format", "json")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+)`))
	wk := startBraid(t, "worker", "--server", url, "--threads", "3", "--module-dir", t.TempDir(),
		"--metrics", "127.0.0.1:"+strconv.Itoa(wport), "--log-format", "json", "--log-level", "debug")
	wk.waitOutput(t, regexp.MustCompile(`(lending) 3 threads`))

	var live, threads, sessions float64
	testwait.Until(10*time.Second, func() bool {
		sf := scrapeMetrics(t, "http://127.0.0.1:"+strconv.Itoa(sport)+"/metrics")
		wf := scrapeMetrics(t, "http://127.0.0.1:"+strconv.Itoa(wport)+"/metrics")
		live, _ = metricstest.Value(sf, "braid_workers", map[string]string{"state": "live"})
		threads, _ = metricstest.Value(wf, "braid_threads", nil)
		sessions, _ = metricstest.Value(wf, "braid_sessions", nil)
		return live == 1 && sessions == 1
	})
	if live != 1 || threads != 3 || sessions != 1 {
		t.Errorf("server: %v live workers, want 1; worker: %v threads, %v sessions, want 3 and 1", live, threads, sessions)
	}
	for name, p := range map[string]*braidProc{"server": srv, "worker": wk} {
		lines := strings.Split(strings.TrimSpace(p.err.String()), "\n")
		for _, l := range lines {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil || v["msg"] == nil {
				t.Errorf("%s log line is not a JSON object with msg: %q", name, l)
			}
		}
		if !strings.Contains(p.err.String(), `"msg":"serving metrics"`) {
			t.Errorf("%s did not log where its metrics are: %s", name, p.err.String())
		}
	}
}
