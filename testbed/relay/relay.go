package relay

import (
	"sync"
	"time"
)

// Config configures a relay. The zero value works.
type Config struct {
	// Addr is the address the relay listens on; "" means 127.0.0.1:0.
	Addr string
	// Seed seeds the generators of UDP drops, one per direction, so a run
	// with the same packets drops the same ones; 0 means a random seed.
	// TCP relays ignore it.
	Seed uint64
	// Queue bounds the bytes a TCP relay holds per connection and
	// direction, like a router's buffer: with SetRate, data beyond it
	// waits in the sender's kernel. 0 means 8 MiB.
	Queue int
}

func (c *Config) addr() string {
	if c == nil || c.Addr == "" {
		return "127.0.0.1:0"
	}
	return c.Addr
}

// Dir selects a direction of a relay.
type Dir int

const (
	// Both means both directions.
	Both Dir = iota
	// ToTarget is from clients to the target.
	ToTarget
	// ToClient is from the target back to clients.
	ToClient
)

// dirs returns the direction indexes (0 to target, 1 to client) that d
// selects.
func (d Dir) dirs() []int {
	switch d {
	case ToTarget:
		return []int{0}
	case ToClient:
		return []int{1}
	}
	return []int{0, 1}
}

// dialTimeout bounds the connection to the target.
const dialTimeout = 5 * time.Second

// pacer spaces sends of one direction to a rate, shared by every
// connection of a relay like a link is.
type pacer struct {
	mu   sync.Mutex
	next time.Time
}

// reserve books n bytes at bps and returns when they may be sent.
func (p *pacer) reserve(n int, bps int64) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = at.Add(time.Duration(float64(n) * 8 / float64(bps) * float64(time.Second)))
	return at
}

// sleepUntil waits until t or until done is closed; it reports whether t
// was reached.
func sleepUntil(t time.Time, done <-chan struct{}) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-done:
		return false
	}
}
