package testbed

import (
	"context"
	"fmt"
)

// LinkDown takes host's interface on network net administratively down: a
// loud failure. Host loses its address's route at once (sends fail with
// "network is unreachable") and the hub side sees the carrier drop.
func (b *Bed) LinkDown(host string, net int) error {
	return b.fault(host, net, func(ctx context.Context, i int) error {
		_, err := run(ctx, "ip", "-n", b.hostNS(i), "link", "set", b.Dev(host, net), "down")
		return err
	})
}

// LinkUp undoes LinkDown and waits (bounded) until the link forwards again.
func (b *Bed) LinkUp(host string, net int) error {
	return b.fault(host, net, func(ctx context.Context, i int) error {
		if _, err := run(ctx, "ip", "-n", b.hostNS(i), "link", "set", b.Dev(host, net), "up"); err != nil {
			return err
		}
		return b.waitReady(ctx, i, net)
	})
}

// Blackhole silently cuts host's link on network net: the hub side of the
// link leaves its bridge, both interfaces stay up with carrier, and every
// packet in either direction vanishes.
func (b *Bed) Blackhole(host string, net int) error {
	return b.fault(host, net, func(ctx context.Context, i int) error {
		_, err := run(ctx, "ip", "-n", b.hubNS(), "link", "set", b.hubDev(i, net), "nomaster")
		return err
	})
}

// Restore undoes Blackhole and waits (bounded) until the link forwards
// again.
func (b *Bed) Restore(host string, net int) error {
	return b.fault(host, net, func(ctx context.Context, i int) error {
		if _, err := run(ctx, "ip", "-n", b.hubNS(), "link", "set", b.hubDev(i, net), "master", b.bridge(net)); err != nil {
			return err
		}
		return b.waitReady(ctx, i, net)
	})
}

func (b *Bed) fault(host string, net int, f func(ctx context.Context, i int) error) error {
	i := b.hostIndex(host)
	if i < 0 {
		return fmt.Errorf("testbed: %w: %q", ErrUnknownHost, host)
	}
	if net < 0 || net >= len(b.spec.Networks) {
		return fmt.Errorf("testbed: %w: %d (bed has %d)", ErrUnknownNetwork, net, len(b.spec.Networks))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return ErrDown
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
	defer cancel()
	if err := f(ctx, i); err != nil {
		return fmt.Errorf("testbed: host %s network %s: %w", host, b.spec.Networks[net].Name, err)
	}
	return nil
}

// SetRate changes the rate of every link of network net, both directions
// (together, or each on a FullDuplex network), to bps bit/s; 0 removes
// the shaping.
func (b *Bed) SetRate(net int, bps int64) error {
	if net < 0 || net >= len(b.spec.Networks) {
		return fmt.Errorf("testbed: %w: %d (bed has %d)", ErrUnknownNetwork, net, len(b.spec.Networks))
	}
	if bps < 0 {
		return fmt.Errorf("testbed: negative rate %d", bps)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return ErrDown
	}
	if b.rates[net] == bps {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
	defer cancel()
	fresh := b.rates[net] == 0
	for i, h := range b.spec.Hosts {
		if !b.spec.Networks[net].FullDuplex {
			// An unshaped half-duplex link has no shaper: made here when
			// it gets a rate, removed when it loses it.
			var err error
			switch {
			case fresh:
				err = b.shareLink(ctx, i, net, bps)
			case bps == 0:
				err = b.unshareLink(ctx, i, net)
			default:
				err = shape(ctx, b.hostNS(i), b.shaper(net), bps, false)
			}
			if err != nil {
				return err
			}
			continue
		}
		if err := shape(ctx, b.hostNS(i), b.Dev(h, net), bps, fresh); err != nil {
			return err
		}
		if err := shape(ctx, b.hubNS(), b.hubDev(i, net), bps, fresh); err != nil {
			return err
		}
	}
	b.rates[net] = bps
	return nil
}

// Rate returns the current rate of network net in bit/s (0: unshaped).
func (b *Bed) Rate(net int) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if net < 0 || net >= len(b.rates) {
		return 0
	}
	return b.rates[net]
}

// EnableMPTCP prepares an MPTCP connection from client to server over every
// network: both hosts accept 8 subflows and 8 announced addresses, server
// announces (signal) its addresses on networks 1..k-1, and client opens
// subflows from its addresses on networks 1..k-1, each bound to its own
// interface (without dev every subflow would leave by the first one).
// Network 0 carries the initial subflow. Call it once per pair.
func (b *Bed) EnableMPTCP(ctx context.Context, server, client string) error {
	si, ci := b.hostIndex(server), b.hostIndex(client)
	if si < 0 || ci < 0 {
		return fmt.Errorf("testbed: %w: %q or %q", ErrUnknownHost, server, client)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return ErrDown
	}
	for _, i := range []int{si, ci} {
		if _, err := run(ctx, "ip", "-n", b.hostNS(i), "mptcp", "limits", "set", "subflow", "8", "add_addr_accepted", "8"); err != nil {
			return err
		}
	}
	for j := 1; j < len(b.spec.Networks); j++ {
		if _, err := run(ctx, "ip", "-n", b.hostNS(si), "mptcp", "endpoint", "add",
			b.Addr(server, j), "dev", b.Dev(server, j), "signal"); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "-n", b.hostNS(ci), "mptcp", "endpoint", "add",
			b.Addr(client, j), "dev", b.Dev(client, j), "subflow"); err != nil {
			return err
		}
	}
	return nil
}
