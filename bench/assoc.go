package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport/channel/sctpudp"
)

// Paper 002, Table 3: one SCTP association carrying 2 streams against 4
// separate connections, bulk one way, throughput and CPU per byte.

// assocEnv says where an assoc run's two ends live.
type assocEnv struct {
	name string
	// run runs f with the calling thread in host's namespace.
	run              func(host string, f func() error) error
	srvAddr, cliAddr string
}

func bedEnv(name string, bed *testbed.Bed) assocEnv {
	return assocEnv{name: name, run: bed.Run, srvAddr: bed.Addr(Server, 0), cliAddr: bed.Addr(Client, 0)}
}

// loopbackEnv runs both ends on 127.0.0.1 of the calling process's
// namespace.
var loopbackEnv = assocEnv{
	name:    "loopback",
	run:     func(_ string, f func() error) error { return f() },
	srvAddr: "127.0.0.1",
	cliAddr: "127.0.0.1",
}

// assocLayout is one way of carrying the flows.
type assocLayout struct {
	name    string
	sctp    bool // sctp-udp, else TCP
	conns   int  // connections or associations
	streams int  // SCTP streams per association, each with its own writer
	// streamBuf is sctpudp.Config.StreamSendBuffer (0: blocking writes).
	streamBuf int
	// rwnd, when positive, is the receive window: sctpudp's
	// MaxReceiveBuffer, or SO_RCVBUF on TCP's accepted socket (0: the
	// defaults).
	rwnd int
}

// kind is how the papers' figures draw l: sctp-udp is braid's, TCP a peer.
func (l assocLayout) kind() string {
	if l.sctp {
		return kindBraid
	}
	return kindPeer
}

var assocLayouts = []assocLayout{
	{"1 sctp-udp association, 2 streams", true, 1, 2, 0, 0},
	{"1 sctp-udp association, 2 streams, StreamSendBuffer 256 KiB", true, 1, 2, 256 << 10, 0},
	{"4 sctp-udp associations, 1 stream each", true, 4, 1, 0, 0},
	{"4 TCP connections", false, 4, 1, 0, 0},
}

// assocResult is one assoc run.
type assocResult struct {
	mbps     float64
	cpuPerGB float64 // process CPU seconds per GB delivered
}

func (s *Suite) assoc(ctx context.Context) error {
	t := s.section("One association with 2 streams vs 4 connections (paper 002, Table 3)",
		"Bulk one way, every stream or connection written by its own goroutine with messages of the given size. CPU is the whole process (sender and receiver, user + system) per GB delivered, over the same interval as the throughput, after 300 ms of warm-up. The testbed link is one network at 1000 Mbit/s; loopback is 127.0.0.1, unshaped.").
		table(text("where", "where"), text("message", "message"), integer("message_bytes", "bytes", "bytes"), text("run", "run"),
			numCol("mbps", "Mbit/s", "Mbit/s", "%.1f"), numCol("cpu_s_per_gb", "CPU s per GB", "s/GB", "%.2f"))
	sizes := []int{2560, 64 << 10}
	each := func(env assocEnv) error {
		for _, size := range sizes {
			for _, l := range assocLayouts {
				r, err := s.assocRun(ctx, env, l, size)
				if err != nil {
					return fmt.Errorf("%s, %s, %s: %w", env.name, l.name, sizeName(size), err)
				}
				t.add(env.name, sizeName(size), size, l.name, r.mbps, r.cpuPerGB)
				s.logf("assoc %s %s %s: %.1f Mbit/s, %.2f CPU s/GB", env.name, sizeName(size), l.name, r.mbps, r.cpuPerGB)
			}
		}
		return nil
	}
	if err := withBed(ctx, []int64{1000e6}, func(bed *testbed.Bed) error {
		return each(bedEnv("testbed 1000 Mbit/s", bed))
	}); err != nil {
		return err
	}
	return each(loopbackEnv)
}

// assocRun moves size-byte messages one way over layout l for s.Duration
// and counts what arrives.
func (s *Suite) assocRun(ctx context.Context, env assocEnv, l assocLayout, size int) (assocResult, error) {
	var wg sync.WaitGroup
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
		wg.Wait()
	}()
	sk := &sink{wg: &wg}
	reader := sk.drain
	var writers []io.Writer
	k := sctpudp.Kind{Config: sctpudp.Config{Linger: -1, StreamSendBuffer: l.streamBuf, MaxReceiveBuffer: l.rwnd}}
	for range l.conns {
		var ln net.Listener
		if err := env.run(Server, func() (err error) {
			addr := net.JoinHostPort(env.srvAddr, "0")
			if l.sctp {
				ln, err = k.Listen(ctx, addr)
			} else {
				ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
			}
			return err
		}); err != nil {
			return assocResult{}, err
		}
		closers = append(closers, ln)
		var c net.Conn
		if err := env.run(Client, func() (err error) {
			if l.sctp {
				c, err = k.Dial(ctx, env.cliAddr, ln.Addr().String())
			} else {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(env.cliAddr)}}
				c, err = d.DialContext(ctx, "tcp", ln.Addr().String())
			}
			return err
		}); err != nil {
			return assocResult{}, err
		}
		closers = append(closers, c)
		sc, err := ln.Accept()
		if err != nil {
			return assocResult{}, err
		}
		closers = append(closers, sc)
		if tc, ok := sc.(*net.TCPConn); ok && l.rwnd > 0 {
			if err := tc.SetReadBuffer(l.rwnd); err != nil {
				return assocResult{}, err
			}
		}
		if !l.sctp {
			writers = append(writers, c)
			reader(sc)
			continue
		}
		// SCTP streams 1..l.streams of the association; stream 0, the
		// channel, stays idle.
		ca, sa := c.(*sctpudp.Stream).Assoc(), sc.(*sctpudp.Stream).Assoc()
		for id := range l.streams {
			st, err := ca.OpenStream(uint16(id+1), sctpudp.StreamOptions{})
			if err != nil {
				return assocResult{}, err
			}
			writers = append(writers, st)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range l.streams {
				st, err := sa.AcceptStream(ctx)
				if err != nil {
					return
				}
				reader(st)
			}
		}()
	}
	mbps, cpuPerGB, err := pump(ctx, sk, writers, size, s.Duration)
	if err != nil {
		return assocResult{}, err
	}
	return assocResult{mbps: mbps, cpuPerGB: cpuPerGB}, nil
}

// errNothing is pump's error when no byte arrived during the run.
var errNothing = errors.New("nothing arrived")

// sink counts the bytes its readers deliver; its goroutines are in wg.
type sink struct {
	wg    *sync.WaitGroup
	recvd atomic.Int64
}

// drain counts what r delivers until it fails (at teardown).
func (k *sink) drain(r io.Reader) {
	k.wg.Go(func() {
		buf := make([]byte, 256<<10)
		for {
			n, err := r.Read(buf)
			k.recvd.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
}

// pump writes messages of size on every writer (each from its own
// goroutine in k's group, until its writer is closed), lets them settle
// for 300 ms, then counts what k received and this process's CPU time
// over d. It returns the goodput in Mbit/s and the CPU seconds per GB
// received.
func pump(ctx context.Context, k *sink, writers []io.Writer, size int, d time.Duration) (mbps, cpuPerGB float64, err error) {
	var werr atomic.Pointer[error]
	for _, w := range writers {
		k.wg.Go(func() {
			buf := make([]byte, size)
			for {
				if _, err := w.Write(buf); err != nil {
					if !errors.Is(err, net.ErrClosed) {
						werr.CompareAndSwap(nil, &err)
					}
					return
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	b0, c0, t0 := k.recvd.Load(), cpuTime(), time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	b1, c1, el := k.recvd.Load(), cpuTime(), time.Since(t0)
	if e := werr.Load(); e != nil {
		return 0, 0, *e
	}
	n := b1 - b0
	if n == 0 {
		return 0, 0, errNothing
	}
	return perf.Mbps(n, el.Seconds()), (c1 - c0).Seconds() / (float64(n) / 1e9), nil
}
