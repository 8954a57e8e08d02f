package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
)

// Bond is the bonding-like comparator of paper 003's Fig. 11: one TCP
// connection per network, and each message goes whole over the one path
// that a layer3+4 hash picks, as Linux bonding with xmit_hash_policy
// layer3+4 places a flow. No message is split. Each message counts as a
// flow of its own (source port base+i), the placement most favorable to
// bonding: one long flow would stay on one path for good.
type Bond struct {
	TCP
}

// layer34 is Linux bonding's layer3+4 transmit hash (bond_xmit_hash with
// BOND_XMIT_POLICY_LAYER34) over IPv4 addresses and ports, modulo k
// slaves.
func layer34(src, dst netip.Addr, sport, dport uint16, k int) int {
	h := uint32(sport)<<16 | uint32(dport)
	if src.Is4() && dst.Is4() {
		s, d := src.As4(), dst.As4()
		h ^= binary.BigEndian.Uint32(s[:]) ^ binary.BigEndian.Uint32(d[:])
	}
	h ^= h >> 16
	h ^= h >> 8
	return int(h>>1) % k
}

// PingPong echoes each message whole over the path its flow hashes to.
func (b *Bond) PingPong(ctx context.Context, size, count int) (Result, error) {
	if len(b.Nets) == 0 {
		return Result{}, fmt.Errorf("bench: bond needs at least one network")
	}
	cli, srv, err := b.conns(ctx)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(cli, srv)
	for _, s := range srv {
		go func() {
			buf := make([]byte, size)
			for {
				if _, err := io.ReadFull(s, buf); err != nil {
					return
				}
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	// The bond's addresses are those of the first network (a bond has
	// one address); the flow's source port changes per message.
	src, _ := netip.ParseAddr(b.Bed.Addr(Client, b.Nets[0]))
	dst, _ := netip.ParseAddr(b.Bed.Addr(Server, b.Nets[0]))
	sport0 := uint16(cli[0].LocalAddr().(*net.TCPAddr).Port)
	dport := uint16(srv[0].LocalAddr().(*net.TCPAddr).Port)
	buf := make([]byte, size)
	i := 0
	rtts, err := pingpong(count, func() error {
		c := cli[layer34(src, dst, sport0+uint16(i), dport, len(cli))]
		i++
		if _, err := c.Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return effective(fmt.Sprintf("bond x%d", len(cli)), size, rtts), nil
}
