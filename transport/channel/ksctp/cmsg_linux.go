//go:build linux

package ksctp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// From linux/sctp.h: the options and control messages lanes use.
const (
	sctpInitMsg     = 2  // SCTP_INITMSG, struct sctp_initmsg
	sctpStatusOpt   = 14 // SCTP_STATUS, struct sctp_status
	sctpRecvRcvInfo = 32 // SCTP_RECVRCVINFO: an SCTP_RCVINFO cmsg on each recvmsg

	// cmsg types (enum sctp_cmsg_type) at level SOL_SCTP.
	sctpSndInfo = 2 // SCTP_SNDINFO, struct sctp_sndinfo
	sctpRcvInfo = 3 // SCTP_RCVINFO, struct sctp_rcvinfo

	sizeofSndinfo = 16 // struct sctp_sndinfo: sid u16, flags u16, ppid u32, context u32, assoc_id s32
	sizeofRcvinfo = 28 // struct sctp_rcvinfo: sid u16, ssn u16, flags u16, (pad), ppid, tsn, cumtsn, context, assoc_id

	// offsets in struct sctp_status: assoc_id s32, state s32, rwnd u32,
	// unackdata u16, penddata u16, instrms u16, outstrms u16, ...
	statusInstrms  = 16
	statusOutstrms = 18
	sizeofStatus   = 176 // with struct sctp_paddrinfo (packed, 152 bytes)

	msgNotification = 0x8000 // MSG_NOTIFICATION
)

// initMsg is SCTP_INITMSG's value: struct sctp_initmsg {
// sinit_num_ostreams, sinit_max_instreams, sinit_max_attempts,
// sinit_max_init_timeo } (__u16 each; zero keeps the default).
func initMsg(streams uint16) []byte {
	b := binary.NativeEndian.AppendUint16(nil, streams)
	b = binary.NativeEndian.AppendUint16(b, streams)
	return binary.NativeEndian.AppendUint32(b, 0)
}

// sndinfo returns the control message that sends on stream sid: a
// cmsghdr at level SOL_SCTP, type SCTP_SNDINFO, then struct sctp_sndinfo
// with snd_sid = sid and the other fields zero (ordered, ppid 0).
func sndinfo(sid uint16) []byte {
	b := make([]byte, unix.CmsgSpace(sizeofSndinfo))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = solSCTP
	h.Type = sctpSndInfo
	h.SetLen(unix.CmsgLen(sizeofSndinfo))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], sid)
	return b
}

// rcvinfoSid finds the SCTP_RCVINFO control message in oob and returns its
// rcv_sid. Control data that ends inside a message is an error.
func rcvinfoSid(oob []byte) (uint16, error) {
	hdr := unix.CmsgLen(0)
	for b := oob; len(b) > 0; {
		if len(b) < hdr {
			return 0, fmt.Errorf("ksctp: recvmsg control data does not parse: %d bytes left, less than a cmsghdr", len(b))
		}
		l, level, typ := cmsgHeader(b)
		if l < uint64(hdr) || l > uint64(len(b)) {
			return 0, fmt.Errorf("ksctp: recvmsg control data does not parse: cmsg_len %d with %d bytes left", l, len(b))
		}
		if level == solSCTP && typ == sctpRcvInfo {
			if int(l)-hdr < sizeofRcvinfo {
				return 0, fmt.Errorf("ksctp: SCTP_RCVINFO control message of %d bytes, want %d", int(l)-hdr, sizeofRcvinfo)
			}
			return binary.NativeEndian.Uint16(b[hdr:]), nil
		}
		b = b[min(len(b), unix.CmsgSpace(int(l)-hdr)):]
	}
	return 0, errors.New("ksctp: recvmsg returned data without an SCTP_RCVINFO control message")
}

// cmsgHeader reads struct cmsghdr at the start of b (at least
// unix.CmsgLen(0) bytes, any alignment): cmsg_len is a size_t, then
// cmsg_level and cmsg_type.
func cmsgHeader(b []byte) (l uint64, level, typ int32) {
	var h unix.Cmsghdr
	off := int(unsafe.Sizeof(h.Len))
	if off == 8 {
		l = binary.NativeEndian.Uint64(b)
	} else {
		l = uint64(binary.NativeEndian.Uint32(b))
	}
	return l, int32(binary.NativeEndian.Uint32(b[off:])), int32(binary.NativeEndian.Uint32(b[off+4:]))
}

// decodePiece turns what recvmsg returned into a piece. skip is true for
// an SCTP notification, which carries no user data.
func decodePiece(n, oobn, flags int, oob []byte) (p piece, skip bool, err error) {
	if flags&unix.MSG_CTRUNC != 0 {
		return piece{}, false, errors.New("ksctp: recvmsg control data truncated (MSG_CTRUNC)")
	}
	if flags&msgNotification != 0 {
		return piece{}, true, nil
	}
	if n == 0 {
		return piece{}, false, nil // the peer shut down
	}
	sid, err := rcvinfoSid(oob[:oobn])
	if err != nil {
		return piece{}, false, err
	}
	return piece{n: n, sid: sid, eor: flags&unix.MSG_EOR != 0}, false, nil
}

// parseStatus returns the inbound and outbound stream counts of struct
// sctp_status.
func parseStatus(b []byte) (in, out int, err error) {
	if len(b) < statusOutstrms+2 {
		return 0, 0, fmt.Errorf("ksctp: SCTP_STATUS of %d bytes, too short", len(b))
	}
	in = int(binary.NativeEndian.Uint16(b[statusInstrms:]))
	out = int(binary.NativeEndian.Uint16(b[statusOutstrms:]))
	if in == 0 || out == 0 {
		return 0, 0, fmt.Errorf("ksctp: SCTP_STATUS reports %d inbound and %d outbound streams", in, out)
	}
	return in, out, nil
}

// status reads SCTP_STATUS off fd.
func status(fd int) (in, out int, err error) {
	b := make([]byte, 256)
	l := uint32(len(b))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), solSCTP, sctpStatusOpt,
		uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, 0, os.NewSyscallError("getsockopt SCTP_STATUS", e)
	}
	return parseStatus(b[:min(int(l), len(b))])
}

// lanesWrap wraps a connected kernel SCTP socket as a Conn with lanes:
// it turns SCTP_RECVRCVINFO on, reads the streams the association got,
// and starts the demultiplexer.
func lanesWrap(nc net.Conn) (*Conn, error) {
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil, err
	}
	var in, out int
	var serr error
	err = rc.Control(func(fd uintptr) {
		if e := unix.SetsockoptInt(int(fd), solSCTP, sctpRecvRcvInfo, 1); e != nil {
			serr = os.NewSyscallError("setsockopt SCTP_RECVRCVINFO", e)
			return
		}
		in, out, serr = status(int(fd))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return nil, fmt.Errorf("ksctp: lanes: %w", err)
	}
	return newLanesConn(nc, rc, in, out), nil
}

// newLanesConn makes a Conn with lanes of nc, whose raw conn is rc and
// whose association has in inbound and out outbound streams, and starts
// its demultiplexer.
func newLanesConn(nc net.Conn, rc syscall.RawConn, in, out int) *Conn {
	c := wrap(nc)
	m := newMux(sctpRecv(rc), sctpSend(rc), in, out)
	m.setWriteDeadline = nc.SetWriteDeadline
	m.onFail = func(error) { _ = nc.Close() }
	c.mux = m
	c.lane = m.lane0()
	go m.run()
	return c
}

// sctpRecv returns the demultiplexer's recvmsg on rc: it waits in the
// poller, skips notifications and decodes each piece.
func sctpRecv(rc syscall.RawConn) recvFunc {
	oob := make([]byte, unix.CmsgSpace(sizeofRcvinfo)+unix.CmsgSpace(64))
	return func(b []byte) (piece, error) {
		for {
			var n, oobn, flags int
			var rerr error
			err := rc.Read(func(fd uintptr) bool {
				for {
					n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), b, oob, 0)
					if rerr != unix.EINTR {
						return rerr != unix.EAGAIN
					}
				}
			})
			if err != nil {
				return piece{}, err
			}
			if rerr != nil {
				return piece{}, os.NewSyscallError("recvmsg", rerr)
			}
			p, skip, err := decodePiece(n, oobn, flags, oob)
			if !skip {
				return p, err
			}
		}
	}
}

// sctpSend returns the lanes' sendmsg on rc: one message on stream sid,
// waiting in the poller (under the socket's write deadline) while the
// send buffer is full.
func sctpSend(rc syscall.RawConn) sendFunc {
	return func(sid uint16, p []byte) (int, error) {
		oob := sndinfo(sid)
		var n int
		var werr error
		err := rc.Write(func(fd uintptr) bool {
			for {
				n, werr = unix.SendmsgN(int(fd), p, oob, nil, 0)
				if werr != unix.EINTR {
					return werr != unix.EAGAIN
				}
			}
		})
		if err != nil {
			return 0, err
		}
		if werr != nil {
			return 0, os.NewSyscallError("sendmsg", werr)
		}
		return n, nil
	}
}
