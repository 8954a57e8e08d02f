package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braid-hpc/braid/internal/vmkernel"
	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/channel/ksctp"
)

// Paper 002's kernel-SCTP rows. This kernel has no SCTP, so the run boots
// a guest kernel (internal/vmkernel: User-Mode Linux where it boots, else
// QEMU), where kernel SCTP loads, and runs this same executable inside it
// with guest002Env set: the guest measures kernel TCP and kernel SCTP on
// its loopback and prints one JSON line per run, which the host reads
// back. The series carry the tag "(UML)" here; relabel002 renames them
// for the backend that ran.

// guest002Env, when set in the environment, makes any executable that
// links this package run paper 002's guest side instead of its main (see
// init): the value is the spec, "d=DURATION,reps=N,loss=PCT:PCT:...,
// gbn=PCT:PCT:...,sack=N:N..." (loss: Fig. 9's sweep; gbn: Fig. 10's;
// sack: Fig. 10's SACK frequencies, of 1, 2 and 7, all three if left out).
const guest002Env = "BRAID_BENCH_PAPER002_GUEST"

// guest002Prefix starts each result line the guest prints.
const guest002Prefix = "paper002-guest "

func init() {
	// Like a re-exec helper: the host started this executable inside the
	// guest to measure, not to run its command line.
	if spec, ok := os.LookupEnv(guest002Env); ok {
		os.Exit(guest002(spec, os.Stdout, os.Stderr))
	}
}

// kcase is one measurement inside the guest.
type kcase struct {
	Table   string  `json:"table"`   // what of the paper it is
	Carrier string  `json:"carrier"` // the layout's series name
	Size    int     `json:"size"`    // message bytes
	Loss    float64 `json:"loss"`    // percent, netem on lo
	Mbps    float64 `json:"mbps"`
	CPU     float64 `json:"cpu_s_per_gb"`
	Rep     int     `json:"rep"`
	Rcvbuf  int     `json:"rcvbuf,omitempty"`    // SO_RCVBUF asked, bytes (0: the default)
	SACK    int     `json:"sack_freq,omitempty"` // SCTP sack_freq (0: the kernel's, 2)
}

// kernel layouts, named as the host's with the kernel said.
const (
	kTCP1    = "kernel TCP, 1 connection (UML)"
	kSCTP1   = "kernel SCTP, 1 association (UML)"
	kTCP4    = "kernel TCP, 4 connections (UML)"
	kSCTP4x2 = "kernel SCTP, 4 associations x 2 streams (UML)"
	// Fig. 10's stand-ins for SACK against GBN: 12 KB over one
	// association with a SACK for every packet, the kernel's delayed SACK
	// (one for every 2 packets) and a SACK for every 7.
	kSACK1 = "kernel SCTP, SACK every packet (sack_freq 1, UML)"
	kSACK2 = "kernel SCTP, delayed SACK (sack_freq 2, default, UML)"
	kSACK7 = "kernel SCTP, SACK every 7 packets (sack_freq 7, UML)"
)

// Tables of the guest's runs.
const (
	tableLoss = "loss"   // Fig. 9
	tableFig8 = "Fig. 8" // 128 B at a 128 KB window (256 KB is Table 2's run)
	tableGBN  = "Fig. 10"
)

// sackCarriers are Fig. 10's series by SACK frequency.
var sackCarriers = map[int]string{1: kSACK1, 2: kSACK2, 7: kSACK7}

// guestRuns is how many runs the guest makes for g: per repetition, 6 for
// Tables 1-3, 2 for Fig. 8's 128 KB window, 2 per Fig. 9 loss rate and
// one per SACK frequency per Fig. 10 loss rate.
func guestRuns(g guestSpec) int {
	return g.reps * (6 + 2 + 2*len(g.losses) + len(g.sackFreqs())*len(g.gbn))
}

// sackFreqs are Fig. 10's SACK frequencies: g.sacks, or all three.
func (g guestSpec) sackFreqs() []int {
	if len(g.sacks) == 0 {
		return []int{1, 2, 7}
	}
	return g.sacks
}

type guestSpec struct {
	d      time.Duration
	reps   int
	losses []float64 // Fig. 9, percent
	gbn    []float64 // Fig. 10, percent
	sacks  []int     // Fig. 10's SACK frequencies (nil: 1, 2 and 7)
}

func parseGuestSpec(spec string) (guestSpec, error) {
	g := guestSpec{d: time.Second, reps: 1}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return g, fmt.Errorf("spec %q: %q is not key=value", spec, kv)
		}
		var err error
		switch k {
		case "d":
			g.d, err = time.ParseDuration(v)
			if err == nil && (g.d <= 0 || g.d > time.Minute) {
				err = fmt.Errorf("duration %v out of (0, 1m]", g.d)
			}
		case "reps":
			g.reps, err = strconv.Atoi(v)
			if err == nil && (g.reps < 1 || g.reps > 20) {
				err = fmt.Errorf("reps %d out of [1, 20]", g.reps)
			}
		case "loss", "gbn":
			var ls []float64
			for _, p := range strings.Split(v, ":") {
				f, perr := strconv.ParseFloat(p, 64)
				if perr != nil || f < 0 || f > 50 {
					err = fmt.Errorf("loss %q: want a percentage in [0, 50]", p)
					break
				}
				ls = append(ls, f)
			}
			if k == "loss" {
				g.losses = ls
			} else {
				g.gbn = ls
			}
		case "sack":
			for _, p := range strings.Split(v, ":") {
				n, perr := strconv.Atoi(p)
				if _, ok := sackCarriers[n]; perr != nil || !ok {
					err = fmt.Errorf("sack frequency %q: want 1, 2 or 7", p)
					break
				}
				g.sacks = append(g.sacks, n)
			}
		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			return g, fmt.Errorf("spec %q, %s: %w", spec, k, err)
		}
	}
	return g, nil
}

func (g guestSpec) String() string {
	s := fmt.Sprintf("d=%v,reps=%d", g.d, g.reps)
	for _, l := range []struct {
		key string
		ls  []float64
	}{{"loss", g.losses}, {"gbn", g.gbn}} {
		var ls []string
		for _, x := range l.ls {
			ls = append(ls, strconv.FormatFloat(x, 'g', -1, 64))
		}
		if len(ls) > 0 {
			s += "," + l.key + "=" + strings.Join(ls, ":")
		}
	}
	if len(g.sacks) > 0 {
		var ns []string
		for _, n := range g.sacks {
			ns = append(ns, strconv.Itoa(n))
		}
		s += ",sack=" + strings.Join(ns, ":")
	}
	return s
}

// stallRun is how long a loss-free case that moved nothing in a short run
// is measured again: past the kernel's first two T3 timeouts (1 s, 2 s).
const stallRun = 4 * time.Second

// guest002 measures inside the guest: Tables 1-3 and Fig. 8's 128 KB
// window without loss, then 12 KB over one connection and one association
// at each Fig. 9 loss rate, then 12 KB over one association at three
// SACK frequencies at each Fig. 10 loss rate, every case once per
// repetition (interleaved). It returns the exit code.
func guest002(spec string, out, errw io.Writer) int {
	g, err := parseGuestSpec(spec)
	if err != nil {
		fmt.Fprintln(errw, err)
		return 2
	}
	if err := ksctp.Available(); err != nil {
		fmt.Fprintf(errw, "kernel SCTP unavailable in the guest: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	type tcase struct {
		table, carrier string
		size           int
		sctp           bool
		conns, streams int
		rcvbuf         int
		sackFreq       int
	}
	tables := []tcase{
		{"Table 1", kTCP1, 12 << 10, false, 1, 1, 0, 0},
		{"Table 1", kSCTP1, 12 << 10, true, 1, 1, 0, 0},
		{"Table 2", kTCP1, 128, false, 1, 1, 256 << 10, 0},
		{"Table 2", kSCTP1, 128, true, 1, 1, 256 << 10, 0},
		{"Table 3", kTCP4, 2560, false, 4, 1, 0, 0},
		{"Table 3", kSCTP4x2, 2560, true, 4, 2, 0, 0},
		{tableFig8, kTCP1, 128, false, 1, 1, 128 << 10, 0},
		{tableFig8, kSCTP1, 128, true, 1, 1, 128 << 10, 0},
	}
	var gbn []tcase
	for _, n := range g.sackFreqs() {
		gbn = append(gbn, tcase{tableGBN, sackCarriers[n], 12 << 10, true, 1, 1, 0, n})
	}
	netem := func(loss float64) error {
		args := []string{"qdisc", "replace", "dev", "lo", "root", "netem", "loss", strconv.FormatFloat(loss, 'f', -1, 64) + "%"}
		if b, err := exec.CommandContext(ctx, "tc", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("tc %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(b))
		}
		return nil
	}
	lossy := len(g.losses) > 0 || len(g.gbn) > 0
	if lossy {
		defer exec.Command("tc", "qdisc", "del", "dev", "lo", "root").Run()
	}
	enc := json.NewEncoder(out)
	run := func(rep int, c tcase, loss float64) error {
		cfg := ksctp.Config{ReceiveBuffer: c.rcvbuf, SACKFreq: c.sackFreq}
		// The loss is for the transfer, not the handshake: a lost INIT or
		// COOKIE ECHO waits out SCTP's 3 s initial RTO, doubling, and at 5%
		// two of them outlast the dial's 10 s. Connect without loss, then
		// switch it on.
		if loss > 0 {
			if err := netem(0); err != nil {
				return err
			}
		}
		lossOn := func() error {
			if loss > 0 {
				return netem(loss)
			}
			return nil
		}
		mbps, cpu, err := kpump(ctx, c.sctp, c.conns, c.streams, cfg, c.size, g.d, lossOn)
		// Without loss, an association can still sit out a whole short
		// run: at small windows the kernel drops chunks it cannot buffer
		// and resends them after T3 timeouts of 1 s, then 2 s
		// (docs/sctp.md, "the ~2 s stall"). A run shorter than that
		// measured the timeout, not the carrier: it is measured again on a
		// fresh association for long enough to see past one (4 s), once.
		if errors.Is(err, errNothing) && loss == 0 && g.d < stallRun {
			fmt.Fprintf(errw, "%s, %s: nothing arrived in %v (stalled until a retransmission timeout); measuring again for %v\n", c.table, c.carrier, g.d, stallRun)
			mbps, cpu, err = kpump(ctx, c.sctp, c.conns, c.streams, cfg, c.size, stallRun, lossOn)
		}
		if errors.Is(err, errNothing) {
			// Stalled for the whole run (in loss recovery, or at a window
			// too small for the loopback MTU): 0 Mbit/s is the result.
			fmt.Fprintf(errw, "%s, %s, loss %v%%: nothing arrived: 0 Mbit/s\n", c.table, c.carrier, loss)
			err = nil
		}
		if err != nil {
			return fmt.Errorf("%s, %s, loss %v%%: %w", c.table, c.carrier, loss, err)
		}
		fmt.Fprint(out, guest002Prefix)
		return enc.Encode(kcase{Table: c.table, Carrier: c.carrier, Size: c.size, Loss: loss, Mbps: mbps, CPU: cpu, Rep: rep, Rcvbuf: c.rcvbuf, SACK: c.sackFreq})
	}
	for rep := range g.reps {
		if lossy {
			if err := netem(0); err != nil {
				fmt.Fprintln(errw, err)
				return 1
			}
		}
		for _, c := range tables {
			if err := run(rep, c, 0); err != nil {
				fmt.Fprintln(errw, err)
				return 1
			}
		}
		for _, loss := range g.losses {
			for _, c := range tables[:2] {
				c.table = tableLoss
				if err := run(rep, c, loss); err != nil {
					fmt.Fprintln(errw, err)
					return 1
				}
			}
		}
		for _, loss := range g.gbn {
			for _, c := range gbn {
				if err := run(rep, c, loss); err != nil {
					fmt.Fprintln(errw, err)
					return 1
				}
			}
		}
	}
	return 0
}

// kpump moves size-byte messages one way over conns TCP connections or
// kernel SCTP associations (streams writers each, configured by cfg) on
// loopback for d, after 300 ms of warm-up, and returns Mbit/s delivered
// and the process's CPU seconds per GB delivered. cfg.ReceiveBuffer is
// also TCP's receiving socket's SO_RCVBUF. connected runs once every
// connection is up, before the warm-up (to switch loss on).
func kpump(ctx context.Context, sctp bool, conns, streams int, cfg ksctp.Config, size int, d time.Duration, connected func() error) (mbps, cpuPerGB float64, err error) {
	rcvbuf := cfg.ReceiveBuffer
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
	k := ksctp.Kind{Config: cfg}
	var writers []io.Writer
	for range conns {
		var ln net.Listener
		if sctp {
			ln, err = k.Listen(ctx, "127.0.0.1:0")
		} else {
			ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		}
		if err != nil {
			return 0, 0, err
		}
		closers = append(closers, ln)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var c net.Conn
		if sctp {
			c, err = k.Dial(dctx, "127.0.0.1", ln.Addr().String())
		} else {
			c, err = (&net.Dialer{}).DialContext(dctx, "tcp", ln.Addr().String())
		}
		cancel()
		if err != nil {
			return 0, 0, err
		}
		closers = append(closers, c)
		s, err := ln.Accept()
		if err != nil {
			return 0, 0, err
		}
		closers = append(closers, s)
		if tc, ok := s.(*net.TCPConn); ok && rcvbuf > 0 {
			_ = tc.SetReadBuffer(rcvbuf)
		}
		if !sctp || streams <= 1 {
			writers = append(writers, c)
			reader(s)
			continue
		}
		cl, sl := c.(channel.Lanes), s.(channel.Lanes)
		for id := 1; id <= streams; id++ {
			w, err := cl.OpenLane(uint16(id))
			if err != nil {
				return 0, 0, err
			}
			if _, err := w.Write([]byte{0}); err != nil { // the peer learns of the lane
				return 0, 0, err
			}
			writers = append(writers, w)
		}
		for range streams {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, r, err := sl.AcceptLane(actx)
			cancel()
			if err != nil {
				return 0, 0, err
			}
			reader(r)
		}
	}
	if err := connected(); err != nil {
		return 0, 0, err
	}
	return pump(ctx, sk, writers, size, d)
}

// kernel002 boots a guest kernel, runs the guest side in it with this
// executable (bin) and returns what it measured, how long the guest ran
// and its kernel release.
func kernel002(ctx context.Context, bin string, g guestSpec) ([]kcase, time.Duration, string, error) {
	res, err := vmkernel.Run(ctx, vmkernel.Config{Env: []string{guest002Env + "=" + g.String()}}, bin)
	if err != nil {
		if res != nil {
			err = fmt.Errorf("%w: %s", err, lastLine(res.Output))
		}
		return nil, 0, "", err
	}
	if res.ExitCode != 0 {
		return nil, res.Elapsed, res.Kernel, fmt.Errorf("the guest exited %d: %s", res.ExitCode, lastLine(res.Output))
	}
	var out []kcase
	sc := bufio.NewScanner(bytes.NewReader(res.Output))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), guest002Prefix)
		if !ok {
			continue
		}
		var c kcase
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, res.Elapsed, res.Kernel, fmt.Errorf("guest line %q: %w", line, err)
		}
		out = append(out, c)
	}
	if want := guestRuns(g); len(out) != want {
		return out, res.Elapsed, res.Kernel, fmt.Errorf("the guest measured %d runs, want %d: %s", len(out), want, lastLine(res.Output))
	}
	return out, res.Elapsed, res.Kernel, nil
}
