package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/xfer"
)

func init() {
	register(&command{
		name:    "recv",
		summary: "receive files from 'braid send' into a directory",
		run:     runRecv,
	})
}

const recvDescription = `
Receives files sent with 'braid send' into DIR, listening on one address
per network (host:port; without a port, 7202). Only plain file names are
accepted: a name with a directory part, such as ../x, is refused.

Each file is written to a temporary file in DIR (.braid-recv-*.part),
checked against the sender's SHA-256, fsynced and renamed to its name,
with the sender's permission bits less the umask (as scp and cp do). A
file of that name already in DIR is refused before its content travels,
and the sender told why, unless --force is given: then it is replaced. On a mismatch, a disconnect or a disk error the
temporary file is removed, no file appears under the final name, and the
sender is told why.

Prints one line per file received. Serves senders concurrently until
interrupted, or until the first sender is done with --once (exit 1 if a
file of it failed).

  braid recv --listen 10.1.0.2,10.2.0.2 --dir /data/in`

// receiver is braid recv: it serves each sender with an xfer.Receiver
// into dir and prints what arrived.
type receiver struct {
	env    *Env
	dir    string
	json   bool       // print one JSON object per event instead of text
	bars   bool       // draw progress on stderr
	force  bool       // replace files of the same name
	mu     sync.Mutex // serializes output lines
	failed atomic.Int64
	// drawing is held by the session whose progress is drawn: one at a
	// time on the one stderr line.
	drawing sync.Mutex
}

// recvEvent is one line of recv --json: "listening", "received" or
// "failed".
type recvEvent struct {
	Event   string   `json:"event"`
	Addrs   []string `json:"addrs,omitempty"` // listening
	Dir     string   `json:"dir,omitempty"`   // listening
	Peer    string   `json:"peer,omitempty"`
	Name    string   `json:"name,omitempty"`
	Size    int64    `json:"size,omitempty"`
	Seconds float64  `json:"seconds,omitempty"`
	Mbps    float64  `json:"mbps,omitempty"`
	SHA256  string   `json:"sha256,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func (r *receiver) event(e recvEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = jsonLine(r.env.Stdout, e)
}

func runRecv(ctx context.Context, env *Env, args []string) int {
	fset := newFlags(env, "recv", "--listen A1,A2,... --dir DIR [--once] [flags]", recvDescription)
	sf := addSessionFlags(fset)
	listen := fset.String("listen", "", "comma-separated `addresses` to listen on, one per network")
	dir := fset.String("dir", "", "`directory` to write the files to")
	once := fset.BoolP("once", "1", false, "exit after the first sender is done")
	asJSON := fset.BoolP("json", "J", false, "print one JSON object per line and event (listening, received, failed) instead of text")
	showProgress := fset.Bool("progress", false, "draw progress on stderr even when it is not a terminal")
	force := fset.BoolP("force", "f", false, "replace files of the same name in --dir (without it such a file is refused, and the sender told why)")
	if code := parseFlags(env, fset, args); code >= 0 {
		return code
	}
	if fset.NArg() > 0 {
		env.Errorf("recv: unexpected arguments %q", fset.Args())
		return 2
	}
	addrs, err := addrList(*listen, xfer.Port)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no address given")
	}
	if err != nil {
		env.Errorf("recv: --listen needs one host:port per network: %v", err)
		return 2
	}
	if *dir == "" {
		env.Errorf("recv: --dir is required")
		return 2
	}
	if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
		env.Errorf("recv: --dir %s is not a directory; create it first", *dir)
		return 2
	}
	cfg, err := sf.config(env)
	if err != nil {
		env.Errorf("recv: %v", err)
		return exitCode(err)
	}
	ln, err := transport.Listen(ctx, addrs, cfg)
	if err != nil {
		env.Errorf("recv: %v", err)
		return 1
	}
	defer ln.Close()
	var bound []string
	for _, a := range ln.Addrs() {
		bound = append(bound, a.String())
	}
	r := &receiver{env: env, dir: *dir, json: *asJSON, bars: *showProgress || isTerminal(env.Stderr), force: *force}
	if r.json {
		r.event(recvEvent{Event: "listening", Addrs: bound, Dir: *dir})
	} else {
		fmt.Fprintf(env.Stdout, "braid recv: listening on %s, writing to %s\n", strings.Join(bound, ","), *dir)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close() // ends the sessions still running before wg.Wait
	for {
		sess, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			env.Errorf("recv: %v", err)
			return 1
		}
		if *once {
			r.serve(ctx, sess)
			if r.failed.Load() > 0 || ctx.Err() != nil {
				return 1
			}
			return 0
		}
		wg.Go(func() { r.serve(ctx, sess) })
	}
}

func (r *receiver) printf(w io.Writer, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, format+"\n", args...)
}

// serve receives the files of one session, each on its own stream, until
// the sender closes the session.
func (r *receiver) serve(ctx context.Context, sess *transport.Session) {
	defer ctl.CloseSession(ctx, sess, false, 0)
	// The session's progress: every file announced so far, drawn while
	// no other session draws.
	var prog *progress
	if r.bars && r.drawing.TryLock() {
		prog = startProgress(r.env.Stderr, isTerminal(r.env.Stderr), 0, nil)
		defer r.drawing.Unlock()
		defer prog.stop()
	}
	x := &xfer.Receiver{Dir: r.dir, Done: r.received, Failed: r.fail, Overwrite: r.force}
	x.Serve(ctx, sess, meter(prog))
}

// fail reports a file that failed.
func (r *receiver) fail(peer string, err error) {
	r.failed.Add(1)
	if r.json {
		r.event(recvEvent{Event: "failed", Peer: peer, Error: err.Error()})
	} else {
		r.printf(r.env.Stderr, "braid: recv: from %s: %v", peer, err)
	}
}

// received reports a file kept.
func (r *receiver) received(res xfer.Result) {
	rate := ctl.Mbps(res.Size, res.Seconds)
	if r.json {
		r.event(recvEvent{Event: "received", Peer: res.Peer, Name: res.Name, Size: res.Size, Seconds: res.Seconds,
			Mbps: rate, SHA256: res.SHA256})
		return
	}
	r.printf(r.env.Stdout, "received %s  %s (%d bytes)  %.2f s  %.1f Mbit/s  sha256 ok %s",
		res.Name, formatBytes(res.Size), res.Size, res.Seconds, rate, res.SHA256[:16])
}
