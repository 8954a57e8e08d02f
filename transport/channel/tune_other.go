//go:build !linux

package channel

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// NotSentLowat is unused where TCP_NOTSENT_LOWAT is missing.
const NotSentLowat = 0

func tune(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
}

// SetSendBacklog is a no-op where TCP_NOTSENT_LOWAT is missing.
func SetSendBacklog(c net.Conn, bytes int) bool { return false }

// MinRTT reports nothing where TCP_INFO is missing.
func MinRTT(net.Conn) (time.Duration, bool) { return 0, false }

// setCongestion is refused where TCP_CONGESTION is missing.
func setCongestion(c *net.TCPConn, name string) error {
	return errors.New("TCP_CONGESTION is Linux's")
}

// socketInfo knows nothing where the socket options are missing.
func socketInfo(*net.TCPConn) SocketInfo { return SocketInfo{} }

// setTOS is refused where the socket option is not known here.
func setTOS(c *net.TCPConn, tos int) error {
	return errors.New("IP_TOS is set on Linux only")
}

// setMSS is refused where TCP_MAXSEG is not known here.
func setMSS(raw syscall.RawConn, mss int) error { return errors.New("TCP_MAXSEG is set on Linux only") }

// TCPStats reports nothing where TCP_INFO is missing.
func TCPStats(net.Conn) (TCPInfo, bool) { return TCPInfo{}, false }
