package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/metrics"
	"github.com/braid-hpc/braid/store"
)

// serverMetrics are the server's Prometheus metrics: counters the server
// updates as things happen, and a collector that reads the current state
// at each scrape. docs/observability.md lists them.
type serverMetrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	requests       *prometheus.HistogramVec
	jobsSubmitted  prometheus.Counter
	jobsFinished   *prometheus.CounterVec
	unitsCompleted prometheus.Counter
	unitFailures   prometheus.Counter
	unitsPreempted prometheus.Counter
	workerUnits    *prometheus.CounterVec
	workerCompute  *prometheus.CounterVec
	workerResults  *prometheus.CounterVec
	heartbeats     *prometheus.CounterVec
}

func newServerMetrics(s *Server) *serverMetrics {
	m := &serverMetrics{
		reg: metrics.NewRegistry(),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "braid_http_request_duration_seconds",
			Help: "Time the control API took to answer, by route pattern, method and status code.",
			// From 1ms (a health check) to 30s (a long poll, a large blob).
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method", "code"}),
		jobsSubmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_jobs_submitted_total", Help: "Jobs the server accepted since it started."}),
		jobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_jobs_finished_total", Help: "Jobs that reached a final state since the server started, by state."},
			[]string{"state"}),
		unitsCompleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_units_completed_total", Help: "Units whose result counted for their job, since the server started."}),
		unitFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_unit_tries_failed_total", Help: "Tries of units that failed on a worker or could not be sent; the unit ran again or its job failed."}),
		unitsPreempted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "braid_units_preempted_total", Help: "Copies of units taken back from a worker thread to give it to another tenant's unit (their units ran again later), since the server started."}),
		workerUnits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_worker_units_completed_total", Help: "Units whose result counted, by the worker that computed them."},
			[]string{"worker"}),
		workerCompute: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_worker_compute_seconds_total", Help: "Compute time the workers reported for the units that counted, by worker."},
			[]string{"worker"}),
		workerResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_worker_result_bytes_total", Help: "Bytes of the results that came back, by worker."},
			[]string{"worker"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "braid_heartbeats_total", Help: "Workers' heartbeats received, by how they came: asked for on the data-plane session (data_plane) or sent over the control API (http)."},
			[]string{"via"}),
	}
	for _, st := range []store.JobState{store.JobDone, store.JobFailed, store.JobCanceled} {
		m.jobsFinished.WithLabelValues(string(st)) // present at 0 from the start
	}
	m.reg.MustRegister(m.requests, m.jobsSubmitted, m.jobsFinished, m.unitsCompleted, m.unitFailures, m.unitsPreempted,
		m.workerUnits, m.workerCompute, m.workerResults, m.heartbeats, &stateCollector{s: s},
		metrics.NewPathCollector(s.pathStats))
	for _, via := range []string{beatDataPlane, beatHTTP} {
		m.heartbeats.WithLabelValues(via)
	}
	m.handler = metrics.Handler(m.reg, s.log)
	return m
}

// instrument times the answers of the route pattern.
func (m *serverMetrics) instrument(pattern string, h http.Handler) http.Handler {
	return promhttp.InstrumentHandlerDuration(m.requests.MustCurryWith(prometheus.Labels{"route": pattern}), h)
}

// result books a result that came back from worker; counted says it
// was the one that counted for its unit.
func (m *serverMetrics) result(worker string, res *api.Result, counted bool) {
	m.workerResults.WithLabelValues(worker).Add(float64(len(res.Output)))
	if counted {
		m.unitsCompleted.Inc()
		m.workerUnits.WithLabelValues(worker).Inc()
		m.workerCompute.WithLabelValues(worker).Add(time.Duration(res.ComputeNanos).Seconds())
	}
}

// MetricsHandler serves the server's Prometheus metrics without
// authentication, for a listener of its own (braid server --metrics).
// The control API serves them at /metrics to the roles that may see
// them.
func (s *Server) MetricsHandler() http.Handler { return s.metrics.handler }

func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request) error {
	s.MetricsHandler().ServeHTTP(w, r)
	return nil
}

// pathStats returns the paths of the sessions to live workers.
func (s *Server) pathStats() []metrics.Session {
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	out := make([]metrics.Session, 0, len(peers))
	for _, p := range peers {
		out = append(out, metrics.Session{Peer: p.id, Paths: p.sess.Stats()})
	}
	return out
}

var (
	descJobs         = prometheus.NewDesc("braid_jobs", "Jobs the server holds, by state.", []string{"state"}, nil)
	descUnits        = prometheus.NewDesc("braid_units", "Units of the unfinished jobs, by state: pending (waiting for a worker's stream), running (out on a worker) or done.", []string{"state"}, nil)
	descQueued       = prometheus.NewDesc("braid_queued_units", "Units of unfinished jobs waiting to be sent to a worker: the scheduler's queue depth.", nil, nil)
	descWorkers      = prometheus.NewDesc("braid_workers", "Workers registered with the server, by whether they are live.", []string{"state"}, nil)
	descWorkerUp     = prometheus.NewDesc("braid_worker_up", "Whether a registered worker is live (1) or not (0).", []string{"worker", "name"}, nil)
	descThreads      = prometheus.NewDesc("braid_worker_threads", "Threads a worker lends: units it runs at once.", []string{"worker"}, nil)
	descRunning      = prometheus.NewDesc("braid_worker_running_units", "Units computing on a worker, as of its last heartbeat.", []string{"worker"}, nil)
	descWorkerQueued = prometheus.NewDesc("braid_worker_queued_units", "Units waiting for a thread on a worker, as of its last heartbeat.", []string{"worker"}, nil)
	descLoad         = prometheus.NewDesc("braid_worker_load", "A worker's one-minute load average, as of its last heartbeat.", []string{"worker"}, nil)
	descStore        = prometheus.NewDesc("braid_store_bytes", "Bytes of the blobs stored in the data directory.", nil, nil)
	descUploading    = prometheus.NewDesc("braid_store_uploading_bytes", "Bytes of uploads in progress.", nil, nil)
	descStoreLimit   = prometheus.NewDesc("braid_store_limit_bytes", "The data limit (braid server --max-data); 0 means none.", nil, nil)
)

// stateCollector reads the server's state at each scrape.
type stateCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descUnits, descQueued, descWorkers, descWorkerUp, descThreads,
		descRunning, descWorkerQueued, descLoad, descStore, descUploading, descStoreLimit} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	if counts, err := s.db.JobCounts(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(descJobs, err)
	} else {
		// Ends not yet in the store count in the state they reached.
		for id, st := range s.lc.UnsavedEnds() {
			if j, err := s.db.Job(ctx, id); err == nil && !j.State.Final() {
				counts[j.State]--
				counts[st]++
			}
		}
		for _, st := range []store.JobState{store.JobQueued, store.JobRunning, store.JobDone, store.JobFailed, store.JobCanceled} {
			gauge(descJobs, float64(max(counts[st], 0)), string(st))
		}
	}

	var pending, running, done int
	for _, j := range s.lc.Jobs() {
		d, n, _, _ := j.Counts()
		done += d
		running += n
		pending += max(len(j.Units)-d-n, 0)
	}
	gauge(descUnits, float64(pending), "pending")
	gauge(descUnits, float64(running), "running")
	gauge(descUnits, float64(done), "done")
	gauge(descQueued, float64(pending))

	if ws, err := s.db.Workers(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(descWorkers, err)
	} else {
		live := 0
		for _, w := range ws {
			s.mu.Lock()
			_, alive := s.peers[w.ID]
			s.mu.Unlock()
			up := 0.0
			if alive {
				up = 1
				live++
			} else {
				w.Running, w.Queued = 0, 0 // taken back when it died
			}
			gauge(descWorkerUp, up, w.ID, w.Name)
			gauge(descThreads, float64(w.Threads), w.ID)
			gauge(descRunning, float64(w.Running), w.ID)
			gauge(descWorkerQueued, float64(w.Queued), w.ID)
			gauge(descLoad, w.Load, w.ID)
		}
		gauge(descWorkers, float64(live), "live")
		gauge(descWorkers, float64(len(ws)-live), "dead")
	}
	gauge(descStore, float64(s.blobs.Used()))
	gauge(descUploading, float64(s.uploading.Load()))
	gauge(descStoreLimit, float64(s.cfg.MaxData))
}
