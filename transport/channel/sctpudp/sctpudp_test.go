package sctpudp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/transport/channel"
)

// checkLeaks fails t if, a few seconds after t's other cleanups, more
// goroutines run than when it was called. Tests in this package do not run
// in parallel, so the count is theirs.
func checkLeaks(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		if !testwait.Until(5*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
			n := runtime.NumGoroutine()
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("goroutines: %d before, %d after\n%s", before, n, buf)
		}
	})
}

// listenLoopback starts a listener on 127.0.0.1 and closes it with t.
func listenLoopback(t testing.TB, k Kind) net.Listener {
	t.Helper()
	ln, err := k.Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// pair returns both ends of one sctp-udp channel; they close with t.
func pair(t testing.TB, k Kind) (client, server *Stream, ln net.Listener) {
	t.Helper()
	ln = listenLoopback(t, k)
	accepted := make(chan net.Conn, 1)
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := k.Dial(ctx, "127.0.0.1", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	select {
	case s := <-accepted:
		t.Cleanup(func() { _ = s.Close() })
		return c.(*Stream), s.(*Stream), ln
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("accept timed out")
	}
	return nil, nil, nil
}

func TestRegistered(t *testing.T) {
	k, err := channel.Lookup("sctp-udp")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := k.(Kind); !ok {
		t.Fatalf("sctp-udp is %T", k)
	}
}

func TestConfigPopulate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"jumbo", Config{MTU: MaxMTU}, true},
		{"mtu too big", Config{MTU: MaxMTU + 1}, false},
		{"mtu too small", Config{MTU: 100}, false},
		{"negative message", Config{MaxMessageSize: -1}, false},
		{"window below mtu", Config{MaxReceiveBuffer: 1000}, false},
		{"negative backlog", Config{Backlog: -1}, false},
		{"small send buffer", Config{SendBuffer: 4096}, true},
		{"negative send buffer", Config{SendBuffer: -1}, false},
		{"huge receive buffer", Config{ReceiveBuffer: 2 << 30}, false},
		{"stream send buffer", Config{StreamSendBuffer: 1 << 20}, true},
		{"negative stream send buffer", Config{StreamSendBuffer: -1}, false},
		{"rto max", Config{RTOMax: 200 * time.Millisecond}, true},
		{"rto max too small", Config{RTOMax: time.Millisecond}, false},
		{"rto max too large", Config{RTOMax: 25 * time.Hour}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.cfg.populate()
			if (err == nil) != tc.ok {
				t.Fatalf("populate(%+v) error %v, want ok=%v", tc.cfg, err, tc.ok)
			}
			if tc.ok && (c.MaxMessageSize == 0 || c.MaxReceiveBuffer == 0 || c.ReceiveBuffer == 0 || c.Logger == nil) {
				t.Fatalf("populate left zero fields: %+v", c)
			}
		})
	}
}

func TestIsInit(t *testing.T) {
	init := makeInit(0)
	if !isInit(init) {
		t.Fatal("valid INIT rejected")
	}
	bad := bytes.Clone(init)
	bad[20] ^= 1
	if isInit(bad) {
		t.Fatal("INIT with a bad checksum accepted")
	}
	for _, b := range [][]byte{nil, init[:31], []byte("hello, world, this is not sctp at all")} {
		if isInit(b) {
			t.Fatalf("%x accepted", b)
		}
	}
	data := bytes.Clone(init)
	data[12] = 0 // DATA chunk
	fixChecksum(data)
	if isInit(data) {
		t.Fatal("DATA accepted as INIT")
	}
	tagged := bytes.Clone(init)
	tagged[4] = 1
	fixChecksum(tagged)
	if isInit(tagged) {
		t.Fatal("INIT with a verification tag accepted")
	}
}

// makeInit returns a minimal INIT packet with a valid checksum and the
// given initiate tag.
func makeInit(tag uint32) []byte {
	b := make([]byte, 32)
	binary.BigEndian.PutUint16(b[0:], 5000)
	binary.BigEndian.PutUint16(b[2:], 5000)
	b[12] = 1
	binary.BigEndian.PutUint16(b[14:], 20)
	binary.BigEndian.PutUint32(b[16:], tag)
	binary.BigEndian.PutUint32(b[20:], 1<<20) // a_rwnd
	binary.BigEndian.PutUint16(b[24:], 10)    // outbound streams
	binary.BigEndian.PutUint16(b[26:], 10)    // inbound streams
	binary.BigEndian.PutUint32(b[28:], 1)     // initial TSN
	fixChecksum(b)
	return b
}

func fixChecksum(b []byte) {
	binary.LittleEndian.PutUint32(b[8:], 0)
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, castagnoli))
}

// usrsctpInit is an INIT that libusrsctp 0.9.5 sent over UDP: it lists
// Supported Address Types and two IPv4 Address parameters, which pion
// refuses.
const usrsctpInit = "1388138800000000e63c6f55010000749fecb6cb0002000000100010e415a4d0" +
	"80000004c000000480080009c00fc18082000000800200245fb67663ec370a82" +
	"6f9b4298520bba980510cb34172c5d15273c6a7498e339f58004000600010000" +
	"8003000680c10000000c00060005000000050008c0000202000500087f000001"

func TestStripInitParams(t *testing.T) {
	b, err := hex.DecodeString(usrsctpInit)
	if err != nil {
		t.Fatal(err)
	}
	fixChecksum(b)
	if !isInit(b) {
		t.Fatal("captured INIT rejected")
	}
	n := stripInitParams(b)
	b = b[:n]
	if !isInit(b) {
		t.Fatalf("stripped INIT invalid: %x", b)
	}
	var types []uint16
	for off := 32; off+4 <= len(b); {
		l := int(binary.BigEndian.Uint16(b[off+2:]))
		types = append(types, binary.BigEndian.Uint16(b[off:]))
		off += (l + 3) &^ 3
	}
	want := []uint16{0x8000, 0xc000, 0x8008, 0x8002, 0x8004, 0x8003}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Errorf("parameters left %#x, want %#x", types, want)
	}
	if got := int(binary.BigEndian.Uint16(b[14:])); got+12 > n || got+12 < n-3 {
		t.Errorf("chunk length %d for a %d-byte packet", got, n)
	}
	// Nothing to strip, a bad checksum, or no INIT: untouched.
	for _, pkt := range [][]byte{makeInit(7), bytes.Clone(b[:n])} {
		c := bytes.Clone(pkt)
		if m := stripInitParams(c); m != len(pkt) || !bytes.Equal(c, pkt) {
			t.Errorf("INIT without foreign parameters changed: %x -> %x", pkt, c[:m])
		}
	}
	bad, _ := hex.DecodeString(usrsctpInit)
	bad[8] ^= 0xff
	if m := stripInitParams(bytes.Clone(bad)); m != len(bad) {
		t.Error("INIT with a bad checksum was rewritten")
	}
}

func TestEcho(t *testing.T) {
	checkLeaks(t)
	c, s, _ := pair(t, Kind{})
	go func() { _, _ = io.Copy(s, s) }()
	for _, size := range []int{1, 100, 1500, 64 << 10, 64<<10 + 1, 300 << 10} {
		msg := make([]byte, size)
		_, _ = rand.Read(msg)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("size %d: echo differs", size)
		}
	}
	if c.LocalAddr().Network() != "udp" || c.RemoteAddr().String() != s.LocalAddr().String() {
		t.Errorf("addresses: client %v -> %v, server %v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr())
	}
}

// pattern fills b with a reproducible byte sequence for position off of
// stream seed.
func pattern(b []byte, seed uint64, off int64) {
	r := mrand.New(mrand.NewPCG(seed, uint64(off)))
	for i := 0; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
}

// sendHashed writes n bytes of pattern seed to w in writes of size chunk and
// returns their SHA-256.
func sendHashed(w io.Writer, seed uint64, n int64, chunk int) ([32]byte, error) {
	h := sha256.New()
	buf := make([]byte, chunk)
	for off := int64(0); off < n; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), n-off)]
		pattern(b, seed, off)
		h.Write(b)
		if _, err := w.Write(b); err != nil {
			return [32]byte{}, err
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}

// recvHashed reads r to EOF and returns the count and SHA-256.
func recvHashed(r io.Reader) (int64, [32]byte, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	var sum [32]byte
	h.Sum(sum[:0])
	return n, sum, err
}

func TestTransfer64MiB(t *testing.T) {
	checkLeaks(t)
	const size = 64 << 20
	c, s, _ := pair(t, Kind{})
	type result struct {
		n   int64
		sum [32]byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, sum, err := recvHashed(s)
		done <- result{n, sum, err}
	}()
	start := time.Now()
	want, err := sendHashed(c, 1, size, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.n != size || r.sum != want {
			t.Fatalf("received %d bytes, sha256 %x; sent %d, %x", r.n, r.sum, size, want)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("transfer timed out")
	}
	el := time.Since(start)
	t.Logf("64 MiB in %v (%.0f MB/s)", el.Round(time.Millisecond), size/el.Seconds()/1e6)
}

func TestStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    Kind
	}{
		{"blocking writes", Kind{}},
		{"per-stream send buffers", Kind{Config: Config{StreamSendBuffer: 128 << 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) { testStreams(t, tc.k) })
	}
}

func testStreams(t *testing.T, k Kind) {
	checkLeaks(t)
	c, s, _ := pair(t, k)
	const (
		streams = 5 // stream 0 plus 1..4
		size    = 2 << 20
	)
	// Server: hash whatever each stream carries and report it by id.
	type result struct {
		id  uint16
		n   int64
		sum [32]byte
		err error
	}
	results := make(chan result, streams)
	recv := func(st *Stream) {
		n, sum, err := recvHashed(st)
		results <- result{st.ID(), n, sum, err}
	}
	go recv(s)
	go func() {
		for range streams - 1 {
			st, err := s.Assoc().AcceptStream(t.Context())
			if err != nil {
				results <- result{err: err}
				return
			}
			go recv(st)
		}
	}()

	want := make(map[uint16][32]byte)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, streams)
	for id := range uint16(streams) {
		st := c
		if id != 0 {
			var err error
			if st, err = c.Assoc().OpenStream(id, StreamOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, err := sendHashed(st, uint64(id), size, 40<<10)
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			want[id] = sum
			mu.Unlock()
			if id != 0 {
				errc <- st.Close() // reset: the peer reads io.EOF
			}
		}()
	}
	wg.Wait()
	for range streams - 1 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// The other streams are done; closing stream 0 ends the association.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range streams {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.n != size || r.sum != want[r.id] {
				t.Errorf("stream %d: got %d bytes %x, want %d %x", r.id, r.n, r.sum, size, want[r.id])
			}
		case <-time.After(60 * time.Second):
			t.Fatal("streams timed out")
		}
	}
}

func TestUnorderedStream(t *testing.T) {
	checkLeaks(t)
	c, s, _ := pair(t, Kind{})
	st, err := c.Assoc().OpenStream(7, StreamOptions{Unordered: true, Reliability: LimitRetransmits, MaxRetransmits: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(make([]byte, defaultMaxMessageSize+1)); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversized message: %v", err)
	}
	const msgs = 50
	for i := range msgs {
		if _, err := fmt.Fprintf(st, "message %03d", i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	in, err := s.Assoc().AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID() != 7 {
		t.Fatalf("accepted stream %d, want 7", in.ID())
	}
	seen := map[string]bool{}
	buf := make([]byte, defaultMaxMessageSize)
	for range msgs {
		_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := in.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(buf[:n])] = true // one Read, one whole message
	}
	for i := range msgs {
		if m := fmt.Sprintf("message %03d", i); !seen[m] {
			t.Errorf("missing %q", m)
		}
	}
}

func TestCloseEOF(t *testing.T) {
	checkLeaks(t)
	c, s, ln := pair(t, Kind{})
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "last words" {
		t.Fatalf("server read %q, %v; want last words, EOF", got, err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Error("Write after the peer closed succeeded")
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
	if _, err := c.Assoc().OpenStream(1, StreamOptions{}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("OpenStream after Close: %v", err)
	}
	if _, err := c.Assoc().AcceptStream(t.Context()); err == nil {
		t.Error("AcceptStream after Close succeeded")
	}

	// Close unblocks a Read in progress: the test closes once the Read
	// is seen parked, not after a sleep that a loaded machine can outlast
	// (then it tests Read after Close).
	c2, _, _ := pair(t, Kind{})
	readErr := make(chan error, 1)
	go func() { readErr <- testwait.ParkedRead(c2, make([]byte, 10)) }()
	testwait.ForBlocked(t, "the Read to block", 10*time.Second, "testwait.ParkedRead")
	_ = c2.Close()
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked Read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock Read")
	}

	// A closed listener refuses Accept and new associations.
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := (Kind{Config: Config{HandshakeTimeout: 2 * time.Second}}).Dial(ctx, "", addr); err == nil {
		t.Error("Dial to a closed listener succeeded")
	}
}

func TestDialRefused(t *testing.T) {
	checkLeaks(t)
	// A UDP port nobody listens on: the ICMP port unreachable ends the
	// handshake at once.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	_ = pc.Close()
	start := time.Now()
	_, err = Kind{}.Dial(t.Context(), "", addr)
	if err == nil {
		t.Fatal("Dial to a closed port succeeded")
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("refused Dial took %v", time.Since(start))
	}
	t.Logf("dial closed port: %v", err)
}

func TestDialContextCancel(t *testing.T) {
	checkLeaks(t)
	// A UDP socket that never answers.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := (Kind{}).Dial(ctx, "", pc.LocalAddr().String()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial: %v, want context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Dial took %v after its context ended", el)
	}
}

func TestDeadline(t *testing.T) {
	checkLeaks(t)
	c, s, _ := pair(t, Kind{})
	buf := make([]byte, 10)

	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past deadline: %v, want a timeout", err)
	}
	if _, ok := err.(net.Error); !ok {
		t.Errorf("timeout %T is not itself a net.Error", err)
	}
	if el := time.Since(start); el < 90*time.Millisecond || el > 2*time.Second {
		t.Errorf("deadline fired after %v, want ~100ms", el)
	}
	// Still expired until moved.
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second Read: %v", err)
	}
	// A deadline in the past fails at once too.
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read with past deadline: %v", err)
	}
	// Clearing it lets data through; the channel survived the timeouts.
	_ = c.SetReadDeadline(time.Time{})
	if _, err := s.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("Read after clearing the deadline: %q, %v", buf[:n], err)
	}
	// A deadline moved later while a Read waits is honored: once the
	// Read is seen waiting, its deadline moves from 1 s to 10 s, and the
	// data comes after the first one passed.
	first := time.Now().Add(time.Second)
	_ = c.SetReadDeadline(first)
	late := make(chan error, 1)
	go func() {
		if !testwait.Until(time.Second, func() bool { return testwait.Blocked("testwait.ParkedRead") }) {
			late <- errors.New("the Read was not seen waiting within its first deadline")
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		time.Sleep(time.Until(first) + 50*time.Millisecond)
		_, err := s.Write([]byte("late"))
		late <- err
	}()
	err = testwait.ParkedRead(c, buf[:4])
	if werr := <-late; werr != nil {
		t.Fatal(werr)
	}
	if err != nil || string(buf[:4]) != "late" {
		t.Fatalf("Read with extended deadline: %q, %v", buf[:4], err)
	}
}

func TestWriteDeadline(t *testing.T) {
	checkLeaks(t)
	// A small window and nobody reading: Writes soon wait for room.
	c, _, _ := pair(t, Kind{Config: Config{MaxReceiveBuffer: 64 << 10, Linger: -1}})
	_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 64<<10)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = c.Write(buf)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Write into a full window: %v, want a timeout", err)
	}
}

func TestGarbage(t *testing.T) {
	checkLeaks(t)
	k := Kind{Config: Config{HandshakeTimeout: 500 * time.Millisecond}}
	c, s, ln := pair(t, k)
	go func() { _, _ = io.Copy(s, s) }()

	target := ln.Addr().(*net.UDPAddr)
	r := mrand.New(mrand.NewPCG(1, 2))
	var junk [][]byte
	for i := range 200 {
		b := make([]byte, 1+r.IntN(1500))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		switch i % 4 {
		case 1: // SCTP-looking, bad checksum
			if len(b) >= 32 {
				b[12] = 1
				copy(b[4:8], []byte{0, 0, 0, 0})
			}
		case 2: // well-formed INIT header, garbled parameters, valid checksum
			init := makeInit(r.Uint32())
			b = append(init, b[:min(len(b), 64)]...)
			binary.BigEndian.PutUint16(b[14:], uint16(len(b)-12))
			fixChecksum(b)
		case 3: // any chunk type with a valid checksum
			if len(b) >= 16 {
				fixChecksum(b)
			}
		}
		junk = append(junk, b)
	}
	for i := range 4 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		for j, b := range junk {
			if j%4 == i {
				_, _ = pc.WriteTo(b, target)
			}
		}
		_ = pc.Close()
	}
	// The valid INIT from a socket that then goes away starts a handshake
	// that times out.
	if pc, err := net.ListenPacket("udp", "127.0.0.1:0"); err == nil {
		_, _ = pc.WriteTo(makeInit(12345), target)
		_ = pc.Close()
	}

	// The established channel still works...
	if _, err := c.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.ReadFull(c, buf[:10]); err != nil || string(buf[:n]) != "still here" {
		t.Fatalf("echo after garbage: %q, %v", buf[:n], err)
	}
	// ...and the listener still accepts.
	go func() {
		if s2, err := ln.Accept(); err == nil {
			_, _ = io.Copy(s2, s2)
			_ = s2.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c2, err := k.Dial(ctx, "", target.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.ReadFull(c2, buf[:3]); err != nil || string(buf[:n]) != "new" {
		t.Fatalf("echo on a new channel: %q, %v", buf[:n], err)
	}
	// Let the garbled handshakes time out before the leak check.
	time.Sleep(time.Second)
}

func TestNoGoroutineLeak(t *testing.T) {
	checkLeaks(t)
	k := Kind{}
	ln, err := k.Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(s, s)
				_ = s.Close()
			}()
		}
	}()
	for i := range 20 {
		c, err := k.Dial(t.Context(), "", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		st := c.(*Stream)
		if i%2 == 1 { // leave an accept pump and a stream behind too
			extra, _ := st.Assoc().OpenStream(3, StreamOptions{})
			_, _ = extra.Write([]byte("x"))
			go func() { _, _ = st.Assoc().AcceptStream(t.Context()) }()
		}
		msg := strings.Repeat("y", i*1000+1)
		_, _ = c.Write([]byte(msg))
		got := make([]byte, len(msg))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			_ = c.Close()
		} else {
			// Abort without the SHUTDOWN exchange.
			_ = closeAbort(st)
		}
	}
	_ = ln.Close()
	wg.Wait()
}

// closeAbort closes st's association at once, as with Config.Linger < 0.
func closeAbort(st *Stream) error {
	st.assoc.cfg.Linger = -1
	return st.Close()
}

// relay forwards UDP datagrams between one client and target, until
// blackhole is set; then it drops everything, as a dead path would.
type relay struct {
	pc        net.PacketConn
	up        *net.UDPConn // to target
	blackhole atomic.Bool
	done      chan struct{}
}

func startRelay(t testing.TB, target string) *relay {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raddr, _ := net.ResolveUDPAddr("udp", target)
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{pc: pc, up: up, done: make(chan struct{})}
	var client atomic.Pointer[net.Addr]
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // client -> target
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			client.Store(&from)
			if !r.blackhole.Load() {
				_, _ = up.Write(buf[:n])
			}
		}
	}()
	go func() { // target -> client
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			if a := client.Load(); a != nil && !r.blackhole.Load() {
				_, _ = pc.WriteTo(buf[:n], *a)
			}
		}
	}()
	t.Cleanup(func() {
		_ = pc.Close()
		_ = up.Close()
		wg.Wait()
	})
	return r
}

func TestDeadPeer(t *testing.T) {
	checkLeaks(t)
	k := Kind{Config: Config{Linger: 300 * time.Millisecond}}
	ln := listenLoopback(t, k)
	r := startRelay(t, ln.Addr().String())
	server := make(chan net.Conn, 1)
	go func() {
		if s, err := ln.Accept(); err == nil {
			server <- s
			_, _ = io.Copy(s, s)
		}
	}()
	c, err := k.Dial(t.Context(), "", r.pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}

	// The path dies: a heartbeat-style read deadline notices, and Close
	// gives up on the SHUTDOWN after Linger.
	r.blackhole.Store(true)
	_, _ = c.Write([]byte("lost"))
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read on a dead path: %v, want a timeout", err)
	}
	start := time.Now()
	_ = c.Close()
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Close on a dead path took %v, Linger is 300ms", el)
	}
	// The server never heard the ABORT, and pion never gives up on a silent
	// peer: its side lives until closed, as braid's heartbeat would.
	s := <-server
	start = time.Now()
	_ = s.Close()
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("server Close on a dead path took %v", el)
	}
}

// With per-stream send buffers, a stream whose peer stops acknowledging
// blocks only its own writes: up to the write deadline, while another
// stream of the same association keeps moving.
func TestStreamSendBuffer(t *testing.T) {
	checkLeaks(t)
	// The server's window is small and nobody reads stream 1 there, so
	// stream 1's data stops being acknowledged once the window is full.
	cfg := Config{StreamSendBuffer: 32 << 10, MaxReceiveBuffer: 256 << 10, Linger: -1}
	c, s, _ := pair(t, Kind{Config: cfg})
	stuck, err := c.Assoc().OpenStream(1, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.SetWriteDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// Less than the window: this much gets acknowledged and frees stream 1.
	chunk := make([]byte, 16<<10)
	if _, err := stuck.Write(chunk); err != nil {
		t.Fatal(err)
	}
	// Meanwhile stream 0 carries 1 MiB to a reader: it is not held up by
	// stream 1 as long as stream 1 has not filled the window.
	got := make(chan int64, 1)
	go func() {
		n, _ := io.CopyN(io.Discard, s, 1<<20)
		got <- n
	}()
	if _, err := c.Write(make([]byte, 1<<20)); err != nil {
		t.Fatalf("stream 0 write: %v", err)
	}
	select {
	case n := <-got:
		if n != 1<<20 {
			t.Fatalf("stream 0 delivered %d of %d bytes", n, 1<<20)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("stream 0 did not deliver")
	}
	// Now fill the window through stream 1: its writes must stop at the
	// deadline with a timeout, not hang.
	var n int
	var werr error
	for range 64 {
		var m int
		m, werr = stuck.Write(chunk)
		n += m
		if werr != nil {
			break
		}
	}
	if !errors.Is(werr, os.ErrDeadlineExceeded) {
		t.Fatalf("stream 1 wrote %d bytes past the window, then %v; want a deadline error (buffered %d)", n, werr, stuck.s.BufferedAmount())
	}
	var ne net.Error
	if !errors.As(werr, &ne) || !ne.Timeout() {
		t.Errorf("error %v is not a timeout", werr)
	}
	// Closing the association ends a write blocked without deadline.
	if err := stuck.SetWriteDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- testwait.ParkedWrite(stuck, chunk) }()
	testwait.ForBlocked(t, "the Write to block on the full window", 10*time.Second, "testwait.ParkedWrite")
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked write after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked write did not end with Close")
	}
}

// Two braid ends negotiate I-DATA (RFC 8260), and a small message on one
// stream then overtakes the large messages queued before it on another
// stream. With plain DATA chunks it would arrive after all of them: the
// sender queues every chunk of a message when it is written.
func TestInterleaving(t *testing.T) {
	checkLeaks(t)
	// Stream buffers and the receive window hold everything written, so
	// the small write is queued while the large ones are still in flight.
	const (
		msgSize = 1 << 20
		bigSize = 8 * msgSize
	)
	cfg := Config{StreamSendBuffer: 2 * bigSize, MaxMessageSize: msgSize, MaxReceiveBuffer: 2 * bigSize, Linger: -1}
	c, s, _ := pair(t, Kind{Config: cfg})
	if !c.Assoc().Interleaved() || !s.Assoc().Interleaved() {
		t.Fatalf("I-DATA not negotiated: client %v, server %v", c.Assoc().Interleaved(), s.Assoc().Interleaved())
	}
	big, err := c.Assoc().OpenStream(1, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	small, err := c.Assoc().OpenStream(2, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The server reads both streams; it notes how many bytes of stream 1
	// it had read when the small message arrived.
	var bigGot atomic.Int64
	smallAt := make(chan int64, 1)
	bigDone := make(chan int64, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	go func() {
		for range 2 {
			st, err := s.Assoc().AcceptStream(ctx)
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 64<<10)
				_ = st.SetReadDeadline(time.Now().Add(20 * time.Second))
				for {
					n, err := st.Read(buf)
					if st.ID() == 2 {
						smallAt <- bigGot.Load()
						return
					}
					if got := bigGot.Add(int64(n)); got == bigSize || err != nil {
						bigDone <- got
						return
					}
				}
			}()
		}
	}()
	if _, err := big.Write(make([]byte, bigSize)); err != nil {
		t.Fatal(err)
	}
	if _, err := small.Write([]byte("small")); err != nil {
		t.Fatal(err)
	}
	var at int64
	select {
	case at = <-smallAt:
	case <-ctx.Done():
		t.Fatal("small message did not arrive")
	}
	select {
	case got := <-bigDone:
		if got != bigSize {
			t.Fatalf("large messages: %d of %d bytes arrived", got, bigSize)
		}
	case <-ctx.Done():
		t.Fatal("large messages did not arrive")
	}
	t.Logf("small message arrived after %d of %d bytes on the other stream", at, bigSize)
	if at > bigSize/2 {
		t.Errorf("small message arrived after %d of the %d bytes queued before it on another stream: not interleaved", at, bigSize)
	}
}
