package sctpudp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/syncbuf"
)

// The interop tests run an independent SCTP stack, libusrsctp, against this
// package over UDP encapsulation, in both directions. They build
// testdata/usrsctp_peer.c with gcc and skip when gcc, usrsctp.h or
// libusrsctp is missing (Debian: apt-get install libusrsctp-dev), unless
// BRAID_REQUIRE_USRSCTP=1 asks them to fail instead, as CI should.

// interopSCTPPort is the SCTP port inside the packets: pion always uses 5000.
const interopSCTPPort = "5000"

// buildPeer compiles the usrsctp peer into a temporary directory.
func buildPeer(t *testing.T) string {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("BRAID_REQUIRE_USRSCTP") == "1" {
		skip = t.Fatalf
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		skip("usrsctp interop: gcc not found: %v", err)
	}
	flags := []string{"-DINET", "-DINET6", "-lusrsctp"}
	if out, err := exec.Command("pkg-config", "--cflags", "--libs", "usrsctp").Output(); err == nil {
		flags = strings.Fields(string(out))
	}
	bin := filepath.Join(t.TempDir(), "usrsctp_peer")
	args := append([]string{"-O1", "-o", bin, filepath.Join("testdata", "usrsctp_peer.c")}, flags...)
	args = append(args, "-lpthread")
	cmd := exec.Command(gcc, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("usrsctp.h")) || bytes.Contains(out, []byte("-lusrsctp")) {
			skip("usrsctp interop: libusrsctp-dev not installed (apt-get install libusrsctp-dev): %s", out)
		}
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// freeUDPPort returns a UDP port that was free on every address a moment
// ago: usrsctp binds its tunnelling port itself, on IPv4 and IPv6.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// peerProc is a running usrsctp_peer.
type peerProc struct {
	cmd    *exec.Cmd
	stderr lockedBuffer
	ready  chan struct{} // closed when the peer prints READY
	done   chan struct{} // closed when it has exited; then out and err are set
	out    []string
	err    error
}

func startPeer(t *testing.T, bin string, args ...string) *peerProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	p := &peerProc{
		cmd:   exec.CommandContext(ctx, bin, args...),
		ready: make(chan struct{}),
		done:  make(chan struct{}),
	}
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel() // kills the peer if it still runs
		<-p.done
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		var once sync.Once
		for sc.Scan() {
			if sc.Text() == "READY" {
				once.Do(func() { close(p.ready) })
			}
			p.out = append(p.out, sc.Text())
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// waitReady waits for the server peer to print READY.
func (p *peerProc) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("usrsctp peer exited before READY: %v\n%s", p.err, p.stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("usrsctp peer never printed READY\n%s", p.stderr.String())
	}
}

// wait waits for the peer to exit and returns its stdout.
func (p *peerProc) wait(t *testing.T) string {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("usrsctp peer did not exit\nstderr:\n%s", p.stderr.String())
	}
	out := strings.Join(p.out, "\n")
	if p.err != nil {
		t.Fatalf("usrsctp peer: %v\nstdout:\n%s\nstderr:\n%s", p.err, out, p.stderr.String())
	}
	return out
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer = syncbuf.Buffer

func TestInteropGoClientUsrsctpServer(t *testing.T) {
	bin := buildPeer(t)
	checkLeaks(t)
	port := freeUDPPort(t)
	p := startPeer(t, bin, "server", strconv.Itoa(port), interopSCTPPort)
	p.waitReady(t)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := Kind{}.Dial(ctx, "127.0.0.1", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("dial usrsctp: %v\n%s", err, p.stderr.String())
	}
	ch := c.(*Stream)
	if ch.Assoc().Interleaved() {
		t.Error("association with usrsctp negotiated I-DATA; usrsctp does not offer it by default")
	}
	const (
		streams = 4
		size    = 1 << 20 // per stream
	)
	var wg sync.WaitGroup
	errc := make(chan error, 2*streams)
	for id := range uint16(streams) {
		st := ch
		if id > 0 {
			if st, err = ch.Assoc().OpenStream(id, StreamOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(2)
		go func() { // writer: writes of growing size, up to past one message
			defer wg.Done()
			data := make([]byte, size)
			pattern(data, uint64(id), 0)
			for off, w := 0, 1; off < size; off, w = off+w, w*3+7 {
				w = min(w, 100<<10, size-off)
				if _, err := st.Write(data[off : off+w]); err != nil {
					errc <- fmt.Errorf("stream %d write: %w", id, err)
					return
				}
			}
		}()
		go func() { // reader: the echo must match, byte for byte
			defer wg.Done()
			got := make([]byte, size)
			_ = st.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.ReadFull(st, got); err != nil {
				errc <- fmt.Errorf("stream %d read: %w", id, err)
				return
			}
			want := make([]byte, size)
			pattern(want, uint64(id), 0)
			if i := firstDiff(got, want); i >= 0 {
				errc <- fmt.Errorf("stream %d: echo differs at byte %d", id, i)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	out := p.wait(t)
	if !strings.Contains(out, fmt.Sprintf("bytes=%d", streams*size)) {
		t.Errorf("usrsctp server says %q, want %d bytes echoed", out, streams*size)
	}
	t.Logf("usrsctp: %s; %s", out, strings.TrimSpace(p.stderr.String()))
}

func TestInteropUsrsctpClientGoServer(t *testing.T) {
	bin := buildPeer(t)
	checkLeaks(t)
	ln := listenLoopback(t, Kind{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close() // before wg.Wait: ends an Accept still waiting
	wg.Add(1)
	go func() { // echo every stream of every association back
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		st := c.(*Stream)
		echo := func(s *Stream) {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if err != nil {
					return
				}
				if _, err := s.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				s, err := st.Assoc().AcceptStream(context.Background())
				if err != nil {
					return
				}
				wg.Add(1)
				go echo(s)
			}
		}()
		wg.Add(1)
		echo(st)
		_ = st.Close()
	}()

	const streams, rounds = 6, 40
	goPort := ln.Addr().(*net.UDPAddr).Port
	p := startPeer(t, bin, "client", strconv.Itoa(freeUDPPort(t)), "127.0.0.1", strconv.Itoa(goPort),
		interopSCTPPort, strconv.Itoa(streams), strconv.Itoa(rounds))
	out := p.wait(t)
	if !strings.HasPrefix(out, fmt.Sprintf("OK verified streams=%d rounds=%d", streams, rounds)) {
		t.Fatalf("usrsctp client says %q\n%s", out, p.stderr.String())
	}
	t.Logf("usrsctp: %s; %s", out, strings.TrimSpace(p.stderr.String()))
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
