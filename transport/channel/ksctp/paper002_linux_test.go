//go:build linux

package ksctp

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
func tcpFlows(t *testing.T, n, rcvbuf int) ([]flow, func()) {
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
func sctpFlows(t *testing.T, cfg Config, n, streams int) ([]flow, func()) {
	var conns []io.Closer
	var flows []flow
	for range n {
		c, s, ln := pair(t, Kind{Config: cfg}, "127.0.0.1", "127.0.0.1:0")
		conns = append(conns, c, s, ln)
		if streams == 1 {
			flows = append(flows, flow{c, s})
			continue
		}
		cl, sl := c.(channel.Lanes), s.(channel.Lanes)
		ws := map[uint16]net.Conn{}
		for i := 1; i <= streams; i++ {
			w, err := cl.OpenLane(uint16(i))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte{0}); err != nil { // the peer learns of the lane
				t.Fatal(err)
			}
			ws[uint16(i)] = w
		}
		for range streams {
			id, r, err := sl.AcceptLane(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			flows = append(flows, flow{ws[id], r})
		}
	}
	return flows, func() {
		for _, c := range conns {
			c.Close()
		}
	}
}

// TestPaper002Bench measures paper 002's experiments (docs/sctp.md) as
// relative effects on the guest's loopback (BRAID_UML_BENCH=1; ksctp's
// TestKernelSCTPBenchInVM runs it inside a guest kernel): 12 KB and
// 128 B messages over one TCP connection and one association (its Tables
// 1 and 2, the latter with 128 KB and 256 KB receive buffers), 2.56 KB
// messages over 4 TCP connections and 4 associations of 2 streams (its
// Table 3), and 12 KB messages under netem loss on lo. The guest's one CPU
// carries both ends.
func TestPaper002Bench(t *testing.T) {
	if os.Getenv("BRAID_UML_BENCH") != "1" {
		t.Skip("measurement; BRAID_UML_BENCH=1")
	}
	requireKernel(t)
	if os.Geteuid() != 0 {
		t.Skip("netem on lo needs root")
	}
	const d = 2 * time.Second
	type bcase struct {
		table, name string
		size        int
		open        func() ([]flow, func())
	}
	sctp := func(cfg Config, n, streams int) func() ([]flow, func()) {
		return func() ([]flow, func()) { return sctpFlows(t, cfg, n, streams) }
	}
	tcp := func(n, rcvbuf int) func() ([]flow, func()) {
		return func() ([]flow, func()) { return tcpFlows(t, n, rcvbuf) }
	}
	cases := []bcase{
		{"1: 12 KB, 1 connection", "tcp", 12000, tcp(1, 0)},
		{"1: 12 KB, 1 connection", "sctp", 12000, sctp(Config{}, 1, 1)},
		{"2: 128 B, rcvbuf 128 KB", "tcp", 128, tcp(1, 128<<10)},
		{"2: 128 B, rcvbuf 128 KB", "sctp", 128, sctp(Config{ReceiveBuffer: 128 << 10}, 1, 1)},
		{"2: 128 B, rcvbuf 256 KB", "tcp", 128, tcp(1, 256<<10)},
		{"2: 128 B, rcvbuf 256 KB", "sctp", 128, sctp(Config{ReceiveBuffer: 256 << 10}, 1, 1)},
		{"3: 2.56 KB", "tcp, 4 connections", 2560, tcp(4, 0)},
		{"3: 2.56 KB", "sctp, 4 associations x 2 streams", 2560, sctp(Config{}, 4, 2)},
		{"3: 2.56 KB", "sctp, 1 association x 8 streams", 2560, sctp(Config{}, 1, 8)},
	}
	lossy := []bcase{
		{"", "tcp", 12000, tcp(1, 0)},
		{"", "sctp", 12000, sctp(Config{}, 1, 1)},
		{"", "sctp, SACKFreq 7", 12000, sctp(Config{SACKFreq: 7}, 1, 1)},
		{"", "sctp, RTO 20ms-1s", 12000, sctp(Config{RTOMin: 20 * time.Millisecond, RTOInitial: 100 * time.Millisecond, RTOMax: time.Second}, 1, 1)},
	}
	netem := func(loss string) {
		args := []string{"qdisc", "replace", "dev", "lo", "root", "netem", "loss", loss}
		if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
			t.Fatalf("tc %v: %v: %s", args, err, out)
		}
	}
	defer func() { _ = exec.Command("tc", "qdisc", "del", "dev", "lo", "root").Run() }()
	reps := 2
	if n, err := strconv.Atoi(os.Getenv("BRAID_UML_BENCH_REPS")); err == nil && n > 0 && n <= 20 {
		reps = n
	}
	res := map[string][]string{}
	var order []string
	record := func(key, v string) {
		if _, ok := res[key]; !ok {
			order = append(order, key)
		}
		res[key] = append(res[key], v)
	}
	// Interleaved: every case once per round.
	for range reps {
		netem("0%")
		for _, c := range cases {
			flows, done := c.open()
			mbps, cpu := pump(flows, c.size, d, done)
			record("| "+c.table+" | "+c.name+" |", fmt.Sprintf("%.0f Mbit/s, %.1f CPU s/GiB", mbps, cpu))
		}
		for _, loss := range []string{"0%", "0.1%", "1%", "3%"} {
			netem(loss)
			for _, c := range lossy {
				flows, done := c.open()
				mbps, _ := pump(flows, c.size, d, done)
				record("| loss "+loss+", 12 KB | "+c.name+" |", fmt.Sprintf("%.1f Mbit/s", mbps))
			}
		}
	}
	var b strings.Builder
	b.WriteString("| experiment | carrier | per round |\n|---|---|---|\n")
	for _, k := range order {
		fmt.Fprintf(&b, "%s %s |\n", k, strings.Join(res[k], " / "))
	}
	t.Logf("paper 002 on the guest's loopback, %v per run, %d interleaved rounds:\n%s", d, reps, b.String())
}
