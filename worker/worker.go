package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/wasm"
)

// maxUnit bounds a unit message from a server.
const maxUnit = 1 << 30

// Worker registers with servers and runs the units they send.
type Worker struct {
	cfg   Config
	log   *slog.Logger
	ln    *transport.Listener
	addrs []string // advertised
	gate  gate
	mods  *modules // nil: the worker runs no modules
	conns []*client.Client

	mu       sync.Mutex
	threads  int
	announce chan struct{} // closed and replaced when the figures should be sent now
	ids      map[string]string
	started  bool
	// beats holds, by the worker ID a server knows, the last heartbeat
	// request that server sent on the data plane (api.OpHeartbeat).
	beats map[string]dataBeat

	sessions, streams       atomic.Int64
	units, failed, computeN atomic.Int64
	running                 atomic.Int64
	queued                  atomic.Int64 // units received and not yet taken by a thread
	jobsMu                  sync.Mutex
	jobsRunning             map[uint64]int // units executing by job, for heartbeats
	first, last             atomic.Int64   // unix nanoseconds

	reg    *prometheus.Registry
	liveMu sync.Mutex
	live   map[*transport.Session]struct{} // sessions open now, for the metrics
}

// New listens on the data-plane addresses. Call Run to register and work.
func New(cfg Config) (*Worker, error) {
	if err := cfg.populate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, log: cfg.Logger, threads: cfg.Threads, announce: make(chan struct{}), ids: map[string]string{},
		beats: map[string]dataBeat{}, live: map[*transport.Session]struct{}{}}
	w.reg = w.newRegistry()
	w.gate.init(cfg.Threads)
	var tcfg transport.Config
	if cfg.Transport != nil {
		tcfg = *cfg.Transport
	}
	tcfg.Key = cfg.Key
	if tcfg.Logger == nil {
		tcfg.Logger = cfg.Logger
	}
	copts := []client.Option{client.WithKey(cfg.Key), client.WithHTTPClient(w.httpClient())}
	if cfg.Token != "" {
		copts = append(copts, client.WithToken(cfg.Token))
	}
	if cfg.Fingerprint != nil {
		copts = append(copts, client.WithFingerprint(cfg.Fingerprint))
	}
	if cfg.InsecureHTTP {
		copts = append(copts, client.WithInsecureHTTP())
	}
	for _, url := range cfg.Servers {
		w.conns = append(w.conns, client.New(url, copts...))
	}
	if cfg.Modules == nil || len(cfg.Modules) > 0 {
		mods, err := newModules(&w.cfg, w.conns)
		if err != nil {
			return nil, err
		}
		w.mods = mods
	}
	ln, err := transport.Listen(context.Background(), cfg.Listen, &tcfg)
	if err != nil {
		if w.mods != nil {
			w.mods.close()
		}
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.ln = ln
	if len(cfg.Advertise) > 0 {
		w.addrs = slices.Clone(cfg.Advertise)
	} else {
		for _, a := range ln.Addrs() {
			host, _, _ := net.SplitHostPort(a.String())
			if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
				ln.Close()
				return nil, fmt.Errorf("worker: listening on %s, a wildcard address the servers cannot dial; "+
					"listen on each network's own address (e.g. --listen 10.1.0.2:7420,10.2.0.2:7420) or give --advertise", a)
			}
			w.addrs = append(w.addrs, a.String())
		}
	}
	return w, nil
}

// Addrs returns the data-plane addresses the worker registers.
func (w *Worker) Addrs() []string { return slices.Clone(w.addrs) }

// SetThreads changes the threads the worker lends and announces it to
// every server, which then opens or closes streams to match.
func (w *Worker) SetThreads(n int) error {
	if n < 1 {
		return errors.New("worker: threads must be at least 1")
	}
	w.mu.Lock()
	w.threads = n
	close(w.announce)
	w.announce = make(chan struct{})
	w.mu.Unlock()
	w.gate.resize(n)
	return nil
}

// announceChan returns the channel SetThreads closes next.
func (w *Worker) announceChan() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.announce
}

// IDs returns the ID each server gave the worker, by server URL, for the
// servers it is registered with now.
func (w *Worker) IDs() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.ids))
	for k, v := range w.ids {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// Stats are a worker's counters.
type Stats struct {
	// Threads is how many units may run at once.
	Threads int
	// Sessions and Streams are open now.
	Sessions, Streams int
	// Running is the number of units computing now, Queued the number
	// received and waiting for a thread.
	Running, Queued int
	// Units counts the units run, Failed those whose operation failed.
	Units, Failed int64
	// ComputeNanos sums the time operations ran.
	ComputeNanos int64
	// First is when the first unit arrived, Last when the last result
	// was sent; zero before.
	First, Last time.Time
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	threads := w.threads
	w.mu.Unlock()
	st := Stats{
		Threads: threads, Sessions: int(w.sessions.Load()), Streams: int(w.streams.Load()),
		Running: int(w.running.Load()), Queued: int(w.queued.Load()), Units: w.units.Load(), Failed: w.failed.Load(), ComputeNanos: w.computeN.Load(),
	}
	if n := w.first.Load(); n != 0 {
		st.First = time.Unix(0, n)
	}
	if n := w.last.Load(); n != 0 {
		st.Last = time.Unix(0, n)
	}
	return st
}

// ResetStats zeroes the counters of units, compute time and the
// first/last times, e.g. between the jobs of a benchmark.
func (w *Worker) ResetStats() {
	w.units.Store(0)
	w.failed.Store(0)
	w.computeN.Store(0)
	w.first.Store(0)
	w.last.Store(0)
}

// ComputeFraction is the share of the lent thread time that went into
// operations between the first unit and the last result:
// ComputeNanos / (Threads x (Last - First)).
func (s Stats) ComputeFraction() float64 {
	wall := s.Last.Sub(s.First)
	if wall <= 0 || s.Threads <= 0 {
		return 0
	}
	return float64(s.ComputeNanos) / (float64(s.Threads) * float64(wall))
}

// Run registers with every server, sends heartbeats and serves the
// servers' sessions until ctx ends, then deregisters and closes the
// listener. It returns early with an error if every server rejected the
// worker (wrong cluster key, invalid registration, unreachable data
// plane): retrying would not help.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker: Run called twice")
	}
	w.started = true
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The servers' sessions outlive ctx until every server was told the
	// worker leaves (serve deregisters as it returns): a server that saw
	// the session end first logged the worker lost and showed it dead.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	var sessions sync.WaitGroup
	sessions.Go(func() { w.accept(sctx) })
	var wg sync.WaitGroup
	if w.mods != nil {
		wg.Go(func() { w.mods.prefetch(ctx) })
	}
	errs := make(chan error, len(w.cfg.Servers))
	for _, c := range w.conns {
		wg.Go(func() { errs <- w.serve(ctx, c) })
	}
	w.log.Info("worker running", "path", strings.Join(w.addrs, ","), "threads", w.cfg.Threads,
		"max_unit_mem", w.cfg.MaxUnitMem, "ops", strings.Join(w.ops(), ","), "servers", strings.Join(w.cfg.Servers, ","))
	var failures []error
	for range w.cfg.Servers {
		if err := <-errs; err != nil {
			failures = append(failures, err)
		} else {
			break // ctx ended
		}
		if len(failures) == len(w.cfg.Servers) {
			break
		}
	}
	cancel()
	wg.Wait() // every serve deregistered (within a second each)
	scancel()
	w.ln.Close()
	sessions.Wait()
	if w.mods != nil {
		w.mods.close()
	}
	if len(failures) == len(w.cfg.Servers) {
		return errors.Join(failures...)
	}
	return nil
}

func (w *Worker) httpClient() *http.Client {
	if w.cfg.HTTPClient != nil {
		return w.cfg.HTTPClient
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// figures measures what the worker registers.
func (w *Worker) figures() api.Register {
	w.mu.Lock()
	threads := w.threads
	w.mu.Unlock()
	return api.Register{
		Name: w.cfg.Name, Addresses: w.Addrs(), Cores: runtime.NumCPU(), Memory: memTotal(), Disk: diskFree(w.cfg.Dir),
		CPUMHz: cpuMHz(), Threads: threads, Ops: w.ops(), MaxUnitMem: w.cfg.MaxUnitMem, ParamCache: true, Preempt: true,
	}
}

// ops returns the operations the worker registers: its built-in ones,
// and for modules ModuleOps or the user operations it runs.
func (w *Worker) ops() []string {
	names := w.cfg.Ops.Names()
	if w.mods != nil {
		names = append(names, w.mods.offered()...)
	}
	return names
}

// changed reports whether figures b differ from a enough to announce:
// any change but drifts of free disk and CPU frequency under 5%.
func changed(a, b api.Register) bool {
	near := func(x, y int64) bool { return 20*abs(x-y) <= max(x, y) }
	return a.Name != b.Name || !slices.Equal(a.Addresses, b.Addresses) || a.Cores != b.Cores || a.Memory != b.Memory ||
		a.Threads != b.Threads || !slices.Equal(a.Ops, b.Ops) || !near(a.Disk, b.Disk) || !near(int64(a.CPUMHz), int64(b.CPUMHz))
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// fatal reports whether a registration error will not go away by
// retrying: the server refused the credential or the registration, or
// could not prove that it is the server meant.
func fatal(err error) bool {
	if errors.Is(err, client.ErrCertificate) || errors.Is(err, client.ErrNoPin) {
		return true
	}
	switch client.StatusOf(err) {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden:
		return true
	}
	return false
}

// serve keeps the worker registered with one server until ctx ends. It
// returns an error only if the server rejects the worker for good.
func (w *Worker) serve(ctx context.Context, c *client.Client) error {
	log := w.log.With("server", c.URL())
	var (
		id        string
		reg       api.Registration
		announced api.Register
	)
	setID := func(v string) {
		w.mu.Lock()
		delete(w.beats, id)
		w.ids[c.URL()] = v
		w.mu.Unlock()
		id = v
	}
	// register (again) until it works; false means ctx ended.
	register := func() (bool, error) {
		delay := w.cfg.RetryInterval
		for {
			fig := w.figures()
			var err error
			if id != "" {
				reg, err = c.Update(ctx, id, fig)
				if errors.Is(err, client.ErrNotFound) {
					setID("")
				}
			}
			if id == "" {
				reg, err = c.Register(ctx, fig)
			}
			if err == nil {
				setID(reg.Worker)
				announced = fig
				log.Info("registered", "worker", reg.Worker, "heartbeat", time.Duration(reg.HeartbeatMillis)*time.Millisecond)
				return true, nil
			}
			if ctx.Err() != nil {
				return false, nil
			}
			if fatal(err) {
				log.Error("the server rejected the worker", "err", err)
				return false, fmt.Errorf("server %s: %w", c.URL(), err)
			}
			log.Warn("registration failed; retrying", "err", err, "in", delay)
			if !sleep(ctx, delay) {
				return false, nil
			}
			delay = min(2*delay, 5*time.Second)
		}
	}
	// next is the announce channel as it was before the figures last sent
	// were read: a SetThreads after that read has closed it, so no change
	// is lost between a registration and the loop below (taking the
	// channel only at the top of each round would miss one made while
	// registering).
	next := w.announceChan()
	if ok, err := register(); !ok {
		return err
	}
	defer func() {
		// Deregister so the server runs our units elsewhere at once.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if id != "" {
			_ = c.Deregister(dctx, id)
		}
		setID("")
	}()
	figTick := time.NewTicker(w.cfg.FiguresInterval)
	defer figTick.Stop()
	// retry fires after an announcement failed, to try again soon rather
	// than at the next figures tick.
	var retry <-chan time.Time
	retryDelay := w.cfg.RetryInterval
	// update announces fig; the server's answer replaces reg only when it
	// came, so a failed update keeps the heartbeat interval.
	update := func(fig api.Register, msg string) error {
		r, err := c.Update(ctx, id, fig)
		if err != nil {
			return err
		}
		reg, announced, retry, retryDelay = r, fig, nil, w.cfg.RetryInterval
		log.Info(msg, "worker", id, "threads", fig.Threads)
		return nil
	}
	for {
		hb := time.NewTimer(max(time.Duration(reg.HeartbeatMillis)*time.Millisecond, 10*time.Millisecond))
		var err error
		announcing := false
		select {
		case <-ctx.Done():
			hb.Stop()
			return nil
		case <-hb.C:
			if every, ok := w.beatingOnDataPlane(id); ok {
				// The server asks on the data plane; no need to beat here.
				reg.HeartbeatMillis = every.Milliseconds()
				break
			}
			var ans api.Registration
			ans, err = c.Heartbeat(ctx, id, w.heartbeat())
			if err == nil && ans.HeartbeatMillis > 0 {
				// The server asks for fewer beats as its cluster grows.
				reg.HeartbeatMillis = ans.HeartbeatMillis
			}
		case <-next:
			hb.Stop()
			announcing = true
			next = w.announceChan()
			err = update(w.figures(), "announced new figures")
		case <-retry:
			hb.Stop()
			announcing = true
			if fig := w.figures(); changed(announced, fig) {
				err = update(fig, "announced new figures")
			} else {
				retry = nil
			}
		case <-figTick.C:
			hb.Stop()
			if fig := w.figures(); changed(announced, fig) {
				announcing = true
				err = update(fig, "announced changed figures")
			}
		}
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, client.ErrNotFound):
			log.Warn("the server does not know this worker any more; registering again", "worker", id)
			next = w.announceChan()
			if ok, err := register(); !ok {
				return err
			}
		default:
			if announcing {
				log.Warn("announcing new figures failed; retrying", "err", err, "in", retryDelay)
				retry = time.After(retryDelay)
				retryDelay = min(2*retryDelay, 5*time.Second)
			} else {
				log.Debug("control request failed", "err", err)
			}
		}
	}
}

// heartbeat returns the worker's heartbeat now.
func (w *Worker) heartbeat() api.Heartbeat {
	return api.Heartbeat{Running: int(w.running.Load()), Queued: int(max(0, w.queued.Load())), Load: loadAvg(), Jobs: w.runningJobs()}
}

// dataBeat is a server's last heartbeat request on the data plane: when
// it came and the interval the server asks at.
type dataBeat struct {
	at    time.Time
	every time.Duration
}

// noteDataBeat records a heartbeat request on the data plane.
func (w *Worker) noteDataBeat(params map[string]string) {
	ms, err := strconv.ParseInt(params[api.BeatMillis], 10, 64)
	id := params[api.BeatWorker]
	if err != nil || ms <= 0 || id == "" {
		return // a malformed request still gets its answer, not the trust
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, known := range w.ids {
		if known == id {
			w.beats[id] = dataBeat{at: time.Now(), every: time.Duration(ms) * time.Millisecond}
			return
		}
	}
}

// beatingOnDataPlane reports whether the server that knows the worker as
// id asked for a heartbeat on the data plane within the last one and a
// half of its intervals, and that interval: the worker then sends none
// over HTTP. When the requests stop (the session broke, or the server
// gave up on it), HTTP heartbeats resume within two and a half
// intervals, well inside the server's WorkerTimeout (five by default),
// and tell the worker if it must register again.
func (w *Worker) beatingOnDataPlane(id string) (time.Duration, bool) {
	w.mu.Lock()
	b, ok := w.beats[id]
	w.mu.Unlock()
	return b.every, ok && time.Since(b.at) < b.every*3/2
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// accept serves the sessions servers open.
func (w *Worker) accept(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		sess, err := w.ln.Accept(ctx)
		if err != nil {
			return
		}
		wg.Go(func() { w.session(ctx, sess) })
	}
}

// session serves one server session. Every stream the server opens gets a
// reader, which queues the stream's units in the session's queue, a
// writer of its results, and one processing goroutine: the session's
// processors take units from the queue in arrival order, whichever stream
// they came on, and hand each result to the writer of its unit's stream.
// So the threads a session reserves (one per stream) share its units,
// and a thread never waits while a unit of the session is queued.
func (w *Worker) session(ctx context.Context, sess *transport.Session) {
	w.sessions.Add(1)
	defer w.sessions.Add(-1)
	w.track(sess, true)
	defer w.track(sess, false)
	id := sess.ID()[:8]
	w.log.Info("server session opened", "session", id)
	q := newUnitQueue(&w.queued)
	var readers, procs, writers sync.WaitGroup
	var outs []*outStream
	clk := sessionClock(time.Now()) // the origin of the session's api.Timing
	for thread := 0; ; thread++ {
		st, err := sess.AcceptStream(ctx)
		if err != nil {
			break
		}
		o := newOutStream(st)
		outs = append(outs, o)
		writers.Go(func() { w.write(ctx, o, clk) })
		readers.Go(func() { w.read(ctx, o, q, clk) })
		procs.Go(func() { w.process(ctx, q, uint32(thread), clk) })
	}
	sess.Close()
	readers.Wait()
	q.close()
	procs.Wait()
	for _, o := range outs {
		o.close()
	}
	writers.Wait()
	w.log.Info("server session closed", "session", id, "err", sess.Err())
}

// sessionClock is the origin of a session's unit timings: the worker's
// monotonic clock when the session opened (see api.Timing).
type sessionClock time.Time

// now returns the nanoseconds since the session opened, at least 1 (0
// means untimed).
func (c sessionClock) now() int64 { return max(1, int64(time.Since(time.Time(c)))) }

// outStream is a stream's way back: its results, in the order they were
// computed. Handing a result over never blocks, so a thread goes from one
// unit to the next without waiting for the writer; what waits is bounded
// by the units the server keeps in flight on the stream.
type outStream struct {
	st   *transport.Stream
	wake chan struct{} // a token when results or the close arrive

	mu      sync.Mutex
	pending []done
	closed  bool
}

func newOutStream(st *transport.Stream) *outStream {
	return &outStream{st: st, wake: make(chan struct{}, 1)}
}

// put queues a result for the writer.
func (o *outStream) put(d done) {
	o.mu.Lock()
	o.pending = append(o.pending, d)
	o.mu.Unlock()
	o.signal()
}

// close tells the writer no more results come once the queued are sent.
func (o *outStream) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.signal()
}

func (o *outStream) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// next waits for results and moves them all into batch; false once the
// stream is closed and nothing is left.
func (o *outStream) next(batch []done) ([]done, bool) {
	for {
		o.mu.Lock()
		batch = append(batch, o.pending...)
		clear(o.pending)
		o.pending = o.pending[:0]
		closed := o.closed
		o.mu.Unlock()
		if len(batch) > 0 || closed {
			return batch, len(batch) > 0
		}
		<-o.wake
	}
}

// task is a unit waiting for a thread, and the stream its result goes to.
type task struct {
	u    api.Unit
	buf  []byte // the message u was decoded from; u's inputs alias it
	out  *outStream
	recv int64 // when it was read, on the session's clock
}

// done is a result on its way out, with the message of its unit, which
// the result may alias and which is released once the result is encoded.
type done struct {
	res    *api.Result
	unit   []byte
	module bool // res.Output came from wasm.Module.Run: recycled once encoded
}

// read queues the units of one stream; it answers figures requests at
// once.
func (w *Worker) read(ctx context.Context, o *outStream, q *unitQueue, clk sessionClock) {
	w.streams.Add(1)
	defer w.streams.Add(-1)
	pc := api.NewParamCache() // at most api.ParamCacheBytes per stream
	for {
		b, err := o.st.ReadMessage(ctx)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				w.log.Debug("stream ended", "stream", o.st.ID(), "err", err)
			}
			return
		}
		recv := clk.now()
		w.first.CompareAndSwap(0, time.Now().UnixNano())
		var u api.Unit
		if err := u.DecodeCached(b, maxUnit, pc); err != nil {
			w.log.Warn("malformed unit; ignoring the rest of the stream", "stream", o.st.ID(), "err", err)
			return
		}
		switch u.Op {
		case api.OpDrop:
			res := &api.Result{Job: u.Job, ID: u.ID, Attempt: u.Attempt}
			job, err := strconv.ParseUint(u.Params[api.DropJob], 10, 64)
			if err != nil || job == 0 {
				res.Err = fmt.Sprintf("drop request: job %q is not a job ID", u.Params[api.DropJob])
			} else {
				w.drop(q, job)
			}
			o.put(done{res: res, unit: b})
			continue
		case api.OpPreempt:
			res := &api.Result{Job: u.Job, ID: u.ID, Attempt: u.Attempt}
			job, err1 := strconv.ParseUint(u.Params[api.DropJob], 10, 64)
			unit, err2 := strconv.ParseUint(u.Params[api.PreemptUnit], 10, 64)
			attempt, err3 := strconv.ParseUint(u.Params[api.PreemptAttempt], 10, 32)
			if err := errors.Join(err1, err2, err3); err != nil || job == 0 {
				res.Err = fmt.Sprintf("preemption request: job %q, unit %q, attempt %q do not name a copy",
					u.Params[api.DropJob], u.Params[api.PreemptUnit], u.Params[api.PreemptAttempt])
			} else {
				w.preempt(q, job, unit, uint32(attempt))
			}
			o.put(done{res: res, unit: b})
			continue
		case api.OpFigures, api.OpHeartbeat:
			res := &api.Result{Job: u.Job, ID: u.ID, Attempt: u.Attempt}
			if u.Op == api.OpFigures {
				res.Output, _ = json.Marshal(w.figures())
			} else {
				w.noteDataBeat(u.Params)
				res.Output, _ = json.Marshal(w.heartbeat())
			}
			o.put(done{res: res})
			continue
		}
		q.push(task{u: u, buf: b, out: o, recv: recv})
	}
}

// process runs queued units until the session ends, as the session's
// thread number thread.
func (w *Worker) process(ctx context.Context, q *unitQueue, thread uint32, clk sessionClock) {
	for {
		t, uctx, r, ok := q.pop(ctx)
		if !ok {
			return
		}
		res := &api.Result{Job: t.u.Job, ID: t.u.ID, Attempt: t.u.Attempt}
		w.compute(uctx, &t.u, res)
		if why := q.ended(r); why != "" && ctx.Err() == nil {
			res.Err, res.Output = why, nil
		}
		// The operation ended now and ran ComputeNanos; the rest of the
		// time since the unit was read it waited for this thread or for
		// the gate.
		end := clk.now()
		res.Timing = api.Timing{Received: t.recv, Started: max(t.recv, end-res.ComputeNanos), Ended: end, Thread: thread}
		if ctx.Err() != nil {
			// Stopping: a unit cut short is not a failure of its data.
			// The server runs it elsewhere once the session is gone.
			return
		}
		if w.log.Enabled(ctx, slog.LevelDebug) { // spares the hot path the arguments
			w.log.Debug("unit run", "job", t.u.Job, "unit", t.u.ID, "attempt", t.u.Attempt, "op", t.u.Op, "thread", thread,
				"compute", time.Duration(res.ComputeNanos), "bytes", len(res.Output), "err", res.Err)
		}
		t.out.put(done{res: res, unit: t.buf, module: strings.HasPrefix(t.u.Op, api.ModulePrefix)})
	}
}

// write sends a stream's results. After a failed write it discards the
// rest, which the server will have run elsewhere.
func (w *Worker) write(ctx context.Context, o *outStream, clk sessionClock) {
	var out []byte
	var batch []done
	failed := false
	for {
		var more bool
		if batch, more = o.next(batch[:0]); !more {
			break
		}
		for _, d := range batch {
			if failed {
				if d.unit != nil {
					o.st.Release(d.unit)
				}
				continue
			}
			if d.res.Timing.Timed() {
				d.res.Timing.Sent = clk.now()
			}
			out, _ = d.res.AppendBinary(out[:0])
			if d.unit != nil {
				o.st.Release(d.unit) // out holds a copy of what the result aliased
			}
			if d.module {
				wasm.Recycle(d.res.Output) // likewise
			}
			if err := o.st.WriteMessage(ctx, out); err != nil {
				failed = true
				continue
			}
			w.last.Store(time.Now().UnixNano())
		}
		clear(batch) // drop the results for the collector
	}
	o.st.Close()
}

// unitQueue is a session's FIFO of units waiting for a thread, and the
// units its threads run. Its length is bounded by the server: streams x
// units in flight per stream.
type unitQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	items   []task
	closed  bool
	count   *atomic.Int64 // the worker's units queued, over all its sessions
	running map[*runningUnit]struct{}
}

// runningUnit is a unit a thread of the session runs: its copy, and how
// to interrupt it (drop, preempt).
type runningUnit struct {
	job, unit uint64
	attempt   uint32
	cancel    context.CancelFunc
	stopped   string // why a drop or preemption interrupted it; guarded by unitQueue.mu
}

// ended notes that unit r ended, and returns why a drop or preemption
// interrupted it, if one did: the Err of its result.
func (q *unitQueue) ended(r *runningUnit) (why string) {
	q.mu.Lock()
	delete(q.running, r)
	why = r.stopped
	q.mu.Unlock()
	r.cancel()
	return why
}

// drop removes the queued units of job and interrupts its running ones;
// it returns the removed tasks.
func (q *unitQueue) drop(job uint64) []task {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []task
	kept := q.items[:0]
	for _, t := range q.items {
		if t.u.Job == job {
			out = append(out, t)
		} else {
			kept = append(kept, t)
		}
	}
	clear(q.items[len(kept):])
	q.items = kept
	q.count.Add(-int64(len(out)))
	for r := range q.running {
		if r.job == job && r.stopped == "" {
			r.stopped = droppedErr(job)
			r.cancel()
		}
	}
	return out
}

// preempt removes the queued copy of job's unit, attempt, and returns
// it; or interrupts it if it runs.
func (q *unitQueue) preempt(job, unit uint64, attempt uint32) (task, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, t := range q.items {
		if t.u.Job == job && t.u.ID == unit && t.u.Attempt == attempt {
			q.items = slices.Delete(q.items, i, i+1)
			q.count.Add(-1)
			return t, true
		}
	}
	for r := range q.running {
		if r.job == job && r.unit == unit && r.attempt == attempt && r.stopped == "" {
			r.stopped = preemptedErr
			r.cancel()
		}
	}
	return task{}, false
}

// preempt serves a preemption request for a copy on the session of q:
// queued, it is answered at once; running, it is interrupted (its
// thread answers it, see process).
func (w *Worker) preempt(q *unitQueue, job, unit uint64, attempt uint32) {
	if t, ok := q.preempt(job, unit, attempt); ok {
		t.out.put(done{res: &api.Result{Job: job, ID: unit, Attempt: attempt, Err: preemptedErr}, unit: t.buf})
	}
	w.log.Debug("unit preempted", "job", job, "unit", unit, "attempt", attempt)
}

// preemptedErr is the Err of a unit's result that a preemption stopped.
const preemptedErr = "preempted: the server gave its thread to another tenant's unit; it runs again later"

// drop serves a drop request for job on the session of q: its queued
// units are answered as dropped at once, and its running ones are
// interrupted (their threads answer them, see process).
func (w *Worker) drop(q *unitQueue, job uint64) {
	tasks := q.drop(job)
	for _, t := range tasks {
		t.out.put(done{res: &api.Result{Job: t.u.Job, ID: t.u.ID, Attempt: t.u.Attempt, Err: droppedErr(job)}, unit: t.buf})
	}
	w.log.Debug("job dropped", "job", job, "queued", len(tasks))
}

// droppedErr is the Err of a unit's result that a drop request stopped.
func droppedErr(job uint64) string {
	return fmt.Sprintf("dropped: the server ended job %d", job)
}

func newUnitQueue(count *atomic.Int64) *unitQueue {
	q := &unitQueue{count: count}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *unitQueue) push(t task) {
	q.mu.Lock()
	q.items = append(q.items, t)
	q.count.Add(1)
	q.mu.Unlock()
	q.cond.Signal()
}

// pop returns the oldest task, waiting for one, with the context to run
// it in, which a drop or preemption cancels, and the handle that notes
// its end; false once the queue is closed (what is left is dropped: the
// session is gone). The task leaves the queue and counts as running at
// once, so a drop finds it in one place or the other.
func (q *unitQueue) pop(ctx context.Context) (task, context.Context, *runningUnit, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return task{}, nil, nil, false
	}
	t := q.items[0]
	q.items[0] = task{}
	q.items = q.items[1:]
	q.count.Add(-1)
	ctx, cancel := context.WithCancel(ctx)
	r := &runningUnit{job: t.u.Job, unit: t.u.ID, attempt: t.u.Attempt, cancel: cancel}
	if q.running == nil {
		q.running = map[*runningUnit]struct{}{}
	}
	q.running[r] = struct{}{}
	return t, ctx, r, true
}

func (q *unitQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.count.Add(-int64(len(q.items)))
	q.items = nil
	q.mu.Unlock()
	q.cond.Broadcast()
}

// unitStarted counts a unit of job executing, unitEnded its end.
func (w *Worker) unitStarted(job uint64) {
	w.running.Add(1)
	w.jobsMu.Lock()
	if w.jobsRunning == nil {
		w.jobsRunning = map[uint64]int{}
	}
	w.jobsRunning[job]++
	w.jobsMu.Unlock()
}

func (w *Worker) unitEnded(job uint64) {
	w.running.Add(-1)
	w.jobsMu.Lock()
	if w.jobsRunning[job]--; w.jobsRunning[job] <= 0 {
		delete(w.jobsRunning, job)
	}
	w.jobsMu.Unlock()
}

// runningJobs returns the units executing now by job; nil for none.
func (w *Worker) runningJobs() map[uint64]int {
	w.jobsMu.Lock()
	defer w.jobsMu.Unlock()
	if len(w.jobsRunning) == 0 {
		return nil
	}
	return maps.Clone(w.jobsRunning)
}

// compute runs one unit into res.
func (w *Worker) compute(ctx context.Context, u *api.Unit, res *api.Result) {
	if hash, ok := strings.CutPrefix(u.Op, api.ModulePrefix); ok {
		w.computeModule(ctx, hash, u, res)
		return
	}
	op, err := w.cfg.Ops.Lookup(u.Op)
	if err != nil {
		res.Err = fmt.Sprintf("worker %s does not run operation %q (it runs %s)", w.cfg.Name, u.Op, strings.Join(w.ops(), ", "))
		w.failed.Add(1)
		return
	}
	if err := w.gate.acquire(ctx); err != nil {
		res.Err = "worker stopping: " + err.Error()
		return
	}
	w.unitStarted(u.Job)
	start := time.Now()
	out, err := runSafely(ctx, op.Run, u)
	d := time.Since(start)
	w.unitEnded(u.Job)
	w.gate.release()
	res.ComputeNanos = d.Nanoseconds()
	w.computeN.Add(res.ComputeNanos)
	w.units.Add(1)
	if err != nil {
		res.Err = ops.Message(err)
		w.failed.Add(1)
		return
	}
	res.Output = out
}

// computeModule runs a unit of a user operation into res.
func (w *Worker) computeModule(ctx context.Context, hash string, u *api.Unit, res *api.Result) {
	if w.mods == nil {
		res.Err = fmt.Sprintf("worker %s runs no WebAssembly modules (it runs %s)", w.cfg.Name, strings.Join(w.ops(), ", "))
		w.failed.Add(1)
		return
	}
	w.unitStarted(u.Job)
	out, d, err := w.mods.run(ctx, &w.gate, hash, u)
	w.unitEnded(u.Job)
	res.ComputeNanos = d.Nanoseconds()
	w.computeN.Add(res.ComputeNanos)
	w.units.Add(1)
	if err != nil {
		res.Err = err.Error()
		w.failed.Add(1)
		if ctx.Err() == nil {
			w.log.Debug("module unit failed", "job", u.Job, "unit", u.ID, "err", err)
		}
		return
	}
	res.Output = out
}

// runSafely runs an operation, turning a panic into an error.
func runSafely(ctx context.Context, run func(context.Context, map[string]string, [][]byte) ([]byte, error), u *api.Unit) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: panic: %v", u.Op, p)
		}
	}()
	return run(ctx, u.Params, u.Inputs)
}

// gate lets at most n units compute at once; n may change.
type gate struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
	used int
}

func (g *gate) init(n int) {
	g.n = n
	g.cond = sync.NewCond(&g.mu)
}

func (g *gate) resize(n int) {
	g.mu.Lock()
	g.n = n
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *gate) acquire(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.used >= g.n {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.cond.Wait()
	}
	g.used++
	return nil
}

func (g *gate) release() {
	g.mu.Lock()
	g.used--
	g.cond.Broadcast()
	g.mu.Unlock()
}
