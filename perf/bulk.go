package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// A bulk test's receiver owns its clock: the test starts when the first
// payload byte arrives, on any stream, and lasts what was asked; the
// receiver counts what arrives until then and closes the data session,
// dropping what the sender still has queued. The sender writes until the
// receiver closes the session. So the receiver's interval is the asked
// time however much the sender queues (a stream window, 16 MiB, is 3.4 s
// of a 40 Mbit/s link), and the command ends about then: the results
// travel on the control session, whose connections that data does not
// hold up.

// sendGrace bounds how long a sender writes past the asked time when the
// receiver does not close the data session (a receiver that never gets
// the first byte, or is gone).
func sendGrace(d time.Duration) time.Duration { return d + 10*time.Second }

// bulkSendResult is what a bulk sender wrote: bytes and messages queued
// whole, and the seconds from its start to the receiver's closing.
type bulkSendResult struct {
	bytes, msgs int64
	seconds     float64
	// paths is the session's path statistics when the receiver closed it.
	paths []transport.PathStats
	// tcp is what the kernel measured of the session's TCP channels;
	// nil when they are not TCP.
	tcp *TCPFigures
}

// bulkSend writes messages of size on n new streams of sess until the
// receiver closes the session (or sendGrace(omit+d) passes), counting per
// stream into ctr, and then closes sess. What it writes in the first omit
// is left out of its result and of ctr's since counts. With bitrate > 0 the streams
// together send at most bitrate bits per second (iperf3 -b). With total
// > 0 they send that many bytes, rounded up to whole messages, close
// their streams and wait for the receiver to close the session.
func bulkSend(ctx context.Context, sess *transport.Session, n int, size int64, omit, d time.Duration, bitrate, total int64, ctr *streamCounter) (bulkSendResult, error) {
	defer endData(sess)
	tcp := startTCPSampler(sess)
	defer tcp.stop()
	buf := make([]byte, size)
	fillPattern(buf)
	start := time.Now()
	var (
		bytes, msgs         atomic.Int64
		baseBytes, baseMsgs atomic.Int64 // what was written in the omitted warm-up
	)
	if omit > 0 {
		t := time.AfterFunc(omit, func() {
			baseBytes.Store(bytes.Load())
			baseMsgs.Store(msgs.Load())
			ctr.markBase()
		})
		defer t.Stop()
	}
	pace := &pacer{start: start, bytesPerSec: float64(bitrate) / 8}
	// With total > 0 each stream sends its share of the messages, the
	// first streams one more when they do not divide evenly; and at least
	// one (Hello.validate: at least one per stream), so that the receiver
	// accepts every stream.
	msgsTotal := (total + size - 1) / size
	share := func(i int) int64 { return max(1, msgsTotal/int64(n)+b2i(int64(i) < msgsTotal%int64(n))) }
	wctx, cancel := context.WithDeadline(ctx, start.Add(sendGrace(omit+d)))
	defer cancel()
	var (
		last latest
		wg   sync.WaitGroup
	)
	turns := newFairShare(n, fairLead)
	errs := make([]error, n)
	for i := range n {
		st, err := sess.OpenStream(wctx)
		if err != nil {
			for j := i; j < n; j++ {
				turns.done(j) // never opened: the others do not wait for it
			}
			if testOver(ctx, wctx, err) {
				break
			}
			return bulkSendResult{}, err
		}
		c := ctr.stream(int(st.ID()))
		wg.Go(func() {
			defer last.mark()
			defer turns.done(i)
			quota := share(i)
			for {
				if total > 0 && quota == 0 {
					// Sent: the receiver counts to the end of the
					// stream, then closes the session.
					turns.done(i)
					_ = st.Close()
					select {
					case <-sess.Done():
					case <-wctx.Done():
					}
					return
				}
				if err := turns.wait(wctx, i); err != nil {
					return // the test is over
				}
				if err := pace.wait(wctx, size); err != nil {
					if !testOver(ctx, wctx, err) {
						errs[i] = err
					}
					return
				}
				// buf never changes: sent in place, as iperf3 sends
				// its buffer.
				if err := st.WriteMessageNoCopy(wctx, buf); err != nil {
					if !testOver(ctx, wctx, err) {
						errs[i] = err
					}
					return
				}
				c.Add(size)
				bytes.Add(size)
				msgs.Add(1)
				turns.sent(i)
				quota--
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return bulkSendResult{}, err
	}
	return bulkSendResult{bytes: bytes.Load() - baseBytes.Load(), msgs: msgs.Load() - baseMsgs.Load(),
		seconds: max(0, last.get().Sub(start.Add(omit)).Seconds()), paths: sess.Stats(), tcp: tcp.stop()}, nil
}

// bulkRecvResult is what a bulk receiver counted over its interval.
type bulkRecvResult struct {
	bytes, msgs int64
	seconds     float64
	// paths is the session's path statistics at the end of the interval.
	paths []transport.PathStats
}

// bulkReceive accepts up to n streams of sess and counts what arrives on
// them for d from omit after the first byte (see countUntil), into ctr
// per stream; then it closes sess. Streams whose first data has not come by then
// carried nothing.
func bulkReceive(ctx context.Context, sess *transport.Session, n int, omit, d time.Duration, ctr *streamCounter) (bulkRecvResult, error) {
	defer endData(sess)
	// Whatever the sender does, the test ends.
	hctx, cancel := context.WithTimeout(ctx, omit+d+2*time.Minute)
	defer cancel()
	clk := newTestClock(hctx, omit, d, ctr.markBase)
	defer clk.stop()
	var (
		bytes, msgs atomic.Int64
		last        latest
		wg          sync.WaitGroup
	)
	errs := make([]error, n)
	for i := range n {
		st, err := sess.AcceptStream(clk.ctx)
		if err != nil {
			if testOver(hctx, clk.ctx, err) {
				break
			}
			clk.stop()
			wg.Wait()
			return bulkRecvResult{}, fmt.Errorf("accept stream %d of %d: %w", i+1, n, err)
		}
		c := ctr.stream(int(st.ID()))
		wg.Go(func() {
			end, err := countUntil(hctx, clk, st, c, &bytes, &msgs)
			errs[i] = err
			last.markAt(end)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return bulkRecvResult{}, err
	}
	r := bulkRecvResult{bytes: bytes.Load(), msgs: msgs.Load(), paths: sess.Stats()}
	if start, ok := clk.started(); ok {
		r.seconds = max(0, last.get().Sub(start).Seconds())
	}
	return r, nil
}

// testClock is a bulk receiver's clock: begin starts it, at the first
// payload byte; the measured interval starts omit later (iperf3 -O) and
// lasts d, and then ctx is canceled.
type testClock struct {
	omit, d time.Duration
	omitted func() // called when the omitted warm-up ends, if omit > 0
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	start   time.Time // of the measured interval
	timers  []*time.Timer
}

func newTestClock(parent context.Context, omit, d time.Duration, omitted func()) *testClock {
	c := &testClock{omit: omit, d: d, omitted: omitted}
	c.ctx, c.cancel = context.WithCancel(parent)
	return c
}

// begin starts the clock if it has not started and returns the measured
// interval.
func (c *testClock) begin() (from, to time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		c.start = time.Now().Add(c.omit)
		c.timers = append(c.timers, time.AfterFunc(c.omit+c.d, c.cancel))
		if c.omit > 0 && c.omitted != nil {
			c.timers = append(c.timers, time.AfterFunc(c.omit, c.omitted))
		}
	}
	return c.start, c.start.Add(c.d)
}

// started returns the start of the measured interval.
func (c *testClock) started() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start, !c.start.IsZero()
}

func (c *testClock) stop() {
	c.mu.Lock()
	for _, t := range c.timers {
		t.Stop()
	}
	c.mu.Unlock()
	c.cancel()
}

// countUntil counts the payload of st's messages as it arrives, segment
// by segment, into stream and bytes, and the messages complete in time
// into msgs, until the clock runs out, the stream ends or the sender
// closes the session. It returns when counting stopped, never after the
// clock's deadline.
func countUntil(ctx context.Context, clk *testClock, st *transport.Stream, stream, bytes, msgs *atomic.Int64) (time.Time, error) {
	w := clockCounter{clk, stream, bytes}
	for {
		mr, err := st.NextMessage(clk.ctx)
		if err == nil {
			if _, err = mr.WriteTo(w); err == nil {
				from, to := w.window()
				if now := time.Now(); !now.Before(from) && now.Before(to) {
					msgs.Add(1)
				}
				continue
			}
		}
		if errors.Is(err, io.EOF) || testOver(ctx, clk.ctx, err) {
			now := time.Now()
			if start, ok := clk.started(); ok && now.After(start.Add(clk.d)) {
				now = start.Add(clk.d)
			}
			return now, nil
		}
		return time.Time{}, err
	}
}

// clockCounter is an io.Writer that starts the clock, counts what it is
// given until the clock's deadline (into a, the stream's count, whose
// warm-up streamCounter.markBase takes off) and in the measured interval
// (into b, the test's), and drops it.
type clockCounter struct {
	clk  *testClock
	a, b *atomic.Int64
}

func (c clockCounter) window() (from, to time.Time) { return c.clk.begin() }

func (c clockCounter) Write(p []byte) (int, error) {
	from, to := c.window() // first: the first byte starts the clock
	now := time.Now()
	if now.Before(to) {
		c.a.Add(int64(len(p)))
		if !now.Before(from) {
			c.b.Add(int64(len(p)))
		}
	}
	return len(p), nil
}

// testOver reports whether err ended a bulk test's wait normally: actx,
// the wait bounded by the test's clock (derived from ctx), ran out, or
// the data session was closed, by the peer or (in a --bidir test) by this
// side's other direction, whose receiver's clock ran out.
func testOver(ctx, actx context.Context, err error) bool {
	return (ctx.Err() == nil && actx.Err() != nil) || errors.Is(err, transport.ErrPeerClosed) || errors.Is(err, transport.ErrClosed)
}

// endData closes a test's data session at once: what is still queued is
// dropped. The control session, on connections of its own, is not held
// up by it.
func endData(sess *transport.Session) {
	_ = ctl.CloseSession(context.Background(), sess, false, 0)
}

// pacer spaces the writes of all a test's streams so that they send
// bytesPerSec on average from start; 0: no pacing. A write of n bytes
// waits until the bytes queued before it are due.
type pacer struct {
	start       time.Time
	bytesPerSec float64
	queued      atomic.Int64
}

func (p *pacer) wait(ctx context.Context, n int64) error {
	if p.bytesPerSec <= 0 {
		return nil
	}
	before := p.queued.Add(n) - n
	due := p.start.Add(time.Duration(float64(before) / p.bytesPerSec * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The streams of a braid session share its paths, and whichever stream
// writes first gets the next segments: left alone, one of two streams
// carried seven times the other's bytes on loopback. iperf3's streams are
// TCP connections, which the kernel shares out about evenly, and a user
// comparing the two expects even streams. So a bulk sender lets no stream
// run more than fairLead messages ahead of the slowest stream still
// sending: the streams take turns, and their bytes differ by at most
// fairLead messages.
const fairLead = 2

// fairShare holds back a stream that is lead messages ahead of the
// slowest stream still sending.
type fairShare struct {
	mu      sync.Mutex
	count   []int64 // messages each stream wrote
	stopped []bool  // the stream no longer sends
	lead    int64
	waiters int
	changed chan struct{} // closed when a count or stopped changes while someone waits
}

func newFairShare(n int, lead int64) *fairShare {
	return &fairShare{count: make([]int64, n), stopped: make([]bool, n), lead: lead, changed: make(chan struct{})}
}

// slowest returns the fewest messages of a stream still sending; f.mu held.
func (f *fairShare) slowest() int64 {
	low := int64(-1)
	for i, c := range f.count {
		if !f.stopped[i] && (low < 0 || c < low) {
			low = c
		}
	}
	return low
}

// wait blocks stream i while it is lead messages ahead of the slowest
// stream still sending, until ctx ends. Each round waits for another
// stream to write or stop, so it ends within the test's time.
func (f *fairShare) wait(ctx context.Context, i int) error {
	f.mu.Lock()
	for f.count[i]-f.slowest() >= f.lead {
		ch := f.changed
		f.waiters++
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			f.mu.Lock()
			f.waiters--
			f.mu.Unlock()
			return ctx.Err()
		}
		f.mu.Lock()
		f.waiters--
	}
	f.mu.Unlock()
	return nil
}

// sent counts a message of stream i.
func (f *fairShare) sent(i int) {
	f.mu.Lock()
	f.count[i]++
	f.wake()
	f.mu.Unlock()
}

// done marks stream i stopped: the others no longer wait for it.
func (f *fairShare) done(i int) {
	f.mu.Lock()
	f.stopped[i] = true
	f.wake()
	f.mu.Unlock()
}

// wake tells the waiters that counts changed; f.mu held.
func (f *fairShare) wake() {
	if f.waiters > 0 {
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
