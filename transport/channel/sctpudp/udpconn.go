package sctpudp

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// udpConn is the dialer's connected UDP socket as pion sees it. Read after
// Close reports io.EOF, so an association that ends by a SHUTDOWN (which
// closes this conn) ends its streams with io.EOF rather than "use of closed
// network connection". The first other read error is kept, so a refused
// handshake can say "connection refused". Writes go through a
// packetWriter, several packets per sendmmsg(2).
type udpConn struct {
	*net.UDPConn
	w      *packetWriter
	closed atomic.Bool

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

func newUDPConn(c *net.UDPConn) *udpConn {
	uc := &udpConn{UDPConn: c}
	if queueWrites {
		uc.w = newPacketWriter(batchSender(c))
	}
	return uc
}

func (c *udpConn) Write(p []byte) (int, error) {
	if c.w == nil {
		return c.UDPConn.Write(p)
	}
	return c.w.write(p)
}

// Close sends what is queued, then closes the socket.
func (c *udpConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.w != nil {
		c.w.close()
	}
	return c.UDPConn.Close()
}

func (c *udpConn) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}
