package sched

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Worker is what the scheduler knows of a live worker.
type Worker struct {
	ID string
	// Streams is how many streams the server keeps open to the worker:
	// the threads it lends. Streams are numbered from 0.
	Streams int
	// Ops are the operations the worker runs. ModuleOps among them means
	// every unit whose Module is set.
	Ops []string
	// NoPreempt marks a worker that cannot stop a copy (one older than
	// api.OpPreempt): Preempt takes nothing back from its streams.
	NoPreempt bool
}

// ModuleOps in a Worker's Ops stands for every user operation: the
// worker runs WebAssembly modules.
const ModuleOps = "wasm"

// Unit is a computation unit as the scheduler sees it.
type Unit struct {
	// ID is unique within the job.
	ID uint64
	// Op is the operation; only workers that run it get the unit.
	Op string
	// Module marks a user operation's unit: workers that offer
	// ModuleOps run it too.
	Module bool
	// Deps are units of the same job that must be done first.
	Deps []uint64
	// Done marks a unit finished before the job was added (a job resumed
	// after a restart).
	Done bool
}

// Job is a set of units to place.
type Job struct {
	ID     uint64
	Policy Policy
	// InFlight caps the units a stream holds at once while it takes this
	// job's units; 0 means Config.InFlight.
	InFlight int
	// MaxTries is how many times a unit's operation may fail before the
	// job fails; 0 means Config.MaxTries.
	MaxTries int
	// Tenant is who submitted the job (a token's ID; empty for the
	// cluster key). Tenants share the streams: see Preempt.
	Tenant string
	Units  []Unit
}

// Assignment is one copy of a unit sent to one stream.
type Assignment struct {
	Job, Unit uint64
	Worker    string
	Stream    int
	// Attempt counts the copies of the unit handed out so far, this one
	// included, from 1.
	Attempt int
	// Backup is true for a speculative copy of a unit already running on
	// another worker.
	Backup bool
	// Tenant is the job's Tenant.
	Tenant string
	// Seq identifies the assignment; it grows with every one.
	Seq uint64
}

// Config tunes a Scheduler. The zero value is ready to use.
type Config struct {
	// InFlight is how many units a stream may hold at once, for jobs that
	// do not say; zero means 2, so a stream has its next unit at hand
	// when a result leaves.
	InFlight int
	// MaxLosses is how many times a unit's copies may be lost (stream
	// broken, worker dead) before its job fails; zero means 3.
	MaxLosses int
	// MaxTries is how many times a unit's operation may fail (the worker
	// returned an error) before its job fails, for jobs that do not say;
	// zero means 3. A failed unit runs again on another worker where one
	// runs its operation.
	MaxTries int
	// NoBackups stops dynamic jobs from handing idle streams backup
	// copies of units running elsewhere. Zero means backups are on.
	NoBackups bool
}

func (c *Config) populate() {
	if c.InFlight <= 0 {
		c.InFlight = 2
	}
	if c.MaxLosses <= 0 {
		c.MaxLosses = 3
	}
	if c.MaxTries <= 0 {
		c.MaxTries = 3
	}
}

// Scheduler places the units of many jobs on the streams of many workers.
// Jobs are served in the order they were added. It is safe for concurrent
// use.
type Scheduler struct {
	mu      sync.Mutex
	cfg     Config
	workers map[string]*worker
	order   []string // worker IDs in the order they were added
	jobs    []*job   // in the order they were added
	byID    map[uint64]*job
	seq     uint64
	// events counts results and losses: a clock that ticks as work
	// completes, to tell how long a copy has been running.
	events  uint64
	changed chan struct{}

	// idle and room list the streams waiting on their Wait channel that
	// held no unit, or fewer than the largest job limit, when they began
	// to wait: the only ones new work can wake. Streams waiting full
	// wake when their own slot frees. Entries whose stream is no longer
	// waiting are dropped lazily.
	idle, room []waiter
	// readied counts units made ready (queued for Next), a clock that
	// tells an event how many streams it may have work for.
	readied uint64
	// streamsFor caches, by operation, how many streams run it; nil
	// after a change of workers.
	streamsFor map[opKey]int
	nstreams   int

	// tenants counts the jobs of each tenant, held the copies each
	// tenant has on streams (running or queued).
	tenants map[string]int
	held    map[string]int
	// byTenant is scratch for find: the tenants of the jobs, fewest
	// copies held first.
	byTenant []string
}

// opKey is what decides which workers run a unit.
type opKey struct {
	op     string
	module bool
}

// waiter is a stream waiting on its Wait channel.
type waiter struct {
	w   *worker
	idx int
	st  *stream
	ch  chan struct{} // st.wake when it began to wait
}

type worker struct {
	Worker
	ops     map[string]bool
	streams []*stream
}

// stream is what one stream holds. It runs its units in Seq order: the
// lowest Seq is running, since the event count headSince.
type stream struct {
	// inFlight holds the stream's assignments in Seq order: Seq grows
	// with every dispatch, so a new one is appended, and a unit's
	// depth in its stream is its index.
	inFlight  []Assignment
	headSince uint64
	// wake is the channel Wait handed out, closed (and set to nil) when
	// work the stream may take arrives.
	wake chan struct{}
}

// head returns the Seq of the running unit, or 0 if the stream is empty.
func (st *stream) head() uint64 {
	if len(st.inFlight) == 0 {
		return 0
	}
	return st.inFlight[0].Seq
}

// index returns where the assignment of seq is in the stream, and
// whether it is there.
func (st *stream) index(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(st.inFlight, seq, func(a Assignment, seq uint64) int { return cmp.Compare(a.Seq, seq) })
}

type job struct {
	id        uint64
	tenant    string
	policy    Policy
	limit     int
	maxTries  int
	units     []*unit
	byID      map[uint64]*unit
	remaining int
	left      map[string]int    // unfinished units by operation
	ready     queue             // dynamic: ready units
	owned     map[string]*queue // static: ready units by owner
	running   []*unit           // units with copies out, by first dispatch
	// backupFrom is where in running the next search for a backup copy
	// starts (backupFor).
	backupFrom int
}

type unit struct {
	id       uint64
	op       string
	module   bool
	waiting  int // deps not done
	children []*unit
	done     bool
	copies   []copyRef
	queued   bool // in a ready queue
	owner    string
	losses   int
	fails    int
	// preempted counts the copies of the unit taken back by Preempt.
	preempted int
	failedOn  []string // workers where the operation failed
	attempts  int
	listed    bool // in job.running
}

type copyRef struct {
	seq    uint64
	worker string
	// st is the stream the copy is on. A stream that goes (SetWorker,
	// RemoveWorker) takes its copies with it (loseAll), so st is live.
	st *stream
}

// queue is a FIFO of units with lazy deletion: an entry whose unit is no
// longer queued is skipped.
type queue struct {
	items []*unit
	head  int
}

func (q *queue) push(u *unit) {
	u.queued = true
	q.items = append(q.items, u)
}

// take removes and returns the first queued unit for which ok is true;
// with remove false it only returns it.
func (q *queue) take(ok func(*unit) bool, remove bool) *unit {
	for q.head < len(q.items) && !q.items[q.head].queued {
		q.head++
	}
	if q.head > 64 && q.head > len(q.items)/2 {
		q.items = slices.Delete(q.items, 0, q.head)
		q.head = 0
	}
	for i := q.head; i < len(q.items); i++ {
		if u := q.items[i]; u.queued && ok(u) {
			u.queued = !remove
			return u
		}
	}
	return nil
}

// New returns an empty Scheduler.
func New(cfg Config) *Scheduler {
	cfg.populate()
	return &Scheduler{
		cfg:     cfg,
		workers: map[string]*worker{},
		tenants: map[string]int{},
		held:    map[string]int{},
		byID:    map[uint64]*job{},
		changed: make(chan struct{}),
	}
}

// Changed returns a channel that is closed at the next change that may
// let Next return a unit where it did not: a job added, a worker added, a
// unit done or lost. Take it before calling Next, so no change is missed.
func (s *Scheduler) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Scheduler) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Wait returns a channel that is closed when Next(worker, stream) may
// return a unit where it did not: the stream's slot freed, units it may
// take became ready, a backup copy became worth taking, or the workers
// changed. Unlike Changed, an event wakes only the streams it may give
// work to, so its cost does not grow with the number of streams. Take
// it before calling Next, so no change is missed. For a stream the
// scheduler does not know it is Changed.
func (s *Scheduler) Wait(workerID string, stream int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.workers[workerID]
	if w == nil || stream < 0 || stream >= len(w.streams) {
		return s.changed
	}
	st := w.streams[stream]
	if st.wake != nil {
		return st.wake
	}
	st.wake = make(chan struct{})
	held := len(st.inFlight)
	wt := waiter{w, stream, st, st.wake}
	switch {
	case held == 0:
		s.idle = s.appendWaiter(s.idle, wt)
	case held < s.maxLimit():
		s.room = s.appendWaiter(s.room, wt)
	}
	return st.wake
}

// appendWaiter adds wt to list, first dropping stale entries when the
// list has grown past twice the streams there are.
func (s *Scheduler) appendWaiter(list []waiter, wt waiter) []waiter {
	if len(list) > 2*s.nstreams+64 {
		list = slices.DeleteFunc(list, func(x waiter) bool { return !s.waiting(x) })
	}
	return append(list, wt)
}

// waiting reports whether x is a current stream still waiting on the
// channel it had when listed.
func (s *Scheduler) waiting(x waiter) bool {
	return x.st.wake == x.ch && s.workers[x.w.ID] == x.w && x.idx < len(x.w.streams) && x.w.streams[x.idx] == x.st
}

// maxLimit is the largest in-flight limit of the jobs: a stream holding
// that many takes no unit until its own slot frees.
func (s *Scheduler) maxLimit() int {
	m := 0
	for _, j := range s.jobs {
		m = max(m, j.limit)
	}
	return m
}

func wakeStream(st *stream) {
	if st.wake != nil {
		close(st.wake)
		st.wake = nil
	}
}

// wakeAll wakes every waiting stream: after a change of workers, which
// changes shares, plans and where failed units may go.
func (s *Scheduler) wakeAll() {
	for _, w := range s.workers {
		for _, st := range w.streams {
			wakeStream(st)
		}
	}
	clear(s.idle)
	clear(s.room)
	s.idle, s.room = s.idle[:0], s.room[:0]
}

// wake runs after an event: it wakes freed's stream (nil for none), up
// to ready waiting streams that Next would now give a unit, idle ones
// first, and, if backup is set, one idle stream that runs op, which may
// take a backup copy.
func (s *Scheduler) wake(freed *Assignment, ready int, backup bool, op opKey) {
	s.notify()
	if freed != nil {
		if w := s.workers[freed.Worker]; w != nil && freed.Stream >= 0 && freed.Stream < len(w.streams) {
			wakeStream(w.streams[freed.Stream])
		}
	}
	for _, list := range []*[]waiter{&s.idle, &s.room} {
		if ready <= 0 {
			break
		}
		keep := (*list)[:0]
		for _, x := range *list {
			if !s.waiting(x) {
				continue
			}
			if ready > 0 && s.pick(x.w, x.idx) {
				wakeStream(x.st)
				ready--
				continue
			}
			keep = append(keep, x)
		}
		clear((*list)[len(keep):])
		*list = keep
	}
	if !backup || s.cfg.NoBackups {
		return
	}
	keep := s.idle[:0]
	woke := false
	for _, x := range s.idle {
		if !s.waiting(x) {
			continue
		}
		if !woke && (x.w.ops[op.op] || op.module && x.w.ops[ModuleOps]) {
			wakeStream(x.st)
			woke = true
			continue
		}
		keep = append(keep, x)
	}
	clear(s.idle[len(keep):])
	s.idle = keep
}

// SetWorker adds a worker or updates one: its streams and operations.
// Units in flight on streams it no longer has are lost and returned, with
// any job failures that causes.
func (s *Scheduler) SetWorker(w Worker) ([]Assignment, []*UnitError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Streams = max(w.Streams, 0)
	ws := s.workers[w.ID]
	if ws == nil {
		ws = &worker{}
		s.workers[w.ID] = ws
		s.order = append(s.order, w.ID)
	}
	ws.Worker = w
	ws.ops = make(map[string]bool, len(w.Ops))
	for _, op := range w.Ops {
		ws.ops[op] = true
	}
	var lost []Assignment
	for len(ws.streams) > w.Streams {
		lost = append(lost, ws.streams[len(ws.streams)-1].assignments()...)
		ws.streams = ws.streams[:len(ws.streams)-1]
	}
	s.unhold(lost)
	for len(ws.streams) < w.Streams {
		ws.streams = append(ws.streams, &stream{})
	}
	s.workersChanged()
	errs := s.loseAll(lost)
	s.notify()
	s.wakeAllIfJobs()
	return lost, errs
}

// wakeAllIfJobs wakes every waiting stream after a change of workers,
// if any job is active: the shares of proportional and dynamic jobs
// change with the workers. Without a job no stream has anything to
// take, and the next job wakes the streams it needs; so 1,000 workers
// registering cost 1,000 wake-ups, not a million.
func (s *Scheduler) wakeAllIfJobs() {
	if len(s.jobs) > 0 {
		s.wakeAll()
	}
}

// workersChanged drops what depends on the set of workers.
func (s *Scheduler) workersChanged() {
	s.streamsFor = nil
	s.nstreams = 0
	for _, w := range s.workers {
		s.nstreams += len(w.streams)
	}
}

// RemoveWorker forgets a dead or departed worker. Its units in flight are
// lost and returned, with any job failures that causes; they and the
// units static plans gave it run elsewhere.
func (s *Scheduler) RemoveWorker(id string) ([]Assignment, []*UnitError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.workers[id]
	if ws == nil {
		return nil, nil
	}
	delete(s.workers, id)
	s.order = slices.DeleteFunc(s.order, func(o string) bool { return o == id })
	var lost []Assignment
	for _, st := range ws.streams {
		lost = append(lost, st.assignments()...)
		wakeStream(st)
	}
	s.unhold(lost)
	s.workersChanged()
	errs := s.loseAll(lost)
	s.notify()
	s.wakeAllIfJobs()
	return lost, errs
}

// assignments returns what the stream holds, in Seq order.
func (st *stream) assignments() []Assignment {
	return slices.Clone(st.inFlight)
}

// loseAll handles lost assignments whose stream is already gone, then
// re-plans static jobs, which may have lost an owner.
func (s *Scheduler) loseAll(lost []Assignment) []*UnitError {
	var errs []*UnitError
	for _, a := range lost {
		if err := s.lose(a); err != nil {
			errs = append(errs, err)
		}
	}
	for _, j := range s.jobs {
		if j.policy.static() {
			s.plan(j)
		}
	}
	return errs
}

// AddJob adds a job to place. Unit IDs must be unique, dependencies must
// name units of the job and form no cycle.
func (s *Scheduler) AddJob(spec Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.byID[spec.ID]; dup {
		return fmt.Errorf("sched: job %d added twice", spec.ID)
	}
	if len(spec.Units) == 0 {
		return fmt.Errorf("sched: job %d has no units", spec.ID)
	}
	j := &job{id: spec.ID, tenant: spec.Tenant, policy: spec.Policy, limit: spec.InFlight, maxTries: spec.MaxTries,
		byID: make(map[uint64]*unit, len(spec.Units)), owned: map[string]*queue{}, left: map[string]int{}}
	if j.limit <= 0 {
		j.limit = s.cfg.InFlight
	}
	if j.maxTries <= 0 {
		j.maxTries = s.cfg.MaxTries
	}
	for _, su := range spec.Units {
		if _, dup := j.byID[su.ID]; dup {
			return fmt.Errorf("sched: job %d: unit %d appears twice", spec.ID, su.ID)
		}
		u := &unit{id: su.ID, op: su.Op, module: su.Module, done: su.Done}
		j.units = append(j.units, u)
		j.byID[su.ID] = u
	}
	for i, su := range spec.Units {
		u := j.units[i]
		for _, d := range su.Deps {
			du := j.byID[d]
			if du == nil || du == u {
				return fmt.Errorf("sched: job %d: unit %d depends on %d, which is not another unit of the job", spec.ID, su.ID, d)
			}
			du.children = append(du.children, u)
			if !du.done {
				u.waiting++
			}
		}
		if !u.done {
			j.remaining++
			j.left[u.op]++
		}
	}
	if err := checkAcyclic(j); err != nil {
		return err
	}
	if j.remaining == 0 {
		return fmt.Errorf("sched: job %d: %w", spec.ID, ErrJobComplete)
	}
	before, prevMax := s.readied, s.maxLimit()
	s.jobs = append(s.jobs, j)
	s.byID[j.id] = j
	s.tenants[j.tenant]++
	if j.policy.static() {
		s.plan(j)
	} else {
		for _, u := range j.units {
			if !u.done && u.waiting == 0 {
				j.ready.push(u)
				s.readied++
			}
		}
	}
	if j.limit > prevMax {
		// Streams that waited full may hold more of this job.
		s.wakeAll()
	}
	s.wake(nil, int(s.readied-before), false, opKey{})
	return nil
}

// checkAcyclic fails if the job's dependencies form a cycle.
func checkAcyclic(j *job) error {
	indeg := make(map[*unit]int, len(j.units))
	for _, u := range j.units {
		for _, c := range u.children {
			indeg[c]++
		}
	}
	var stack []*unit
	for _, u := range j.units {
		if indeg[u] == 0 {
			stack = append(stack, u)
		}
	}
	seen := 0
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		seen++
		for _, c := range u.children {
			if indeg[c]--; indeg[c] == 0 {
				stack = append(stack, c)
			}
		}
	}
	if seen != len(j.units) {
		return fmt.Errorf("sched: job %d: unit dependencies form a cycle", j.id)
	}
	return nil
}

// CancelJob stops placing a job's units. Copies in flight keep their
// stream slots until Done or Lost is called for them.
func (s *Scheduler) CancelJob(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.byID[id]; j != nil {
		s.removeJob(j)
		s.notify()
	}
}

func (s *Scheduler) removeJob(j *job) {
	if s.byID[j.id] != j {
		return
	}
	delete(s.byID, j.id)
	s.jobs = slices.DeleteFunc(s.jobs, func(o *job) bool { return o == j })
	if s.tenants[j.tenant]--; s.tenants[j.tenant] <= 0 {
		delete(s.tenants, j.tenant)
	}
}

// unhold books that the copies in lost left their streams.
func (s *Scheduler) unhold(lost []Assignment) {
	for _, a := range lost {
		s.dropHeld(a.Tenant)
	}
}

func (s *Scheduler) dropHeld(tenant string) {
	if s.held[tenant]--; s.held[tenant] <= 0 {
		delete(s.held, tenant)
	}
}

// Next returns the unit the stream should run next, if it has room and
// there is one for it: the first ready unit, in job order, that the
// job's policy lets this worker run; else, for dynamic jobs, a backup
// copy of a unit running on another worker.
func (s *Scheduler) Next(workerID string, stream int) (Assignment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.workers[workerID]
	if w == nil || stream < 0 || stream >= len(w.streams) {
		return Assignment{}, false
	}
	j, u, backup := s.find(w, stream, true)
	if u == nil {
		return Assignment{}, false
	}
	return s.dispatch(j, u, w, stream, backup), true
}

// pick reports whether Next would give the stream a unit now.
func (s *Scheduler) pick(w *worker, stream int) bool {
	_, u, _ := s.find(w, stream, false)
	return u != nil
}

// find returns the unit Next gives the stream, and whether it is a
// backup copy; with take false it leaves a ready unit queued.
//
// With jobs of several tenants, the tenant holding the fewest copies on
// streams goes first (then the tenant of the oldest job), and a stream
// takes a unit only when it holds none: a unit queued behind a running
// one waits for as long as that one lasts, which its tenant decides,
// and a worker runs the units queued on all its streams in the order
// they came, on whichever thread frees first, so a unit queued on one
// stream can wait behind another tenant's on any of them. With one unit
// a stream, every unit out runs at once, and Preempt sees what runs.
func (s *Scheduler) find(w *worker, stream int, take bool) (*job, *unit, bool) {
	st := w.streams[stream]
	held := len(st.inFlight)
	runs := func(u *unit) bool { return w.runs(u) && !s.avoid(u, w) }
	if len(s.tenants) <= 1 {
		for _, j := range s.jobs {
			if u := s.ready(j, w, runs, held, take); u != nil {
				return j, u, false
			}
		}
	} else {
		if held > 0 {
			return nil, nil, false
		}
		for _, t := range s.tenantOrder() {
			for _, j := range s.jobs {
				if j.tenant != t {
					continue
				}
				if u := s.ready(j, w, runs, held, take); u != nil {
					return j, u, false
				}
			}
		}
	}
	// Only an idle stream takes a backup: it has nothing better to do,
	// and a stream with work queued would not start the copy soon.
	if s.cfg.NoBackups || held > 0 {
		return nil, nil, false
	}
	for _, j := range s.jobs {
		if j.policy.static() {
			continue
		}
		if u := s.backupFor(j, w); u != nil {
			return j, u, true
		}
	}
	return nil, nil, false
}

// ready returns the first ready unit of job j that its policy lets a
// stream of w holding held copies take (runs: whether w may run the
// unit), and takes it if take is set.
func (s *Scheduler) ready(j *job, w *worker, runs func(*unit) bool, held int, take bool) *unit {
	if held >= j.limit {
		return nil
	}
	q, ok := &j.ready, runs
	if j.policy.static() {
		if q = j.owned[w.ID]; q == nil {
			return nil
		}
	} else {
		if held >= s.maxShare(j) {
			return nil // no unit of the job would pass: skip the scan
		}
		ok = func(u *unit) bool { return runs(u) && held < s.share(j, u) }
	}
	return q.take(ok, take)
}

// tenantOrder returns the tenants of the jobs, those holding fewer
// copies first, then in the order of their oldest job. The slice is
// reused by the next call.
func (s *Scheduler) tenantOrder() []string {
	order := s.byTenant[:0]
	for _, j := range s.jobs {
		if !slices.Contains(order, j.tenant) {
			order = append(order, j.tenant)
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(s.held[a], s.held[b]) })
	s.byTenant = order
	return order
}

// share returns how many units a stream of a worker running op may hold
// at once for dynamic job j: InFlight, or less when the job has fewer
// units of op left than the streams that run op could hold. The streams
// share what is left, so that one stream does not take it all (and a slow
// stream does not sit on a queue of it) while others stand idle; the
// units a slow stream did not take stay for the fast ones, and the few it
// holds are what backup copies must cover.
func (s *Scheduler) share(j *job, u *unit) int {
	return s.shareOf(j, opKey{u.op, u.module})
}

// maxShare is the largest share any unit of dynamic job j may have: a
// stream holding that many takes none of its units, whichever is ready,
// which spares a scan of the ready queue at a large job's end, when
// every stream holds its share.
func (s *Scheduler) maxShare(j *job) int {
	m := 1
	for op, n := range j.left {
		if n > 0 {
			m = max(m, s.shareOf(j, opKey{op, false}), s.shareOf(j, opKey{op, true}))
		}
	}
	return m
}

func (s *Scheduler) shareOf(j *job, k opKey) int {
	streams, cached := s.streamsFor[k]
	if !cached {
		u := &unit{op: k.op, module: k.module}
		for _, w := range s.workers {
			if w.runs(u) {
				streams += len(w.streams)
			}
		}
		if s.streamsFor == nil {
			s.streamsFor = map[opKey]int{}
		}
		s.streamsFor[k] = streams
	}
	share := (j.left[k.op] + streams - 1) / max(streams, 1)
	return max(1, min(j.limit, share))
}

// backupFor picks, among the units out on other workers that w can run,
// the one that would start last: streams run their units in order, so a
// copy queued deep in its stream starts late, and a unit starts when its
// earliest copy does. A unit already running twice, or out on w, gets no
// further copy; copies still queued do not count, as they cost nothing
// yet.
func (s *Scheduler) backupFor(j *job, w *worker) *unit {
	// At most maxBackupScan units are weighed a call, from where the
	// last call stopped: with a thousand streams idle at a job's end, each
	// weighing every unit out, the tail would cost the square of the
	// workers. Units no longer out are passed over, and dropped from the
	// list once a round, when the scan comes back to its start.
	if len(j.running) > 0 && j.backupFrom >= len(j.running) {
		keep := j.running[:0]
		for _, u := range j.running {
			if u.done || len(u.copies) == 0 {
				u.listed = false
				continue
			}
			keep = append(keep, u)
		}
		clear(j.running[len(keep):])
		j.backupFrom %= len(j.running) // the next round starts where this one ended
		j.running = keep
	}
	n := len(j.running)
	if n == 0 {
		return nil
	}
	scan := min(n, maxBackupScan)
	from := j.backupFrom % n
	j.backupFrom = from + scan
	var found *unit
	foundDepth, foundSince := -1, uint64(0)
	// The units of a job mostly share one operation: whether w runs it
	// is looked up once per operation seen in a row.
	var lastOp opKey
	lastRuns, looked := false, false
	for i := range scan {
		u := j.running[(from+i)%n]
		if u.done || len(u.copies) == 0 {
			continue
		}
		if k := (opKey{u.op, u.module}); !looked || k != lastOp {
			lastOp, lastRuns, looked = k, w.runs(u), true
		}
		if !lastRuns || u.failedOnWorker(w.ID) {
			continue // a backup must not go where the unit failed
		}
		start, running, mine := -1, 0, false
		since := s.events + 1
		for _, c := range u.copies {
			d, h := depth(c)
			if d == 0 {
				running++
				since = min(since, h)
			}
			if start < 0 || d < start {
				start = d
			}
			mine = mine || c.worker == w.ID
		}
		if mine || running >= 2 {
			continue
		}
		// Among running units, the one running longest is likely on
		// the slowest worker.
		if start > foundDepth || start == 0 && foundDepth == 0 && since < foundSince {
			found, foundDepth, foundSince = u, start, since
		}
	}
	return found
}

// maxBackupScan bounds the units out that one search for a backup copy
// weighs.
const maxBackupScan = 128

// depth returns how many units are ahead of copy c on its stream, and,
// if none is, since when (in events) c has been running.
func depth(c copyRef) (int, uint64) {
	d, _ := c.st.index(c.seq)
	return d, c.st.headSince
}

func (s *Scheduler) dispatch(j *job, u *unit, w *worker, stream int, backup bool) Assignment {
	s.seq++
	u.attempts++
	a := Assignment{Job: j.id, Unit: u.id, Worker: w.ID, Stream: stream, Attempt: u.attempts, Backup: backup, Tenant: j.tenant, Seq: s.seq}
	s.held[j.tenant]++
	u.copies = append(u.copies, copyRef{seq: s.seq, worker: w.ID, st: w.streams[stream]})
	if !u.listed {
		u.listed = true
		j.running = append(j.running, u)
	}
	st := w.streams[stream]
	if len(st.inFlight) == 0 {
		st.headSince = s.events
	}
	st.inFlight = append(st.inFlight, a) // s.seq is the largest yet
	return a
}

// release frees a's stream slot, if the stream still exists, and ticks
// the event clock.
func (s *Scheduler) release(a Assignment) {
	s.events++
	if w := s.workers[a.Worker]; w != nil && a.Stream >= 0 && a.Stream < len(w.streams) {
		st := w.streams[a.Stream]
		if i, ok := st.index(a.Seq); ok {
			if i == 0 {
				st.headSince = s.events // the next unit starts now
			}
			st.inFlight = slices.Delete(st.inFlight, i, i+1)
			s.dropHeld(a.Tenant)
		}
	}
}

// lookup returns a's job and unit, and removes a from the unit's copies.
func (s *Scheduler) lookup(a Assignment) (*job, *unit, bool) {
	j := s.byID[a.Job]
	if j == nil {
		return nil, nil, false
	}
	u := j.byID[a.Unit]
	if u == nil {
		return nil, nil, false
	}
	n := len(u.copies)
	u.copies = slices.DeleteFunc(u.copies, func(c copyRef) bool { return c.seq == a.Seq })
	return j, u, len(u.copies) < n
}

// Done records a unit's result from assignment a and frees its slot.
// counted is true for the first result of the unit, the one to keep;
// jobDone is true when that was the job's last unit, and the job leaves
// the scheduler. A result for an unknown, canceled or failed job, or for
// a unit already done, is not counted.
func (s *Scheduler) Done(a Assignment) (counted, jobDone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(a)
	before := s.readied
	j, u, _ := s.lookup(a)
	if j == nil || u.done {
		s.wake(&a, 0, false, opKey{})
		return false, false
	}
	// The next unit on a's stream starts now: an idle stream may want a
	// backup copy of it.
	defer func() { s.wake(&a, int(s.readied-before), !j.policy.static() && !jobDone, opKey{u.op, u.module}) }()
	u.done = true
	u.queued = false // a result from a copy thought lost may beat the requeued one
	j.remaining--
	j.left[u.op]--
	for _, c := range u.children {
		if c.waiting--; c.waiting == 0 && !c.done {
			s.enqueue(j, c)
		}
	}
	if j.remaining == 0 {
		s.removeJob(j)
		return true, true
	}
	return true, false
}

// Lost records that assignment a will bring no result: its stream broke.
// The unit runs again unless another copy is still out. If the unit has
// been lost MaxLosses times, its job fails and leaves the scheduler, and
// the returned error says so.
func (s *Scheduler) Lost(a Assignment) *UnitError {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(a)
	before := s.readied
	err := s.lose(a)
	s.wake(&a, int(s.readied-before), false, opKey{})
	return err
}

func (s *Scheduler) lose(a Assignment) *UnitError {
	j, u, had := s.lookup(a)
	if j == nil || !had || u.done || len(u.copies) > 0 {
		return nil
	}
	u.losses++
	if u.losses >= s.cfg.MaxLosses {
		s.removeJob(j)
		return &UnitError{Job: j.id, Unit: u.id,
			Err: fmt.Errorf("lost %d times, last on worker %s: %w", u.losses, a.Worker, ErrTooManyAttempts)}
	}
	s.enqueue(j, u)
	return nil
}

// Fail records that unit a's operation failed with cause. The unit runs
// again, on another worker where one runs its operation, until it failed
// the job's MaxTries times: then the job fails and leaves the scheduler,
// and the returned error names the unit and cause. retried reports that
// the unit runs again, tries how many times it failed so far. All are
// zero if the job was gone already.
func (s *Scheduler) Fail(a Assignment, cause error) (tries int, retried bool, err *UnitError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(a)
	before := s.readied
	defer func() { s.wake(&a, int(s.readied-before), false, opKey{}) }()
	j, u, had := s.lookup(a)
	if j == nil || u.done {
		return 0, false, nil
	}
	if cause == nil {
		cause = errors.New("unit failed")
	}
	if had {
		u.fails++
		if !u.failedOnWorker(a.Worker) {
			u.failedOn = append(u.failedOn, a.Worker)
		}
	}
	if u.fails >= j.maxTries {
		s.removeJob(j)
		return u.fails, false, &UnitError{Job: j.id, Unit: u.id, Tries: u.fails, Err: cause}
	}
	if len(u.copies) > 0 {
		return u.fails, true, nil // another copy is still out
	}
	if j.policy.static() && u.failedOnWorker(u.owner) {
		if w := s.elsewhere(u, u.owner); w != nil {
			u.owner = w.ID
		}
	}
	s.enqueue(j, u)
	return u.fails, true, nil
}

// enqueue makes a ready unit available to Next.
func (s *Scheduler) enqueue(j *job, u *unit) {
	if u.queued || u.done || len(u.copies) > 0 {
		return
	}
	if !j.policy.static() {
		j.ready.push(u)
		s.readied++
		return
	}
	if !s.canRun(u.owner, u) {
		s.plan(j)
		return
	}
	q := j.owned[u.owner]
	if q == nil {
		q = &queue{}
		j.owned[u.owner] = q
	}
	q.push(u)
	s.readied++
}

func (s *Scheduler) canRun(worker string, u *unit) bool {
	w := s.workers[worker]
	return w != nil && w.runs(u)
}

// runs reports whether the worker runs u's operation.
func (w *worker) runs(u *unit) bool {
	return w.ops[u.op] || u.module && w.ops[ModuleOps]
}

// failedOn reports whether u's operation failed on worker id.
func (u *unit) failedOnWorker(id string) bool { return slices.Contains(u.failedOn, id) }

// avoid reports whether w should not take u: u failed on w, and another
// live worker that runs it has not failed it.
func (s *Scheduler) avoid(u *unit, w *worker) bool {
	if len(u.failedOn) == 0 || !u.failedOnWorker(w.ID) {
		return false
	}
	return s.elsewhere(u, w.ID) != nil
}

// elsewhere returns a live worker other than not that runs u and on which
// u has not failed, in registration order; nil if there is none.
func (s *Scheduler) elsewhere(u *unit, not string) *worker {
	for _, id := range s.order {
		if w := s.workers[id]; id != not && w.runs(u) && len(w.streams) > 0 && !u.failedOnWorker(id) {
			return w
		}
	}
	return nil
}

// plan gives every unfinished unit of a static job without a live owner
// that runs its operation an owner, sharing them by the job's policy among
// the live workers that run the operation. Units for which no such worker
// exists stay without an owner until SetWorker brings one.
func (s *Scheduler) plan(j *job) {
	var byOp map[string][]*unit // units of one operation run on the same workers
	var ops []string
	for _, u := range j.units {
		if u.done || len(u.copies) > 0 || s.canRun(u.owner, u) {
			continue
		}
		if byOp == nil {
			byOp = map[string][]*unit{}
		}
		if _, seen := byOp[u.op]; !seen {
			ops = append(ops, u.op)
		}
		byOp[u.op] = append(byOp[u.op], u)
		u.queued = false // drop it from a dead owner's queue
		u.owner = ""
	}
	for id := range j.owned {
		if s.workers[id] == nil {
			delete(j.owned, id)
		}
	}
	for _, op := range ops {
		var eligible []Worker
		for _, id := range s.order {
			if w := s.workers[id]; w.runs(byOp[op][0]) {
				eligible = append(eligible, w.Worker)
			}
		}
		shares := Shares(j.policy, len(byOp[op]), eligible)
		units := byOp[op]
		for i, n := range shares {
			for _, u := range units[:n] {
				u.owner = eligible[i].ID
				if u.waiting == 0 {
					s.enqueue(j, u)
				}
			}
			units = units[n:]
		}
	}
}

// Blocked returns an error if some unfinished unit of the job has no live
// worker that runs its operation, so the job cannot finish until one
// registers. It returns nil for a job that can progress or is unknown.
func (s *Scheduler) Blocked(jobID uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.byID[jobID]
	if j == nil {
		return nil
	}
	checked := map[string]bool{}
	for _, u := range j.units {
		if u.done || checked[u.op] {
			continue
		}
		checked[u.op] = true
		found := false
		for _, w := range s.workers {
			if w.runs(u) && len(w.streams) > 0 {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("sched: job %d: no live worker runs operation %q; start a worker that offers it", j.id, u.op)
		}
	}
	return nil
}

// Preempt takes back copies so that every tenant with ready units gets
// its share of the streams, and returns them: the caller stops them on
// their workers (a result that arrives anyway still counts, as any
// copy's first result does). Their units run again later, with no loss
// or failed try counted.
//
// A tenant W whose ready unit no idle stream can take gets a stream of
// another tenant V that runs at least two units more than W (so a move
// never reverses one just made, and the tenants' running units end at
// most one apart): among those, a stream running a backup copy first,
// then one of the tenant running the most, then a unit taken back fewer
// times, then the unit started last,
// which loses the least work. Every copy of other tenants on that
// stream is taken back, the queued ones too, so W's unit runs next
// there. A tenant running its fair share or more takes nothing; a
// tenant's own units never give way to each other. With jobs of one
// tenant only, Preempt does nothing.
//
// The server calls it after events (Changed); its cost is a pass over
// the streams and the jobs when more than one tenant has jobs.
func (s *Scheduler) Preempt() []Assignment {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tenants) < 2 {
		return nil
	}
	// Tenants' waiting units: the first ready unit of each tenant's
	// jobs, and how many are ready (up to the streams there are).
	type want struct {
		tenant string
		j      *job
		u      *unit
		n      int
	}
	var wants []*want
	for _, j := range s.jobs {
		var w *want
		for _, x := range wants {
			if x.tenant == j.tenant {
				w = x
			}
		}
		if w != nil && w.n >= s.nstreams {
			continue
		}
		for _, q := range j.queues() {
			for i := q.head; i < len(q.items) && (w == nil || w.n < s.nstreams); i++ {
				u := q.items[i]
				if !u.queued {
					continue
				}
				if w == nil {
					w = &want{tenant: j.tenant, j: j, u: u}
					wants = append(wants, w)
				}
				w.n++
			}
		}
	}
	// Copies queued behind a running one (sent while one tenant had
	// jobs) come back: with several tenants a stream holds one unit.
	var out []Assignment
	for _, id := range s.order {
		if s.workers[id].NoPreempt {
			continue
		}
		for _, st := range s.workers[id].streams {
			if len(st.inFlight) > 1 {
				out = append(out, s.takeBack(st.inFlight[1:])...)
			}
		}
	}
	if len(wants) == 0 {
		s.wakeAfter(out, nil)
		return out
	}
	// What each tenant runs (the heads of the streams), the idle
	// streams, and the streams that may give way: a backup copy first,
	// then by tenant, each tenant's in the order they give way (taken
	// back fewer times before, then started last). Sorted once, so that
	// a call costs O(streams log streams), not streams for every stream
	// it gives (BenchmarkPreempt).
	type cand struct {
		st   *stream
		wk   *worker
		head Assignment // what st ran when the call began
		pos  int        // in worker order, then stream order: the last tie-break
	}
	run := map[string]int{}
	var idle, busy []cand
	for _, id := range s.order {
		wk := s.workers[id]
		for _, st := range wk.streams {
			if len(st.inFlight) == 0 {
				idle = append(idle, cand{st: st, wk: wk})
				continue
			}
			run[st.inFlight[0].Tenant]++
			if !wk.NoPreempt {
				busy = append(busy, cand{st, wk, st.inFlight[0], len(busy)})
			}
		}
	}
	// Most calls find every tenant at its share and no stream idle: they
	// end here, at O(streams).
	if len(idle) == 0 && !slices.ContainsFunc(wants, func(w *want) bool {
		for v, n := range run {
			if v != w.tenant && n >= run[w.tenant]+2 {
				return true
			}
		}
		return false
	}) {
		s.wakeAfter(out, nil)
		return out
	}
	var backups []cand
	victims := map[string][]cand{}
	for _, c := range busy {
		if c.head.Backup {
			backups = append(backups, c)
		} else {
			victims[c.head.Tenant] = append(victims[c.head.Tenant], c)
		}
	}
	// preempted is how many copies of each candidate's unit were taken
	// back, kept current as the call takes more; copies counts the
	// candidates of each unit (a unit may run twice: a backup copy).
	preempted := map[*stream]int{}
	copies := map[[2]uint64]int{}
	for _, c := range busy {
		copies[[2]uint64{c.head.Job, c.head.Unit}]++
	}
	var tenants []string
	for v, vs := range victims {
		tenants = append(tenants, v)
		for _, c := range vs {
			preempted[c.st] = s.timesPreempted(c.head)
		}
	}
	for _, c := range backups {
		preempted[c.st] = s.timesPreempted(c.head)
	}
	// better orders the streams that give way within a tenant.
	better := func(a, b cand) int {
		if pa, pb := preempted[a.st], preempted[b.st]; pa != pb {
			return cmp.Compare(pa, pb)
		}
		if a.st.headSince != b.st.headSince {
			return cmp.Compare(b.st.headSince, a.st.headSince)
		}
		return cmp.Compare(a.pos, b.pos)
	}
	for _, vs := range victims {
		slices.SortFunc(vs, better)
	}
	taken := map[*stream]bool{} // streams given to a waiting tenant
	for range s.nstreams {
		// The waiting tenant running least, in job order on ties.
		var w *want
		for _, x := range wants {
			if x.n > 0 && (w == nil || run[x.tenant] < run[w.tenant]) {
				w = x
			}
		}
		if w == nil {
			break
		}
		fits := func(c cand) bool {
			if taken[c.st] {
				return false
			}
			if w.j.policy.static() {
				// A static job's units wait for their owners: any
				// owner with one waiting (not only the first found, in
				// the map order of the owners).
				q := w.j.owned[c.wk.ID]
				return q != nil && q.take(func(*unit) bool { return true }, false) != nil
			}
			return c.wk.runs(w.u) && !s.avoid(w.u, c.wk)
		}
		// gives reports whether a stream running tenant v's unit may
		// give way to w.
		gives := func(v string) bool { return v != w.tenant && run[v] >= run[w.tenant]+2 }
		var free, victim *stream
		if i := slices.IndexFunc(idle, fits); i >= 0 {
			free = idle[i].st
		}
		if free == nil {
			// A backup copy first, of the tenant running most.
			var best *cand
			for i, c := range backups {
				// fits first: a stream taken already runs nothing.
				if !fits(c) || !gives(c.head.Tenant) {
					continue
				}
				if v, b := c.head.Tenant, best; b == nil || run[v] > run[b.head.Tenant] ||
					run[v] == run[b.head.Tenant] && better(c, *b) < 0 {
					best = &backups[i]
				}
			}
			if best != nil {
				victim = best.st
			}
		}
		if free == nil && victim == nil {
			// Then of the tenant running most that may give way (of
			// those running as many, the stream that gives way first).
			slices.SortFunc(tenants, func(a, b string) int { return cmp.Compare(run[b], run[a]) })
			var best *cand
			for _, v := range tenants {
				if best != nil && run[v] < run[best.head.Tenant] {
					break
				}
				if !gives(v) {
					continue
				}
				vs := victims[v]
				for len(vs) > 0 && taken[vs[0].st] {
					vs = vs[1:] // taken streams gather at the front
				}
				victims[v] = vs
				if i := slices.IndexFunc(vs, fits); i >= 0 && (best == nil || better(vs[i], *best) < 0) {
					best = &vs[i]
				}
			}
			if best != nil {
				victim = best.st
			}
		}
		if victim != nil {
			// Another copy of the victim's unit now counts one more
			// preemption: it gives way later.
			h := victim.inFlight[0]
			if k := [2]uint64{h.Job, h.Unit}; copies[k] > 1 {
				for _, c := range busy {
					if c.st != victim && c.head.Job == h.Job && c.head.Unit == h.Unit {
						preempted[c.st]++
					}
				}
				slices.SortFunc(victims[h.Tenant], better)
			}
		}
		switch {
		case free != nil:
			// Next gives it w's unit: the tenant running least goes first.
			taken[free] = true
			run[w.tenant]++
			w.n--
		case victim != nil:
			taken[victim] = true
			run[victim.inFlight[0].Tenant]-- // not taken before: it runs its head still
			run[w.tenant]++
			w.n--
			out = append(out, s.takeBack(victim.inFlight)...)
		default:
			w.n = 0 // nothing to give it now
		}
	}
	s.wakeAfter(out, taken)
	return out
}

// wakeAfter wakes the streams that may take the units of the copies
// Preempt took back, and the streams it freed.
func (s *Scheduler) wakeAfter(back []Assignment, freed map[*stream]bool) {
	if len(back) == 0 {
		return
	}
	s.wake(nil, len(back), false, opKey{})
	for st := range freed {
		wakeStream(st)
	}
}

// timesPreempted returns how many copies of a's unit Preempt took back.
func (s *Scheduler) timesPreempted(a Assignment) int {
	if j := s.byID[a.Job]; j != nil {
		if u := j.byID[a.Unit]; u != nil {
			return u.preempted
		}
	}
	return 0
}

// takeBack removes the copies back from their stream, requeues their
// units, and returns the copies.
func (s *Scheduler) takeBack(back []Assignment) []Assignment {
	back = slices.Clone(back) // release edits the stream's slice
	var out []Assignment
	for _, a := range back {
		s.release(a)
		out = append(out, a)
		j, u, had := s.lookup(a)
		if j == nil || !had || u.done {
			continue
		}
		u.preempted++
		s.enqueue(j, u)
	}
	return out
}

// queues returns the job's ready queues: the shared one of a dynamic
// job, each worker's of a static one.
func (j *job) queues() []*queue {
	if !j.policy.static() {
		return []*queue{&j.ready}
	}
	out := make([]*queue, 0, len(j.owned))
	for _, q := range j.owned {
		out = append(out, q)
	}
	return out
}
