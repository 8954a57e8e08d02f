package perf

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braid-hpc/braid/internal/metrics"
	"github.com/braid-hpc/braid/transport"
)

// serverMetrics are the Prometheus metrics of braid perf -s (--metrics):
// the tests served and their payload, and the paths of the sessions of
// the tests running now.
type serverMetrics struct {
	reg   *prometheus.Registry
	tests *prometheus.CounterVec
	bytes *prometheus.CounterVec

	mu   sync.Mutex
	live map[*transport.Session]struct{}
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{
		reg: metrics.NewRegistry(),
		tests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_perf_tests_total", Help: "Tests served, by mode (bulk, bulk-reverse, pingpong; -tcp-baseline for the baseline) and result (ok or error)."},
			[]string{"mode", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_perf_payload_bytes_total", Help: "Payload bytes of the tests served, by direction as the server sees it (received, sent, echoed)."},
			[]string{"direction"}),
		live: map[*transport.Session]struct{}{},
	}
	for _, d := range []string{"received", "sent", "echoed"} {
		m.bytes.WithLabelValues(d)
	}
	m.reg.MustRegister(m.tests, m.bytes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "braid_perf_sessions", Help: "Sessions open now; a test has two, its control session and its data session."}, func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return float64(len(m.live))
		}),
		metrics.NewPathCollector(m.paths))
	return m
}

func (m *serverMetrics) handler() http.Handler { return metrics.Handler(m.reg, nil) }

func (m *serverMetrics) track(s *transport.Session, open bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if open {
		m.live[s] = struct{}{}
	} else {
		delete(m.live, s)
	}
}

func (m *serverMetrics) paths() []metrics.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]metrics.Session, 0, len(m.live))
	for s := range m.live {
		out = append(out, metrics.Session{Peer: s.ID()[:8], Paths: s.Stats()})
	}
	return out
}

// test books a test that ended.
func (m *serverMetrics) test(h *Hello, res *Result) {
	mode := h.Mode
	if h.Reverse {
		mode += "-reverse"
	}
	if h.Baseline {
		mode += "-tcp-baseline"
	}
	result := "ok"
	if res.Error != "" {
		result = "error"
	}
	m.tests.WithLabelValues(mode, result).Inc()
	dir := "received"
	switch {
	case h.Mode == "pingpong":
		dir = "echoed"
	case h.Reverse:
		dir = "sent"
	}
	m.bytes.WithLabelValues(dir).Add(float64(res.Bytes))
}
