package perf

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/internal/accept"
	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// The TCP baseline: k plain TCP connections, one per path, with the data
// split by hand. The braid session of the test carries the control
// messages; each connection opens with the test's token and its path
// index so the server knows which is which.

const baselineTokenLen = 16

// baselineParts splits size bytes into k parts that differ by at most one.
func baselineParts(size int64, k int) []int64 {
	parts := make([]int64, k)
	for i := range parts {
		parts[i] = size / int64(k)
		if int64(i) < size%int64(k) {
			parts[i]++
		}
	}
	return parts
}

// baseline runs the server's side of a baseline test.
func (s *Server) baseline(ctx context.Context, sess *transport.Session, ctrl *transport.Stream, h *Hello) (*Result, error) {
	// Wait until every path of the session has arrived: its local address
	// is where the plain listener of that path goes.
	var stats []transport.PathStats
	for deadline := time.Now().Add(5 * time.Second); ; {
		stats = sess.Stats()
		if len(stats) >= h.Paths || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(stats) < h.Paths {
		return nil, fmt.Errorf("only %d of %d paths arrived; the baseline needs every path up", len(stats), h.Paths)
	}
	token := make([]byte, baselineTokenLen)
	_, _ = rand.Read(token)
	listeners := map[string]net.Listener{}
	defer func() {
		for _, ln := range listeners {
			_ = ln.Close()
		}
	}()
	ports := make([]int, h.Paths)
	for _, p := range stats[:h.Paths] {
		host, port, err := net.SplitHostPort(p.Local)
		if err != nil {
			return nil, fmt.Errorf("path %d: local address %q: %w", p.ID, p.Local, err)
		}
		ln := listeners[host]
		if ln == nil {
			lport := 0
			if s.PortOffset > 0 {
				n, _ := strconv.Atoi(port)
				if lport = n + s.PortOffset; lport > 65535 {
					return nil, fmt.Errorf("port %d + offset %d is past 65535", n, s.PortOffset)
				}
			}
			var lc net.ListenConfig
			ln, err = lc.Listen(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(lport)))
			if err != nil {
				return nil, fmt.Errorf("baseline listener: %w", err)
			}
			listeners[host] = ln
		}
		if p.ID < 0 || p.ID >= h.Paths {
			return nil, fmt.Errorf("unexpected path id %d", p.ID)
		}
		ports[p.ID] = ln.Addr().(*net.TCPAddr).Port
	}
	if err := ctl.WriteJSON(ctx, ctrl, Ready{Token: token, Ports: ports}); err != nil {
		return nil, err
	}
	conns, err := acceptBaseline(ctx, listeners, token, h.Paths, s.cfg.Logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for _, ln := range listeners {
		_ = ln.Close()
	}
	if err := ctl.WriteJSON(ctx, ctrl, Ready{}); err != nil {
		return nil, err
	}
	start := time.Now()
	hard := start.Add(h.duration() + 2*time.Minute)
	counts := make([]int64, len(conns))
	errs := make([]error, len(conns))
	var (
		last latest
		wg   sync.WaitGroup
	)
	buf := make([]byte, h.Size)
	fillPattern(buf)
	parts := baselineParts(h.Size, len(conns))
	for i, c := range conns {
		_ = c.SetDeadline(hard)
		wg.Go(func() {
			var err error
			switch {
			case h.Mode == "pingpong":
				counts[i], err = echoParts(c, parts[i])
			case h.Reverse:
				counts[i], err = writeUntil(c, buf, start.Add(h.duration()), nil)
				if err == nil {
					err = c.(*net.TCPConn).CloseWrite()
				}
				if err == nil {
					// The client closes once it has read everything.
					_, err = io.Copy(io.Discard, c)
				}
			default:
				counts[i], err = io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
			}
			errs[i] = err
			last.mark()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res := &Result{Seconds: last.get().Sub(start).Seconds(), Conns: counts}
	for _, n := range counts {
		res.Bytes += n
	}
	res.Messages = res.Bytes / h.Size
	return res, nil
}

// acceptBaseline accepts the k connections of a baseline test and orders
// them by path index.
func acceptBaseline(ctx context.Context, listeners map[string]net.Listener, token []byte, k int, logger *slog.Logger) ([]net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	type arrival struct {
		c   net.Conn
		idx int
	}
	ch := make(chan arrival)
	var wg sync.WaitGroup
	for _, ln := range listeners {
		wg.Go(func() {
			b := accept.Backoff{Logger: logger, Name: "perf baseline", Addr: ln.Addr().String()}
			for {
				c, err := ln.Accept()
				if err != nil {
					if b.Wait(err, ctx.Done()) {
						continue
					}
					return
				}
				b.Reset()
				wg.Go(func() {
					_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
					hdr := make([]byte, baselineTokenLen+2)
					if _, err := io.ReadFull(c, hdr); err != nil || subtle.ConstantTimeCompare(hdr[:baselineTokenLen], token) != 1 {
						_ = c.Close()
						return
					}
					_ = c.SetReadDeadline(time.Time{})
					select {
					case ch <- arrival{c, int(binary.BigEndian.Uint16(hdr[baselineTokenLen:]))}:
					case <-ctx.Done():
						_ = c.Close()
					}
				})
			}
		})
	}
	conns := make([]net.Conn, k)
	var err error
	for got := 0; got < k && err == nil; {
		select {
		case a := <-ch:
			if a.idx >= k || conns[a.idx] != nil {
				_ = a.c.Close()
				continue
			}
			conns[a.idx] = a.c
			got++
		case <-ctx.Done():
			err = fmt.Errorf("baseline connections did not arrive: %w", ctx.Err())
		}
	}
	cancel()
	for _, ln := range listeners {
		_ = ln.Close()
	}
	wg.Wait()
	if err != nil {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
		return nil, err
	}
	return conns, nil
}

// writeUntil writes buf to c repeatedly until deadline, counting into n
// (and into meter when not nil).
func writeUntil(c net.Conn, buf []byte, deadline time.Time, meter *atomic.Int64) (int64, error) {
	var n int64
	for time.Now().Before(deadline) {
		m, err := c.Write(buf)
		n += int64(m)
		if meter != nil {
			meter.Add(int64(m))
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// echoParts echoes messages of part bytes until the client closes.
func echoParts(c net.Conn, part int64) (int64, error) {
	buf := make([]byte, part)
	var n int64
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		if _, err := c.Write(buf); err != nil {
			return n, err
		}
		n += part
	}
}

// baselineClient runs the client's side of a baseline test.
func baselineClient(ctx context.Context, o *Options, sess *transport.Session, ctrl *transport.Stream, ready *Ready, rep *Report, before *snapshot) (*Result, error) {
	k := len(o.Paths)
	if len(ready.Ports) != k || len(ready.Token) != baselineTokenLen {
		return nil, fmt.Errorf("server sent %d baseline ports for %d paths", len(ready.Ports), k)
	}
	conns := make([]*net.TCPConn, k)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i, p := range o.Paths {
		host, _, err := net.SplitHostPort(p.Remote)
		if err != nil {
			return nil, err
		}
		d := net.Dialer{Timeout: 10 * time.Second}
		if p.Local != "" {
			lhost, _, err := net.SplitHostPort(p.Local)
			if err != nil {
				lhost = p.Local
			}
			ip := net.ParseIP(lhost)
			if ip == nil {
				return nil, fmt.Errorf("--from %q: the baseline needs IP addresses", p.Local)
			}
			d.LocalAddr = &net.TCPAddr{IP: ip}
		}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(ready.Ports[i])))
		if err != nil {
			return nil, fmt.Errorf("baseline connection %d: %w", i, err)
		}
		conns[i] = c.(*net.TCPConn)
		_ = conns[i].SetNoDelay(true)
		hdr := append(append([]byte{}, ready.Token...), byte(i>>8), byte(i))
		if _, err := c.Write(hdr); err != nil {
			return nil, fmt.Errorf("baseline connection %d: %w", i, err)
		}
	}
	var goAhead Ready
	if err := ctl.ReadJSON(ctx, ctrl, 20*time.Second, &goAhead); err != nil {
		return nil, fmt.Errorf("server did not start the baseline: %w", err)
	}
	if goAhead.Error != "" {
		return nil, fmt.Errorf("server: %s", goAhead.Error)
	}

	counters := make([]atomic.Int64, k)
	meter := func() []int64 {
		out := make([]int64, k)
		for i := range counters {
			out[i] = counters[i].Load()
		}
		return out
	}
	busy := func() int64 {
		var n int64
		for _, v := range meter() {
			n += v
		}
		return n
	}
	iv := startIntervals(o, rep, meter)
	start := time.Now()
	deadline := start.Add(time.Duration(o.Seconds * float64(time.Second)))
	hard := deadline.Add(2 * time.Minute)
	for _, c := range conns {
		_ = c.SetDeadline(hard)
	}
	var (
		rtts    []time.Duration
		elapsed time.Duration
		err     error
		res     Result
	)
	counts := make([]int64, k)
	switch {
	case o.Mode == "pingpong":
		rtts, elapsed, err = baselinePingPong(o, conns, deadline, counters, iv)
	case o.Reverse:
		var last latest
		errs := make([]error, k)
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() {
				counts[i], errs[i] = io.CopyBuffer(meterWriter{&counters[i]}, c, make([]byte, 256<<10))
				_ = c.CloseWrite()
				last.mark()
			})
		}
		wg.Wait()
		err = errors.Join(errs...)
		elapsed = last.get().Sub(start)
	default:
		buf := make([]byte, o.Size)
		fillPattern(buf)
		errs := make([]error, k)
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() {
				_, errs[i] = writeUntil(c, buf, deadline, &counters[i])
				if errs[i] == nil {
					errs[i] = c.CloseWrite()
				}
			})
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	if err == nil {
		err = ctl.ReadJSONWhileBusy(ctx, ctrl, ctl.CounterMoving(busy), 2*time.Minute, &res)
	}
	iv.stop()
	if err != nil {
		return nil, err
	}
	u1, s1 := ctl.CPUTimes()
	rep.CPUUser, rep.CPUSys = (u1 - before.user).Seconds(), (s1 - before.sys).Seconds()
	switch {
	case o.Mode == "pingpong":
		rep.setPingPong(o, rtts, elapsed)
		rep.ThroughputMbps = ctl.Mbps(2*rep.Bytes, rep.Seconds)
		for i := range counts {
			counts[i] = counters[i].Load()
		}
	case o.Reverse:
		rep.Seconds = elapsed.Seconds()
		for _, n := range counts {
			rep.Bytes += n
		}
		rep.Messages = rep.Bytes / o.Size
		rep.ThroughputMbps = ctl.Mbps(rep.Bytes, rep.Seconds)
	default:
		if len(res.Conns) != k {
			return nil, fmt.Errorf("server reported %d connections, want %d", len(res.Conns), k)
		}
		copy(counts, res.Conns)
		rep.Bytes, rep.Messages, rep.Seconds = res.Bytes, res.Messages, res.Seconds
		rep.ThroughputMbps = ctl.Mbps(rep.Bytes, rep.Seconds)
	}
	rep.sent = make([]int64, k)
	switch {
	case o.Mode == "pingpong":
		copy(rep.sent, counts)
	case o.Reverse:
		copy(rep.sent, res.Conns)
	default:
		for i := range counters {
			rep.sent[i] = counters[i].Load()
		}
	}
	rep.PerPath = rep.PerPath[:0]
	for i, c := range conns {
		rep.PerPath = append(rep.PerPath, Path{ID: i, Local: c.LocalAddr().String(), Remote: c.RemoteAddr().String(),
			Bytes: counts[i], Mbps: ctl.Mbps(counts[i], rep.Seconds), State: "up"})
	}
	return &res, nil
}

// meterWriter discards what it is given and counts it.
type meterWriter struct{ n *atomic.Int64 }

func (w meterWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return len(b), nil
}

// baselinePingPong sends each message as k parts in parallel, one per
// connection, and waits for every part's echo: one round trip.
func baselinePingPong(o *Options, conns []*net.TCPConn, deadline time.Time, counters []atomic.Int64, iv *intervals) ([]time.Duration, time.Duration, error) {
	k := len(conns)
	parts := baselineParts(o.Size, k)
	type worker struct {
		start chan uint64
		done  chan error
	}
	workers := make([]worker, k)
	var wg sync.WaitGroup
	for i, c := range conns {
		w := worker{start: make(chan uint64), done: make(chan error, 1)}
		workers[i] = w
		wg.Go(func() {
			out, in := make([]byte, parts[i]), make([]byte, parts[i])
			fillPattern(out)
			for seq := range w.start {
				stamp(out, seq)
				_, err := c.Write(out)
				if err == nil {
					_, err = io.ReadFull(c, in)
				}
				if err == nil && !checkStamp(in, seq) {
					err = fmt.Errorf("connection %d: echo %d does not match what was sent", i, seq)
				}
				counters[i].Add(2 * parts[i])
				w.done <- err
			}
		})
	}
	defer func() {
		for _, w := range workers {
			close(w.start)
		}
		wg.Wait()
	}()
	round := func(seq uint64) (time.Duration, error) {
		t0 := time.Now()
		for _, w := range workers {
			w.start <- seq
		}
		var errs []error
		for _, w := range workers {
			if err := <-w.done; err != nil {
				errs = append(errs, err)
			}
		}
		return time.Since(t0), errors.Join(errs...)
	}
	if _, err := round(0); err != nil { // warm-up
		return nil, 0, err
	}
	var rtts []time.Duration
	t0 := time.Now()
	for n := 1; (o.Count == 0 || n <= o.Count) && time.Now().Before(deadline); n++ {
		d, err := round(uint64(n))
		if err != nil {
			return nil, 0, err
		}
		rtts = append(rtts, d)
		iv.addRTT(d)
	}
	elapsed := time.Since(t0)
	for _, c := range conns {
		_ = c.CloseWrite()
	}
	return rtts, elapsed, nil
}

// baselineIperf makes the intervals and the end section of the
// iperf3-shaped report of a --tcp-baseline test, whose streams are its
// plain TCP connections.
func baselineIperf(o *Options, rep *Report, res *Result) ([]IperfInterval, IperfEnd) {
	local := !o.Reverse
	f := false
	ivs := []IperfInterval{}
	for _, in := range rep.Intervals {
		iv := IperfInterval{Streams: []IperfSpan{}}
		var sum int64
		for i, m := range in.PerPath {
			n := int64(m * 1e6 / 8 * (in.End - in.Start))
			sp := span(in.Start, in.End, n, local)
			sp.Socket, sp.Omitted = &i, &f
			iv.Streams = append(iv.Streams, sp)
			sum += n
		}
		iv.Sum = span(in.Start, in.End, sum, local)
		iv.Sum.Omitted = &f
		ivs = append(ivs, iv)
	}
	e := IperfEnd{Streams: []IperfEndStream{}}
	var sent int64
	for i, p := range rep.PerPath {
		var s int64
		if i < len(rep.sent) {
			s = rep.sent[i]
		}
		sent += s
		e.Streams = append(e.Streams, IperfEndStream{Sender: streamSpan(i, rep.Seconds, s, local),
			Receiver: streamSpan(i, rep.Seconds, p.Bytes, local)})
	}
	if o.Mode == "pingpong" {
		sent = rep.Bytes
	}
	ss, sr := span(0, rep.Seconds, sent, local), span(0, rep.Seconds, rep.Bytes, local)
	e.SumSent, e.SumReceived = &ss, &sr
	var c IperfCPU
	c.HostTotal, c.HostUser, c.HostSystem = cpuPercent(rep.CPUUser, rep.CPUSys, rep.Seconds)
	c.RemoteTotal, c.RemoteUser, c.RemoteSystem = cpuPercent(res.CPUUser, res.CPUSys, rep.Seconds)
	e.CPU = &c
	return ivs, e
}
