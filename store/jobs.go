package store

import (
	"context"
	"time"
)

// JobState is where a job is in its life; the values match api.JobState.
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
func (s JobState) Final() bool { return s == JobDone || s == JobFailed || s == JobCanceled }

// UnitState is where a computation unit is.
type UnitState string

// Unit states. A unit goes pending → running → done, back to pending when
// its worker is lost, to failed when its operation fails, and to canceled
// when its job fails or is canceled before it is done.
const (
	UnitPending  UnitState = "pending"
	UnitRunning  UnitState = "running"
	UnitDone     UnitState = "done"
	UnitFailed   UnitState = "failed"
	UnitCanceled UnitState = "canceled"
)

// Job is a job's record.
type Job struct {
	// ID is assigned by CreateJob, from 1, never reused.
	ID uint64
	// Op, Input (a blob ID) and Params are what the client asked for.
	Op     string
	Input  string
	Params map[string]string
	// Units, TileW, TileH and Repeat are the split hint, kept so that the
	// job can be assembled after a restart.
	Units, TileW, TileH, Repeat int
	// Policy and InFlight are the scheduling the client asked for.
	Policy   string
	InFlight int
	State    JobState
	// Output is the result blob's ID once the job is done.
	Output string
	// Error says why the job failed or was canceled.
	Error string
	// Submitted, Started (first unit sent) and Finished (final state);
	// zero until they happen.
	Submitted, Started, Finished time.Time
	// Unit counts, maintained with every unit state change.
	Total, Done, Failed, Running int
	// ComputeNanos sums the compute time of the units that counted.
	ComputeNanos int64
	// Spec is what the job asked for beyond the fields above.
	Spec JobSpec
	// Retries counts the failed tries of units that were run again.
	Retries int
	// Expired is when the output was removed after the retention
	// period; zero while it is kept.
	Expired time.Time
	// Server names the server that owns the job while it is unfinished,
	// and Epoch is the epoch of that server's lease when it took the
	// job (leases.go): writes of the job's progress fenced by another
	// epoch fail. CreateJob stores both as given.
	Server string
	Epoch  uint64
	// Owner is who submitted the job (see Owner in owners.go); empty for
	// a job of the cluster key or of a schema without owners.
	Owner string
}

// JobSpec is the part of a job's request that only some jobs use: the
// module a user operation runs (kept to the end, whatever happens to the
// operation's name), an explicit split and merge, the limits of its
// units, how often a unit may fail, and the job whose output is the input.
type JobSpec struct {
	// Module is the sha256 of the WebAssembly module of a user operation.
	Module string `json:"module,omitempty"`
	// Split and Merge are the canonical forms of ops.Split and ops.Merge;
	// empty means the operation's own.
	Split string `json:"split,omitempty"`
	Merge string `json:"merge,omitempty"`
	// ReduceOp and ReduceModule name the operation of a reduce merge and,
	// for a user operation, its module.
	ReduceOp     string `json:"reduce_op,omitempty"`
	ReduceModule string `json:"reduce_module,omitempty"`
	// Limits of a module's units: memory and output bytes, time.
	UnitMem           int64 `json:"unit_mem,omitempty"`
	UnitOutput        int64 `json:"unit_output,omitempty"`
	UnitTimeoutMillis int64 `json:"unit_timeout_ms,omitempty"`
	// MaxTries is how often a unit may fail before the job fails.
	MaxTries int `json:"max_tries,omitempty"`
	// InputJob is the job whose output is this job's input; Input is
	// empty until that job is done.
	InputJob uint64 `json:"input_job,omitempty"`
	// Pipeline and Step place the job in a pipeline.
	Pipeline uint64 `json:"pipeline,omitempty"`
	Step     string `json:"step,omitempty"`
	// Inputs are the inputs of a fan-in job (blob IDs and job:ID), in
	// order, InputNames the names of the files a module finds them as,
	// and InputSizes their sizes once joined. Input is their
	// concatenation once they are all there; until then InputJob is one
	// of the jobs it waits for.
	Inputs     []string `json:"inputs,omitempty"`
	InputNames []string `json:"input_names,omitempty"`
	InputSizes []int64  `json:"input_sizes,omitempty"`
}

// Unit is a computation unit's record.
type Unit struct {
	// Job and ID identify the unit; IDs are the caller's (ops.Split's
	// indexes), unique within the job.
	Job, ID uint64
	// Params are the unit's parameters. CreateJob stores them once per job
	// when they equal the job's Params.
	Params map[string]string
	// Blob, Off and Len locate the unit's own data: bytes [Off, Off+Len)
	// of blob Blob. An empty Blob means no data.
	Blob     string
	Off, Len int64
	// Deps are the IDs of units whose results are this unit's further
	// inputs, in order.
	Deps []uint64
	// Reduce marks the unit that runs the job's reduce operation.
	Reduce bool
	State  UnitState
	// Worker is the last worker the unit was sent to, or the one whose
	// result counted.
	Worker string
	// Attempts counts how often the unit was sent.
	Attempts int
	// Result is the result blob's ID once the unit is done.
	Result string
	// Error is the operation's error once the unit failed.
	Error        string
	ComputeNanos int64
}

// UnitResult is one unit's result for FinishUnits.
type UnitResult struct {
	Job, ID uint64
	// Worker delivered the result; Result is its blob's ID.
	Worker, Result string
	ComputeNanos   int64
	// Epoch, if not 0, is the lease epoch of the server that counted
	// the result: it counts only while the job is still that epoch's.
	Epoch uint64
}

// UnitKey names one unit.
type UnitKey struct{ Job, ID uint64 }

// Beat is one worker's heartbeat, as Heartbeats records it: the units
// it runs and holds queued, and its load.
type Beat struct {
	Worker          string
	Running, Queued int
	Load            float64
}

// Worker is a worker's record: what it registered and how it is doing.
type Worker struct {
	// ID is assigned by RegisterWorker ("w1", "w2", ...), never reused.
	ID        string
	Name      string
	Addresses []string
	Cores     int
	Memory    int64
	Disk      int64
	CPUMHz    int
	Threads   int
	Ops       []string
	// Registered is when the worker first registered; LastSeen the last
	// registration or heartbeat.
	Registered, LastSeen time.Time
	// Running, Queued and Load are from the last heartbeat.
	Running, Queued int
	Load            float64
	// Done counts the units whose results this worker delivered first.
	Done uint64
}

// JobFilter selects jobs for ListJobs.
type JobFilter struct {
	// State selects jobs in this state; empty means any.
	State JobState
	// Limit caps the number of jobs; 0 means 100.
	Limit int
	// Owner selects the jobs of this owner; empty means every owner's.
	Owner string
}

// Jobs stores the state of jobs, their units and the workers. Every
// method is atomic. Implementations are safe for concurrent use.
type Jobs interface {
	// CreateJob stores j (its ID, State, times and counts are set here)
	// with all its units, in one transaction, and returns the stored job.
	// Unit IDs must be unique and Deps must name units of the job.
	CreateJob(ctx context.Context, j Job, units []Unit) (Job, error)
	// Job returns one job.
	Job(ctx context.Context, id uint64) (Job, error)
	// ListJobs returns jobs, newest first.
	ListJobs(ctx context.Context, f JobFilter) ([]Job, error)
	// Unfinished returns the queued and running jobs, oldest first: what
	// a restarted server resumes.
	Unfinished(ctx context.Context) ([]Job, error)
	// Units returns a job's units by ID.
	Units(ctx context.Context, job uint64) ([]Unit, error)
	// Unit returns one unit.
	Unit(ctx context.Context, job, id uint64) (Unit, error)

	// StartUnit records that the unit was sent to worker: it becomes
	// running (a unit already running gets a further copy), Attempts
	// grows, and a queued job becomes running. It returns the attempt
	// number. ErrConflict if the unit or its job is finished.
	StartUnit(ctx context.Context, job, id uint64, worker string) (attempt int, err error)
	// FinishUnit records a unit's result. Only the first result for a
	// unit counts: counted is false, and nothing changes, if the unit is
	// already done or its job is finished.
	FinishUnit(ctx context.Context, job, id uint64, worker, result string, computeNanos int64) (counted bool, err error)
	// FinishUnits is FinishUnit for many results in one transaction,
	// which costs far less per result than a transaction each.
	// counted[i] reports whether rs[i] counted; a result for an unknown
	// job or unit does not count and does not fail the batch.
	FinishUnits(ctx context.Context, rs []UnitResult) (counted []bool, err error)
	// FailUnit records that the unit's operation failed with msg.
	FailUnit(ctx context.Context, job, id uint64, worker, msg string) error
	// RequeueUnit returns a running unit to pending (its worker was lost).
	RequeueUnit(ctx context.Context, job, id uint64) error
	// RequeueWorker returns the running units last sent to worker to
	// pending and names them.
	RequeueWorker(ctx context.Context, worker string) ([]UnitKey, error)
	// ResetRunning returns every running unit of an unfinished job to
	// pending, as a restarted server must: no stream survived.
	ResetRunning(ctx context.Context) (int, error)

	// FinishJob marks a job whose units are all done as done, with the
	// output blob's ID.
	FinishJob(ctx context.Context, id uint64, output string) error
	// FailJob marks an unfinished job as failed with msg; its unfinished
	// units become canceled.
	FailJob(ctx context.Context, id uint64, msg string) error
	// CancelJob is FailJob for a job the client canceled.
	CancelJob(ctx context.Context, id uint64, msg string) error
	// DeleteJob removes a finished job and its units.
	DeleteJob(ctx context.Context, id uint64) error
	// BlobUsers returns the unfinished jobs that refer to the blob as
	// input, unit data or unit result, so it must not be deleted.
	BlobUsers(ctx context.Context, blob string) ([]uint64, error)

	// RegisterWorker stores a worker. An empty w.ID registers a new
	// worker and assigns its ID; otherwise the registration of that
	// worker is replaced (ErrNotFound if unknown), keeping Registered
	// and Done. LastSeen becomes now either way.
	RegisterWorker(ctx context.Context, w Worker) (Worker, error)
	// Heartbeats records the signs of life and load of many workers in
	// one write, each seen now; it returns how many workers it updated.
	// A beat of a worker no longer stored (deleted meanwhile) is
	// skipped. A batch holds at most one beat per worker.
	Heartbeats(ctx context.Context, beats []Beat) (int, error)
	// Worker returns one worker.
	Worker(ctx context.Context, id string) (Worker, error)
	// Workers returns every worker, by registration order.
	Workers(ctx context.Context) ([]Worker, error)
	// DeleteWorker removes a worker.
	DeleteWorker(ctx context.Context, id string) error

	// Close releases the store.
	Close() error
}
