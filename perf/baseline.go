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
	"github.com/braid-hpc/braid/transport/channel"
)

// The TCP baseline: plain TCP connections, -P on each path (one by
// default), with the data split by hand. The braid session of the test
// carries the control messages; each connection opens with the test's
// token and its index (connection i rides path i mod k) so the server
// knows which is which.

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
	conns, err := acceptBaseline(ctx, listeners, token, h.baselineConns(), s.cfg.Logger)
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
// them by their index.
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

// baselineClient runs the client's side of a baseline test: o.Streams
// connections on each of the k paths, connection i on path i mod k. Its
// streams (iperf3's sockets) are the connections, numbered from 0; the
// per-path figures add up the connections of each path. It fills ip's
// connected list and intervals.
func baselineClient(ctx context.Context, o *Options, sess *transport.Session, ctrl *transport.Stream, ready *Ready, rep *Report, before *snapshot, ip *IperfReport) (*Result, error) {
	k := len(o.Paths)
	if len(ready.Ports) != k || len(ready.Token) != baselineTokenLen {
		return nil, fmt.Errorf("server sent %d baseline ports for %d paths", len(ready.Ports), k)
	}
	n := o.hello().baselineConns()
	conns := make([]*net.TCPConn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range n {
		p := o.Paths[i%k]
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
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(ready.Ports[i%k])))
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
	ip.Start.Connected = make([]IperfConnected, n)
	for i, c := range conns {
		ip.Start.Connected[i] = connected(i, c.LocalAddr().String(), c.RemoteAddr().String())
		ip.Start.Connected[i].Paths = []int{i % k}
	}
	var goAhead Ready
	if err := ctl.ReadJSON(ctx, ctrl, 20*time.Second, &goAhead); err != nil {
		return nil, fmt.Errorf("server did not start the baseline: %w", err)
	}
	if goAhead.Error != "" {
		return nil, fmt.Errorf("server: %s", goAhead.Error)
	}

	ctr := &streamCounter{}
	counters := make([]*atomic.Int64, n)
	for i := range counters {
		counters[i] = ctr.stream(i)
	}
	// The per-path meter: the connections of each path together.
	meter := func() []int64 {
		out := make([]int64, k)
		for i := range counters {
			out[i%k] += counters[i].Load()
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
	period := time.Duration(o.Interval * float64(time.Second))
	var tcp *connsTCP
	if !o.Reverse { // this side sends: its sockets' figures are iperf3's sender's
		tcp = newConnsTCP(conns)
	}
	sampler := startSampler(ctr, !o.Reverse, period, 0, o.OnStreamInterval, tcp.source())
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
	counts := make([]int64, n)
	switch {
	case o.Mode == "pingpong":
		rtts, elapsed, err = baselinePingPong(o, conns, deadline, counters, iv)
	case o.Reverse:
		var last latest
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() {
				counts[i], errs[i] = io.CopyBuffer(meterWriter{counters[i]}, c, make([]byte, 256<<10))
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
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() {
				_, errs[i] = writeUntil(c, buf, deadline, counters[i])
				if errs[i] == nil {
					errs[i] = c.CloseWrite()
				}
			})
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	ip.Intervals = sampler.stop()
	if tcp != nil {
		tcp.read() // the last reading, with or without intervals
		rep.connTCP = tcp
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
		if len(res.Conns) != n {
			return nil, fmt.Errorf("server reported %d connections, want %d", len(res.Conns), n)
		}
		copy(counts, res.Conns)
		rep.Bytes, rep.Messages, rep.Seconds = res.Bytes, res.Messages, res.Seconds
		rep.ThroughputMbps = ctl.Mbps(rep.Bytes, rep.Seconds)
	}
	rep.sent = make([]int64, n)
	switch {
	case o.Mode == "pingpong":
		copy(rep.sent, counts)
	case o.Reverse:
		if len(res.Conns) != n {
			return nil, fmt.Errorf("server reported %d connections, want %d", len(res.Conns), n)
		}
		copy(rep.sent, res.Conns)
	default:
		for i := range counters {
			rep.sent[i] = counters[i].Load()
		}
	}
	rep.received = counts
	rep.PerPath = rep.PerPath[:0]
	for i := range k {
		// A path's connections: the first one's addresses (the others
		// differ in their local ports), all of their bytes.
		var b int64
		for j := i; j < n; j += k {
			b += counts[j]
		}
		c := conns[i]
		rep.PerPath = append(rep.PerPath, Path{ID: i, Local: c.LocalAddr().String(), Remote: c.RemoteAddr().String(),
			Bytes: b, Mbps: ctl.Mbps(b, rep.Seconds), State: "up"})
	}
	return &res, nil
}

// connsTCP reads the TCP_INFO of plain TCP connections: each stream (by
// index) is one connection, with its own socket. Its read is the
// tcpSource of their intervals, and it keeps each connection's figures
// over the test (figures) for the end section.
type connsTCP struct {
	conns []*net.TCPConn
	acc   []channelSamples // by connection; read only after the sampler stopped
	seen  []bool
}

func newConnsTCP(conns []*net.TCPConn) *connsTCP {
	return &connsTCP{conns: conns, acc: make([]channelSamples, len(conns)), seen: make([]bool, len(conns))}
}

func (t *connsTCP) read() (map[int]tcpNow, tcpNow, bool) {
	streams := make(map[int]tcpNow, len(t.conns))
	infos := make([]tcpNow, 0, len(t.conns))
	for i, c := range t.conns {
		st, ok := channel.TCPStats(c)
		if !ok {
			continue
		}
		now := tcpNow{retr: st.Retransmits, cwnd: st.SendCwnd, rtt: st.RTT}
		streams[i] = now
		infos = append(infos, now)
		// The connections opened for the test: their first reading
		// counts from 0, not from itself.
		t.seen[i] = true
		t.acc[i].lastRetr = st.Retransmits
		t.acc[i].add(st.SendCwnd, st.RTT)
	}
	return streams, sumTCP(infos), len(infos) > 0
}

// source is t's tcpSource; nil for a nil t.
func (t *connsTCP) source() tcpSource {
	if t == nil {
		return nil
	}
	return t.read
}

// figures returns connection i's figures over the test, nil when it was
// never read (not TCP).
func (t *connsTCP) figures(i int) *TCPFigures {
	if i >= len(t.acc) || !t.seen[i] {
		return nil
	}
	a := &t.acc[i]
	return &TCPFigures{MaxSendCwnd: a.maxCwnd, MaxRTT: a.maxRTT.Microseconds(), MinRTT: a.minRTT.Microseconds(),
		MeanRTT: a.mean().Microseconds(), Retransmits: a.lastRetr - a.firstRetr}
}

// meterWriter discards what it is given and counts it.
type meterWriter struct{ n *atomic.Int64 }

func (w meterWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return len(b), nil
}

// baselinePingPong sends each message as k parts in parallel, one per
// connection, and waits for every part's echo: one round trip.
func baselinePingPong(o *Options, conns []*net.TCPConn, deadline time.Time, counters []*atomic.Int64, iv *intervals) ([]time.Duration, time.Duration, error) {
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

// baselineIperf makes the end section of the iperf3-shaped report of a
// --tcp-baseline test, whose streams are its plain TCP connections.
func baselineIperf(o *Options, rep *Report, res *Result) IperfEnd {
	local := !o.Reverse
	e := IperfEnd{Streams: []IperfEndStream{}}
	var (
		sent, retr int64
		tcp        bool
	)
	for i, s := range rep.sent {
		var r int64
		if i < len(rep.received) {
			r = rep.received[i]
		}
		sent += s
		es := IperfEndStream{Sender: streamSpan(i, rep.Seconds, s, local), Receiver: streamSpan(i, rep.Seconds, r, local)}
		if rep.connTCP != nil {
			f := rep.connTCP.figures(i)
			es.Sender.withTCP(f)
			if f != nil {
				retr += f.Retransmits
				tcp = true
			}
		}
		e.Streams = append(e.Streams, es)
	}
	if o.Mode == "pingpong" {
		sent = rep.Bytes
	}
	ss, sr := span(0, rep.Seconds, sent, local), span(0, rep.Seconds, rep.Bytes, local)
	if tcp {
		ss.Retransmits = &retr // each connection its own
	}
	e.SumSent, e.SumReceived = &ss, &sr
	var c IperfCPU
	c.HostTotal, c.HostUser, c.HostSystem = cpuPercent(rep.CPUUser, rep.CPUSys, rep.Seconds)
	c.RemoteTotal, c.RemoteUser, c.RemoteSystem = cpuPercent(res.CPUUser, res.CPUSys, rep.Seconds)
	e.CPU = &c
	return e
}
