package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flynn/noise"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/testbed/relay"
)

// testCiphers returns a matching pair of record ciphers, as two ends of a
// handshake would have.
func testCiphers(t testing.TB) (a2b, b2a noise.Cipher) {
	t.Helper()
	var k1, k2 [32]byte
	k1[0], k2[0] = 1, 2
	return noise.CipherAESGCM.Cipher(k1), noise.CipherAESGCM.Cipher(k2)
}

// TestRecordsRoundTrip writes vectors of many shapes through the record
// layer and reads back the same bytes, including across record and write
// boundaries and with Discard.
func TestRecordsRoundTrip(t *testing.T) {
	a2b, b2a := testCiphers(t)
	ca, cb := net.Pipe()
	defer ca.Close()
	defer cb.Close()
	w := newSecureConn(ca, 3, a2b, b2a, 0)
	r := newSecureConn(cb, 3, b2a, a2b, 0)
	src := randBytes(7, 3*maxRecord+12345)
	sizes := []int{1, 0, 17, maxRecord - 1, maxRecord, maxRecord + 1, 5000, 40}
	go func() {
		off := 0
		for i := 0; off < len(src); i++ {
			n := min(sizes[i%len(sizes)], len(src)-off)
			m := min(n, 3)
			if err := w.writeBuffers([][]byte{src[off : off+m], src[off+m : off+n], nil}); err != nil {
				t.Error(err)
				return
			}
			off += n
		}
		ca.Close()
	}()
	got := make([]byte, 0, len(src))
	// Small reads copy out of a decrypted record; reads of a whole record
	// or more open it in place.
	buf := make([]byte, maxRecord+100)
	for i := 0; ; i++ {
		if i%5 == 4 {
			// Skip some bytes, as the frame reader does for duplicates.
			n, err := r.Discard(100)
			got = append(got, src[len(got):len(got)+n]...)
			if err != nil {
				break
			}
			continue
		}
		b := buf[:777]
		if i%2 == 1 {
			b = buf
		}
		n, err := r.Read(b)
		got = append(got, b[:n]...)
		if err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("got %d bytes, want %d; equal prefix %v", len(got), len(src), bytes.HasPrefix(src, got))
	}
}

// TestRecordsTampered alters a sealed stream in each way a relay could and
// checks the reader returns ErrIntegrity (or a cut) before any altered
// byte, and never the altered bytes.
func TestRecordsTampered(t *testing.T) {
	a2b, b2a := testCiphers(t)
	var wire bytes.Buffer
	w := newSecureConn(nopConn{Writer: &wire}, 0, a2b, b2a, 1)
	msgs := [][]byte{randBytes(1, 1000), randBytes(2, maxRecord), randBytes(3, 10)}
	var bounds []int
	for _, m := range msgs {
		if _, err := w.Write(m); err != nil {
			t.Fatal(err)
		}
		bounds = append(bounds, wire.Len())
	}
	sealed := wire.Bytes()
	first := bounds[0] // the first record
	for _, tc := range []struct {
		name   string
		alter  func([]byte) []byte
		wantOK int // plaintext bytes that must still come through
	}{
		{"flip in first", func(b []byte) []byte { b[10] ^= 1; return b }, 0},
		{"flip in second", func(b []byte) []byte { b[first+100] ^= 1; return b }, 1000},
		{"flip length", func(b []byte) []byte { b[first+3] ^= 1; return b }, 1000},
		{"replay first", func(b []byte) []byte { return append(append(b[:first:first], b[:first]...), b[first:]...) }, 1000},
		{"drop first", func(b []byte) []byte { return b[first:] }, 0},
		{"swap", func(b []byte) []byte {
			return append(append(append([]byte(nil), b[first:bounds[1]]...), b[:first]...), b[bounds[1]:]...)
		}, 0},
		{"huge length", func(b []byte) []byte { b[0] = 0x7f; return b }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.alter(bytes.Clone(sealed))
			r := newSecureConn(nopConn{Reader: bytes.NewReader(b)}, 0, b2a, a2b, 1)
			got, err := io.ReadAll(r)
			if !errors.Is(err, ErrIntegrity) {
				t.Fatalf("err = %v, want ErrIntegrity", err)
			}
			var ie *IntegrityError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), "lane 0") {
				t.Fatalf("error does not locate the record: %v", err)
			}
			want := bytes.Join(msgs, nil)[:tc.wantOK]
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes before the error, want the %d of the good records", len(got), len(want))
			}
		})
	}
	t.Run("cut", func(t *testing.T) {
		r := newSecureConn(nopConn{Reader: bytes.NewReader(sealed[:first+50])}, 0, b2a, a2b, 1)
		got, err := io.ReadAll(r)
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != 1000 {
			t.Fatalf("cut record: %d bytes, %v", len(got), err)
		}
	})
	t.Run("other lane", func(t *testing.T) {
		r := newSecureConn(nopConn{Reader: bytes.NewReader(sealed)}, 1, b2a, a2b, 1)
		if _, err := io.ReadAll(r); !errors.Is(err, ErrIntegrity) {
			t.Fatalf("records of lane 0 read as lane 1: %v", err)
		}
	})
}

// nopConn is a net.Conn over a reader or a writer.
type nopConn struct {
	net.Conn
	io.Reader
	io.Writer
}

func (c nopConn) Read(p []byte) (int, error)  { return c.Reader.Read(p) }
func (c nopConn) Write(p []byte) (int, error) { return c.Writer.Write(p) }

func FuzzRecords(f *testing.F) {
	a2b, b2a := testCiphers(f)
	var wire bytes.Buffer
	w := newSecureConn(nopConn{Writer: &wire}, 0, a2b, b2a, 0)
	_, _ = w.Write([]byte("hello"))
	f.Add(wire.Bytes())
	f.Add([]byte{0, 0, 0, 16})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := newSecureConn(nopConn{Reader: bytes.NewReader(b)}, 0, b2a, a2b, 0)
		got, err := io.ReadAll(r)
		// Nobody forges a tag: only the sealed "hello" reads as data.
		if len(got) > 0 && !bytes.Equal(got, []byte("hello")) {
			t.Fatalf("%d bytes read as %q (%v)", len(b), got, err)
		}
	})
}

// TestTamper puts a tampering relay in front of one of two paths during a
// transfer: the altered channel fails its integrity check (or is cut),
// and every byte still arrives intact, over the other path and the
// reconnected one.
func TestTamper(t *testing.T) {
	// MPTCP through the relay is MPTCP on the dialer's socket and TCP
	// past the relay. Kernel SCTP has no relay here (it is not carried
	// over TCP or UDP); its channels use the same records, tested above.
	for _, tr := range []string{"tcp", "mptcp", "sctp-udp"} {
		modes := []relay.Tamper{relay.TamperFlip, relay.TamperDrop, relay.TamperReplay, relay.TamperTruncate}
		if tr == "sctp-udp" {
			// SCTP itself drops replayed packets, and a dropped datagram is
			// a loss it recovers: only a payload altered with a fixed CRC
			// reaches braid.
			modes = []relay.Tamper{relay.TamperFlip}
		}
		for _, mode := range modes {
			t.Run(tr+"/"+mode.String(), func(t *testing.T) {
				c, s, relays := relayed(t, 2, func(c *Config) { c.Transport = tr })
				type tamperer interface {
					Tampered() int64
				}
				arm := func() {
					switch r := relays[0].(type) {
					case *relay.TCP:
						r.Tamper(relay.ToTarget, mode)
					case *relay.UDP:
						if err := r.Tamper(relay.ToTarget, mode); err != nil {
							t.Error(err)
						}
					}
				}
				transfer(t, c, s, 8<<20, 128<<10, 2<<20, arm)
				// If path 0 carried nothing more of the transfer, the
				// relay alters the next probe of the idle path.
				testwait.Until(10*time.Second, func() bool { return relays[0].(tamperer).Tampered() > 0 })
				if n := relays[0].(tamperer).Tampered(); n != 1 {
					t.Fatalf("the relay altered %d chunks, want 1", n)
				}
				if mode == relay.TamperTruncate {
					testwait.For(t, "the cut path to reconnect", 10*time.Second, func() bool { return c.Stats()[0].Reconnects >= 1 })
					return
				}
				testwait.Until(10*time.Second, func() bool { return s.Stats()[0].Integrity > 0 })
				if st := s.Stats()[0]; st.Integrity != 1 {
					t.Fatalf("server path 0 counts %d integrity failures, want 1 (%+v)", st.Integrity, st)
				}
				testwait.For(t, "path 0 back up", 10*time.Second, func() bool { return s.Stats()[0].State == "up" })
				if !s.Stats()[0].Encrypted {
					t.Fatal("path not reported as encrypted")
				}
			})
		}
	}
}

// TestNoPlaintextOnWire sends a recognisable payload and looks for it in
// every byte the relay carried: absent when encrypted, present in
// plaintext mode (which shows the check can see it).
func TestNoPlaintextOnWire(t *testing.T) {
	marker := []byte("braid-secret-marker-0123456789-")
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plaintext=%v", plain), func(t *testing.T) {
			c, s, relays := relayed(t, 1, func(c *Config) { c.InsecurePlaintext = plain })
			var mu sync.Mutex
			var seen bytes.Buffer
			relays[0].(*relay.TCP).Tap(func(toTarget bool, b []byte) {
				mu.Lock()
				seen.Write(b)
				mu.Unlock()
			})
			msg := bytes.Repeat(marker, 4000)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			st, err := c.OpenStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.WriteMessage(ctx, msg); err != nil {
				t.Fatal(err)
			}
			rs, err := s.AcceptStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m, err := rs.ReadMessage(ctx); err != nil || !bytes.Equal(m, msg) {
				t.Fatalf("message: %v", err)
			}
			mu.Lock()
			found := bytes.Contains(seen.Bytes(), marker)
			n := seen.Len()
			mu.Unlock()
			if n < len(msg) {
				t.Fatalf("the tap saw %d bytes, less than the message", n)
			}
			if found != plain {
				t.Fatalf("marker on the wire: %v, want %v", found, plain)
			}
			if got := c.Stats()[0].Encrypted; got == plain {
				t.Fatalf("Stats says encrypted=%v", got)
			}
		})
	}
}

// TestIntegrityClosesSession alters every channel of a one-path session
// until the session gives up with ErrIntegrity.
func TestIntegrityClosesSession(t *testing.T) {
	c, s, relays := relayed(t, 1, nil)
	r := relays[0].(*relay.TCP)
	for i := range maxIntegrityFailures {
		// Alter the next record (a heartbeat, at least) of an established
		// channel, not a handshake: that would be refused as ErrAuth.
		testwait.For(t, "the path to be up", 10*time.Second, func() bool {
			st := c.Stats()[0]
			return st.State == "up" && st.Reconnects == int64(i)
		})
		r.Tamper(relay.ToTarget, relay.TamperFlip)
		testwait.For(t, "the integrity failure", 10*time.Second, func() bool { return s.integrityFailures.Load() == int64(i+1) })
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("server session still open after %d integrity failures", s.integrityFailures.Load())
	}
	if err := s.closeErr; !errors.Is(err, ErrIntegrity) {
		t.Fatalf("session closed with %v, want ErrIntegrity", err)
	}
}

// TestHandshakeReplay replays a recorded handshake (HELLO and JOIN) to
// the listener: it must not attach anything to a session.
func TestHandshakeReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ln, err := Listen(ctx, []string{"127.0.0.1:0"}, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r, err := relay.ListenTCP(ln.Addrs()[0].String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var mu sync.Mutex
	var rec []byte
	r.Tap(func(toTarget bool, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		if toTarget && len(rec) < 6+48+4+27+16 {
			rec = append(rec, b...)
		}
	})
	c, err := Dial(ctx, []Path{{Remote: r.Addr()}}, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := ln.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	replay := bytes.Clone(rec[:6+48+4+27+16])
	mu.Unlock()

	conn, err := net.Dial("tcp", ln.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(replay); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the listener kept a replayed handshake's channel open")
	}
	if len(got) > 6+1+48 {
		t.Fatalf("the listener answered a replayed JOIN with %d bytes", len(got))
	}
	actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer acancel()
	if s, err := ln.Accept(actx); err == nil {
		t.Fatalf("a replayed handshake made session %x", s.id)
	}
	if st := c.Stats()[0]; st.State != "up" || st.Reconnects != 0 {
		t.Fatalf("the real session's path was disturbed: %+v", st)
	}
}

// TestPlaintextMismatch: both sides must agree to run without encryption.
func TestPlaintextMismatch(t *testing.T) {
	for _, serverPlain := range []bool{false, true} {
		t.Run(fmt.Sprintf("server-plaintext=%v", serverPlain), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			scfg := testConfig(t)
			scfg.InsecurePlaintext = serverPlain
			ln, err := Listen(ctx, []string{"127.0.0.1:0"}, scfg)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ccfg := testConfig(t)
			ccfg.InsecurePlaintext = !serverPlain
			_, err = Dial(ctx, []Path{{Remote: ln.Addrs()[0].String()}}, ccfg)
			if err == nil || !strings.Contains(err.Error(), "--insecure-plaintext") {
				t.Fatalf("dial: %v, want a refusal naming --insecure-plaintext", err)
			}
		})
	}
}

// TestErrClosedIsNetErrClosed: code written for net.Conn recognises a
// closed session.
func TestErrClosedIsNetErrClosed(t *testing.T) {
	c, _ := pair(t, 1, nil)
	c.Close()
	_, err := c.OpenStream(t.Context())
	if !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("OpenStream on a closed session: %v, want ErrClosed and net.ErrClosed", err)
	}
}

// TestIdleChannelHoldsNoLargeBuffers: after a large record is read, and
// then a small one, the channel gives back the large read and plaintext
// buffers it borrowed, so an idle channel holds only its small ones.
// (Keeping the borrowed buffers, as a bufio.Reader of 256 KiB did, fails
// it; that cost a server 372 KB a connected worker.)
func TestIdleChannelHoldsNoLargeBuffers(t *testing.T) {
	a2b, b2a := testCiphers(t)
	ca, cb := net.Pipe()
	defer ca.Close()
	defer cb.Close()
	w := newSecureConn(ca, 0, a2b, b2a, 0)
	r := newSecureConn(cb, 0, b2a, a2b, 0)
	big, small := randBytes(1, maxRecord), randBytes(2, 10)
	go func() {
		for _, p := range [][]byte{big, small} {
			if err := w.writeBuffers([][]byte{p}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	got := make([]byte, len(big)+len(small))
	for off := 0; off < len(got); {
		// Reads smaller than a record go through the plaintext buffer.
		n, err := r.Read(got[off:min(off+777, len(got))])
		if err != nil {
			t.Fatal(err)
		}
		off += n
		if off == len(big) && (!r.raw.borrowed || r.pbuf != nil) {
			// The large record needed both; the plaintext one is back
			// as soon as it was read.
			t.Errorf("after the large record: read buffer borrowed %v, plaintext buffer held %v; want true, false",
				r.raw.borrowed, r.pbuf != nil)
		}
	}
	if !bytes.Equal(got, append(append([]byte(nil), big...), small...)) {
		t.Fatal("read back other bytes than were written")
	}
	if r.raw.borrowed || len(r.raw.buf) != rawSmall || r.pbuf != nil {
		t.Errorf("idle after a small record: read buffer borrowed %v (%d bytes), plaintext buffer held %v; want only the small ones",
			r.raw.borrowed, len(r.raw.buf), r.pbuf != nil)
	}
}
