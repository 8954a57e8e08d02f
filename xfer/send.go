package xfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// File is one file to send and, once Send returns nil, what it took.
type File struct {
	Path    string  `json:"path"` // the local file
	Name    string  `json:"name"` // its name on the receiver: a base name
	Size    int64   `json:"size"`
	Seconds float64 `json:"seconds"`
	Mbps    float64 `json:"mbps"`
	SHA256  string  `json:"sha256,omitempty"` // hex, as the receiver confirmed it
	OK      bool    `json:"ok"`
	Error   string  `json:"error,omitempty"`
}

// Meter counts the bytes a transfer moves, for a progress display. Send
// and Receiver.Serve accept a nil Meter.
type Meter interface {
	// Add counts n more bytes moved.
	Add(n int64)
	// Grow counts n more bytes to move: a receiver learns the sizes as
	// the files arrive.
	Grow(n int64)
}

// Send sends f on a new stream of sess and waits for the receiver's
// verdict. On success it sets f's Size (as the file was when opened),
// SHA256, Seconds and Mbps; it does not touch OK and Error. The error
// names what failed: the file, the stream, the receiver's refusal or a
// checksum the receiver did not confirm.
func Send(ctx context.Context, sess *transport.Session, f *File, m Meter) error {
	start := time.Now()
	file, err := os.Open(f.Path)
	if err != nil {
		return err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return err
	}
	f.Size = fi.Size()
	st, err := sess.OpenStream(ctx)
	if err != nil {
		return fmt.Errorf("open a stream: %w", err)
	}
	defer st.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := ctl.WriteJSON(wctx, st, Header{Version: Version, Name: f.Name, Size: f.Size, Mode: uint32(fi.Mode().Perm())}); err != nil {
		return err
	}
	// The verdict may come early (the receiver refused the file).
	type answer struct {
		v   Verdict
		err error
	}
	verdict := make(chan answer, 1)
	go func() {
		var a answer
		a.err = ctl.ReadJSONWhileBusy(wctx, st, ctl.SessionMoving(sess), time.Minute, &a.v)
		if a.err == nil && !a.v.OK {
			cancel() // stop writing at once
		}
		verdict <- a
	}()
	early := func() (answer, bool) {
		select {
		case a := <-verdict:
			return a, true
		default:
			return answer{}, false
		}
	}

	h := sha256.New()
	buf := make([]byte, chunk)
	var sent int64
	var a answer
	got := false
	for sent < f.Size {
		if a, got = early(); got {
			break
		}
		n, err := io.ReadFull(file, buf[:min(int64(len(buf)), f.Size-sent)])
		if err != nil {
			// The file shrank: the receiver sees the stream end early.
			return fmt.Errorf("read %s after %d of %d bytes: %w", f.Path, sent+int64(n), f.Size, err)
		}
		h.Write(buf[:n])
		if err := st.WriteMessage(wctx, buf[:n]); err != nil {
			if wctx.Err() != nil && ctx.Err() == nil {
				// Only a verdict cancels wctx while we run.
				a, got = <-verdict, true
				break
			}
			if a, got = early(); got {
				break
			}
			return describeSessionErr(err)
		}
		sent += int64(n)
		if m != nil {
			m.Add(int64(n))
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if !got {
		if err := ctl.WriteJSON(wctx, st, Trailer{SHA256: sum}); err != nil {
			return err
		}
		_ = st.Close()
		a = <-verdict
	}
	if a.err != nil {
		return fmt.Errorf("no verdict from the receiver: %w", describeSessionErr(a.err))
	}
	if !a.v.OK {
		return fmt.Errorf("receiver: %s", a.v.Error)
	}
	if a.v.SHA256 != sum {
		return fmt.Errorf("receiver confirmed SHA-256 %s, but the file's is %s", a.v.SHA256, sum)
	}
	f.SHA256 = sum
	f.Seconds = time.Since(start).Seconds()
	f.Mbps = ctl.Mbps(f.Size, f.Seconds)
	return nil
}

// describeSessionErr says what a session error means for a transfer.
func describeSessionErr(err error) error {
	switch {
	case errors.Is(err, transport.ErrPeerClosed):
		return fmt.Errorf("the receiver closed the session before the file was confirmed: %w", err)
	case errors.Is(err, transport.ErrNoPaths):
		return fmt.Errorf("lost every path to the receiver: %w", err)
	}
	return err
}
