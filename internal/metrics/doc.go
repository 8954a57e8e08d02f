// Package metrics holds what braid's server, worker and perf server share
// to expose Prometheus metrics and profiles: a registry with the Go
// runtime's and the process's collectors, its HTTP handler, a collector
// of the per-path statistics of transport sessions, and the separate
// listeners of --metrics and --pprof.
//
// Names follow the Prometheus conventions: every metric starts with
// braid_, counters end in _total, and quantities are in base units
// (_seconds, _bytes). The metrics are listed in docs/observability.md.
package metrics
