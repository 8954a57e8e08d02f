package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/transport/channel/sctpudp"
)

// Head-of-line blocking: stream A sends big messages back to back, stream B
// a 1 KB message every millisecond stamped with its send time; the receiver
// records B's latencies. Sender and receiver share the clock. Each of B's
// messages is written by its own goroutine, so a write that blocks delays
// that message, not the next one's start: latency runs from when the
// message was due.

// holResult is what one head-of-line run measured.
type holResult struct {
	lat   []time.Duration // stream B's one-way latencies
	sent  int             // stream B's messages written
	bytes int64           // stream A's bytes received while B was sending
	el    time.Duration   // how long B was sending
}

// mbps returns stream A's goodput while B was sending.
func (r holResult) mbps() float64 {
	if r.el <= 0 {
		return 0
	}
	return perf.Mbps(r.bytes, r.el.Seconds())
}

// holClock runs the sender of stream B and keeps the receivers' tallies.
type holClock struct {
	mu     sync.Mutex
	lat    []time.Duration
	bytes  atomic.Int64 // stream A's bytes received so far
	window atomic.Bool  // B is sending: A's bytes count
	sends  sync.WaitGroup
}

func (h *holClock) small(m []byte) {
	if len(m) < 8 {
		return
	}
	sent := time.Unix(0, int64(beUint64(m)))
	h.mu.Lock()
	h.lat = append(h.lat, time.Since(sent))
	h.mu.Unlock()
}

func (h *holClock) big(n int) {
	if h.window.Load() {
		h.bytes.Add(int64(n))
	}
}

// run lets A warm up, then starts send with a stamped 1 KB message every
// millisecond for d, each on its own goroutine, and returns what the
// receivers saw up to 200 ms later. Call wait after closing the
// connections, so that blocked sends end.
func (h *holClock) run(d time.Duration, send func(msg []byte)) holResult {
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	h.window.Store(true)
	end := start.Add(d)
	sent := 0
	for next := start; next.Before(end); next = next.Add(time.Millisecond) {
		time.Sleep(time.Until(next))
		msg := make([]byte, 1024)
		putUint64(msg, uint64(next.UnixNano()))
		h.sends.Go(func() { send(msg) })
		sent++
	}
	el := time.Since(start)
	h.window.Store(false)
	time.Sleep(200 * time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	return holResult{lat: append([]time.Duration(nil), h.lat...), sent: sent, bytes: h.bytes.Load(), el: el}
}

// wait waits for the sends that run started.
func (h *holClock) wait() { h.sends.Wait() }

// hol measures the latency of small messages on one stream while another
// stream sends large messages, against the same traffic on one TCP
// connection.
func (s *Suite) hol(ctx context.Context) error {
	const big = 64 << 20
	t := s.section(fmt.Sprintf("Head-of-line blocking: 1 KB every ms beside %d MB messages, 100 Mbit/s links", big>>20)).
		table(append([]Column{text("run", "run")}, latColumns("small messages")...)...)
	return withBed(ctx, []int64{100e6, 100e6}, func(bed *testbed.Bed) error {
		for _, run := range []struct {
			nets    []int
			release bool
		}{{[]int{0}, false}, {[]int{0, 1}, false}, {[]int{0, 1}, true}} {
			r, err := s.holBraid(ctx, bed, run.nets, transport.Config{}, big, run.release)
			if err != nil {
				return err
			}
			reader := "keeps each message"
			if run.release {
				reader = "releases each message"
			}
			t.add(append([]any{fmt.Sprintf("braid, %d path(s), 2 streams, big reader %s", len(run.nets), reader)}, latCells(r.lat)...)...)
		}
		r, err := s.holTCP(ctx, bed, big)
		if err != nil {
			return err
		}
		t.add(append([]any{"one TCP connection, both flows"}, latCells(r.lat)...)...)
		return nil
	})
}

// holLoss is hol on one lossy path: the latency of stream B's small
// messages while stream A's messages are being lost and resent, over two
// SCTP streams of one association, one TCP connection, and braid's streams
// over tcp and over sctp-udp. Loss is set on both hosts, so data and
// acknowledgements are lost alike. A row without loss comes first for each,
// to tell the queueing in send buffers from the blocking by losses.
func (s *Suite) holLoss(ctx context.Context) error {
	const big = 64 << 10
	cols := []Column{numCol("loss_percent", "loss", "%", "%g%%"), text("run", "run")}
	cols = append(cols, latColumns("small messages arrived")...)
	cols = append(cols, integer("sent", "of sent", "messages"), numCol("a_mbps", "stream A Mbit/s", "Mbit/s", "%.1f"))
	t := s.section(fmt.Sprintf("Head-of-line blocking under loss: 1 KB every ms beside %d KB messages, one 100 Mbit/s path", big>>10),
		"Loss is random, per packet, in both directions (testbed.SetLoss on both hosts). Latency is stream B's, from when the message was due (each is written by its own goroutine, so blocked writes queue up) to its arrival; messages still queued 200 ms after the last was due are not counted. Stream A's goodput is over the same interval.").
		table(cols...)
	return withBed(ctx, []int64{100e6}, func(bed *testbed.Bed) error {
		for _, pct := range []float64{0, 1} {
			for _, h := range []string{Client, Server} {
				if err := bed.SetLoss(h, 0, pct); err != nil {
					return err
				}
			}
			runs := []struct {
				name string
				f    func() (holResult, error)
			}{
				{"two SCTP streams, one sctp-udp association (pion's blocking writes)", func() (holResult, error) { return s.holSCTP(ctx, bed, 0, big) }},
				{"two SCTP streams, one sctp-udp association, StreamSendBuffer 256 KiB", func() (holResult, error) {
					return s.holSCTP(ctx, bed, 256<<10, big)
				}},
				{"two SCTP streams, one sctp-udp association, StreamSendBuffer 256 KiB, RTOMax 200 ms", func() (holResult, error) {
					return s.holSCTPConfig(ctx, bed, sctpudp.Config{StreamSendBuffer: 256 << 10, RTOMax: 200 * time.Millisecond}, big)
				}},
				{"one TCP connection, both flows", func() (holResult, error) { return s.holTCP(ctx, bed, big) }},
				{"braid over tcp, 2 streams", func() (holResult, error) {
					return s.holBraid(ctx, bed, []int{0}, transport.Config{Transport: "tcp"}, big, false)
				}},
				{"braid over tcp, 2 streams, StreamWindow 1 MiB", func() (holResult, error) {
					return s.holBraid(ctx, bed, []int{0}, transport.Config{Transport: "tcp", StreamWindow: 1 << 20}, big, false)
				}},
				{"braid over sctp-udp, 2 streams", func() (holResult, error) {
					return s.holBraid(ctx, bed, []int{0}, transport.Config{Transport: "sctp-udp"}, big, false)
				}},
			}
			for _, r := range runs {
				res, err := r.f()
				if err != nil {
					return fmt.Errorf("%s, loss %g%%: %w", r.name, pct, err)
				}
				row := append([]any{pct, r.name}, latCells(res.lat)...)
				t.add(append(row, res.sent, res.mbps())...)
				s.logf("holloss %g%% %s: %s, A %.1f Mbit/s", pct, r.name, percentiles(res.lat), res.mbps())
			}
		}
		return nil
	})
}

// latColumns are the columns of latCells: p50, p90, p99 and max latency
// and the number of messages (headed count).
func latColumns(count string) []Column {
	return []Column{dur("p50_s", "p50"), dur("p90_s", "p90"), dur("p99_s", "p99"), dur("max_s", "max"), integer("messages", count, "messages")}
}

// latCells are the latency percentiles of lat, rounded to 10 µs, and its
// length; the percentiles are empty cells when lat is.
func latCells(lat []time.Duration) []any {
	if len(lat) == 0 {
		return []any{nil, nil, nil, nil, 0}
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	p := func(q float64) time.Duration {
		return s[min(len(s)-1, int(q*float64(len(s))))].Round(10 * time.Microsecond)
	}
	return []any{p(0.5), p(0.9), p(0.99), s[len(s)-1].Round(10 * time.Microsecond), len(s)}
}

// percentiles is latCells as one line for the log.
func percentiles(lat []time.Duration) string {
	if len(lat) == 0 {
		return "- | - | - | - | 0"
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration {
		return lat[min(len(lat)-1, int(q*float64(len(lat))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("%v | %v | %v | %v | %d", p(0.5), p(0.9), p(0.99), lat[len(lat)-1].Round(10*time.Microsecond), len(lat))
}

// holBraid runs stream A and stream B as braid streams of one session over
// the networks nets. If release is set, A's reader hands each message's
// buffer back (Stream.Release), as braid recv and the job system do;
// otherwise every big message is a fresh allocation left to the garbage
// collector, as for a reader that keeps the data.
func (s *Suite) holBraid(ctx context.Context, bed *testbed.Bed, nets []int, cfg transport.Config, big int, release bool) (holResult, error) {
	cli, srv, closeSession, err := (&Braid{Bed: bed, Nets: nets, Config: cfg}).session(ctx)
	if err != nil {
		return holResult{}, err
	}
	closeFn := sync.OnceFunc(closeSession)
	defer closeFn()
	bigSt, err := cli.OpenStream(ctx)
	if err != nil {
		return holResult{}, err
	}
	smallSt, err := cli.OpenStream(ctx)
	if err != nil {
		return holResult{}, err
	}
	// One message each, so the receiver can tell the streams apart.
	if err := bigSt.WriteMessage(ctx, []byte{0}); err != nil {
		return holResult{}, err
	}
	if err := smallSt.WriteMessage(ctx, []byte{0}); err != nil {
		return holResult{}, err
	}
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	rb, err := srv.AcceptStream(actx)
	if err != nil {
		return holResult{}, err
	}
	rs, err := srv.AcceptStream(actx)
	if err != nil {
		return holResult{}, err
	}
	if _, err := rb.ReadMessage(actx); err != nil {
		return holResult{}, err
	}
	if _, err := rs.ReadMessage(actx); err != nil {
		return holResult{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var h holClock
	var wg sync.WaitGroup
	// Closing the session ends whatever the cancel does not.
	defer func() {
		cancel()
		closeFn()
		wg.Wait()
		h.wait()
	}()
	wg.Add(3)
	go func() {
		defer wg.Done()
		for {
			m, err := rb.ReadMessage(rctx)
			if err != nil {
				return
			}
			h.big(len(m))
			if release {
				rb.Release(m)
			}
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, big)
		for bigSt.WriteMessage(rctx, buf) == nil {
		}
	}()
	go func() {
		defer wg.Done()
		for {
			m, err := rs.ReadMessage(rctx)
			if err != nil {
				return
			}
			h.small(m)
		}
	}()
	return h.run(s.Duration, func(msg []byte) { smallSt.WriteMessage(rctx, msg) }), nil
}

// holTCP carries both flows on one TCP connection, whole messages
// interleaved: frames of 1 byte flow, 4 bytes length, payload.
func (s *Suite) holTCP(ctx context.Context, bed *testbed.Bed, big int) (holResult, error) {
	cli, srv, err := (&TCP{Bed: bed, Nets: []int{0}}).conns(ctx)
	if err != nil {
		return holResult{}, err
	}
	c, sv := cli[0], srv[0]
	var h holClock
	var wg sync.WaitGroup
	// Closing the sockets ends every goroutine; wait for them.
	defer func() {
		wg.Wait()
		h.wait()
	}()
	defer closeAll(cli, srv)
	wg.Add(1)
	go func() {
		defer wg.Done()
		hdr := make([]byte, 5)
		buf := make([]byte, big)
		for {
			if _, err := io.ReadFull(sv, hdr); err != nil {
				return
			}
			n := int(hdr[1])<<24 | int(hdr[2])<<16 | int(hdr[3])<<8 | int(hdr[4])
			if n > len(buf) {
				return
			}
			if _, err := io.ReadFull(sv, buf[:n]); err != nil {
				return
			}
			if hdr[0] == 1 {
				h.small(buf[:n])
			} else {
				h.big(n)
			}
		}
	}()
	var wmu sync.Mutex
	write := func(flow byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		hdr := []byte{flow, byte(len(p) >> 24), byte(len(p) >> 16), byte(len(p) >> 8), byte(len(p))}
		_, err := (&net.Buffers{hdr, p}).WriteTo(c)
		return err
	}
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, big)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if write(0, buf) != nil {
				return
			}
		}
	}()
	r := h.run(s.Duration, func(msg []byte) { write(1, msg) })
	close(stop)
	return r, nil
}

// holSCTP runs stream A and stream B as SCTP streams 1 and 2 of one
// sctp-udp association, without braid: what SCTP's multi-streaming gives
// by itself. streamBuf is sctpudp.Config.StreamSendBuffer (0: pion's
// blocking writes, one at a time per association).
func (s *Suite) holSCTP(ctx context.Context, bed *testbed.Bed, streamBuf, big int) (holResult, error) {
	return s.holSCTPConfig(ctx, bed, sctpudp.Config{StreamSendBuffer: streamBuf}, big)
}

// holSCTPConfig is holSCTP with the association's whole configuration
// (Linger is set to abort at once).
func (s *Suite) holSCTPConfig(ctx context.Context, bed *testbed.Bed, cfg sctpudp.Config, big int) (holResult, error) {
	if big > 64<<10 {
		return holResult{}, fmt.Errorf("holSCTP: message of %d bytes exceeds the SCTP message size of 64 KiB", big)
	}
	cfg.Linger = -1
	k := sctpudp.Kind{Config: cfg}
	var ln net.Listener
	if err := bed.Run(Server, func() (err error) {
		ln, err = k.Listen(ctx, net.JoinHostPort(bed.Addr(Server, 0), "0"))
		return err
	}); err != nil {
		return holResult{}, err
	}
	defer ln.Close()
	var c net.Conn
	if err := bed.Run(Client, func() (err error) {
		c, err = k.Dial(ctx, bed.Addr(Client, 0), ln.Addr().String())
		return err
	}); err != nil {
		return holResult{}, err
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		return holResult{}, err
	}
	defer sc.Close()
	ca, sa := c.(*sctpudp.Stream).Assoc(), sc.(*sctpudp.Stream).Assoc()
	bigSt, err := ca.OpenStream(1, sctpudp.StreamOptions{})
	if err != nil {
		return holResult{}, err
	}
	smallSt, err := ca.OpenStream(2, sctpudp.StreamOptions{})
	if err != nil {
		return holResult{}, err
	}
	var h holClock
	var wg sync.WaitGroup
	// Closing the associations (deferred above) ends every goroutine.
	defer func() {
		wg.Wait()
		h.wait()
	}()
	defer sc.Close()
	defer c.Close()
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, big)
		for {
			if _, err := bigSt.Write(buf); err != nil {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		// The receiver learns of each stream from its first message.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for range 2 {
			st, err := sa.AcceptStream(actx)
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, big)
				for {
					if st.ID() == 2 {
						// Each 1 KB write is one SCTP message.
						if _, err := io.ReadFull(st, buf[:1024]); err != nil {
							return
						}
						h.small(buf[:1024])
						continue
					}
					n, err := st.Read(buf)
					if err != nil {
						return
					}
					h.big(n)
				}
			}()
		}
	}()
	var werr atomic.Pointer[error]
	r := h.run(s.Duration, func(msg []byte) {
		if _, err := smallSt.Write(msg); err != nil && !errors.Is(err, net.ErrClosed) {
			werr.CompareAndSwap(nil, &err)
		}
	})
	if e := werr.Load(); e != nil {
		return r, *e
	}
	return r, nil
}

func beUint64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func putUint64(b []byte, v uint64) {
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}
