//go:build linux

package ksctp

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
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
