package xfer

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
	"sync"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/internal/outfile"
	"github.com/braid-hpc/braid/transport"
)

// Result is one file a Receiver kept.
type Result struct {
	Peer    string  // the sender, by the remote address of its lowest path
	Name    string  // the file's name in the directory
	Size    int64   // bytes
	Seconds float64 // from its header to its verdict
	SHA256  string  // hex
}

// Receiver receives files into a directory. Its zero value is not
// usable: Dir must name an existing directory.
type Receiver struct {
	// Dir is the directory the files are written to.
	Dir string
	// Done, if not nil, is called after each file kept in Dir.
	Done func(Result)
	// Failed, if not nil, is called after each file refused or lost;
	// peer names the sender. Nothing of the file is left in Dir.
	Failed func(peer string, err error)
	// Overwrite lets a file replace one of the same name in Dir. Without
	// it such a file is refused, before its content travels when the
	// name is taken already, and atomically at the end otherwise.
	Overwrite bool
}

// errExists refuses a file whose name is taken in the directory.
func (r *Receiver) errExists(name string) error {
	return fmt.Errorf("%s already exists in %s; nothing was replaced (braid recv --force replaces files)", name, r.Dir)
}

// Serve receives the files of sess, each on its own stream, until the
// sender closes the session or ctx ends; it returns when every file it
// began is kept or failed. Done and Failed are called from several
// goroutines at once. Serve does not close sess.
func (r *Receiver) Serve(ctx context.Context, sess *transport.Session, m Meter) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		st, err := sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		wg.Go(func() {
			if err := r.receive(ctx, sess, st, m); err != nil && r.Failed != nil {
				r.Failed(ctl.PeerOf(sess), err)
			}
		})
	}
}

// receive receives one file from st.
func (r *Receiver) receive(ctx context.Context, sess *transport.Session, st *transport.Stream, m Meter) error {
	defer st.Close()
	moving := ctl.SessionMoving(sess)
	var h Header
	if err := ctl.ReadJSON(ctx, st, 30*time.Second, &h); err != nil {
		return fmt.Errorf("no file header: %w", err)
	}
	// refuse tells the sender why, then discards what is still coming.
	refuse := func(err error) error {
		if werr := ctl.WriteJSON(ctx, st, Verdict{Error: err.Error()}); werr == nil {
			for {
				if _, rerr := ctl.ReadWhileBusy(ctx, st, moving, 30*time.Second); rerr != nil {
					break
				}
			}
		}
		return err
	}
	switch {
	case h.Version != Version:
		return refuse(fmt.Errorf("file protocol version %d, this receiver speaks %d: use the same braid version on both hosts", h.Version, Version))
	case h.Size < 0:
		return refuse(fmt.Errorf("%q: negative size %d", h.Name, h.Size))
	}
	if err := CheckName(h.Name); err != nil {
		return refuse(err)
	}
	if fi, err := os.Lstat(filepath.Join(r.Dir, h.Name)); err == nil {
		switch {
		case !fi.Mode().IsRegular():
			return refuse(fmt.Errorf("%s exists and is not a regular file", filepath.Join(r.Dir, h.Name)))
		case !r.Overwrite:
			return refuse(r.errExists(h.Name))
		}
	}
	start := time.Now()
	if m != nil {
		m.Grow(h.Size)
	}
	sum, err := r.write(ctx, st, &h, moving, m)
	if err != nil {
		err = fmt.Errorf("%s: %w; nothing was kept", h.Name, err)
		if errors.Is(err, transport.ErrPeerClosed) || errors.Is(err, transport.ErrNoPaths) || errors.Is(err, transport.ErrClosed) {
			return err // nobody to tell
		}
		return refuse(err)
	}
	if err := ctl.WriteJSON(ctx, st, Verdict{OK: true, SHA256: sum}); err != nil {
		return fmt.Errorf("%s: received, but the sender did not hear so: %w", h.Name, err)
	}
	if r.Done != nil {
		r.Done(Result{Peer: ctl.PeerOf(sess), Name: h.Name, Size: h.Size, Seconds: time.Since(start).Seconds(), SHA256: sum})
	}
	return nil
}

// write receives the content and trailer of h into a temporary file and,
// when the SHA-256 matches, renames it to its name. It returns the hex
// SHA-256. On error no file is left behind.
func (r *Receiver) write(ctx context.Context, st *transport.Stream, h *Header, moving func() bool, m Meter) (sum string, err error) {
	// The sender's permission bits, filtered by the umask as scp and cp
	// do: a 0644 file arrives 0644, a 0755 one 0755, a 0600 one 0600.
	tmp, err := outfile.CreateTemp(r.Dir, ".braid-recv-*.part", fs.FileMode(h.Mode)&fs.ModePerm)
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
		if m != nil {
			m.Add(int64(len(msg)))
		}
		st.Release(msg)
	}
	var tr Trailer
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
	final := filepath.Join(r.Dir, h.Name)
	if fi, err := os.Lstat(final); err == nil && !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s exists and is not a regular file", final)
	}
	if r.Overwrite {
		if err := os.Rename(tmp.Name(), final); err != nil {
			return "", err
		}
	} else {
		// A link fails where a file of the name appeared meanwhile.
		if err := os.Link(tmp.Name(), final); errors.Is(err, fs.ErrExist) {
			return "", r.errExists(h.Name)
		} else if err != nil {
			return "", err
		}
		_ = os.Remove(tmp.Name())
	}
	if d, err := os.Open(r.Dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return sum, nil
}
