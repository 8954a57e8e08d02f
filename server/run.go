package server

import (
	"bytes"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/lifecycle"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
)

// run is the server's part of an active job (lifecycle.Job.Ext): what
// the streams need to send its units' bytes and what assembly needs. The
// job's and its units' state is the lifecycle's.
type run struct {
	ops  jobOps
	hint ops.Hint

	mu      sync.Mutex
	readers map[string]store.Reader // open blobs the units' data comes from
	// checked are the blobs of units' data verified as a whole, which
	// the units then read at offsets.
	checked map[string]bool
	// twins hold, for a repeated job, the first result of each unit of a
	// copy that is small enough: the same unit of every other copy should
	// give the same bytes, which a comparison confirms for far less than
	// hashing them again. twinBytes is what they hold.
	twins     []twin
	twinBytes int
	// size and took are the output's bytes and how long its assembly
	// took, for the log.
	size int64
	took time.Duration
	// pinned are the blobs of the output dataset's members the assembly
	// stored, pinned until the job ends (its output is recorded by then).
	pinned []string
}

// unpinOutput undoes the pins of the assembly.
func (r *run) unpinOutput(s *Server) {
	r.mu.Lock()
	ids := r.pinned
	r.pinned = nil
	r.mu.Unlock()
	s.unpin(ids...)
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

func newRun(j store.Job, jo jobOps, units []store.Unit) (*run, error) {
	r := &run{
		ops:     jo,
		hint:    ops.Hint{Units: j.Units, TileW: j.TileW, TileH: j.TileH, Repeat: j.Repeat},
		readers: map[string]store.Reader{},
		checked: map[string]bool{},
	}
	if c := r.hint.Repeat; c > 1 && len(units)%c == 0 {
		r.twins = make([]twin, len(units)/c)
	}
	for i, u := range units {
		if u.Reduce && jo.reduce.op == nil {
			return nil, fmt.Errorf("job %d: unit %d is a reduce unit, but the job has no reduce merge; the store is inconsistent", j.ID, i)
		}
	}
	return r, nil
}

// runOf returns the server's part of an active job.
func runOf(j *lifecycle.Job) *run { return j.Ext.(*run) }

// place names a unit's operation for the scheduler, and whether it runs
// a module.
func (r *run) place(j store.Job) func(store.Unit) (string, bool) {
	return func(u store.Unit) (string, bool) {
		if u.Reduce {
			return j.Spec.ReduceOp, r.ops.reduce.module != ""
		}
		return j.Op, r.ops.main.module != ""
	}
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

// maxReaders bounds the blobs a run keeps open: a job over a dataset
// reads from as many blobs as it has members.
const maxReaders = 64

// reader returns an open reader of blob, opened once per job for up to
// maxReaders blobs; call done when through with it (it closes a reader
// the run does not keep). A blob the job did not verify yet (a resumed
// job's) is verified first: units read it at offsets, which are not
// checked as they are read.
func (r *run) reader(s *Server, j *lifecycle.Job, blob string) (rd store.Reader, done func(), err error) {
	keep := func() {}
	r.mu.Lock()
	rd, checked := r.readers[blob], r.checked[blob]
	r.mu.Unlock()
	if rd != nil {
		return rd, keep, nil
	}
	if !checked {
		ctx, cancel := s.lifetime()
		err := s.blobs.Verify(ctx, blob)
		cancel()
		if err != nil {
			return nil, nil, err
		}
	}
	rd, _, err = s.blobs.Open(blob)
	if err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked[blob] = true
	if j.Ended() {
		rd.Close()
		return nil, nil, fmt.Errorf("job %d ended", j.ID)
	}
	if old := r.readers[blob]; old != nil {
		rd.Close() // another stream opened it meanwhile
		return old, keep, nil
	}
	if len(r.readers) >= maxReaders {
		return rd, func() { rd.Close() }, nil
	}
	r.readers[blob] = rd
	return rd, keep, nil
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
// it depends on. Long parameter values go through the stream's cache pc
// (nil: an older worker, every value whole).
func (r *run) message(s *Server, j *lifecycle.Job, a sched.Assignment, pc *api.ParamCache, buf, scratch []byte) (msg, scratchOut []byte, err error) {
	if a.Unit >= uint64(len(j.Units)) {
		return buf, scratch, fmt.Errorf("no unit %d", a.Unit)
	}
	u := j.Units[a.Unit]
	deps := make([]string, len(u.Deps))
	for i, d := range u.Deps {
		deps[i], _ = j.Result(d)
	}

	inputs := make([][]byte, 1, 1+len(deps))
	if u.Blob != "" && u.Len > 0 {
		rd, done, err := r.reader(s, j, u.Blob)
		if err != nil {
			return buf, scratch, fmt.Errorf("open its data: %w", err)
		}
		defer done()
		if int64(cap(scratch)) < u.Len {
			scratch = make([]byte, u.Len)
		}
		data := scratch[:u.Len]
		if n, err := rd.ReadAt(data, u.Off); n < len(data) {
			return buf, scratch, fmt.Errorf("read its data (blob %s bytes %d-%d): %w", u.Blob, u.Off, u.Off+u.Len, err)
		}
		inputs[0] = data
	}
	for i, id := range deps {
		if id == "" {
			return buf, scratch, fmt.Errorf("dependency unit %d has no result", u.Deps[i])
		}
		b, err := s.readBlob(s.results, id)
		if err != nil {
			return buf, scratch, fmt.Errorf("read the result of unit %d: %w", u.Deps[i], err)
		}
		inputs = append(inputs, b)
	}
	res, extra := r.ops.main, r.ops.extra[0]
	if u.Reduce {
		// The reduce operation reads its deps' results as one input.
		res, extra = r.ops.reduce, r.ops.extra[1]
		inputs = [][]byte{ops.Concat(inputs)}
	}
	params := u.Params
	if extra != nil {
		params = make(map[string]string, len(u.Params)+len(extra))
		maps.Copy(params, u.Params)
		maps.Copy(params, extra)
	}
	m := api.Unit{Job: j.ID, ID: a.Unit, Attempt: uint32(a.Attempt), Op: res.wire(), Params: params, Inputs: inputs}
	return m.AppendCached(buf, pc), scratch, nil
}
