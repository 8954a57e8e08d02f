package testbed

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// pingPongWarmup is the number of round trips PingPong makes before it
// starts the clock.
const pingPongWarmup = 2

// PingPong measures what a serial exchange gets from a network: it
// connects client to server with TCP over network (an index), echoes
// size-byte messages there and back, times rounds round trips after two warm-up
// ones, and returns the effective bandwidth in bit/s as the papers define
// it, 8 x size / (mean RTT / 2): the bytes of both ways over the time. On
// a half-duplex network (the default) it stays within the rate at every
// size; on a FullDuplex one small messages measure up to twice it (see
// the package doc). ctx bounds the whole exchange.
func (b *Bed) PingPong(ctx context.Context, client, server string, network, size, rounds int) (float64, error) {
	if size <= 0 || rounds <= 0 {
		return 0, fmt.Errorf("testbed: ping-pong of %d rounds of %d bytes: want both above 0", rounds, size)
	}
	if b.Addr(client, network) == "" || b.Addr(server, network) == "" {
		return 0, fmt.Errorf("testbed: ping-pong from %q to %q over network %d: %w or %w", client, server, network, ErrUnknownHost, ErrUnknownNetwork)
	}
	var ln net.Listener
	if err := b.Run(server, func() (err error) {
		ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(b.Addr(server, network), "0"))
		return err
	}); err != nil {
		return 0, err
	}
	defer ln.Close()
	var c net.Conn
	if err := b.Run(client, func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
		return err
	}); err != nil {
		return 0, err
	}
	defer c.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	ln.(*net.TCPListener).SetDeadline(deadline)
	s, err := ln.Accept()
	if err != nil {
		return 0, fmt.Errorf("testbed: ping-pong: accept: %w", err)
	}
	defer s.Close()
	// Closing both ends when ctx ends wakes the blocked reads.
	stop := context.AfterFunc(ctx, func() { c.Close(); s.Close() })
	defer stop()
	s.SetDeadline(deadline)
	c.SetDeadline(deadline)
	echoed := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for range pingPongWarmup + rounds {
			if _, err := io.ReadFull(s, buf); err != nil {
				echoed <- err
				return
			}
			if _, err := s.Write(buf); err != nil {
				echoed <- err
				return
			}
		}
		echoed <- nil
	}()
	msg := make([]byte, size)
	var start time.Time
	for i := range pingPongWarmup + rounds {
		if i == pingPongWarmup {
			start = time.Now()
		}
		if _, err := c.Write(msg); err != nil {
			c.Close()
			<-echoed
			return 0, fmt.Errorf("testbed: ping-pong of %d B, round trip %d: write: %w", size, i, err)
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			c.Close()
			<-echoed
			return 0, fmt.Errorf("testbed: ping-pong of %d B, round trip %d: read: %w", size, i, err)
		}
	}
	elapsed := time.Since(start)
	if err := <-echoed; err != nil {
		return 0, fmt.Errorf("testbed: ping-pong of %d B: echo: %w", size, err)
	}
	return float64(2*size*rounds*8) / elapsed.Seconds(), nil
}
