package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
)

// Random loss is an nftables rule in the hub namespace: one netdev-family
// base chain per host and network, on the ingress hook of the hub's end of
// the host's link, dropping packets with probability pct/100 drawn per
// packet by numgen. So a lost packet has crossed the host's shaped link,
// and the sender cannot tell: a drop on the sender's own output hook would
// fail its send with EPERM instead, which TCP treats as "try again later"
// rather than as loss. netem would do the same, but it is not in every
// kernel; nftables is. The rules live in the hub namespace, so Down
// removes them with it.

// lossTable is the nftables table, in the hub namespace, that holds the
// loss chains of every host and network.
const lossTable = "braid_loss"

// LossResolution is the finest loss step SetLoss applies, in percent.
const LossResolution = 0.01

// lossScale is the numgen modulus: one step is 1/lossScale of all packets.
const lossScale = 10000

// SetLoss makes the network lose pct percent of the packets host sends on
// network net, chosen at random per packet, in steps of LossResolution; 0
// removes the loss. Packets are lost after crossing host's link, where it
// joins the network, so the sender sees no error. It acts on what host
// sends only: for loss in both directions of a path, set it on both hosts.
// Traffic of other networks and of other hosts is untouched. It needs nft
// (Debian package nftables).
func (b *Bed) SetLoss(host string, net int, pct float64) error {
	if math.IsNaN(pct) || pct < 0 || pct > 100 {
		return fmt.Errorf("testbed: loss %v%% out of range [0, 100]", pct)
	}
	steps := int(math.Round(pct * lossScale / 100))
	if pct > 0 && steps == 0 {
		return fmt.Errorf("testbed: loss %v%% is below the resolution of %v%%; use 0 or at least %v", pct, LossResolution, LossResolution)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("testbed: nft not found in PATH; install nftables (apt-get install nftables) to emulate loss")
	}
	return b.fault(host, net, func(ctx context.Context, i int) error {
		chain := lossChain(i, net)
		var script strings.Builder
		// add is idempotent; flushing then refilling the chain in one
		// batch replaces the old rate atomically.
		fmt.Fprintf(&script, "add table netdev %s\n", lossTable)
		fmt.Fprintf(&script, "add chain netdev %s %s { type filter hook ingress device %q priority 0; policy accept; }\n",
			lossTable, chain, b.hubDev(i, net))
		switch steps {
		case 0:
			fmt.Fprintf(&script, "delete chain netdev %s %s\n", lossTable, chain)
		case lossScale:
			fmt.Fprintf(&script, "flush chain netdev %s %s\n", lossTable, chain)
			fmt.Fprintf(&script, "add rule netdev %s %s counter drop\n", lossTable, chain)
		default:
			fmt.Fprintf(&script, "flush chain netdev %s %s\n", lossTable, chain)
			fmt.Fprintf(&script, "add rule netdev %s %s numgen random mod %d < %d counter drop\n",
				lossTable, chain, lossScale, steps)
		}
		return b.nft(ctx, script.String())
	})
}

// Loss returns the loss SetLoss put on host's packets on network net, in
// percent, and how many packets it has dropped since.
func (b *Bed) Loss(host string, net int) (pct float64, dropped int64, err error) {
	err = b.fault(host, net, func(ctx context.Context, i int) error {
		out, err := run(ctx, "ip", "netns", "exec", b.hubNS(), "nft", "-j", "list", "table", "netdev", lossTable)
		if err != nil {
			if strings.Contains(err.Error(), "No such file or directory") {
				return nil // no loss set anywhere on this bed
			}
			return err
		}
		pct, dropped, err = parseLoss(out, lossChain(i, net))
		return err
	})
	return pct, dropped, err
}

// lossChain names the chain of host i's loss on network net.
func lossChain(i, net int) string { return "h" + strconv.Itoa(i) + "n" + strconv.Itoa(net) }

// nft runs an nft script in the hub namespace.
func (b *Bed) nft(ctx context.Context, script string) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", b.hubNS(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = cmdTimeout / 10
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testbed: nft in %s: %w: %s", b.hubNS(), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// parseLoss reads the loss rule of chain from `nft -j list table` output:
// its numgen threshold (none: every packet) and its counter. No rule means
// no loss.
func parseLoss(js []byte, chain string) (float64, int64, error) {
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Chain string            `json:"chain"`
				Expr  []json.RawMessage `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return 0, 0, fmt.Errorf("testbed: parse nft output: %w", err)
	}
	for _, it := range doc.Nftables {
		if it.Rule == nil || it.Rule.Chain != chain {
			continue
		}
		pct := 100.0
		var dropped int64
		for _, raw := range it.Rule.Expr {
			var e struct {
				Match *struct {
					Left struct {
						Numgen *struct {
							Mod int `json:"mod"`
						} `json:"numgen"`
					} `json:"left"`
					Right json.RawMessage `json:"right"`
				} `json:"match"`
				Counter *struct {
					Packets int64 `json:"packets"`
				} `json:"counter"`
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				return 0, 0, fmt.Errorf("testbed: parse nft rule: %w", err)
			}
			if e.Match != nil && e.Match.Left.Numgen != nil && e.Match.Left.Numgen.Mod > 0 {
				var n int
				if err := json.Unmarshal(e.Match.Right, &n); err != nil {
					return 0, 0, fmt.Errorf("testbed: parse nft numgen threshold %s: %w", e.Match.Right, err)
				}
				pct = 100 * float64(n) / float64(e.Match.Left.Numgen.Mod)
			}
			if e.Counter != nil {
				dropped = e.Counter.Packets
			}
		}
		return pct, dropped, nil
	}
	return 0, 0, nil
}
