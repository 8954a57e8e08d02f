package channel

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NotSentLowat is the initial bound on the bytes a channel may hold unsent
// in the kernel. Keeping it small makes the sender's choice of the next
// fragment late, which is what lets a small message on one stream overtake
// a large one on another, and what keeps striping balanced on paths of
// unequal speed. SetSendBacklog adapts it to a path's measured rate.
const NotSentLowat = 32 << 10

// tcpNotSentLowat is TCP_NOTSENT_LOWAT from linux/tcp.h.
const tcpNotSentLowat = 25

func tune(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	SetSendBacklog(c, NotSentLowat)
}

// SetSendBacklog sets how many bytes c may hold unsent in the kernel
// (TCP_NOTSENT_LOWAT) where the channel supports it. It reports whether
// it did.
func SetSendBacklog(c net.Conn, bytes int) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	if _, isTCP := c.(*net.TCPConn); !isTCP {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, bytes)
	}); err != nil {
		return false
	}
	return serr == nil
}

// MinRTT returns the smallest round trip the kernel measured on c's TCP
// connection (tcpi_min_rtt), which data queued ahead of a probe does not
// inflate. ok is false where c is not a TCP connection.
func MinRTT(c net.Conn) (rtt time.Duration, ok bool) {
	tc, isTCP := c.(*net.TCPConn)
	if !isTCP {
		return 0, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || serr != nil || info.Min_rtt == 0 || info.Min_rtt == ^uint32(0) {
		return 0, false
	}
	return time.Duration(info.Min_rtt) * time.Microsecond, true
}

// setCongestion sets TCP_CONGESTION on c.
func setCongestion(c *net.TCPConn, name string) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	return serr
}

// socketInfo reads c's congestion control, buffers and MSS.
func socketInfo(c *net.TCPConn) SocketInfo {
	var i SocketInfo
	raw, err := c.SyscallConn()
	if err != nil {
		return i
	}
	_ = raw.Control(func(fd uintptr) {
		if s, err := unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION); err == nil {
			i.Congestion = s
		}
		if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF); err == nil {
			i.SendBuffer = n
		}
		if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			i.ReceiveBuffer = n
		}
		if n, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG); err == nil {
			i.MaxSegmentSize = n
		}
		if a, ok := c.LocalAddr().(*net.TCPAddr); ok && a.IP.To4() == nil {
			if n, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS); err == nil {
				i.TOS = n
			}
		} else if n, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS); err == nil {
			i.TOS = n
		}
	})
	return i
}

// setTOS sets the type of service byte (IP_TOS, or IPV6_TCLASS on an
// IPv6 socket) on c.
func setTOS(c *net.TCPConn, tos int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	v6 := false
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok && a.IP.To4() == nil {
		v6 = true
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		lvl, opt, name := unix.IPPROTO_IP, unix.IP_TOS, "IP_TOS"
		if v6 {
			lvl, opt, name = unix.IPPROTO_IPV6, unix.IPV6_TCLASS, "IPV6_TCLASS"
		}
		if err := unix.SetsockoptInt(int(fd), lvl, opt, tos); err != nil {
			serr = fmt.Errorf("%s %d: %w", name, tos, err)
		}
	}); err != nil {
		return err
	}
	return serr
}

// setMSS sets TCP_MAXSEG on a socket before it connects.
func setMSS(raw syscall.RawConn, mss int) error {
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, mss)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("TCP_MAXSEG %d: %w", mss, serr)
	}
	return nil
}

// TCPStats reads c's TCP_INFO: the smoothed round trip, the congestion
// window in bytes (segments times the send MSS) and the segments
// retransmitted since the connection opened. ok is false where c is not
// a TCP connection.
func TCPStats(c net.Conn) (s TCPInfo, ok bool) {
	tc, isTCP := c.(*net.TCPConn)
	if !isTCP {
		return s, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return s, false
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || serr != nil {
		return s, false
	}
	return TCPInfo{RTT: time.Duration(info.Rtt) * time.Microsecond, SendCwnd: int64(info.Snd_cwnd) * int64(info.Snd_mss),
		Retransmits: int64(info.Total_retrans)}, true
}
