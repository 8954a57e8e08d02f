//go:build linux

package ksctp

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport/channel"
)

// flow is one writer and the reader of what it writes.
type flow struct {
	w io.Writer
	r io.Reader
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pump writes size-byte messages on every flow for d, and returns the rate
// of bytes read meanwhile and the process's CPU seconds per GiB read (both
// ends are in this process). closeAll ends the flows afterwards.
func pump(flows []flow, size int, d time.Duration, closeAll func()) (mbps, cpuPerGiB float64) {
	var got atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, f := range flows {
		wg.Go(func() {
			b := make([]byte, size)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := f.w.Write(b); err != nil {
					return
				}
			}
		})
		wg.Go(func() {
			b := make([]byte, 64<<10)
			for {
				n, err := f.r.Read(b)
				got.Add(int64(n))
				if err != nil {
					return
				}
			}
		})
	}
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(d)
	n, cpu, el := got.Load(), cpuTime()-cpu0, time.Since(t0)
	close(stop)
	closeAll()
	wg.Wait()
	if n == 0 {
		return 0, 0
	}
	return float64(n) * 8 / el.Seconds() / 1e6, cpu.Seconds() / (float64(n) / (1 << 30))
}

// tcpFlows opens n TCP connections on loopback; rcvbuf > 0 sets the
// receiver's SO_RCVBUF.
func tcpFlows(t testing.TB, n, rcvbuf int) ([]flow, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var flows []flow
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if rcvbuf > 0 {
			_ = s.(*net.TCPConn).SetReadBuffer(rcvbuf)
		}
		conns = append(conns, c, s)
		flows = append(flows, flow{c, s})
	}
	return flows, func() {
		ln.Close()
		for _, c := range conns {
			c.Close()
		}
	}
}

// sctpFlows opens n associations on loopback with streams lanes each (one
// writer per lane; 1 means the association itself, lane 0).
func sctpFlows(t testing.TB, cfg Config, n, streams int) ([]flow, func()) {
	var conns []io.Closer
	var flows []flow
	for range n {
		c, s, ln := pair(t, Kind{Config: cfg}, "127.0.0.1", "127.0.0.1:0")
		conns = append(conns, c, s, ln)
		if streams == 1 {
			flows = append(flows, flow{c, s})
			continue
		}
		ws, rs := openLanes(t, c, s, streams)
		for i := range ws {
			flows = append(flows, flow{ws[i], rs[i]})
		}
	}
	return flows, func() {
		for _, c := range conns {
			c.Close()
		}
	}
}

// openLanes opens lanes 1 to n of the association between c and s,
// writes a byte on each (so that the peer learns of it), and returns
// each lane's writer and its reader, in the same order. The byte stays
// for the reader.
func openLanes(t testing.TB, c, s net.Conn, n int) (ws, rs []net.Conn) {
	t.Helper()
	cl, sl := c.(channel.Lanes), s.(channel.Lanes)
	byID := map[uint16]net.Conn{}
	for i := 1; i <= n; i++ {
		w, err := cl.OpenLane(uint16(i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		byID[uint16(i)] = w
	}
	for range n {
		id, r, err := sl.AcceptLane(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		ws, rs = append(ws, byID[id]), append(rs, r)
	}
	return ws, rs
}

// carrier is one of an experiment's ways of moving the messages.
type carrier struct {
	name string
	open func(testing.TB) ([]flow, func())
}

func tcpCarrier(name string, n, rcvbuf int) carrier {
	return carrier{name, func(tb testing.TB) ([]flow, func()) { return tcpFlows(tb, n, rcvbuf) }}
}

func sctpCarrier(name string, cfg Config, n, streams int) carrier {
	return carrier{name, func(tb testing.TB) ([]flow, func()) { return sctpFlows(tb, cfg, n, streams) }}
}

// BenchmarkPaper002 measures paper 002's experiments (docs/sctp.md) as
// relative effects on loopback, inside a guest kernel
// (BenchmarkKernelSCTPInVM): 12 KB and 128 B messages over one TCP
// connection and one association (its Tables 1 and 2, the latter with
// 128 KB and 256 KB receive buffers), 2.56 KB messages over 4 TCP
// connections, 4 associations of 2 streams and one of 8 (its Table 3),
// and 12 KB messages under netem loss on lo (root in a guest only, see
// loNetem). Each iteration runs every carrier of the experiment for 2 s,
// one after the other, so that a loaded host moves them alike: besides
// each carrier's Mbit/s and CPU seconds per GiB (both ends are in this
// process), the metrics are each carrier's throughput over the first's,
// measured in the same iteration (e.g. sctp/tcp), averaged.
func BenchmarkPaper002(b *testing.B) {
	const d = 2 * time.Second
	type experiment struct {
		name     string
		size     int
		loss     string // netem loss on lo; "" for none
		carriers []carrier
	}
	exps := []experiment{
		{"table=1/size=12KB", 12000, "", []carrier{tcpCarrier("tcp", 1, 0), sctpCarrier("sctp", Config{}, 1, 1)}},
		{"table=2/size=128B/rcvbuf=128KB", 128, "", []carrier{tcpCarrier("tcp", 1, 128<<10), sctpCarrier("sctp", Config{ReceiveBuffer: 128 << 10}, 1, 1)}},
		{"table=2/size=128B/rcvbuf=256KB", 128, "", []carrier{tcpCarrier("tcp", 1, 256<<10), sctpCarrier("sctp", Config{ReceiveBuffer: 256 << 10}, 1, 1)}},
		{"table=3/size=2.56KB", 2560, "", []carrier{tcpCarrier("tcp4", 4, 0), sctpCarrier("sctp4x2", Config{}, 4, 2), sctpCarrier("sctp1x8", Config{}, 1, 8)}},
	}
	for _, loss := range []string{"0%", "0.1%", "1%", "3%"} {
		exps = append(exps, experiment{"loss=" + loss + "/size=12KB", 12000, loss, []carrier{
			tcpCarrier("tcp", 1, 0),
			sctpCarrier("sctp", Config{}, 1, 1),
			sctpCarrier("sctp-sackfreq7", Config{SACKFreq: 7}, 1, 1),
			sctpCarrier("sctp-rto20ms", Config{RTOMin: 20 * time.Millisecond, RTOInitial: 100 * time.Millisecond, RTOMax: time.Second}, 1, 1),
		}})
	}
	for _, e := range exps {
		b.Run(e.name, func(b *testing.B) {
			requireKernel(b)
			if e.loss != "" {
				loNetem(b, "loss", e.loss)
			}
			k := len(e.carriers)
			mbps, cpu, ratio := make([]float64, k), make([]float64, k), make([]float64, k)
			for b.Loop() {
				var first float64
				for i, c := range e.carriers {
					flows, done := c.open(b)
					m, cp := pump(flows, e.size, d, done)
					if m == 0 {
						b.Fatalf("%s: nothing arrived in %v", c.name, d)
					}
					if i == 0 {
						first = m
					}
					mbps[i] += m
					cpu[i] += cp
					ratio[i] += m / first
				}
			}
			n := float64(b.N)
			for i, c := range e.carriers {
				b.ReportMetric(mbps[i]/n, c.name+"-Mbit/s")
				b.ReportMetric(cpu[i]/n, c.name+"-cpu-s/GiB")
				if i > 0 {
					b.ReportMetric(ratio[i]/n, c.name+"/"+e.carriers[0].name)
				}
			}
		})
	}
}
