package server

import (
	"bytes"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
)

// run is an active (unfinished) job: what the streams need to send its
// units and what assembly needs. Unit IDs are the indexes of Split's
// units, 0 to n-1.
type run struct {
	id     uint64
	ops    jobOps
	job    store.Job // as submitted; its counters are not kept up to date
	hint   ops.Hint
	policy sched.Policy
	// finished is closed when the job reached a final state.
	finished chan struct{}

	mu      sync.Mutex
	units   []runUnit
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
	readers  map[string]store.Reader // open blobs the units' data comes from
	// checked are the blobs of units' data verified as a whole, which
	// the units then read at offsets.
	checked map[string]bool
	// twins hold, for a repeated job, the first result of each unit of a
	// copy that is small enough: the same unit of every other copy should
	// give the same bytes, which a comparison confirms for far less than
	// hashing them again. twinBytes is what they hold.
	twins     []twin
	twinBytes int
	// spare are results stored for units whose result another copy gave
	// first, or after the job ended: intermediate, to remove when the
	// job ends. output is the job's output once assembled.
	spare  []string
	output string
}

// twin is a result kept to compare the other copies' results with.
type twin struct {
	id   string
	data []byte
}

// Bounds of the results a run keeps as twins.
const (
	maxTwin      = 1 << 20
	maxTwinBytes = 8 << 20
)

type runUnit struct {
	params map[string]string
	// blob, off and n locate the unit's own data; blob is empty for none.
	blob   string
	off, n int64
	deps   []uint64
	// reduce: the unit runs the job's reduce operation on its deps'
	// results joined.
	reduce bool
	// result is the ID of the first result that arrived; done is set
	// once the scheduler counted a result.
	result string
	done   bool
	copies int
	// fails and lost count the tries that brought no result (see
	// store.UnitTries); tryErr says what the last one was.
	fails, lost int
	tryErr      string
}

func newRun(j store.Job, jo jobOps, units []store.Unit) (*run, error) {
	policy, err := sched.ParsePolicy(j.Policy)
	if err != nil {
		return nil, err
	}
	r := &run{
		id:       j.ID,
		ops:      jo,
		job:      j,
		hint:     ops.Hint{Units: j.Units, TileW: j.TileW, TileH: j.TileH, Repeat: j.Repeat},
		retries:  j.Retries,
		policy:   policy,
		finished: make(chan struct{}),
		units:    make([]runUnit, len(units)),
		out:      map[uint64]uint64{},
		started:  j.Started,
		readers:  map[string]store.Reader{},
		checked:  map[string]bool{},
	}
	if c := r.hint.Repeat; c > 1 && len(units)%c == 0 {
		r.twins = make([]twin, len(units)/c)
	}
	for i, u := range units {
		if u.ID != uint64(i) {
			return nil, fmt.Errorf("job %d: unit %d stored at position %d; the store is inconsistent", j.ID, u.ID, i)
		}
		ru := runUnit{params: u.Params, blob: u.Blob, off: u.Off, n: u.Len, deps: u.Deps, reduce: u.Reduce}
		if u.Reduce && jo.reduce.op == nil {
			return nil, fmt.Errorf("job %d: unit %d is a reduce unit, but the job has no reduce merge; the store is inconsistent", j.ID, i)
		}
		if u.State == store.UnitDone {
			ru.done, ru.result = true, u.Result
			r.done++
			r.compute += u.ComputeNanos
		}
		r.units[i] = ru
	}
	return r, nil
}

// dispatched books a copy going out; it reports whether it is the job's
// first.
func (r *run) dispatched(a sched.Assignment) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.Unit >= uint64(len(r.units)) {
		return false
	}
	r.out[a.Seq] = a.Unit
	u := &r.units[a.Unit]
	if u.copies++; u.copies == 1 {
		r.running++
	}
	first := r.started.IsZero()
	if first {
		r.started = time.Now()
	}
	return first
}

// release books that copy seq is back or lost. It is idempotent.
func (r *run) release(seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.out[seq]
	if !ok {
		return
	}
	delete(r.out, seq)
	u := &r.units[i]
	if u.copies--; u.copies == 0 {
		r.running--
	}
}

// result returns the unit's result ID if one arrived.
func (r *run) result(unit uint64) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if unit >= uint64(len(r.units)) {
		return "", false
	}
	id := r.units[unit].result
	return id, id != ""
}

// offer records a result unless one arrived first, and returns the one
// kept. ended reports that the job ended first: the result is spare.
func (r *run) offer(unit uint64, id string) (kept string, ended bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := &r.units[unit]
	switch {
	case r.ended:
		r.spare = append(r.spare, id)
		return id, true
	case u.result == "":
		u.result = id
	case u.result != id:
		r.spare = append(r.spare, id)
	}
	return u.result, false
}

// setOutput records the output's ID, which the removal of the job's
// intermediate blobs keeps.
func (r *run) setOutput(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.output = id
}

// twinOf returns the result ID of another copy of unit whose result is
// exactly data, if the run kept one.
func (r *run) twinOf(unit uint64, data []byte) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.twins) == 0 {
		return "", false
	}
	t := r.twins[unit%uint64(len(r.twins))]
	if t.id == "" || !bytes.Equal(t.data, data) {
		return "", false
	}
	return t.id, true
}

// keepTwin keeps a copy of a small result stored as id, for the other
// copies of its unit to be compared with.
func (r *run) keepTwin(unit uint64, id string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.twins) == 0 || len(data) > maxTwin || r.twinBytes+len(data) > maxTwinBytes {
		return
	}
	t := &r.twins[unit%uint64(len(r.twins))]
	if t.id != "" {
		return
	}
	t.id, t.data = id, bytes.Clone(data)
	r.twinBytes += len(data)
}

// count books the result the scheduler counted, once queued for the
// store. It reports true for the one result that made every unit done.
func (r *run) count(unit uint64, computeNanos int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u := &r.units[unit]; !u.done {
		u.done = true
		r.done++
		r.compute += computeNanos
		return r.done == len(r.units)
	}
	return false
}

// end marks the job final; only the first call reports true.
func (r *run) end() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return false
	}
	r.ended = true
	return true
}

// failed books a failed try of unit, msg saying what failed. again, if
// set, says that the unit runs again: it counts as a retry and is what the
// job's status says about it.
func (r *run) failed(unit uint64, msg, again string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if again != "" {
		r.retries++
		r.lastFail = again
	}
	if unit < uint64(len(r.units)) {
		u := &r.units[unit]
		u.fails++
		u.tryErr = msg
	}
}

// lostCopy books a copy of unit that will bring no result: why says
// where it went.
func (r *run) lostCopy(unit uint64, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if unit < uint64(len(r.units)) && !r.units[unit].done {
		u := &r.units[unit]
		u.lost++
		u.tryErr = why
	}
}

// tries returns the units with a try that brought no result, at most
// limit of them by unit ID, and how many there are.
func (r *run) tries(limit int) ([]store.UnitTries, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.UnitTries
	total := 0
	for i := range r.units {
		u := &r.units[i]
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

// failures returns the failed tries so far and the last one's message.
func (r *run) failures() (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retries, r.lastFail
}

func (r *run) counts() (done, running int, compute int64, started time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done, r.running, r.compute, r.started
}

func (r *run) resultIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, len(r.units))
	for i, u := range r.units {
		ids[i] = u.result
	}
	return ids
}

// reader returns an open reader of blob, opened once per job. A blob
// the job did not verify yet (a resumed job's) is verified first: units
// read it at offsets, which are not checked as they are read.
func (r *run) reader(s *Server, blob string) (store.Reader, error) {
	r.mu.Lock()
	rd, checked := r.readers[blob], r.checked[blob]
	r.mu.Unlock()
	if rd != nil {
		return rd, nil
	}
	if !checked {
		ctx, cancel := s.lifetime()
		err := s.blobs.Verify(ctx, blob)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	rd, _, err := s.blobs.Open(blob)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked[blob] = true
	if r.ended {
		rd.Close()
		return nil, fmt.Errorf("job %d ended", r.id)
	}
	if old := r.readers[blob]; old != nil {
		rd.Close() // another stream opened it meanwhile
		return old, nil
	}
	r.readers[blob] = rd
	return rd, nil
}

func (r *run) closeReaders() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, rd := range r.readers {
		rd.Close()
		delete(r.readers, id)
	}
}

// message encodes the unit of assignment a into buf: its operation,
// parameters, own data (read into scratch) and the results of the units
// it depends on.
func (r *run) message(s *Server, a sched.Assignment, buf, scratch []byte) (msg, scratchOut []byte, err error) {
	r.mu.Lock()
	if a.Unit >= uint64(len(r.units)) {
		r.mu.Unlock()
		return buf, scratch, fmt.Errorf("no unit %d", a.Unit)
	}
	u := r.units[a.Unit]
	deps := make([]string, len(u.deps))
	for i, d := range u.deps {
		deps[i] = r.units[d].result
	}
	r.mu.Unlock()

	inputs := make([][]byte, 1, 1+len(deps))
	if u.blob != "" && u.n > 0 {
		rd, err := r.reader(s, u.blob)
		if err != nil {
			return buf, scratch, fmt.Errorf("open its data: %w", err)
		}
		if int64(cap(scratch)) < u.n {
			scratch = make([]byte, u.n)
		}
		data := scratch[:u.n]
		if n, err := rd.ReadAt(data, u.off); n < len(data) {
			return buf, scratch, fmt.Errorf("read its data (blob %s bytes %d-%d): %w", u.blob, u.off, u.off+u.n, err)
		}
		inputs[0] = data
	}
	for i, id := range deps {
		if id == "" {
			return buf, scratch, fmt.Errorf("dependency unit %d has no result", u.deps[i])
		}
		b, err := s.readBlob(s.results, id)
		if err != nil {
			return buf, scratch, fmt.Errorf("read the result of unit %d: %w", u.deps[i], err)
		}
		inputs = append(inputs, b)
	}
	res, extra := r.ops.main, r.ops.extra[0]
	if u.reduce {
		// The reduce operation reads its deps' results as one input.
		res, extra = r.ops.reduce, r.ops.extra[1]
		inputs = [][]byte{ops.Concat(inputs)}
	}
	params := u.params
	if extra != nil {
		params = make(map[string]string, len(u.params)+len(extra))
		maps.Copy(params, u.params)
		maps.Copy(params, extra)
	}
	m := api.Unit{Job: r.id, ID: a.Unit, Attempt: uint32(a.Attempt), Op: res.wire(), Params: params, Inputs: inputs}
	buf, _ = m.AppendBinary(buf)
	return buf, scratch, nil
}
