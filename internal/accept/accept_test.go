package accept

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// flaky is a listener whose Accept fails with errs, in order, and then
// hands out conns until closed.
type flaky struct {
	mu     sync.Mutex
	errs   []error
	calls  int
	at     []time.Duration // when each Accept was called, from start
	start  time.Time
	done   chan struct{}
	closed bool
}

func newFlaky(errs ...error) *flaky {
	return &flaky{errs: errs, start: time.Now(), done: make(chan struct{})}
}

func (f *flaky) Accept() (net.Conn, error) {
	f.mu.Lock()
	f.calls++
	f.at = append(f.at, time.Since(f.start))
	if f.closed {
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: net.ErrClosed}
	}
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		f.mu.Unlock()
		return nil, err
	}
	f.mu.Unlock()
	c, _ := net.Pipe()
	return c, nil
}

func (f *flaky) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.done)
	}
	return nil
}

func (f *flaky) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func emfile() error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

func TestTemporary(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{emfile(), true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)}, true},
		{fmt.Errorf("wrapped: %w", syscall.ECONNABORTED), true},
		{syscall.ENOBUFS, true},
		{os.ErrDeadlineExceeded, true},
		{net.ErrClosed, false},
		{errors.New("broken"), false},
	} {
		if got := Temporary(tc.err); got != tc.want {
			t.Errorf("Temporary(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestLoopSurvivesEMFILE runs the loop of the package example over a
// listener that fails with EMFILE n times: it goes on accepting, with
// delays doubling from 5ms to 1s, one Warn for the episode, and ends
// only when the listener is closed.
func TestLoopSurvivesEMFILE(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 12
		errs := make([]error, n)
		for i := range errs {
			errs[i] = emfile()
		}
		ln := newFlaky(errs...)
		var logs bytes.Buffer
		b := Backoff{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Name: "test", Addr: "x"}
		accepted := make(chan net.Conn)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			for {
				c, err := ln.Accept()
				if err != nil {
					if b.Wait(err, ln.done) {
						continue
					}
					return
				}
				b.Reset()
				select {
				case accepted <- c:
				case <-ln.done:
					c.Close()
				}
			}
		}()
		for range 3 {
			c := <-accepted
			c.Close()
		}
		// The episode ends at the first accept a second after the last
		// failure.
		if strings.Contains(logs.String(), "works again") {
			t.Errorf("episode ended right after the failures:\n%s", logs.String())
		}
		time.Sleep(MaxDelay)
		(<-accepted).Close() // accepted before the sleep
		(<-accepted).Close()
		synctest.Wait()
		ln.mu.Lock()
		at := append([]time.Duration(nil), ln.at...)
		ln.mu.Unlock()
		if len(at) < n+3 {
			t.Fatalf("%d accepts, want at least %d", len(at), n+1)
		}
		want := MinDelay
		for i := 1; i <= n; i++ {
			if got := at[i] - at[i-1]; got != want {
				t.Errorf("delay before accept %d = %v, want %v", i, got, want)
			}
			want = min(2*want, MaxDelay)
		}
		ln.Close()
		synctest.Wait()
		select {
		case <-ended:
		default:
			t.Fatal("loop still running after Close")
		}
		out := logs.String()
		if c := strings.Count(out, "level=WARN"); c != 1 || !strings.Contains(out, "works again") {
			t.Errorf("%d Warn lines for one episode, want 1, and then its end:\n%s", c, out)
		}
		if !strings.Contains(out, "too many open files") || !strings.Contains(out, "failures=12") {
			t.Errorf("log does not name the error and count the failures:\n%s", out)
		}
	})
}

// TestWaitEndsOnDone: a backoff in progress ends as soon as done closes.
func TestWaitEndsOnDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b Backoff
		b.Logger = slog.New(slog.DiscardHandler)
		done := make(chan struct{})
		for range 20 { // reach the 1s cap
			b.Wait(emfile(), nil)
		}
		start := time.Now()
		go func() {
			time.Sleep(10 * time.Millisecond)
			close(done)
		}()
		if b.Wait(emfile(), done) {
			t.Error("Wait returned true after done closed")
		}
		if d := time.Since(start); d != 10*time.Millisecond {
			t.Errorf("Wait took %v after done, want 10ms", d)
		}
		if b.Wait(errors.New("x"), done) {
			t.Error("Wait returned true with done closed")
		}
		if (&Backoff{}).Wait(&net.OpError{Err: net.ErrClosed}, nil) {
			t.Error("Wait retried a closed listener")
		}
	})
}

// TestListener: the wrapper hides failures from its caller, and Close
// ends an Accept that is backing off.
func TestListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := Retrying(newFlaky(emfile(), emfile(), syscall.ECONNABORTED), "test", slog.New(slog.DiscardHandler))
		c, err := ln.Accept()
		if err != nil {
			t.Fatalf("Accept: %v", err)
		}
		c.Close()

		inner := newFlaky()
		inner.errs = make([]error, 1000)
		for i := range inner.errs {
			inner.errs[i] = emfile()
		}
		ln = Retrying(inner, "test", slog.New(slog.DiscardHandler))
		errc := make(chan error, 1)
		go func() {
			_, err := ln.Accept()
			errc <- err
		}()
		time.Sleep(3 * time.Second)
		ln.Close()
		synctest.Wait()
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
			}
		default:
			t.Fatal("Accept still backing off after Close")
		}
	})
}

// TestFlappingIsOneEpisode: failures with successes between them, less
// than MaxDelay apart, log one Warn; each failure after a success waits
// MinDelay again.
func TestFlappingIsOneEpisode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		b := Backoff{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		for range 10 {
			start := time.Now()
			b.Wait(emfile(), nil)
			if d := time.Since(start); d != MinDelay {
				t.Errorf("wait after a success = %v, want %v", d, MinDelay)
			}
			b.Reset()
		}
		if c := strings.Count(logs.String(), "level=WARN"); c != 1 || strings.Contains(logs.String(), "works again") {
			t.Errorf("flapping logged %d Warns, want 1 and no end yet:\n%s", c, logs.String())
		}
		time.Sleep(MaxDelay)
		b.Reset()
		if !strings.Contains(logs.String(), "failures=10") || b.Failing() {
			t.Errorf("episode did not end a second after its last failure:\n%s", logs.String())
		}
	})
}

// TestLimit: the third connection waits until one of two closes; Close
// ends a waiting Accept.
func TestLimit(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	ln := Limit(inner, 2, "test", slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil)))
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	<-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted past the cap of 2")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	first.Close() // a second Close gives back no second slot
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted after one closed")
	}
	mu.Lock()
	if !strings.Contains(logs.String(), "connection cap reached") {
		t.Errorf("no warning about the cap: %s", logs.String())
	}
	mu.Unlock()
	ln.Close()
	for range accepted {
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
