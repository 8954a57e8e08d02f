package api

import "time"

// Register is what a worker tells the server about itself, at start
// (POST /v1/workers) and whenever it changes (PUT /v1/workers/{id}).
type Register struct {
	// Name is a label for logs and listings, e.g. the host name. Optional.
	Name string `json:"name,omitempty"`
	// Addresses are the data-plane addresses (host:port) the server dials
	// to open streams to this worker, one per network path.
	Addresses []string `json:"addresses"`
	// Cores is the number of CPU cores of the host.
	Cores int `json:"cores"`
	// Memory is the host's RAM in bytes.
	Memory int64 `json:"memory"`
	// Disk is the free disk space in bytes.
	Disk int64 `json:"disk"`
	// CPUMHz is the processor frequency in MHz.
	CPUMHz int `json:"cpu_mhz"`
	// Threads is how many processing threads the worker lends; the server
	// opens at most this many streams to it.
	Threads int `json:"threads"`
	// MaxUnitMem is the most memory a unit of a user operation may ask
	// for on this worker (braid worker --max-unit-mem); a unit asking
	// more fails there. 0 means unknown (an older worker).
	MaxUnitMem int64 `json:"max_unit_mem,omitempty"`
	// ParamCache says the worker decodes units of encoding version 2,
	// whose long parameter values travel once per stream (ParamCache);
	// the server sends an older worker version 1, every value whole.
	ParamCache bool `json:"param_cache,omitempty"`
	// Preempt says the worker stops a copy when the server sends
	// OpPreempt for it. The server takes no thread back from an older
	// worker, which would run the copy to its end while the scheduler
	// counted its thread as free (and another tenant's unit queued
	// behind it).
	Preempt bool `json:"preempt,omitempty"`
	// Ops lists the operations the worker can run. A unit is only sent to
	// a worker whose Ops contains the unit's operation.
	Ops []string `json:"ops"`
}

// Registration is the server's answer to Register.
type Registration struct {
	// Worker is the identifier the worker uses in heartbeats and updates.
	Worker string `json:"worker"`
	// HeartbeatMillis is how often the server wants a heartbeat.
	HeartbeatMillis int64 `json:"heartbeat_ms"`
	// TimeoutMillis is how long the server waits without a heartbeat
	// before it declares the worker dead and runs its units elsewhere.
	TimeoutMillis int64 `json:"timeout_ms"`
}

// Heartbeat is a worker's periodic sign of life with its current load
// (POST /v1/workers/{id}/heartbeat). A 404 answer means the server does
// not know the worker (it was declared dead, or the server lost it):
// register again.
type Heartbeat struct {
	// Running is the number of units the worker is executing.
	Running int `json:"running"`
	// Queued is the number of units received but not yet started.
	Queued int `json:"queued"`
	// Load is the host's one-minute load average.
	Load float64 `json:"load"`
	// Jobs counts the units executing now by job ID, for the units a
	// job has computing (UnitCounts.Computing); omitted when none is.
	// Older workers send none.
	Jobs map[uint64]int `json:"jobs,omitempty"`
}

// WorkerInfo is the server's view of one worker.
type WorkerInfo struct {
	ID string `json:"id"`
	Register
	// Registered is when the worker first registered.
	Registered time.Time `json:"registered"`
	// LastSeen is the time of the last registration or heartbeat.
	LastSeen time.Time `json:"last_seen"`
	// Alive is false once the worker was declared dead: silent past the
	// timeout, its data-plane session lost, or its process gone.
	Alive bool `json:"alive"`
	// Died is when this server declared the worker dead, and DiedOf
	// why; both are empty while it is live, and for a worker that was
	// not live when the server started.
	Died   time.Time `json:"died,omitzero"`
	DiedOf string    `json:"died_of,omitempty"`
	// Running, Queued and Load are from the last heartbeat of a live
	// worker. A dead worker's Running and Queued are 0: the server took
	// its units back and runs them elsewhere.
	Running int     `json:"running"`
	Queued  int     `json:"queued"`
	Load    float64 `json:"load"`
	// Done counts the units whose results this worker delivered first.
	Done uint64 `json:"done"`
	// ComputeNanos and LentNanos measure the worker's last session with
	// this server (up to its death, for a dead worker): the compute time
	// its results report, and the thread time it lent while it had
	// units, its threads times the time it had any in flight.
	// ComputeNanos / LentNanos is the share of the lent time it spent
	// computing (its compute fraction); the rest went to waiting for units
	// and to moving them.
	ComputeNanos int64 `json:"compute_ns,omitempty"`
	LentNanos    int64 `json:"lent_ns,omitempty"`
	// Tries counts the unit tries whose compute time is in ComputeNanos:
	// every result the worker sent back in that session, whether it
	// counted (Done), came second (a backup copy that lost the race) or
	// failed, and tries stopped by a preemption. A worker with Done 0
	// and ComputeNanos > 0 computed copies whose results came second;
	// one with Tries 0 computed nothing and has ComputeNanos 0.
	Tries uint64 `json:"tries,omitempty"`
	// Paths are the paths of the server's data-plane session to the
	// worker, one per address, while the worker is live.
	Paths []PathInfo `json:"paths,omitempty"`
	// MaxBeatGapNanos is, for a live worker, the longest the server went
	// between two of its heartbeats (HTTP or data plane) since it became
	// live: compare it with the heartbeat interval, and with the worker
	// timeout after which a silent worker is declared dead. 0 before its
	// second heartbeat.
	MaxBeatGapNanos int64 `json:"max_beat_gap_ns,omitempty"`
}

// PathInfo is one path of the data-plane session between the server and
// a worker, as the server sees it.
type PathInfo struct {
	// Local and Remote are the path's endpoints (host:port); Remote is
	// one of the worker's addresses.
	Local  string `json:"local"`
	Remote string `json:"remote"`
	// State is "up" while the path carries traffic.
	State string `json:"state"`
	// BytesSent and BytesReceived count the bytes the server sent and
	// received on the path over the session's life: units out, results
	// back.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
	// RateBps is the path's measured send rate while it was busy, in
	// bit/s; RTTNanos its smoothed round-trip time.
	RateBps  float64 `json:"rate_bps"`
	RTTNanos int64   `json:"rtt_ns"`
	// MaxGapNanos is the longest the server waited between two frames
	// from the worker on this path, heartbeats included: a path goes
	// down when it reaches the data plane's path timeout (500 ms by
	// default). 0 when not known.
	MaxGapNanos int64 `json:"max_gap_ns,omitempty"`
}

// WorkerList is the answer to GET /v1/workers.
type WorkerList struct {
	Workers []WorkerInfo `json:"workers"`
}

// ComputeFraction is ComputeNanos / LentNanos; 0 before any unit.
func (w WorkerInfo) ComputeFraction() float64 {
	if w.LentNanos <= 0 {
		return 0
	}
	return float64(w.ComputeNanos) / float64(w.LentNanos)
}
