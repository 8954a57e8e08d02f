package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braid-hpc/braid/transport"
)

// Session is the per-path statistics of one live transport session and
// the peer it is with: a worker's ID on the server, the session's ID on
// a worker or a perf server.
type Session struct {
	Peer  string
	Paths []transport.PathStats
}

// pathLabels label every path series: the peer, the path's ID in its
// session and its two ends.
var pathLabels = []string{"peer", "path", "local", "remote"}

func pathDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("braid_path_"+name, help, pathLabels, nil)
}

var (
	pathUp          = pathDesc("up", "Whether the path is up (1) or down (0).")
	pathSent        = pathDesc("sent_bytes_total", "Bytes sent on the path, frame headers included.")
	pathReceived    = pathDesc("received_bytes_total", "Bytes received on the path, frame headers included.")
	pathFramesSent  = pathDesc("sent_frames_total", "Frames sent on the path.")
	pathFramesRecv  = pathDesc("received_frames_total", "Frames received on the path.")
	pathRTT         = pathDesc("rtt_seconds", "The path's smoothed round-trip time.")
	pathRetransmit  = pathDesc("retransmitted_bytes_total", "Bytes sent again on other paths after this path failed.")
	pathDuplicated  = pathDesc("duplicated_bytes_total", "Bytes this idle path sent again on behalf of a slower one.")
	pathDupReceived = pathDesc("duplicate_received_bytes_total", "Payload bytes received that had already arrived, and were dropped.")
	pathFailovers   = pathDesc("failovers_total", "Times the path failed and its traffic moved to the other paths.")
	pathReconnects  = pathDesc("reconnects_total", "Times the path's channel was opened again after a failure.")
	pathIntegrity   = pathDesc("integrity_failures_total", "Channels of the path dropped because received bytes failed authentication.")
)

// PathCollector collects the per-path statistics of the sessions that
// sessions returns, at each scrape. Series of a session disappear with
// it; the counters of a path restart at 0 in a new session.
type PathCollector struct {
	sessions func() []Session
}

// NewPathCollector returns a collector of the paths of sessions().
func NewPathCollector(sessions func() []Session) *PathCollector {
	return &PathCollector{sessions: sessions}
}

// Describe implements prometheus.Collector.
func (c *PathCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pathUp, pathSent, pathReceived, pathFramesSent, pathFramesRecv, pathRTT,
		pathRetransmit, pathDuplicated, pathDupReceived, pathFailovers, pathReconnects, pathIntegrity} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PathCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sessions() {
		for _, p := range s.Paths {
			lv := []string{s.Peer, strconv.Itoa(p.ID), p.Local, p.Remote}
			up := 0.0
			if p.State == "up" {
				up = 1
			}
			gauge := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
			}
			counter := func(d *prometheus.Desc, v int64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
			}
			gauge(pathUp, up)
			gauge(pathRTT, p.RTT.Seconds())
			counter(pathSent, p.BytesSent)
			counter(pathReceived, p.BytesReceived)
			counter(pathFramesSent, p.FramesSent)
			counter(pathFramesRecv, p.FramesRecv)
			counter(pathRetransmit, p.Retransmitted)
			counter(pathDuplicated, p.Duplicated)
			counter(pathDupReceived, p.DupReceived)
			counter(pathFailovers, p.Failovers)
			counter(pathReconnects, p.Reconnects)
			counter(pathIntegrity, p.Integrity)
		}
	}
}
