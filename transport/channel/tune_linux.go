package channel

import (
	"net"
	"syscall"
)

// NotSentLowat bounds the bytes a channel may hold unsent in the kernel.
// Keeping it small makes the sender's choice of the next fragment late,
// which is what lets a small message on one stream overtake a large one on
// another, and what keeps striping balanced on paths of unequal speed.
const NotSentLowat = 128 << 10

// tcpNotSentLowat is TCP_NOTSENT_LOWAT from linux/tcp.h.
const tcpNotSentLowat = 25

func tune(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, NotSentLowat)
	})
}
