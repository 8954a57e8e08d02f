package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// JobState is where a job is in its life.
type JobState string

// Job states. Queued and Running are unfinished; the others are final.
const (
	JobQueued   JobState = "queued"
	JobRunning  JobState = "running"
	JobDone     JobState = "done"
	JobFailed   JobState = "failed"
	JobCanceled JobState = "canceled"
)

// Final reports whether s is a state a job never leaves.
func (s JobState) Final() bool {
	return s == JobDone || s == JobFailed || s == JobCanceled
}

// Valid reports whether s is one of the defined states.
func (s JobState) Valid() bool {
	switch s {
	case JobQueued, JobRunning, JobDone, JobFailed, JobCanceled:
		return true
	}
	return false
}

// Scheduling policies a job may ask for. The empty string means
// PolicyDynamic.
const (
	// PolicyEqual splits the units evenly among the live workers up front.
	PolicyEqual = "equal"
	// PolicyProportional splits the units up front in proportion to the
	// threads each worker lends.
	PolicyProportional = "proportional"
	// PolicyDynamic keeps a few units in flight on every stream and sends
	// the next one as a result comes back.
	PolicyDynamic = "dynamic"
)

// JobRequest submits a job (POST /v1/jobs): apply Op to the blob Input.
type JobRequest struct {
	// Op names the operation, e.g. "blur"; GET /v1/ops lists them.
	Op string `json:"op"`
	// Input is the ID of an uploaded blob or dataset, or job:ID.
	Input string `json:"input,omitempty"`
	// Inputs, instead of Input, join several inputs (fan-in): blob IDs
	// and job:ID (in a pipeline also step:NAME), at most MaxInputs. The
	// operation reads them concatenated in this order; a module also
	// finds each as a file of its own (see docs/ops.md). A dataset cannot
	// be joined.
	Inputs []string `json:"inputs,omitempty"`
	// Params are the operation's parameters, e.g. {"radius": "5"}.
	Params map[string]string `json:"params,omitempty"`
	// Units asks for this many computation units; 0 lets the operation
	// choose. Mutually exclusive with Tile.
	Units int `json:"units,omitempty"`
	// Tile splits an image into tiles of this size; the zero Tile means
	// no tiling. Only image operations accept it.
	Tile Tile `json:"tile,omitzero"`
	// Repeat processes the whole job this many times as independent
	// units (0 and 1 mean once). All copies must agree; the output is one
	// of them.
	Repeat int `json:"repeat,omitempty"`
	// Policy is PolicyEqual, PolicyProportional or PolicyDynamic (the
	// default when empty).
	Policy string `json:"policy,omitempty"`
	// InFlight is how many units a stream may hold at once; 0 means the
	// server's default.
	InFlight int `json:"in_flight,omitempty"`
	// Split cuts the input into units: "whole", "bytes:SIZE",
	// "lines:SIZE" or "tiles:WxH[+HALO]". Empty means the operation's
	// default. Not together with Units or Tile.
	Split string `json:"split,omitempty"`
	// Merge turns the units' outputs into the job's: "concat", "tiles"
	// or "reduce:OP". Empty means the operation's default.
	Merge string `json:"merge,omitempty"`
	// UnitMem, UnitTimeout and UnitOutput limit each unit of a module:
	// linear memory in bytes, run time ("30s") and output bytes. Zero
	// and empty mean the server's defaults.
	UnitMem     int64  `json:"unit_mem,omitempty"`
	UnitTimeout string `json:"unit_timeout,omitempty"`
	UnitOutput  int64  `json:"unit_output,omitempty"`
	// MaxTries is how many times a unit may fail before the job fails;
	// 0 means the server's default (3).
	MaxTries int `json:"max_tries,omitempty"`
}

// MaxInputs bounds JobRequest.Inputs.
const MaxInputs = 64

// InputList returns the request's inputs: Inputs, or Input alone.
func (r JobRequest) InputList() []string {
	if len(r.Inputs) > 0 || r.Input == "" {
		return r.Inputs
	}
	return []string{r.Input}
}

// InputJobPrefix makes JobRequest.Input name another job, whose output
// is the input: "job:42". The job waits for that one to finish.
const InputJobPrefix = "job:"

// UnitCounts counts a job's computation units by state.
type UnitCounts struct {
	Total   int `json:"total"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Running int `json:"running"`
	// Computing counts the units executing on a worker now, as of the
	// workers' last heartbeats (at most a heartbeat interval old): the
	// units of Running that are not waiting in a worker's queue.
	Computing int `json:"computing"`
	// Retries counts the failed tries of units that then ran again.
	Retries int `json:"retries"`
	// Retried counts the units with a try that brought no result: it
	// failed, or its copy was lost with its stream, path or worker.
	// JobStatus.RetriedUnits lists the first of them.
	Retried int `json:"retried,omitempty"`
}

// UnitTries are the tries of one unit that brought no result.
type UnitTries struct {
	Unit uint64 `json:"unit"`
	// Failed counts the tries whose operation failed (or that the
	// server could not prepare or record); Lost the copies that went
	// away with their stream, path or worker.
	Failed int `json:"failed"`
	Lost   int `json:"lost"`
	// Error says what the last of them was.
	Error string `json:"error,omitempty"`
}

// Timings records when a job moved and how much compute it used.
type Timings struct {
	// Submitted is when the server accepted the job.
	Submitted time.Time `json:"submitted"`
	// Started is when the first unit was sent; zero until then.
	Started time.Time `json:"started,omitzero"`
	// Finished is when the job reached a final state; zero until then.
	Finished time.Time `json:"finished,omitzero"`
	// ComputeNanos sums the compute time the workers reported for the
	// units that counted.
	ComputeNanos int64 `json:"compute_ns"`
}

// JobStatus is the server's view of one job: the answer to a submission
// and to GET /v1/jobs/{id}.
type JobStatus struct {
	Job uint64 `json:"job"`
	Op  string `json:"op"`
	// Input is the ID of the input blob: the sha256 of its bytes, which
	// the server checks as it reads them.
	Input  string            `json:"input"`
	Params map[string]string `json:"params,omitempty"`
	Policy string            `json:"policy"`
	State  JobState          `json:"state"`
	// Output is the ID of the result blob once State is JobDone: the
	// sha256 of its bytes.
	Output string `json:"output,omitempty"`
	// OutputExpires is when the server will remove the output (braid
	// server --retain); zero if it keeps it until it is deleted.
	OutputExpires time.Time `json:"output_expires,omitzero"`
	// OutputExpired is when the server removed the output after its
	// retention period; fetching it then answers 410 Gone.
	OutputExpired time.Time  `json:"output_expired,omitzero"`
	Units         UnitCounts `json:"units"`
	// RetriedUnits lists, by unit ID, the first 100 units with a try
	// that brought no result (Units.Retried counts them all). Only GET
	// /v1/jobs/{id} fills it.
	RetriedUnits []UnitTries `json:"retried_units,omitempty"`
	// Error says why a job failed or was canceled, naming the unit; while
	// it runs, why it is blocked or why a unit's last try failed.
	Error   string  `json:"error,omitempty"`
	Timings Timings `json:"timings"`
	// Module is the sha256 of the module a user operation's job runs,
	// the version it was submitted with.
	Module string `json:"module,omitempty"`
	// Split and Merge are what the job asked for (empty: the
	// operation's own).
	Split string `json:"split,omitempty"`
	Merge string `json:"merge,omitempty"`
	// InputJob is the job whose output is the input; Input is empty
	// until it is done.
	InputJob uint64 `json:"input_job,omitempty"`
	// Inputs are the inputs of a fan-in job, as submitted (step:NAME
	// as job:ID); Input is the blob of their concatenation once they
	// are all there.
	Inputs []string `json:"inputs,omitempty"`
	// Pipeline and Step place the job in a pipeline.
	Pipeline uint64 `json:"pipeline,omitempty"`
	Step     string `json:"step,omitempty"`
}

// JobList is the answer to GET /v1/jobs.
type JobList struct {
	Jobs []JobStatus `json:"jobs"`
}

// Tile is a tile size in pixels. In JSON and on the command line it is
// written WxH, e.g. "256x256". The zero Tile means "no tiling".
type Tile struct {
	W, H int
}

// ParseTile parses "WxH" (or a single number N for NxN). Both sides must be
// at least 1.
func ParseTile(s string) (Tile, error) {
	ws, hs, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	if !ok {
		hs = ws
	}
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if err1 != nil || err2 != nil {
		return Tile{}, fmt.Errorf("tile %q: want WIDTHxHEIGHT in pixels, e.g. 256x256", s)
	}
	if w < 1 || h < 1 {
		return Tile{}, fmt.Errorf("tile %q: width and height must be at least 1 pixel", s)
	}
	return Tile{W: w, H: h}, nil
}

// IsZero reports whether t is the zero Tile (no tiling).
func (t Tile) IsZero() bool { return t == Tile{} }

// String returns "WxH".
func (t Tile) String() string { return strconv.Itoa(t.W) + "x" + strconv.Itoa(t.H) }

// MarshalText implements encoding.TextMarshaler.
func (t Tile) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseTile, so a
// zero or negative size in a request is rejected when it is decoded.
func (t *Tile) UnmarshalText(b []byte) error {
	v, err := ParseTile(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Set implements flag.Value.
func (t *Tile) Set(s string) error { return t.UnmarshalText([]byte(s)) }

// PipelineRequest submits a pipeline (POST /v1/pipelines): a DAG of
// steps, each a job whose input is a blob, another step's output or an
// earlier job's output.
type PipelineRequest struct {
	// Name labels the pipeline in listings. Optional.
	Name  string         `json:"name,omitempty"`
	Steps []PipelineStep `json:"steps"`
}

// PipelineStep is one job of a pipeline: a JobRequest whose Input may
// also be "step:NAME", the output of the step so named.
type PipelineStep struct {
	// Name is unique within the pipeline: letters, digits, '-', '_'.
	Name string `json:"name"`
	JobRequest
}

// InputStepPrefix makes a pipeline step's input another step's output:
// "step:count".
const InputStepPrefix = "step:"

// PipelineStatus is the server's view of a pipeline: the answer to a
// submission and to GET /v1/pipelines/{id}.
type PipelineStatus struct {
	Pipeline uint64 `json:"pipeline"`
	Name     string `json:"name,omitempty"`
	// State is done when every step is done, failed or canceled when a
	// step is (the steps after it fail too), else running or queued.
	State JobState `json:"state"`
	// Steps are the steps' jobs, in the order they were given.
	Steps []JobStatus `json:"steps"`
}

// UnitSpan is one try of a unit on a worker, as the server saw it: the
// unit went out on stream Stream of the worker (one stream per thread
// the worker lends) at Sent, and its result came back at Received after
// ComputeNanos of computation.
type UnitSpan struct {
	Unit    uint64 `json:"unit"`
	Attempt uint32 `json:"attempt"`
	Worker  string `json:"worker"`
	Stream  int    `json:"stream"`
	// Sent and Received are the server's clock.
	Sent         time.Time `json:"sent"`
	Received     time.Time `json:"received"`
	ComputeNanos int64     `json:"compute_ns"`
	// Thread is the worker's thread that ran the try, numbered from 0 in
	// the worker's session with this server; Started and Ended are when
	// the operation ran, as the worker measured it, placed on the
	// server's clock (see Timing for how). Each try keeps its exact
	// place relative to the other tries of the session: two tries of one
	// thread never overlap. PlaceErrNanos bounds how far the session's
	// tries as a whole may be off the server's clock (half the shortest
	// round trip seen). Thread is -1 and Started and Ended are absent
	// when the worker did not report its timing (an older worker).
	Thread        int       `json:"thread"`
	Started       time.Time `json:"started,omitzero"`
	Ended         time.Time `json:"ended,omitzero"`
	PlaceErrNanos int64     `json:"place_err_ns,omitempty"`
	// Error is the operation's error if the try failed.
	Error string `json:"error,omitempty"`
}

// UnitTimeline is the answer to GET /v1/jobs/{id}/units: the tries of a
// job's units that brought a result back, in the order they arrived.
type UnitTimeline struct {
	Job uint64 `json:"job"`
	// Kept is false when the server holds no tries of the job: it keeps
	// those of its most recent jobs in memory, and stores a job's when
	// it ends, but not those of jobs that ended on a server before
	// version 6 of the store's schema, nor of removed jobs. Units is then
	// empty. Of a job's tries the first 65,536 are kept.
	Kept  bool       `json:"kept"`
	Units []UnitSpan `json:"units"`
}
