package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/internal/outfile"
	"github.com/braid-hpc/braid/transport"
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
replacing a file of that name, with the sender's permission bits less the
umask (as scp and cp do). On a mismatch, a disconnect or a disk error the
temporary file is removed, no file appears under the final name, and the
sender is told why.

Prints one line per file received. Serves senders concurrently until
interrupted, or until the first sender is done with --once (exit 1 if a
file of it failed).

  braid recv --listen 10.1.0.2,10.2.0.2 --dir /data/in`

// receiver receives files into dir.
type receiver struct {
	env    *Env
	dir    string
	json   bool       // print one JSON object per event instead of text
	bars   bool       // draw progress on stderr
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
	if code := parseFlags(env, fset, args); code >= 0 {
		return code
	}
	if fset.NArg() > 0 {
		env.Errorf("recv: unexpected arguments %q", fset.Args())
		return 2
	}
	addrs, err := addrList(*listen, copyPort)
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
	r := &receiver{env: env, dir: *dir, json: *asJSON, bars: *showProgress || isTerminal(env.Stderr)}
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
	var wg sync.WaitGroup
	defer wg.Wait()
	// The session's progress: every file announced so far, drawn while
	// no other session draws.
	var prog *progress
	if r.bars && r.drawing.TryLock() {
		prog = startProgress(r.env.Stderr, isTerminal(r.env.Stderr), 0, nil)
		defer r.drawing.Unlock()
		defer prog.stop()
	}
	for {
		st, err := sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		wg.Go(func() {
			if err := r.receive(ctx, sess, st, prog); err != nil {
				r.failed.Add(1)
				if r.json {
					r.event(recvEvent{Event: "failed", Peer: ctl.PeerOf(sess), Error: err.Error()})
				} else {
					r.printf(r.env.Stderr, "braid: recv: from %s: %v", ctl.PeerOf(sess), err)
				}
			}
		})
	}
}

// receive receives one file from st.
func (r *receiver) receive(ctx context.Context, sess *transport.Session, st *transport.Stream, prog *progress) error {
	defer st.Close()
	moving := ctl.SessionMoving(sess)
	var h fileHeader
	if err := ctl.ReadJSON(ctx, st, 30*time.Second, &h); err != nil {
		return fmt.Errorf("no file header: %w", err)
	}
	// refuse tells the sender why, then discards what is still coming.
	refuse := func(err error) error {
		if werr := ctl.WriteJSON(ctx, st, fileVerdict{Error: err.Error()}); werr == nil {
			for {
				if _, rerr := ctl.ReadWhileBusy(ctx, st, moving, 30*time.Second); rerr != nil {
					break
				}
			}
		}
		return err
	}
	switch {
	case h.Version != copyVersion:
		return refuse(fmt.Errorf("file protocol version %d, this receiver speaks %d: use the same braid version on both hosts", h.Version, copyVersion))
	case h.Size < 0:
		return refuse(fmt.Errorf("%q: negative size %d", h.Name, h.Size))
	}
	if err := checkName(h.Name); err != nil {
		return refuse(err)
	}
	start := time.Now()
	if prog != nil {
		prog.grow(h.Size)
	}
	sum, err := r.write(ctx, st, &h, moving, prog)
	if err != nil {
		err = fmt.Errorf("%s: %w; nothing was kept", h.Name, err)
		if errors.Is(err, transport.ErrPeerClosed) || errors.Is(err, transport.ErrNoPaths) || errors.Is(err, transport.ErrClosed) {
			return err // nobody to tell
		}
		return refuse(err)
	}
	if err := ctl.WriteJSON(ctx, st, fileVerdict{OK: true, SHA256: sum}); err != nil {
		return fmt.Errorf("%s: received, but the sender did not hear so: %w", h.Name, err)
	}
	d := time.Since(start)
	if r.json {
		r.event(recvEvent{Event: "received", Peer: ctl.PeerOf(sess), Name: h.Name, Size: h.Size, Seconds: d.Seconds(),
			Mbps: ctl.Mbps(h.Size, d.Seconds()), SHA256: sum})
		return nil
	}
	r.printf(r.env.Stdout, "received %s  %s (%d bytes)  %.2f s  %.1f Mbit/s  sha256 ok %s",
		h.Name, formatBytes(h.Size), h.Size, d.Seconds(), ctl.Mbps(h.Size, d.Seconds()), sum[:16])
	return nil
}

// write receives the content and trailer of h into a temporary file and,
// when the SHA-256 matches, renames it to its name. It returns the hex
// SHA-256. On error no file is left behind.
func (r *receiver) write(ctx context.Context, st *transport.Stream, h *fileHeader, moving func() bool, prog *progress) (sum string, err error) {
	// The sender's permission bits, filtered by the umask as scp and cp
	// do: a 0644 file arrives 0644, a 0755 one 0755, a 0600 one 0600.
	tmp, err := outfile.CreateTemp(r.dir, ".braid-recv-*.part", fs.FileMode(h.Mode)&fs.ModePerm)
	if err != nil {
		return "", fmt.Errorf("create a temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	hash := sha256.New()
	var got int64
	for got < h.Size {
		msg, err := ctl.ReadWhileBusy(ctx, st, moving, 2*time.Minute)
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("the sender ended the file after %d of %d bytes", got, h.Size)
		}
		if err != nil {
			return "", fmt.Errorf("after %d of %d bytes: %w", got, h.Size, err)
		}
		if int64(len(msg)) > h.Size-got {
			return "", fmt.Errorf("the sender sent more than the %d bytes it announced", h.Size)
		}
		if _, err := tmp.Write(msg); err != nil {
			return "", fmt.Errorf("write: %w", err)
		}
		hash.Write(msg)
		got += int64(len(msg))
		if prog != nil {
			prog.add(int64(len(msg)))
		}
		st.Release(msg)
	}
	var tr fileTrailer
	if err := ctl.ReadJSON(ctx, st, 2*time.Minute, &tr); err != nil {
		return "", fmt.Errorf("no checksum after the content: %w", err)
	}
	sum = hex.EncodeToString(hash.Sum(nil))
	if tr.SHA256 != sum {
		return "", fmt.Errorf("SHA-256 mismatch: the data received hashes to %s, the sender's file to %s", sum, tr.SHA256)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	final := filepath.Join(r.dir, h.Name)
	if fi, err := os.Lstat(final); err == nil && !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s exists and is not a regular file", final)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", err
	}
	if d, err := os.Open(r.dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return sum, nil
}
