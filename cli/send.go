package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/xfer"
)

func init() {
	register(&command{
		name:    "send",
		summary: "copy files to a 'braid recv' over every path",
		run:     runSend,
	})
}

const sendDescription = `
Copies files to a host running 'braid recv', over one session that uses
every network path: give the receiver's address on each network with --to
(host:port; without a port, 7202) and optionally the local source address
of each path with --from. Several files travel at once on parallel streams.

Each file goes with its base name, size and permission bits, then its
content, then its SHA-256. The receiver writes a temporary file, checks the
SHA-256, fsyncs and renames it; on any failure it removes the temporary file
and reports the error, and send exits 1 naming the file and the reason.

A progress bar (bytes, percent, MB/s, per-path Mbit/s, ETA) is drawn on
stderr when it is a terminal, or with --progress. --json prints a summary
object at the end.

  braid send --to 10.1.0.2,10.2.0.2 data.bin more.bin`

// sendReport is what --json prints.
type sendReport struct {
	Files          []*xfer.File `json:"files"`
	FilesOK        int          `json:"files_ok"`
	FilesFailed    int          `json:"files_failed"`
	Bytes          int64        `json:"bytes"`
	Seconds        float64      `json:"seconds"`
	ThroughputMbps float64      `json:"throughput_mbps"` // Bytes of files acknowledged over Seconds
	Paths          int          `json:"paths"`
	Streams        int          `json:"streams"`
	Stripe         string       `json:"stripe"`
	Policy         string       `json:"policy"`
	Transport      string       `json:"transport"`
	PerPath        []perf.Path  `json:"per_path"`
	CPUUser        float64      `json:"cpu_user_s"`
	CPUSys         float64      `json:"cpu_sys_s"`
}

func runSend(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "send", "FILE... --to B1,B2,... [--from A1,A2,...] [flags]", sendDescription)
	sf := addSessionFlags(fs)
	to := fs.String("to", "", "comma-separated receiver `addresses`, one per path")
	from := fs.String("from", "", "comma-separated local source `addresses`, the i-th for the i-th path")
	parallel := fs.IntP("parallel", "P", 4, "send `n` files at once, each on its own stream")
	showProgress := fs.Bool("progress", false, "draw progress on stderr even when it is not a terminal")
	asJSON := fs.Bool("json", false, "print a JSON summary on stdout")
	files, code := parseInterspersed(env, fs, args)
	if code >= 0 {
		return code
	}
	if len(files) == 0 {
		env.Errorf("send: no files given")
		helpHint(env, fs.Name())
		return 2
	}
	paths, err := dialPaths(*to, *from, xfer.Port)
	if err != nil {
		env.Errorf("send: --to: %v", err)
		return 2
	}
	if *parallel < 1 || *parallel > 256 {
		env.Errorf("send: --parallel %d out of range 1..256", *parallel)
		return 2
	}
	cfg, err := sf.config(env)
	if err != nil {
		env.Errorf("send: %v", err)
		return exitCode(err)
	}
	// Check every file before connecting.
	items := make([]*xfer.File, len(files))
	names := map[string]string{}
	var total int64
	for i, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			env.Errorf("send: %v", err)
			return 1
		}
		if !fi.Mode().IsRegular() {
			env.Errorf("send: %s is not a regular file (send the files of a directory, or an archive of it)", f)
			return 1
		}
		name := filepath.Base(f)
		if prev, dup := names[name]; dup {
			env.Errorf("send: %s and %s have the same name %q on the receiver; rename one", prev, f, name)
			return 2
		}
		names[name] = f
		items[i] = &xfer.File{Path: f, Name: name, Size: fi.Size()}
		total += fi.Size()
	}

	sess, err := transport.Dial(ctx, paths, cfg)
	if err != nil {
		env.Errorf("send: connect to the receiver: %v", err)
		return 1
	}
	defer ctl.CloseSession(ctx, sess, false, 0)
	u0, s0 := ctl.CPUTimes()
	before := sess.Stats()
	var prog *progress
	if *showProgress || isTerminal(env.Stderr) {
		prog = startProgress(env.Stderr, isTerminal(env.Stderr), total, sess.Stats)
	}
	start := time.Now()
	work := make(chan *xfer.File)
	var wg sync.WaitGroup
	for range min(*parallel, len(items)) {
		wg.Go(func() {
			for it := range work {
				if err := xfer.Send(ctx, sess, it, meter(prog)); err != nil {
					it.Error = err.Error()
				} else {
					it.OK = true
				}
			}
		})
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	if prog != nil {
		prog.stop()
	}
	after := sess.Stats()
	_ = ctl.CloseSession(ctx, sess, true, 5*time.Second)
	u1, s1 := ctl.CPUTimes()

	rep := &sendReport{Files: items, Seconds: elapsed.Seconds(), Paths: len(paths), Streams: min(*parallel, len(items)),
		Stripe: cfg.Stripe.String(), Policy: cfg.Policy.String(), Transport: cfg.Transport,
		CPUUser: (u1 - u0).Seconds(), CPUSys: (s1 - s0).Seconds(), PerPath: []perf.Path{}}
	for _, it := range items {
		if it.OK {
			rep.FilesOK++
			rep.Bytes += it.Size
		} else {
			rep.FilesFailed++
			env.Errorf("send: %s: %s", it.Path, it.Error)
		}
	}
	rep.ThroughputMbps = ctl.Mbps(rep.Bytes, rep.Seconds)
	b := ctl.StatsByID(before)
	for _, p := range after {
		n := p.BytesSent - b[p.ID].BytesSent
		rep.PerPath = append(rep.PerPath, perf.Path{ID: p.ID, Local: p.Local, Remote: p.Remote, Bytes: n,
			Mbps: ctl.Mbps(n, rep.Seconds), State: p.State, Failovers: p.Failovers - b[p.ID].Failovers,
			Retransmitted: p.Retransmitted - b[p.ID].Retransmitted})
	}
	if *asJSON {
		if err := printJSON(env.Stdout, rep); err != nil {
			env.Errorf("send: %v", err)
			return 1
		}
	} else if rep.FilesOK > 0 {
		fmt.Fprintf(env.Stdout, "sent %d of %d files, %s in %.2f s, %.1f Mbit/s over %s\n",
			rep.FilesOK, len(items), formatBytes(rep.Bytes), rep.Seconds, rep.ThroughputMbps, plural(rep.Paths, "path", "paths"))
	}
	if rep.FilesFailed > 0 {
		return 1
	}
	return 0
}

// progressMeter lets a progress bar count the bytes of xfer.
type progressMeter struct{ p *progress }

func (m progressMeter) Add(n int64)  { m.p.add(n) }
func (m progressMeter) Grow(n int64) { m.p.grow(n) }

// meter is prog as an xfer.Meter, nil without a bar.
func meter(prog *progress) xfer.Meter {
	if prog == nil {
		return nil
	}
	return progressMeter{prog}
}
