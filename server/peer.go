package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/transport"
)

// maxResult bounds a result message from a worker.
const maxResult = 1 << 30

// peer is a live worker: its registration and the data-plane session the
// server dialed to it, with one stream per thread the worker lends.
type peer struct {
	id       string
	sess     *transport.Session
	cancel   context.CancelFunc
	lastSeen atomic.Int64 // unix nanoseconds
	// loops counts the stream loops, which the watcher waits for.
	loops sync.WaitGroup
	// lost are the copies lost with the peer: those its stream loops
	// held when they ended, and those the scheduler still gave it (often
	// the same ones), for the log.
	lostMu sync.Mutex
	lost   map[flightKey]bool

	mu      sync.Mutex
	ctx     context.Context // the peer's lifetime: canceled by drop; only for new stream loops
	reg     api.Register
	streams []*pstream
	dead    bool
	figSeq  uint64
	figWait map[uint64]chan api.Result

	// computing is the units executing on the worker by job, from its
	// last heartbeat.
	computing map[uint64]int
	// lastBeat is when its last heartbeat came (either way), and
	// maxBeatGap the longest time between two (api.WorkerInfo.MaxBeatGapNanos).
	lastBeat   time.Time
	maxBeatGap time.Duration

	// busy is the worker's compute fraction over this session.
	busy *busy
	// clock places the worker's timing of units on the server's clock.
	clock *workerClock
}

func (p *peer) noteLost(a sched.Assignment) {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	if p.lost == nil {
		p.lost = map[flightKey]bool{}
	}
	p.lost[keyOf(a)] = true
}

func (p *peer) lostCount() int {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	return len(p.lost)
}

func (p *peer) seen() { p.lastSeen.Store(time.Now().UnixNano()) }

func (p *peer) silence() time.Duration { return time.Since(time.Unix(0, p.lastSeen.Load())) }

func (p *peer) addresses() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reg.Addresses
}

// pstream is one stream of a peer: units go out, results come back on it.
type pstream struct {
	idx    int
	st     *transport.Stream
	cancel context.CancelFunc

	mu       sync.Mutex
	inFlight map[flightKey]flight
	// stops are the copies the scheduler took back (Preempt) whose
	// preemption request the stream's sender has yet to write, after
	// the copy itself; preempted marks them until their flight is added.
	stops     []sched.Assignment
	preempted map[flightKey]bool
	stopWake  chan struct{} // 1-buffered: stops has entries
}

// flight is a unit's copy out on a stream, and when it was sent.
// preempted marks a copy the scheduler took back: its error result is
// not a failed try, and its loss is not a loss.
type flight struct {
	a         sched.Assignment
	sent      time.Time
	preempted bool
}

// flightKey names a unit's copy as its Result does.
type flightKey struct {
	job, unit uint64
	attempt   uint32
}

func keyOf(a sched.Assignment) flightKey {
	return flightKey{a.Job, a.Unit, uint32(a.Attempt)}
}

func (ps *pstream) add(a sched.Assignment) {
	ps.mu.Lock()
	k := keyOf(a)
	ps.inFlight[k] = flight{a: a, sent: time.Now(), preempted: ps.preempted[k]}
	ps.mu.Unlock()
}

// preempt marks copy a, which the scheduler took back, and queues its
// preemption request for the stream's sender.
func (ps *pstream) preempt(a sched.Assignment) {
	ps.mu.Lock()
	k := keyOf(a)
	if f, ok := ps.inFlight[k]; ok {
		f.preempted = true
		ps.inFlight[k] = f
	} else {
		// Next handed it out and the sender has not added it yet: it
		// will, before it writes the request.
		if ps.preempted == nil {
			ps.preempted = map[flightKey]bool{}
		}
		ps.preempted[k] = true
	}
	ps.stops = append(ps.stops, a)
	ps.mu.Unlock()
	select {
	case ps.stopWake <- struct{}{}:
	default:
	}
}

// takeStops returns the preemption requests to write.
func (ps *pstream) takeStops() []sched.Assignment {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := ps.stops
	ps.stops = nil
	for _, a := range out {
		delete(ps.preempted, keyOf(a))
	}
	return out
}

func (ps *pstream) take(k flightKey) (flight, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	f, ok := ps.inFlight[k]
	delete(ps.inFlight, k)
	return f, ok
}

func (ps *pstream) takeAll() []flight {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]flight, 0, len(ps.inFlight))
	for _, f := range ps.inFlight {
		out = append(out, f)
	}
	clear(ps.inFlight)
	return out
}

// startPeer makes a registered worker live: it opens reg.Threads streams
// on sess and gives the worker to the scheduler. A live peer of the same
// ID is dropped first.
func (s *Server) startPeer(id string, reg api.Register, sess *transport.Session) error {
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{id: id, sess: sess, cancel: cancel, ctx: ctx, reg: reg, figWait: map[uint64]chan api.Result{}, busy: newBusy(), clock: newWorkerClock()}
	p.seen()
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		cancel()
		sess.Close()
		return kindf(errUnavailable, "the server is shutting down; register again once it is back")
	}
	old := s.peers[id]
	s.peers[id] = p
	delete(s.gone, id)
	s.bg.Add(1) // the watcher; added under s.mu so Run's Wait cannot have begun
	s.mu.Unlock()
	if old != nil {
		// Its streams' units must leave the scheduler before the new
		// streams, which have the same numbers, arrive.
		s.kill(old)
		lost, errs := s.sched.RemoveWorker(id)
		s.lostAll(lost, errs)
	}
	s.resize(p, reg.Threads)
	s.setSched(p, reg)
	p.loops.Go(func() { s.beatPeer(ctx, p) })
	go func() {
		defer s.bg.Done()
		s.watch(ctx, p)
	}()
	return nil
}

// watch drops the peer when its session ends, and waits for its stream
// loops once it is dropped.
func (s *Server) watch(ctx context.Context, p *peer) {
	select {
	case <-p.sess.Done():
		err := p.sess.Err()
		if err == nil {
			err = transport.ErrClosed
		}
		s.drop(p, fmt.Errorf("data-plane session ended: %w", err))
	case <-ctx.Done():
	}
	p.loops.Wait()
}

// maxUnitMem returns the largest memory a unit may ask for on some live
// worker (api.Register.MaxUnitMem), or 0 when there is no live worker or
// one does not say (then nothing is refused at submit).
func (s *Server) maxUnitMem() int64 {
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	var most int64
	for _, p := range peers {
		p.mu.Lock()
		m := p.reg.MaxUnitMem
		p.mu.Unlock()
		if m == 0 {
			return 0
		}
		most = max(most, m)
	}
	return most
}

// update applies a registration with unchanged addresses to a live peer:
// threads (streams) and operations.
func (s *Server) update(p *peer, reg api.Register) {
	p.mu.Lock()
	old := p.reg
	p.reg = reg
	p.mu.Unlock()
	if reg.Threads > old.Threads {
		s.resize(p, reg.Threads)
		s.setSched(p, reg)
	} else {
		s.setSched(p, reg)
		s.resize(p, reg.Threads)
	}
	if reg.Threads != old.Threads {
		s.log.Info("worker changed its threads", "worker", p.id, "threads", reg.Threads, "was", old.Threads)
	}
}

// setSched tells the scheduler what the peer offers.
func (s *Server) setSched(p *peer, reg api.Register) {
	lost, errs := s.sched.SetWorker(sched.Worker{ID: p.id, Streams: reg.Threads, Ops: reg.Ops, NoPreempt: !reg.Preempt})
	s.lostAll(lost, errs)
}

// resize opens or closes streams until the peer has n.
func (s *Server) resize(p *peer, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return
	}
	for len(p.streams) < n {
		st, err := p.sess.OpenStream(p.ctx)
		if err != nil {
			return // the session ended; the watcher drops the peer
		}
		sctx, cancel := context.WithCancel(p.ctx)
		ps := &pstream{idx: len(p.streams), st: st, cancel: cancel, inFlight: map[flightKey]flight{}, stopWake: make(chan struct{}, 1)}
		p.streams = append(p.streams, ps)
		p.loops.Go(func() { s.runStream(sctx, p, ps) })
	}
	for len(p.streams) > n {
		p.streams[len(p.streams)-1].cancel()
		p.streams = p.streams[:len(p.streams)-1]
	}
	p.busy.setThreads(len(p.streams))
}

// kill ends a peer's session and loops. It reports false if the peer was
// dead already.
func (s *Server) kill(p *peer) bool {
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return false
	}
	p.dead = true
	p.mu.Unlock()
	p.cancel()
	p.sess.Close()
	return true
}

// drop declares a peer dead, because of cause (nil: deregistered or
// shutting down): its session closes and its units run elsewhere.
func (s *Server) drop(p *peer, cause error) {
	if !s.kill(p) {
		return
	}
	use := p.busy.totals()
	s.mu.Lock()
	current := s.peers[p.id] == p
	closing := s.closing
	if current {
		delete(s.peers, p.id)
		if cause != nil && !closing {
			s.gone[p.id] = death{at: time.Now(), cause: cause.Error(), usage: use}
		}
	}
	s.mu.Unlock()
	if !current {
		return
	}
	lost, errs := s.sched.RemoveWorker(p.id)
	for _, a := range lost {
		p.noteLost(a)
	}
	s.lostAll(lost, errs)
	// Logged once the stream loops let go of their copies too: counting
	// only the scheduler's said "units 0" for a worker lost mid-job. A
	// goroutine, as drop may run in one of those loops; the peer's
	// watcher, which Run waits for, is counted in bg until they end.
	s.bg.Go(func() {
		p.loops.Wait()
		if cause != nil && !closing {
			s.log.Warn("worker lost; its units run elsewhere", "worker", p.id, "units", p.lostCount(), "err", cause)
		} else {
			s.log.Info("worker removed", "worker", p.id, "units", p.lostCount())
		}
	})
}

// death is a worker the server declared dead: when and why, and its
// compute figures up to then (busy.totals), which the listing keeps.
type death struct {
	at    time.Time
	cause string
	usage
}

// lostAll books the assignments the scheduler took back from a worker
// and fails the jobs it gave up.
func (s *Server) lostAll(lost []sched.Assignment, errs []*sched.UnitError) { s.lc.LostAll(lost, errs) }

// lose reports that a copy will bring no result.
func (s *Server) lose(a sched.Assignment, why error) {
	msg := fmt.Sprintf("lost: its stream to worker %s broke", a.Worker)
	if why != nil {
		msg += ": " + why.Error()
	}
	s.lc.Lost(a, msg)
}

// runStream drives one stream: a sender of units and a receiver of
// results. When either ends, the stream closes and what was in flight on
// it runs elsewhere.
func (s *Server) runStream(ctx context.Context, p *peer, ps *pstream) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var why error // why the stream ended, if it broke
	wg.Go(func() {
		defer cancel()
		why = s.receive(ctx, p, ps)
	})
	s.send(ctx, p, ps)
	cancel()
	ps.st.Close()
	wg.Wait()
	for _, f := range ps.takeAll() {
		p.busy.lost()
		if f.preempted {
			s.lc.Preempted(f.a)
			continue
		}
		p.noteLost(f.a)
		s.lose(f.a, why)
	}
}

// send writes the units the scheduler picks for the stream.
func (s *Server) send(ctx context.Context, p *peer, ps *pstream) {
	var buf, scratch []byte
	var pc *api.ParamCache // long parameter values sent once per stream
	p.mu.Lock()
	if p.reg.ParamCache {
		pc = api.NewParamCache()
	}
	p.mu.Unlock()
	for ctx.Err() == nil {
		// Preemption requests follow the copies they name: this loop
		// wrote those already.
		for _, a := range ps.takeStops() {
			if err := s.writeStop(ctx, ps, a); err != nil {
				return
			}
		}
		changed := s.sched.Wait(p.id, ps.idx)
		a, ok := s.sched.Next(p.id, ps.idx)
		if !ok {
			select {
			case <-changed:
				continue
			case <-ps.stopWake:
				continue
			case <-ctx.Done():
				return
			}
		}
		j, first := s.lc.Dispatched(a)
		if j == nil {
			continue // the job ended meanwhile
		}
		var err error
		buf, scratch, err = runOf(j).message(s, j, a, pc, buf[:0], scratch)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				s.metrics.unitFailures.Inc()
			}
			s.lc.Unsent(a, err)
			continue
		}
		if first {
			s.lc.Started(ctx, a, p.id) // marks the job running, with its start time
		}
		ps.add(a)
		p.busy.sent()
		if err := ps.st.WriteMessage(ctx, buf); err != nil {
			return
		}
		s.log.Debug("unit sent", "job", a.Job, "unit", a.Unit, "worker", p.id, "stream", ps.idx, "bytes", len(buf))
	}
}

// receive reads results from the stream. It returns why the stream
// broke, or nil if it ended in order.
func (s *Server) receive(ctx context.Context, p *peer, ps *pstream) error {
	for {
		b, err := ps.st.ReadMessage(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			s.log.Debug("stream ended", "worker", p.id, "stream", ps.idx, "err", err)
			return err
		}
		var res api.Result
		if err := res.Decode(b, maxResult); err != nil {
			err = fmt.Errorf("malformed result on stream %d: %w", ps.idx, err)
			s.drop(p, err)
			return err
		}
		if res.Job == 0 {
			p.deliverFigures(res)
			continue
		}
		f, ok := ps.take(flightKey{res.Job, res.ID, res.Attempt})
		if !ok {
			s.log.Debug("result for no unit in flight; dropped", "job", res.Job, "unit", res.ID, "worker", p.id)
			ps.st.Release(b)
			continue
		}
		if f.preempted && res.Err != "" {
			// Stopped as asked (or failed on its own meanwhile): the
			// unit was requeued when it was taken back.
			p.seen()
			p.busy.back(time.Duration(res.ComputeNanos))
			s.lc.Preempted(f.a)
			ps.st.Release(b)
			continue
		}
		a := f.a
		now := time.Now()
		sp := span{UnitSpan: api.UnitSpan{Unit: res.ID, Attempt: res.Attempt, Worker: p.id, Stream: ps.idx,
			Sent: f.sent.UTC(), Received: now.UTC(), ComputeNanos: res.ComputeNanos, Error: res.Err}}
		if p.clock.observe(f.sent, now, res.Timing) {
			sp.clk, sp.timing = p.clock, res.Timing
		}
		s.spans.add(res.Job, sp)
		if s.log.Enabled(ctx, slog.LevelDebug) { // spares the hot path the arguments
			s.log.Debug("result received", "job", res.Job, "unit", res.ID, "worker", p.id, "stream", ps.idx,
				"bytes", len(res.Output), "compute", time.Duration(res.ComputeNanos), "err", res.Err)
		}
		p.seen() // a result is a sign of life too
		p.busy.back(time.Duration(res.ComputeNanos))
		s.onResult(ctx, p, a, &res)
		ps.st.Release(b) // onResult keeps no reference to the output
	}
}

// onResult books one result: the first for a unit counts.
func (s *Server) onResult(ctx context.Context, p *peer, a sched.Assignment, res *api.Result) {
	j := s.lc.Job(a.Job)
	if j == nil {
		s.lc.Stale(a) // the job ended meanwhile
		return
	}
	if res.Err != "" {
		s.metrics.unitFailures.Inc()
		s.lc.Failed(a, p.id, res.Err)
		return
	}
	r := runOf(j)
	id, have := j.Result(a.Unit)
	stored := ""
	if !have {
		// Another copy of a repeated unit may have given these very bytes.
		twin, same := r.twinOf(a.Unit, res.Output)
		if same {
			id = twin
		} else {
			var err error
			// The result is in hand: store it even if the stream is closing.
			if id, err = s.storeResult(context.WithoutCancel(ctx), res.Output); err != nil {
				s.metrics.unitFailures.Inc()
				s.lc.Failed(a, "", fmt.Sprintf("storing its result failed: %v", err))
				return
			}
			stored = id
			r.keepTwin(a.Unit, id, res.Output)
		}
	}
	counted, ended := s.lc.Result(j, a, p.id, id, res.ComputeNanos)
	if stored != "" {
		s.unpin(stored) // the job refers to it now
		if ended {
			// The job ended while the result was stored: remove it
			// with the rest of the job's intermediate blobs.
			s.dropIntermediates(j)
		}
	}
	if !ended {
		s.metrics.result(p.id, res, counted)
	}
}

// persist runs a small state write that must not depend on a request's or
// stream's context.
func (s *Server) persist(fn func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fn(ctx); err != nil {
		s.log.Warn("state write failed", "err", err)
	}
}

// storeResult stores a unit's result and returns its blob ID, pinned
// (the caller unpins it once the run refers to it). Identical results
// (every copy of a repeated job) are stored once.
func (s *Server) storeResult(ctx context.Context, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	id := hex.EncodeToString(sum[:])
	s.pin(id)
	// Servers sharing the blob store remove blobs this one stored: it
	// asks the store each time.
	if !s.shared && s.known.has(id) {
		return id, nil
	}
	if _, err := s.results.Stat(id); err != nil {
		if _, _, err := s.results.Put(ctx, bytes.NewReader(data)); err != nil {
			s.unpin(id)
			return "", err
		}
	}
	s.known.add(id)
	return id, nil
}

// figures asks the worker for its current figures: a figures request on
// stream 0, which the worker answers as soon as it reads it, ahead of the
// units queued for its threads.
func (p *peer) figures(ctx context.Context) (api.Register, error) {
	out, err := p.ask(ctx, api.OpFigures, nil, "figures", figuresTimeout)
	if err != nil {
		return api.Register{}, err
	}
	var reg api.Register
	if err := json.Unmarshal(out, &reg); err != nil {
		return api.Register{}, kindf(errUnreachable, "worker %s sent malformed figures: %v", p.id, err)
	}
	return reg, nil
}

// ask sends the worker a request of reserved operation op (api.OpFigures,
// api.OpHeartbeat) with params on stream 0 and returns the Output of its
// answer, which the worker sends as soon as it reads the request, ahead
// of the units queued for its threads. what names the request in errors.
func (p *peer) ask(ctx context.Context, op string, params map[string]string, what string, timeout time.Duration) ([]byte, error) {
	p.mu.Lock()
	if p.dead || len(p.streams) == 0 {
		p.mu.Unlock()
		return nil, kindf(errConflict, "worker %s is not live; it cannot be asked for fresh %s", p.id, what)
	}
	st := p.streams[0].st
	p.figSeq++
	id := p.figSeq
	ch := make(chan api.Result, 1)
	p.figWait[id] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.figWait, id)
		p.mu.Unlock()
	}()
	req := api.Unit{ID: id, Attempt: 1, Op: op, Params: params}
	b, _ := req.MarshalBinary()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := st.WriteMessage(ctx, b); err != nil {
		return nil, kindf(errUnreachable, "ask worker %s for %s: %v", p.id, what, err)
	}
	var res api.Result
	select {
	case res = <-ch:
	case <-ctx.Done():
		return nil, kindf(errTimeout, "worker %s did not send its %s within %v", p.id, what, timeout)
	}
	if res.Err != "" {
		return nil, kindf(errUnreachable, "worker %s refused to send its %s: %w", p.id, what, refusedError(res.Err))
	}
	return res.Output, nil
}

// writeStop writes the preemption request for copy a on its stream.
func (s *Server) writeStop(ctx context.Context, ps *pstream, a sched.Assignment) error {
	req := api.Unit{Op: api.OpPreempt, Attempt: 1, Params: map[string]string{
		api.DropJob:        strconv.FormatUint(a.Job, 10),
		api.PreemptUnit:    strconv.FormatUint(a.Unit, 10),
		api.PreemptAttempt: strconv.Itoa(a.Attempt),
	}}
	b, err := req.MarshalBinary()
	if err != nil {
		return err
	}
	s.log.Debug("unit preempted", "job", a.Job, "unit", a.Unit, "attempt", a.Attempt, "worker", a.Worker, "stream", a.Stream, "tenant", a.Tenant)
	return ps.st.WriteMessage(ctx, b)
}

// preempt hands the copies the scheduler takes back (sched.Preempt) to
// their streams' senders, after each event, at most every
// preemptEvery: a tenant whose units wait while another holds the
// threads gets its share within that.
func (s *Server) preempt() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		changed := s.sched.Changed()
		for _, a := range s.sched.Preempt() {
			s.metrics.unitsPreempted.Inc()
			s.mu.Lock()
			p := s.peers[a.Worker]
			s.mu.Unlock()
			if ps := p.stream(a.Stream); ps != nil {
				ps.preempt(a)
			} else {
				s.lc.Preempted(a) // its stream is gone: nothing to stop
			}
		}
		select {
		case <-s.stop:
			return
		case <-changed:
		}
		t.Reset(preemptEvery)
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// preemptEvery is the least time between two passes of preempt.
const preemptEvery = 20 * time.Millisecond

// stream returns the peer's stream i, or nil.
func (p *peer) stream(i int) *pstream {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.streams) {
		return nil
	}
	return p.streams[i]
}

// dropOnWorkers tells each live worker that holds units of job, which
// ended, to drop them (api.OpDrop): the units queued behind its threads
// and those running would otherwise keep it busy for nothing, and the
// next job's units would wait behind them. The workers answer each unit
// as dropped, and those results are discarded as results of an ended job
// are.
func (s *Server) dropOnWorkers(job uint64) {
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	params := map[string]string{api.DropJob: strconv.FormatUint(job, 10)}
	for _, p := range peers {
		if p.holds(job) {
			go p.tell(api.OpDrop, params)
		}
	}
}

// holds reports whether a copy of a unit of job is out on the peer.
func (p *peer) holds(job uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ps := range p.streams {
		ps.mu.Lock()
		for k := range ps.inFlight {
			if k.job == job {
				ps.mu.Unlock()
				return true
			}
		}
		ps.mu.Unlock()
	}
	return false
}

// tell sends the worker a request of reserved operation op with params
// on stream 0, as ask does, without waiting for the answer (which
// deliverFigures discards). It gives up when the peer dies, or after
// figuresTimeout.
func (p *peer) tell(op string, params map[string]string) {
	p.mu.Lock()
	if p.dead || len(p.streams) == 0 {
		p.mu.Unlock()
		return
	}
	st := p.streams[0].st
	p.figSeq++
	req := api.Unit{ID: p.figSeq, Attempt: 1, Op: op, Params: params}
	ctx := p.ctx
	p.mu.Unlock()
	b, _ := req.MarshalBinary()
	ctx, cancel := context.WithTimeout(ctx, figuresTimeout)
	defer cancel()
	_ = st.WriteMessage(ctx, b) // a broken stream drops the peer, and its units with it
}

// refusedError is a worker's answer to a request it would not or could
// not serve.
type refusedError string

func (e refusedError) Error() string { return string(e) }

// beatPeer asks the worker for its heartbeat over the data plane once an
// interval (beatTimes), as long as the peer lives. The answer counts as
// the heartbeat: the worker then sends none over HTTP, which for a large
// cluster costs the server a TLS record, an HTTP request, a credential
// check and two JSON documents a worker an interval where a request on a
// session already open costs two small messages. A worker too old to
// know the request answers with an error, and is left to beat over HTTP.
// A request unanswered within WorkerTimeout leaves the judgement to the
// reaper, which declares the worker dead after that much silence either
// way.
func (s *Server) beatPeer(ctx context.Context, p *peer) {
	for {
		every, timeout := s.beatTimes()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		params := map[string]string{api.BeatWorker: p.id, api.BeatMillis: strconv.FormatInt(every.Milliseconds(), 10)}
		// The request may wait on stream 0 behind large units still in
		// transfer; the worker beats over HTTP meanwhile (it has heard
		// no request), and a late answer still counts.
		out, err := p.ask(ctx, api.OpHeartbeat, params, "heartbeat", timeout)
		var hb api.Heartbeat
		if err == nil {
			err = json.Unmarshal(out, &hb)
		}
		if err == nil {
			err = s.noteBeat(p, hb, beatDataPlane)
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, new(refusedError)):
			s.log.Info("worker answers no heartbeat requests on the data plane; it beats over HTTP", "worker", p.id, "err", err)
			return
		case err != nil:
			s.log.Debug("heartbeat request failed", "worker", p.id, "err", err)
		}
	}
}

func (p *peer) deliverFigures(res api.Result) {
	p.mu.Lock()
	ch := p.figWait[res.ID]
	p.mu.Unlock()
	if ch != nil {
		res.Output = bytes.Clone(res.Output)
		select {
		case ch <- res:
		default:
		}
	}
}
