package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/worker"
)

// TestJSONLogs runs a job with the server and the worker logging JSON at
// debug level (braid server --log-format json -v) and parses every line:
// each is one JSON object, and the lines about the job and its units
// carry the job's and the unit's IDs as attributes.
func TestJSONLogs(t *testing.T) {
	var srvLog, wkLog lockedBuffer
	jsonLog := func(b *lockedBuffer) *slog.Logger {
		return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c := newCluster(t, func(cfg *server.Config) { cfg.Logger = jsonLog(&srvLog) })
	c.addWorker(2, func(cfg *worker.Config) { cfg.Logger = jsonLog(&wkLog) })
	c.waitWorkers(1)
	data := bytes.Repeat([]byte("braid logs "), 30_000)
	st := c.run(api.JobRequest{Op: "checksum", Input: c.put(data), Params: map[string]string{"block": "4096"}, Units: 5})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	c.stopServer() // every line is written

	type line = map[string]any
	parse := func(name string, b []byte) []line {
		var out []line
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("%s log line is not JSON: %v: %s", name, err, sc.Bytes())
				continue
			}
			for _, k := range []string{"time", "level", "msg"} {
				if _, ok := l[k]; !ok {
					t.Errorf("%s log line without %q: %s", name, k, sc.Bytes())
				}
			}
			out = append(out, l)
		}
		return out
	}
	job := float64(st.Job)
	units := func(name string, lines []line, msgs ...string) {
		t.Helper()
		seen := map[float64]bool{}
		for _, l := range lines {
			msg, _ := l["msg"].(string)
			concerns := strings.Contains(msg, "unit") || strings.Contains(msg, "job")
			if !concerns {
				continue
			}
			// Every line about a job or a unit names the job.
			if l["job"] != job {
				t.Errorf("%s: %q has job %v, want %v: %v", name, msg, l["job"], job, l)
			}
			if strings.HasPrefix(msg, "unit ") || strings.HasPrefix(msg, "result ") {
				u, ok := l["unit"].(float64)
				if !ok || u < 0 || u >= float64(st.Units.Total) {
					t.Errorf("%s: %q has unit %v, want 0 to %d", name, msg, l["unit"], st.Units.Total-1)
				}
				seen[u] = true
			}
		}
		if len(seen) != st.Units.Total {
			t.Errorf("%s: lines name %d distinct units, want every one of the %d", name, len(seen), st.Units.Total)
		}
	}
	sl := parse("server", []byte(srvLog.String()))
	units("server", sl)
	var accepted, done bool
	for _, l := range sl {
		switch l["msg"] {
		case "job accepted":
			accepted = l["job"] == job && l["units"] == float64(st.Units.Total)
		case "job done":
			done = l["job"] == job && l["blob"] == st.Output
		}
	}
	if !accepted || !done {
		t.Errorf("server log: job accepted with its units %v, job done with its output %v", accepted, done)
	}
	units("worker", parse("worker", []byte(wkLog.String())))
}
