//go:build linux

package ksctp

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func littleEndian(t *testing.T) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("expected bytes are written for a little-endian host")
	}
}

// The option values laid out as linux/sctp.h's structs (checked against
// Debian linux-libc-dev 6.1: struct sctp_sack_info is 12 bytes, delay at
// 4, freq at 8; struct sctp_assoc_value 8 bytes, value at 4; struct
// sctp_rtoinfo 16 bytes, initial at 4, max at 8, min at 12).
func TestSockopts(t *testing.T) {
	littleEndian(t)
	ms := time.Millisecond
	type opt struct {
		level, opt int
		name, hex  string
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []opt
	}{
		{"zero", Config{}, nil},
		{"nagle only", Config{Nagle: true}, nil},
		{"all", Config{
			SendBuffer: 1 << 20, ReceiveBuffer: 2 << 20,
			SACKDelay: 40 * ms, SACKFreq: 7, MaxBurst: 16, MaxSeg: 1000,
			RTOInitial: 300 * ms, RTOMin: 20 * ms, RTOMax: 900 * ms,
		}, []opt{
			{1, 7, "SO_SNDBUF", "00001000"},
			{1, 8, "SO_RCVBUF", "00002000"},
			{132, 16, "SCTP_DELAYED_SACK", "00000000" + "28000000" + "07000000"},
			{132, 20, "SCTP_MAX_BURST", "00000000" + "10000000"},
			{132, 13, "SCTP_MAXSEG", "00000000" + "e8030000"},
			{132, 0, "SCTP_RTOINFO", "00000000" + "2c010000" + "84030000" + "14000000"},
		}},
		{"sack freq only", Config{SACKFreq: 1}, []opt{{132, 16, "SCTP_DELAYED_SACK", "00000000" + "00000000" + "01000000"}}},
		{"sack delay only", Config{SACKDelay: 500 * ms}, []opt{{132, 16, "SCTP_DELAYED_SACK", "00000000" + "f4010000" + "00000000"}}},
		{"no burst limit", Config{MaxBurst: -1}, []opt{{132, 20, "SCTP_MAX_BURST", "00000000" + "00000000"}}},
		{"rto max only", Config{RTOMax: 5 * time.Second}, []opt{{132, 0, "SCTP_RTOINFO", "00000000" + "00000000" + "88130000" + "00000000"}}},
		{"kernel receive buffer", Config{ReceiveBuffer: -1}, nil},
		// struct sctp_paddrparams is packed: hbinterval at 132, the
		// 16-bit pathmaxrxt at 136, flags at 146, 152 bytes in the
		// layout without spp_ipv6_flowlabel and spp_dscp.
		{"heartbeat and path max retrans", Config{HeartbeatInterval: 1500 * ms, PathMaxRetrans: 3}, []opt{{132, 9, "SCTP_PEER_ADDR_PARAMS",
			strings.Repeat("00", 132) + "dc050000" + "0300" + "00000000" + "00000000" + "01000000" + "0000"}}},
		{"path max retrans only", Config{PathMaxRetrans: 2}, []opt{{132, 9, "SCTP_PEER_ADDR_PARAMS",
			strings.Repeat("00", 132) + "00000000" + "0200" + strings.Repeat("00", 14)}}},
		// struct sctp_paddrthlds: pathmaxrxt at 136, pathpfthld at 138
		// on 64-bit systems (see thldsMaxRxt).
		{"pf threshold and path max retrans", Config{PathMaxRetrans: 4, PFThreshold: 2}, []opt{
			{132, 9, "SCTP_PEER_ADDR_PARAMS", strings.Repeat("00", 132) + "00000000" + "0400" + strings.Repeat("00", 14)},
			{132, 31, "SCTP_PEER_ADDR_THLDS", strings.Repeat("00", thldsMaxRxt) + "0400" + "0200" + strings.Repeat("00", paddrthldsLen-thldsPF-2)}}},
		{"pf threshold zero", Config{PFThreshold: -1}, []opt{{132, 31, "SCTP_PEER_ADDR_THLDS", strings.Repeat("00", paddrthldsLen)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			if tc.cfg.ReceiveBuffer == 0 {
				// Zero asks for 4 MiB (see Config.ReceiveBuffer).
				tc.want = append([]opt{{1, 8, "SO_RCVBUF", "00004000"}}, tc.want...)
			}
			got := sockopts(&tc.cfg)
			if len(got) != len(tc.want) {
				t.Fatalf("%d options, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.level != w.level || g.opt != w.opt || g.name != w.name || hex.EncodeToString(g.val) != w.hex {
					t.Errorf("option %d = {%d %d %s %x}, want {%d %d %s %s}", i, g.level, g.opt, g.name, g.val, w.level, w.opt, w.name, w.hex)
				}
			}
		})
	}
}

// setCall is one setsockopt the fake saw.
type setCall struct {
	fd, level, opt int
	val            string
	connected      bool // the socket had a peer or listened already
}

// fakeSetopt records setsockopt calls and where the socket stood. SOL_SCTP
// options stop there (the stand-in is TCP); SOL_SOCKET ones reach the
// kernel. With failing set, SOL_SCTP option fail fails with EINVAL.
type fakeSetopt struct {
	mu      sync.Mutex
	calls   []setCall
	failing bool
	fail    int
}

func (f *fakeSetopt) set(fd, level, opt int, b []byte) error {
	_, perr := unix.Getpeername(fd)
	ln, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	f.mu.Lock()
	f.calls = append(f.calls, setCall{fd, level, opt, string(b), perr == nil || ln != 0})
	f.mu.Unlock()
	if level == solSCTP && f.failing && opt == f.fail {
		return unix.EINVAL
	}
	if level == solSCTP {
		return nil
	}
	return setsockopt(fd, level, opt, b)
}

// Dial and Listen set every knob on their socket before it connects or
// listens, through proto.setopt.
func TestSockoptsSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cfg := &Config{
		SendBuffer: 256 << 10, ReceiveBuffer: 512 << 10,
		SACKDelay: 10 * time.Millisecond, SACKFreq: 4, MaxBurst: -1, MaxSeg: 1400,
		RTOInitial: 100 * time.Millisecond, RTOMin: 10 * time.Millisecond, RTOMax: 400 * time.Millisecond,
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want := sockopts(cfg)
	fake := &fakeSetopt{}
	p := tcpStandIn
	p.setopt = fake.set

	loop, _ := ParseAddr(ctx, nil, "127.0.0.1:0", true)
	ln, err := p.listen(cfg, loop)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raddr, _ := ParseAddr(ctx, nil, ln.Addr().String(), true)
	accepted := make(chan net.Conn, 1)
	go func() {
		s, _ := ln.Accept()
		accepted <- s
	}()
	c, err := p.dial(ctx, cfg, &Addr{}, raddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := <-accepted; s != nil {
		defer s.Close()
	}

	// The listener's socket, then the dialer's (the descriptor numbers may
	// repeat: os.NewFile's is closed once the poller has a duplicate).
	fake.mu.Lock()
	calls := fake.calls
	fake.mu.Unlock()
	if len(calls) != 2*len(want) {
		t.Fatalf("%d options set, want %d on each of listener and dialer", len(calls), len(want))
	}
	for i, g := range calls {
		who, w := "listener", want[i%len(want)]
		if i >= len(want) {
			who = "dialer"
		}
		if g.level != w.level || g.opt != w.opt || g.val != string(w.val) {
			t.Errorf("%s option %d: {%d %d %x}, want %s {%d %d %x}", who, i%len(want), g.level, g.opt, g.val, w.name, w.level, w.opt, w.val)
		}
		if g.connected {
			t.Errorf("%s: %s set after connect or listen; accepted associations would not inherit it", who, w.name)
		}
	}
	// The SOL_SOCKET ones took: Linux doubles what was asked.
	if got := sockoptInt(t, c, unix.SOL_SOCKET, unix.SO_SNDBUF); got < cfg.SendBuffer {
		t.Errorf("SO_SNDBUF %d, asked %d", got, cfg.SendBuffer)
	}
}

// A refused option fails Dial and Listen with an error naming it.
func TestSockoptRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	fake := &fakeSetopt{failing: true, fail: sctpMaxBurst}
	p := tcpStandIn
	p.setopt = fake.set
	cfg := &Config{MaxBurst: 8}
	loop, _ := ParseAddr(ctx, nil, "127.0.0.1:0", true)
	if ln, err := p.listen(cfg, loop); err == nil {
		_ = ln.Close()
		t.Fatal("listen succeeded")
	} else if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "setsockopt SCTP_MAX_BURST") {
		t.Errorf("listen: %v", err)
	}
	raddr, _ := ParseAddr(ctx, nil, "127.0.0.1:9", true)
	if _, err := p.dial(ctx, cfg, &Addr{}, raddr); !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "setsockopt SCTP_MAX_BURST") {
		t.Errorf("dial: %v", err)
	}
}

// getsockoptBytes reads n bytes of an option whose struct starts with
// sctp_assoc_t 0 (this socket's association).
func getsockoptBytes(t *testing.T, c net.Conn, level, opt, n int) []byte {
	t.Helper()
	if kc, ok := c.(*Conn); ok {
		c = kc.Conn
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	l := uint32(n)
	var errno syscall.Errno
	_ = rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(opt),
			uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
	})
	if errno != 0 {
		t.Fatalf("getsockopt %d/%d: %v", level, opt, errno)
	}
	return b[:l]
}

// With kernel SCTP, both ends of an association carry the knobs.
func TestKnobsKernel(t *testing.T) {
	requireKernel(t)
	ms := time.Millisecond
	cfg := Config{
		SACKDelay: 40 * ms, SACKFreq: 7, MaxBurst: 16, MaxSeg: 1000,
		RTOInitial: 300 * ms, RTOMin: 20 * ms, RTOMax: 900 * ms,
		HeartbeatInterval: 1500 * ms, PathMaxRetrans: 3, PFThreshold: 2,
	}
	c, s, _ := pair(t, Kind{Config: cfg}, "127.0.0.1", "127.0.0.1:0")
	u32 := func(b []byte, i int) uint32 { return binary.NativeEndian.Uint32(b[4*i:]) }
	for _, conn := range []net.Conn{c, s} {
		sack := getsockoptBytes(t, conn, solSCTP, sctpDelayedSACK, 12)
		if u32(sack, 1) != 40 || u32(sack, 2) != 7 {
			t.Errorf("%v: sack_delay %d, sack_freq %d", conn.LocalAddr(), u32(sack, 1), u32(sack, 2))
		}
		if b := getsockoptBytes(t, conn, solSCTP, sctpMaxBurst, 8); u32(b, 1) != 16 {
			t.Errorf("%v: max burst %d", conn.LocalAddr(), u32(b, 1))
		}
		if b := getsockoptBytes(t, conn, solSCTP, sctpMaxSeg, 8); u32(b, 1) != 1000 {
			t.Errorf("%v: fragmentation point %d", conn.LocalAddr(), u32(b, 1))
		}
		rto := getsockoptBytes(t, conn, solSCTP, sctpRTOInfo, 16)
		if u32(rto, 1) != 300 || u32(rto, 2) != 900 || u32(rto, 3) != 20 {
			t.Errorf("%v: rto initial/max/min %d/%d/%d", conn.LocalAddr(), u32(rto, 1), u32(rto, 2), u32(rto, 3))
		}
		pp := getsockoptBytes(t, conn, solSCTP, sctpPeerParams, paddrparamsLen)
		hb, pmr, flags := binary.NativeEndian.Uint32(pp[132:]), binary.NativeEndian.Uint16(pp[136:]), binary.NativeEndian.Uint32(pp[146:])
		if hb != 1500 || pmr != 3 || flags&sppHBEnable == 0 {
			t.Errorf("%v: heartbeat interval %d ms, path max retrans %d, flags %#x; want 1500, 3, heartbeats on", conn.LocalAddr(), hb, pmr, flags)
		}
		th := getsockoptBytes(t, conn, solSCTP, sctpPeerThlds, paddrthldsLen)
		if pmr, pf := binary.NativeEndian.Uint16(th[thldsMaxRxt:]), binary.NativeEndian.Uint16(th[thldsPF:]); pmr != 3 || pf != 2 {
			t.Errorf("%v: thresholds: path max retrans %d, potentially failed %d; want 3, 2", conn.LocalAddr(), pmr, pf)
		}
	}
}
