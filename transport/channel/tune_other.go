//go:build !linux

package channel

import "net"

// NotSentLowat is unused where TCP_NOTSENT_LOWAT is missing.
const NotSentLowat = 0

func tune(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
}

// SetSendBacklog is a no-op where TCP_NOTSENT_LOWAT is missing.
func SetSendBacklog(c net.Conn, bytes int) bool { return false }
