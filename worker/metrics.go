package worker

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braid-hpc/braid/internal/metrics"
	"github.com/braid-hpc/braid/transport"
)

// newRegistry returns the worker's Prometheus metrics, read from its
// counters and its live sessions at each scrape. docs/observability.md
// lists them.
func (w *Worker) newRegistry() *prometheus.Registry {
	reg := metrics.NewRegistry()
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		counter("braid_units_run_total", "Units the worker ran, failed ones included.", func() float64 { return float64(w.units.Load()) }),
		counter("braid_units_failed_total", "Units whose operation failed, or that the worker could not run.", func() float64 { return float64(w.failed.Load()) }),
		counter("braid_compute_seconds_total", "Time the worker's operations ran.", func() float64 { return float64(w.computeN.Load()) / 1e9 }),
		gauge("braid_running_units", "Units computing now.", func() float64 { return float64(w.running.Load()) }),
		gauge("braid_threads", "Threads the worker lends: units it runs at once.", func() float64 {
			w.mu.Lock()
			defer w.mu.Unlock()
			return float64(w.threads)
		}),
		gauge("braid_sessions", "Data-plane sessions open with servers.", func() float64 { return float64(w.sessions.Load()) }),
		gauge("braid_streams", "Data-plane streams open with servers: one per thread lent to each.", func() float64 { return float64(w.streams.Load()) }),
		metrics.NewPathCollector(w.pathStats),
	)
	return reg
}

// MetricsHandler serves the worker's Prometheus metrics, without
// authentication (braid worker --metrics serves it on an address of its
// own).
func (w *Worker) MetricsHandler() http.Handler { return metrics.Handler(w.reg, w.log) }

// pathStats returns the paths of the live sessions, each named by its
// session's ID.
func (w *Worker) pathStats() []metrics.Session {
	w.liveMu.Lock()
	defer w.liveMu.Unlock()
	out := make([]metrics.Session, 0, len(w.live))
	for s := range w.live {
		out = append(out, metrics.Session{Peer: s.ID()[:8], Paths: s.Stats()})
	}
	return out
}

func (w *Worker) track(s *transport.Session, open bool) {
	w.liveMu.Lock()
	defer w.liveMu.Unlock()
	if open {
		w.live[s] = struct{}{}
	} else {
		delete(w.live, s)
	}
}
