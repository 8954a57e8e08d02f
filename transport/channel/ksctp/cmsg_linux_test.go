//go:build linux

package ksctp

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/braid-hpc/braid/internal/testwait"
)

// cmsg builds one control message: cmsghdr (level, type, length) and data.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

// rcvinfo lays out struct sctp_rcvinfo with rcv_sid = sid and the other
// fields set to noise.
func rcvinfo(sid uint16) []byte {
	b := make([]byte, sizeofRcvinfo)
	for i := range b {
		b[i] = 0xee
	}
	binary.NativeEndian.PutUint16(b, sid)
	return b
}

func TestSndinfo(t *testing.T) {
	littleEndian(t)
	b := sndinfo(0x0102)
	// cmsghdr: cmsg_len (size_t) = header + 16, level 132, type 2; then
	// struct sctp_sndinfo: snd_sid 0x0102, the rest zero.
	hdr := unix.CmsgLen(0)
	if len(b) != unix.CmsgSpace(sizeofSndinfo) {
		t.Fatalf("%d bytes", len(b))
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	if h.Level != 132 || h.Type != 2 || int(h.Len) != hdr+16 {
		t.Fatalf("header %+v", *h)
	}
	if got := hex.EncodeToString(b[hdr:]); got != "0201"+strings.Repeat("00", 14) {
		t.Fatalf("sctp_sndinfo %s", got)
	}
	// It parses back as one SOL_SCTP message.
	msgs, err := unix.ParseSocketControlMessage(b)
	if err != nil || len(msgs) != 1 || len(msgs[0].Data) != sizeofSndinfo {
		t.Fatalf("parse: %v %+v", err, msgs)
	}
}

func TestInitMsg(t *testing.T) {
	littleEndian(t)
	// struct sctp_initmsg: ostreams, max_instreams, max_attempts, max_init_timeo.
	if got := hex.EncodeToString(initMsg(65)); got != "41004100"+"00000000" {
		t.Fatalf("initmsg %s", got)
	}
}

func TestRcvinfoSid(t *testing.T) {
	other := cmsg(unix.SOL_SOCKET, unix.SCM_RIGHTS, []byte{1, 2, 3, 4})
	ok := cmsg(solSCTP, sctpRcvInfo, rcvinfo(42))
	for _, tc := range []struct {
		name string
		oob  []byte
		sid  uint16
		err  string // "" for none
	}{
		{"rcvinfo", ok, 42, ""},
		{"after another message", append(append([]byte(nil), other...), ok...), 42, ""},
		{"short data", cmsg(solSCTP, sctpRcvInfo, rcvinfo(42)[:20]), 0, "SCTP_RCVINFO control message of 20 bytes, want 28"},
		{"cut header", ok[:5], 0, "does not parse"},
		{"cut data", ok[:unix.CmsgLen(0)+10], 0, "does not parse"},
		{"none", nil, 0, "without an SCTP_RCVINFO"},
		{"other only", other, 0, "without an SCTP_RCVINFO"},
		{"sndinfo is not rcvinfo", sndinfo(3), 0, "without an SCTP_RCVINFO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid, err := rcvinfoSid(tc.oob)
			if tc.err == "" {
				if err != nil || sid != tc.sid {
					t.Fatalf("= %d, %v; want %d", sid, err, tc.sid)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("= %d, %v; want an error with %q", sid, err, tc.err)
			}
		})
	}
}

func TestDecodePiece(t *testing.T) {
	oob := cmsg(solSCTP, sctpRcvInfo, rcvinfo(7))
	p, skip, err := decodePiece(100, len(oob), unix.MSG_EOR, oob)
	if err != nil || skip || p != (piece{n: 100, sid: 7, eor: true}) {
		t.Fatalf("whole message: %+v %v %v", p, skip, err)
	}
	p, _, err = decodePiece(50, len(oob), 0, oob)
	if err != nil || p.eor || p.sid != 7 {
		t.Fatalf("partial: %+v %v", p, err)
	}
	if _, _, err := decodePiece(50, len(oob), unix.MSG_CTRUNC, oob); err == nil || !strings.Contains(err.Error(), "MSG_CTRUNC") {
		t.Fatalf("truncated control data: %v", err)
	}
	if _, skip, err := decodePiece(50, 0, msgNotification|unix.MSG_EOR, oob); !skip || err != nil {
		t.Fatalf("notification: skip %v, %v", skip, err)
	}
	if p, _, err := decodePiece(0, 0, 0, oob); err != nil || p.n != 0 {
		t.Fatalf("end: %+v %v", p, err)
	}
	if _, _, err := decodePiece(10, 0, 0, oob); err == nil {
		t.Fatal("data without control message decoded")
	}
}

func TestParseStatus(t *testing.T) {
	b := make([]byte, sizeofStatus)
	binary.NativeEndian.PutUint16(b[16:], 65)
	binary.NativeEndian.PutUint16(b[18:], 10)
	if in, out, err := parseStatus(b); err != nil || in != 65 || out != 10 {
		t.Fatalf("= %d, %d, %v", in, out, err)
	}
	if _, _, err := parseStatus(b[:19]); err == nil {
		t.Error("short SCTP_STATUS parsed")
	}
	if _, _, err := parseStatus(make([]byte, sizeofStatus)); err == nil {
		t.Error("SCTP_STATUS with no streams accepted")
	}
}

// FuzzDecodePiece: garbage control data gives an error, never a panic.
func FuzzDecodePiece(f *testing.F) {
	f.Add(cmsg(solSCTP, sctpRcvInfo, rcvinfo(3)), 10, unix.MSG_EOR)
	f.Add(sndinfo(1), 10, 0)
	f.Add([]byte{1, 2, 3}, 10, 0)
	f.Fuzz(func(t *testing.T, oob []byte, n, flags int) {
		p, _, err := decodePiece(n, len(oob), flags, oob)
		if err == nil && n > 0 && flags&(msgNotification|unix.MSG_CTRUNC) == 0 && p.n != n {
			t.Fatalf("n %d, piece %+v", n, p)
		}
	})
}

// seqpacketPair returns a Conn with lanes over one end of an AF_UNIX
// SOCK_SEQPACKET socket pair, and the other end. The pair keeps message
// boundaries as SCTP does and drops the SOL_SCTP control messages, so the
// real sendmsg and recvmsg plumbing (poller waits, deadlines) runs without
// kernel SCTP; the peer sees no stream ids, and what it sends arrives
// without SCTP_RCVINFO.
func seqpacketPair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "seqpacket")
		c, err := net.FileConn(f)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	rc, err := conns[0].(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	c := newLanesConn(conns[0], rc, numStreams, numStreams)
	t.Cleanup(func() { _ = c.Close(); _ = conns[1].Close() })
	return c, conns[1]
}

func TestLanesPollerWrite(t *testing.T) {
	c, peer := seqpacketPair(t)
	l3, err := c.OpenLane(3)
	if err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("0123456789"), 15<<10/10*10)
	if n, err := l3.Write(msg); err != nil || n != len(msg) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	var got []byte
	b := make([]byte, 128<<10)
	for len(got) < len(msg) {
		_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := peer.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		if n > maxMessage {
			t.Fatalf("a message of %d bytes", n)
		}
		got = append(got, b[:n]...)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("messages do not add up to the Write")
	}
}

func TestLanesPollerWriteDeadlines(t *testing.T) {
	c, peer := seqpacketPair(t)
	l1, _ := c.OpenLane(1)
	l2, _ := c.OpenLane(2)
	// Nobody reads: the socket fills up and the writers wait in the poller.
	_ = l1.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	big := make([]byte, 4<<20)
	done2 := make(chan error, 1)
	n2 := 1 << 20
	go func() {
		_, err := l2.Write(make([]byte, n2))
		done2 <- err
	}()
	n1, err := l1.Write(big)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "lane 1") {
		t.Fatalf("lane 1 Write past its deadline: %d, %v", n1, err)
	}
	select {
	case err := <-done2:
		t.Fatalf("lane 2 Write returned with lane 1's deadline: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	// Reading unblocks lane 2, which writes all of its bytes.
	total := 0
	b := make([]byte, 128<<10)
	for total < n1+n2 {
		_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := peer.Read(b)
		if err != nil {
			t.Fatalf("read %d of %d bytes: %v", total, n1+n2, err)
		}
		total += n
	}
	if err := <-done2; err != nil {
		t.Fatalf("lane 2 Write: %v", err)
	}
}

func TestLanesPollerCloseWakesWriter(t *testing.T) {
	c, _ := seqpacketPair(t)
	l1, _ := c.OpenLane(1)
	done := make(chan error, 1)
	go func() { done <- testwait.ParkedWrite(l1, make([]byte, 4<<20)) }()
	testwait.ForBlocked(t, "the Write to wait for room", 10*time.Second, "testwait.ParkedWrite")
	_ = c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Write after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the writer")
	}
}

func TestLanesPollerRecvWithoutRcvinfo(t *testing.T) {
	c, peer := seqpacketPair(t)
	if _, err := peer.Write([]byte("no stream id")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 64))
	if err == nil || !strings.Contains(err.Error(), "without an SCTP_RCVINFO") {
		t.Fatalf("Read: %v", err)
	}
	// The association is closed: the peer reads the end.
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := peer.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("peer Read after the protocol error: %d, %v; want EOF", n, err)
	}
}

// A deadline set in the past wakes a Write already waiting, as on a
// net.Conn.
func TestLanesPollerDeadlineInterrupts(t *testing.T) {
	c, _ := seqpacketPair(t)
	l1, _ := c.OpenLane(1)
	done := make(chan error, 1)
	go func() { done <- testwait.ParkedWrite(l1, make([]byte, 4<<20)) }()
	testwait.ForBlocked(t, "the Write to wait for room", 10*time.Second, "testwait.ParkedWrite")
	_ = l1.SetWriteDeadline(time.Now().Add(-time.Second))
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Write: %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a past deadline did not wake the writer")
	}
	// The socket deadline is back in step: lane 2 times out at its own.
	l2, _ := c.OpenLane(2)
	_ = l2.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := l2.Write(make([]byte, 4<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("lane 2 Write into a full socket: %v, want its own timeout", err)
	}
}

// Closing a lane wakes its Write waiting in the poller; the channel and
// the other lanes go on.
func TestLanesPollerLaneCloseWakesWriter(t *testing.T) {
	c, peer := seqpacketPair(t)
	l1, _ := c.OpenLane(1)
	done := make(chan error, 1)
	go func() { done <- testwait.ParkedWrite(l1, make([]byte, 4<<20)) }()
	testwait.ForBlocked(t, "the Write to wait for room", 10*time.Second, "testwait.ParkedWrite")
	_ = l1.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Write on a lane closed under it: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the lane did not wake its writer")
	}
	// Drain what lane 1 got out, then lane 0 still writes.
	go func() {
		b := make([]byte, 128<<10)
		for {
			if _, err := peer.Read(b); err != nil {
				return
			}
		}
	}()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("still here")); err != nil {
		t.Fatalf("channel Write after a lane closed: %v", err)
	}
}
