// Package channel provides the reliable, ordered byte channels that a braid
// session runs over: one channel per network path. A Kind knows how to dial
// and listen for one protocol (TCP, Linux MPTCP, SCTP, SCTP over UDP).
//
// Channels are plain net.Conn values: braid frames its own messages on top
// and relies only on reliability and FIFO order within one channel.
package channel

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
)

// Kind dials and listens for one channel protocol.
type Kind interface {
	// Name is the value of --transport that selects this kind.
	Name() string
	// Dial connects to remote. A non-empty local pins the source address
	// (host or host:port) so the traffic leaves by that network.
	Dial(ctx context.Context, local, remote string) (net.Conn, error)
	// Listen accepts channels on addr (host:port).
	Listen(ctx context.Context, addr string) (net.Listener, error)
}

var (
	mu    sync.Mutex
	kinds = map[string]Kind{}
)

// Register makes a Kind available by name. It panics on a duplicate name.
func Register(k Kind) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := kinds[k.Name()]; dup {
		panic("channel: duplicate kind " + k.Name())
	}
	kinds[k.Name()] = k
}

// Lookup returns the Kind registered under name.
func Lookup(name string) (Kind, error) {
	mu.Lock()
	defer mu.Unlock()
	if k, ok := kinds[name]; ok {
		return k, nil
	}
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("channel: unknown transport %q (have %v)", name, names)
}

// ResolveLocal turns a local source address that may lack a port into a
// *net.TCPAddr suitable for net.Dialer.LocalAddr.
func ResolveLocal(local string) (*net.TCPAddr, error) {
	if local == "" {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(local)
	if err != nil {
		host, port = local, "0"
	}
	ip := net.ParseIP(host)
	if ip == nil {
		ips, err := net.DefaultResolver.LookupIP(context.Background(), "ip", host)
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("channel: local address %q: not an IP address", local)
		}
		ip = ips[0]
	}
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		return nil, fmt.Errorf("channel: local address %q: %w", local, err)
	}
	return &net.TCPAddr{IP: ip, Port: p}, nil
}

// Lanes is implemented by channels that carry several independent ordered
// byte streams ("lanes") over one connection, such as the streams of an
// SCTP association. Lane 0 is the channel itself; lanes 1 and up are
// further streams of the same connection, each reliable and FIFO on its
// own, with no ordering between lanes: a lost packet of one lane delays
// only that lane, not the others.
//
// A lane is bidirectional and named by its id on both ends: what one side
// writes on lane 5 the other reads from lane 5. OpenLane returns the same
// net.Conn for an id every time, whichever side used the lane first;
// AcceptLane returns a lane only if OpenLane had not returned it before,
// and at most once. So a user that reads every lane either call returns
// first, and no lane twice, reads everything the peer sends. Lanes end
// when the channel (lane 0) is closed.
//
// TCP and MPTCP channels do not implement Lanes; a braid session then
// carries everything on the one channel.
type Lanes interface {
	// OpenLane returns lane id (1 and up), the same net.Conn each time
	// for the same id. Nothing is sent until the first Write.
	OpenLane(id uint16) (net.Conn, error)
	// AcceptLane waits for the peer to send on a lane this side has not
	// opened, and returns it with its id. It fails once the channel is
	// closed.
	AcceptLane(ctx context.Context) (uint16, net.Conn, error)
}
