package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/testbed"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/transport/channel"
)

// Hosts used on a bench testbed.
const (
	Server = "srv"
	Client = "cli"
)

// Key is the cluster key of bench sessions.
var Key = []byte("braid-bench-cluster-key")

// NewBed brings up a two-host testbed with one full-duplex network per
// rate (bit/s; testbed.Network.FullDuplex: a bucket per direction), for
// bulk traffic.
func NewBed(ctx context.Context, rates []int64) (*testbed.Bed, error) {
	return newBed(ctx, rates, false)
}

// NewHalfDuplexBed is NewBed with half-duplex networks (the testbed's
// default: one bucket per host and network for both directions), on which a ping-pong of small messages
// stays within the rate as on a wire.
func NewHalfDuplexBed(ctx context.Context, rates []int64) (*testbed.Bed, error) {
	return newBed(ctx, rates, true)
}

func newBed(ctx context.Context, rates []int64, half bool) (*testbed.Bed, error) {
	spec := testbed.Spec{Hosts: []string{Server, Client}}
	for i, r := range rates {
		spec.Networks = append(spec.Networks, testbed.Network{Name: fmt.Sprintf("n%d", i), Rate: r, FullDuplex: !half})
	}
	return testbed.Up(ctx, spec)
}

// Result is one measurement.
type Result struct {
	Name      string
	Mbps      float64 // bulk goodput, or ping-pong effective bandwidth (eq. 1)
	RTT       time.Duration
	PerPath   []float64 // Mbit/s per path where known
	CPUPerGB  time.Duration
	Starts    int64
	Ends      int64
	Segments  int64
	Messages  int
	Elapsed   time.Duration
	Transport transport.StripeStats
}

// Braid runs a braid session from cli to srv over the networks listed in
// nets (indexes into the bed's networks).
type Braid struct {
	Bed    *testbed.Bed
	Nets   []int
	Config transport.Config
	// Kind, if set, makes the channels instead of the kind that
	// Config.Transport names, e.g. an sctpudp.Kind with its own Config.
	Kind channel.Kind
}

func (b *Braid) config(host string) *transport.Config {
	c := b.Config
	c.Key = Key
	name := c.Transport
	if name == "" {
		name = "tcp"
	}
	kind, err := channel.Lookup(name)
	if b.Kind != nil {
		kind, err = b.Kind, nil
	}
	if err == nil {
		c.Channel = nsKind{Kind: kind, bed: b.Bed, host: host}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
		if os.Getenv("BRAID_BENCH_LOG") != "" {
			c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
	}
	return &c
}

// session dials a braid session and returns it with the accepted side.
func (b *Braid) session(ctx context.Context) (cli, srv *transport.Session, closeFn func(), err error) {
	var ln *transport.Listener
	var addrs []string
	for _, n := range b.Nets {
		addrs = append(addrs, net.JoinHostPort(b.Bed.Addr(Server, n), "0"))
	}
	ln, err = transport.Listen(ctx, addrs, b.config(Server))
	if err != nil {
		return nil, nil, nil, err
	}
	var paths []transport.Path
	for i, a := range ln.Addrs() {
		paths = append(paths, transport.Path{Local: b.Bed.Addr(Client, b.Nets[i]), Remote: a.String()})
	}
	cli, err = transport.Dial(ctx, paths, b.config(Client))
	if err != nil {
		ln.Close()
		return nil, nil, nil, err
	}
	srv, err = ln.Accept(ctx)
	if err != nil {
		cli.Close()
		ln.Close()
		return nil, nil, nil, err
	}
	// Wait for every path to be up on both sides.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (up(cli) < len(b.Nets) || up(srv) < len(b.Nets)) {
		time.Sleep(10 * time.Millisecond)
	}
	return cli, srv, func() { cli.Close(); ln.Close() }, nil
}

func up(s *transport.Session) int {
	n := 0
	for _, p := range s.Stats() {
		if p.State == "up" {
			n++
		}
	}
	return n
}

// measure runs one braid perf test (package perf, the engine of braid
// perf) from the client host to a perf server on the server host over
// b.Nets, and returns the client's report and its iperf3 form (per
// stream figures).
func (b *Braid) measure(ctx context.Context, o perf.Options) (*perf.Report, *perf.IperfReport, error) {
	var addrs []string
	for _, n := range b.Nets {
		addrs = append(addrs, net.JoinHostPort(b.Bed.Addr(Server, n), "0"))
	}
	scfg := b.config(Server)
	ln, err := transport.Listen(ctx, addrs, scfg)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- perf.NewServer(scfg).Serve(sctx, ln, true) }()
	defer func() {
		cancel()
		ln.Close()
		<-served
	}()
	for i, a := range ln.Addrs() {
		o.Paths = append(o.Paths, transport.Path{Local: b.Bed.Addr(Client, b.Nets[i]), Remote: a.String()})
	}
	o.Config = b.config(Client)
	return perf.Run(ctx, &o)
}

// Bulk runs braid perf's bulk test: msgSize messages on streams streams,
// counted at the receiver for d from the first byte.
func (b *Braid) Bulk(ctx context.Context, msgSize, streams int, d time.Duration) (Result, error) {
	rep, _, err := b.measure(ctx, perf.Options{Mode: "bulk", Size: int64(msgSize), Streams: streams, Seconds: d.Seconds()})
	if err != nil {
		return Result{}, err
	}
	res := Result{Name: "braid", Mbps: rep.ThroughputMbps, Elapsed: time.Duration(rep.Seconds * float64(time.Second)),
		Messages: int(rep.Messages), Transport: rep.Control}
	for _, p := range rep.PerPath {
		res.PerPath = append(res.PerPath, p.Mbps)
	}
	return res, nil
}

// PingPong runs braid perf's ping-pong test on one stream: count round
// trips of a size-byte message after a warm-up one, and returns the
// effective bandwidth of eq. 1 with the mean round trip.
func (b *Braid) PingPong(ctx context.Context, size, count int) (Result, error) {
	rep, _, err := b.measure(ctx, perf.Options{Mode: "pingpong", Size: int64(size), Streams: 1, Count: count, Seconds: pingPongLimit.Seconds()})
	if err != nil {
		return Result{}, err
	}
	return Result{Name: "braid", Mbps: rep.EffectiveMbps, RTT: time.Duration(rep.RTTus * 1e3), Messages: rep.RoundTrips,
		Elapsed: time.Duration(rep.Seconds * float64(time.Second)), Transport: rep.Control}, nil
}

// pingPongLimit bounds a ping-pong measurement's time.
const pingPongLimit = 10 * time.Minute

// pingpong times count round trips after 2 warm-up ones (the plain TCP
// peers; braid's go through perf).
func pingpong(count int, once func() error) ([]time.Duration, error) {
	for range 2 {
		if err := once(); err != nil {
			return nil, err
		}
	}
	rtts := make([]time.Duration, 0, count)
	for range count {
		t0 := time.Now()
		if err := once(); err != nil {
			return nil, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}

func effective(name string, size int, rtts []time.Duration) Result {
	var sum time.Duration
	for _, r := range rtts {
		sum += r
	}
	mean := sum / time.Duration(len(rtts))
	return Result{Name: name, RTT: mean, Messages: len(rtts), Mbps: perf.EffectiveMbps(int64(size), mean)}
}

// TCP runs plain TCP connections, one per listed network, between the two
// hosts: the baseline. With one network it is "one TCP connection"; with
// several, data is split evenly by hand.
type TCP struct {
	Bed       *testbed.Bed
	Nets      []int
	Multipath bool // one MPTCP connection instead (Nets[0] as primary)
}

func (t *TCP) conns(ctx context.Context) (cli, srv []net.Conn, err error) {
	n := len(t.Nets)
	if t.Multipath {
		n = 1
	}
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for i := range n {
		var ln net.Listener
		if err := t.Bed.Run(Server, func() (err error) {
			lc := net.ListenConfig{}
			lc.SetMultipathTCP(t.Multipath)
			ln, err = lc.Listen(ctx, "tcp", net.JoinHostPort(t.Bed.Addr(Server, t.Nets[i]), "0"))
			return err
		}); err != nil {
			return nil, nil, err
		}
		lns = append(lns, ln)
		var c net.Conn
		if err := t.Bed.Run(Client, func() (err error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(t.Bed.Addr(Client, t.Nets[i]))}}
			d.SetMultipathTCP(t.Multipath)
			c, err = d.DialContext(ctx, "tcp", ln.Addr().String())
			return err
		}); err != nil {
			return nil, nil, err
		}
		s, err := ln.Accept()
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		cli = append(cli, c)
		srv = append(srv, s)
	}
	if t.Multipath {
		time.Sleep(500 * time.Millisecond) // let extra subflows come up
	}
	return cli, srv, nil
}

func (t *TCP) name() string {
	switch {
	case t.Multipath:
		return "mptcp"
	case len(t.Nets) == 1:
		return fmt.Sprintf("tcp(net %d)", t.Nets[0])
	}
	return fmt.Sprintf("tcp x%d", len(t.Nets))
}

// Bulk streams bytes on every connection for d.
func (t *TCP) Bulk(ctx context.Context, d time.Duration) (Result, error) {
	cli, srv, err := t.conns(ctx)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(cli, srv)
	counts := make([]int64, len(srv))
	var wg sync.WaitGroup
	start := time.Now()
	for i, s := range srv {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for {
				n, err := s.Read(buf)
				counts[i] += int64(n)
				if err != nil {
					return
				}
			}
		}()
	}
	stop := start.Add(d)
	var swg sync.WaitGroup
	for _, c := range cli {
		swg.Add(1)
		go func() {
			defer swg.Done()
			buf := make([]byte, 256<<10)
			for time.Now().Before(stop) {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
			c.(*net.TCPConn).CloseWrite()
		}()
	}
	swg.Wait()
	wg.Wait()
	el := time.Since(start)
	res := Result{Name: t.name(), Elapsed: el}
	var total int64
	for _, n := range counts {
		total += n
		res.PerPath = append(res.PerPath, perf.Mbps(n, el.Seconds()))
	}
	res.Mbps = perf.Mbps(total, el.Seconds())
	return res, nil
}

// PingPong splits each message evenly over the connections and echoes the
// parts back.
func (t *TCP) PingPong(ctx context.Context, size, count int) (Result, error) {
	cli, srv, err := t.conns(ctx)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(cli, srv)
	k := len(cli)
	part := func(i int) int { return size/k + boolInt(i < size%k) }
	for i, s := range srv {
		go func() {
			buf := make([]byte, part(i))
			for {
				if _, err := io.ReadFull(s, buf); err != nil {
					return
				}
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	bufs := make([][]byte, k)
	for i := range bufs {
		bufs[i] = make([]byte, part(i))
	}
	rtts, err := pingpong(count, func() error {
		errs := make([]error, k)
		var wg sync.WaitGroup
		for i, c := range cli {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Write(bufs[i]); err != nil {
					errs[i] = err
					return
				}
				_, errs[i] = io.ReadFull(c, bufs[i])
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return Result{}, err
	}
	return effective(t.name(), size, rtts), nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func closeAll(lists ...[]net.Conn) {
	for _, l := range lists {
		for _, c := range l {
			c.Close()
		}
	}
}

// nsKind creates channels inside a testbed host's network namespace.
type nsKind struct {
	channel.Kind
	bed  *testbed.Bed
	host string
}

func (k nsKind) Dial(ctx context.Context, local, remote string) (c net.Conn, err error) {
	err = k.bed.Run(k.host, func() (err error) {
		c, err = k.Kind.Dial(ctx, local, remote)
		return err
	})
	return c, err
}

func (k nsKind) Listen(ctx context.Context, addr string) (l net.Listener, err error) {
	err = k.bed.Run(k.host, func() (err error) {
		l, err = k.Kind.Listen(ctx, addr)
		return err
	})
	return l, err
}
