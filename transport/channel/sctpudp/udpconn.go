package sctpudp

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// udpConn is the dialer's connected UDP socket as pion sees it. Read after
// Close reports io.EOF, so an association that ends by a SHUTDOWN (which
// closes this conn) ends its streams with io.EOF rather than "use of closed
// network connection". The first other read error is kept, so a refused
// handshake can say "connection refused". With tuner set, writes size the
// socket's send buffer (sndbuf.go).
type udpConn struct {
	*net.UDPConn
	closed atomic.Bool
	tuner  *sendTuner

	mu    sync.Mutex
	first error
}

func (c *udpConn) Read(p []byte) (int, error) {
	n, err := c.UDPConn.Read(p)
	if err != nil {
		if c.closed.Load() {
			return n, io.EOF
		}
		c.mu.Lock()
		if c.first == nil {
			c.first = err
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *udpConn) Write(p []byte) (int, error) {
	n, err := c.UDPConn.Write(p)
	if c.tuner != nil && n > 0 {
		c.tuner.wrote(n, time.Now())
	}
	return n, err
}

func (c *udpConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.UDPConn.Close()
}

func (c *udpConn) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}
