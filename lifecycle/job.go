package lifecycle

import (
	"sync"
	"time"

	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
)

// Job is an active (unfinished) job: its record, its units' specs and
// the state of each unit. Unit IDs are the indexes of Units, 0 to n-1.
type Job struct {
	// ID is the job's ID.
	ID uint64
	// Rec is the job's record as submitted; its counters are not kept
	// up to date (Counts has the live ones).
	Rec store.Job
	// Units are the units' specs as stored; their State and Result are
	// those at Add, not kept up to date.
	Units []store.Unit
	// Ext is the caller's own view of the job (what it needs to move its
	// bytes), set at Add.
	Ext any

	// finished is closed when the job reached a final state.
	finished chan struct{}

	mu      sync.Mutex
	units   []unit
	out     map[uint64]uint64 // copies in flight: unit by assignment Seq
	done    int
	running int // units with a copy in flight
	compute int64
	// retries counts the failed tries of units that run again; lastFail
	// says what the last one was.
	retries  int
	lastFail string
	started  time.Time
	ended    bool
	// spare are results stored for units whose result another copy gave
	// first, or after the job ended: intermediate, to remove when the
	// job ends. output is the job's output once assembled.
	spare  []string
	output string
}

// unit is the state of one unit.
type unit struct {
	// result is the ID of the first result that arrived; done is set
	// once the scheduler counted a result and it was queued for the
	// store.
	result string
	done   bool
	copies int
	// fails and lost count the tries that brought no result (see
	// store.UnitTries); tryErr says what the last one was.
	fails, lost int
	tryErr      string
}

func newJob(rec store.Job, units []store.Unit, ext any) *Job {
	j := &Job{
		ID:       rec.ID,
		Rec:      rec,
		Units:    units,
		Ext:      ext,
		finished: make(chan struct{}),
		units:    make([]unit, len(units)),
		out:      map[uint64]uint64{},
		retries:  rec.Retries,
		started:  rec.Started,
	}
	for i, u := range units {
		if u.State == store.UnitDone {
			j.units[i] = unit{done: true, result: u.Result}
			j.done++
			j.compute += u.ComputeNanos
		}
	}
	return j
}

// Finished is closed when the job reaches a final state.
func (j *Job) Finished() <-chan struct{} { return j.finished }

// dispatched books a copy going out; it reports whether it is the job's
// first.
func (j *Job) dispatched(a sched.Assignment) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if a.Unit >= uint64(len(j.units)) {
		return false
	}
	j.out[a.Seq] = a.Unit
	u := &j.units[a.Unit]
	if u.copies++; u.copies == 1 {
		j.running++
	}
	first := j.started.IsZero()
	if first {
		j.started = time.Now()
	}
	return first
}

// release books that copy seq is back or lost. It is idempotent.
func (j *Job) release(seq uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	i, ok := j.out[seq]
	if !ok {
		return
	}
	delete(j.out, seq)
	u := &j.units[i]
	if u.copies--; u.copies == 0 {
		j.running--
	}
}

// Result returns the unit's result ID if one arrived.
func (j *Job) Result(unit uint64) (string, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if unit >= uint64(len(j.units)) {
		return "", false
	}
	id := j.units[unit].result
	return id, id != ""
}

// offer records a result unless one arrived first, and returns the one
// kept. ended reports that the job ended first: the result is spare.
func (j *Job) offer(unit uint64, id string) (kept string, ended bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	u := &j.units[unit]
	switch {
	case j.ended:
		j.spare = append(j.spare, id)
		return id, true
	case u.result == "":
		u.result = id
	case u.result != id:
		j.spare = append(j.spare, id)
	}
	return u.result, false
}

// count books a result the scheduler counted, once it is queued for the
// store. It reports true for the one result that made every unit done.
func (j *Job) count(unit uint64, computeNanos int64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	u := &j.units[unit]
	if u.done {
		return false
	}
	u.done = true
	j.done++
	j.compute += computeNanos
	return j.done == len(j.units)
}

// end marks the job final; only the first call reports true.
func (j *Job) end() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ended {
		return false
	}
	j.ended = true
	return true
}

// Ended reports whether the job reached a final state (or is being
// assembled into one).
func (j *Job) Ended() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ended
}

// failed books a failed try of unit, msg saying what failed. again, if
// set, says that the unit runs again: it counts as a retry and is what the
// job's status says about it.
func (j *Job) failed(unit uint64, msg, again string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if again != "" {
		j.retries++
		j.lastFail = again
	}
	if unit < uint64(len(j.units)) {
		u := &j.units[unit]
		u.fails++
		u.tryErr = msg
	}
}

// lostCopy books a copy of unit that will bring no result: why says
// where it went.
func (j *Job) lostCopy(unit uint64, why string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if unit < uint64(len(j.units)) && !j.units[unit].done {
		u := &j.units[unit]
		u.lost++
		u.tryErr = why
	}
}

// Tries returns the units with a try that brought no result, at most
// limit of them by unit ID, and how many there are.
func (j *Job) Tries(limit int) ([]store.UnitTries, int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []store.UnitTries
	total := 0
	for i := range j.units {
		u := &j.units[i]
		if u.fails == 0 && u.lost == 0 {
			continue
		}
		total++
		if len(out) < limit {
			out = append(out, store.UnitTries{Unit: uint64(i), Fails: u.fails, Lost: u.lost, Error: u.tryErr})
		}
	}
	return out, total
}

// Failures returns the failed tries so far and the last one's message.
func (j *Job) Failures() (int, string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.retries, j.lastFail
}

// Counts returns the units done and out on workers, the compute time of
// the done ones and when the first copy went out (zero if none did).
func (j *Job) Counts() (done, running int, compute int64, started time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.done, j.running, j.compute, j.started
}

// ResultIDs returns the result of each unit, "" for none yet.
func (j *Job) ResultIDs() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	ids := make([]string, len(j.units))
	for i, u := range j.units {
		ids[i] = u.result
	}
	return ids
}

// Blobs returns the blobs the job refers to: its results, the spare ones
// and its output ("" for none).
func (j *Job) Blobs() (results, spare []string, output string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	results = make([]string, len(j.units))
	for i, u := range j.units {
		results[i] = u.result
	}
	return results, append([]string(nil), j.spare...), j.output
}

// setOutput records the output's ID, which the removal of the job's
// intermediate blobs keeps.
func (j *Job) setOutput(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.output = id
}
