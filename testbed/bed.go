package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Bed is a set of emulated hosts joined by shaped networks, each host in
// its own network namespace. Methods are safe for concurrent use.
type Bed struct {
	id   string
	spec Spec

	mu      sync.Mutex
	rates   []int64  // current rate of each network
	created []string // namespaces this bed made, in order; Down removes them
	gone    bool     // Down ran
}

// State identifies a bed so that another process can drive it (see
// Attach). It encodes as JSON.
type State struct {
	// ID is the random prefix of every name the bed made.
	ID string `json:"id"`
	// Spec is the populated spec with the current rates.
	Spec Spec `json:"spec"`
}

// readyTimeout bounds the wait for links to come up.
const readyTimeout = 5 * time.Second

// Up builds the bed described by spec: one namespace per host and a hub
// namespace holding one bridge per network, a veth pair per host and
// network, addresses, and tbf shaping of every link (one bucket per host
// and network for both directions, or one per direction on a FullDuplex
// network). It waits
// until every link carries traffic. On error it removes whatever it made.
func Up(ctx context.Context, spec Spec) (*Bed, error) {
	s, err := spec.populate()
	if err != nil {
		return nil, err
	}
	// Names are random; retry the rare clash with a leftover bed.
	for range 3 {
		b := newBed(newID(), s)
		if nsExists(b.hubNS()) {
			continue
		}
		if err = b.up(ctx); err != nil {
			if derr := b.Down(); derr != nil {
				err = errors.Join(err, fmt.Errorf("testbed: cleanup after failed up: %w", derr))
			}
			return nil, err
		}
		return b, nil
	}
	return nil, errors.New("testbed: no free bed id after 3 tries; remove leftover namespaces (ip netns list | grep ^bt)")
}

func newBed(id string, s Spec) *Bed {
	b := &Bed{id: id, spec: s}
	for _, n := range s.Networks {
		b.rates = append(b.rates, n.Rate)
	}
	return b
}

// testHookUp, when set by a test, runs after each stage of up and fails it
// by returning an error.
var testHookUp func(b *Bed, stage string) error

func (b *Bed) hook(stage string) error {
	if testHookUp == nil {
		return nil
	}
	return testHookUp(b, stage)
}

func (b *Bed) up(ctx context.Context) error {
	hub := b.hubNS()
	namespaces := []string{hub}
	for i := range b.spec.Hosts {
		namespaces = append(namespaces, b.hostNS(i))
	}
	for _, ns := range namespaces {
		if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
			return err
		}
		b.mu.Lock()
		b.created = append(b.created, ns)
		b.mu.Unlock()
		// IPv4 only: new interfaces get no IPv6, so no neighbour or router
		// chatter crosses the shaped links. lo keeps ::1.
		if err := b.disableIPv6(ns); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	if err := b.hook("namespaces"); err != nil {
		return err
	}
	for j := range b.spec.Networks {
		br := b.bridge(j)
		if _, err := run(ctx, "ip", "-n", hub, "link", "add", br, "type", "bridge", "forward_delay", "0", "stp_state", "0"); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "-n", hub, "link", "set", br, "up"); err != nil {
			return err
		}
		for i := range b.spec.Hosts {
			if err := b.link(ctx, i, j); err != nil {
				return err
			}
		}
	}
	if err := b.hook("links"); err != nil {
		return err
	}
	return b.waitReady(ctx, -1, -1)
}

// link makes the veth pair of host i on network j: created in the hub with
// its peer straight in the host namespace, so nothing ever appears in the
// root namespace.
func (b *Bed) link(ctx context.Context, i, j int) error {
	hub, ns := b.hubNS(), b.hostNS(i)
	hd, pd := b.Dev(b.spec.Hosts[i], j), b.hubDev(i, j)
	n := b.spec.Networks[j]
	if _, err := run(ctx, "ip", "-n", hub, "link", "add", pd, "mtu", "1500", "type", "veth",
		"peer", "name", hd, "mtu", "1500", "netns", ns); err != nil {
		return err
	}
	if _, err := run(ctx, "ip", "-n", hub, "link", "set", pd, "master", b.bridge(j), "up"); err != nil {
		return err
	}
	addr := hostAddr(n.Subnet, i).String() + "/" + strconv.Itoa(n.Subnet.Bits())
	if _, err := run(ctx, "ip", "-n", ns, "addr", "add", addr, "dev", hd); err != nil {
		return err
	}
	if _, err := run(ctx, "ip", "-n", ns, "link", "set", hd, "up"); err != nil {
		return err
	}
	if !n.FullDuplex {
		if n.Rate == 0 {
			return nil // unshaped: no shaper until SetRate gives a rate
		}
		return b.shareLink(ctx, i, j, n.Rate)
	}
	if err := shape(ctx, ns, hd, n.Rate, true); err != nil {
		return err
	}
	return shape(ctx, hub, pd, n.Rate, true)
}

// shareLink shapes both directions of host i's link on network j with one
// token bucket: an ifb device in the host namespace holds the tbf, and
// filters on the host's interface redirect what it sends (egress) and
// what it receives (ingress) through it. In the host namespace, so the
// sender's queue is local and TCP feels it (as with full-duplex
// shaping), and nothing is left in the hub.
func (b *Bed) shareLink(ctx context.Context, i, j int, bps int64) error {
	ns, dev, ifb := b.hostNS(i), b.Dev(b.spec.Hosts[i], j), b.shaper(j)
	cmds := [][]string{
		{"ip", "-n", ns, "link", "add", ifb, "type", "ifb"},
		{"ip", "-n", ns, "link", "set", ifb, "up"},
		{"tc", "-n", ns, "qdisc", "add", "dev", dev, "clsact"},
	}
	for _, dir := range []string{"egress", "ingress"} {
		cmds = append(cmds, []string{"tc", "-n", ns, "filter", "add", "dev", dev, dir, "protocol", "all", "prio", "1",
			"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb})
	}
	for _, c := range cmds {
		if _, err := run(ctx, c[0], c[1:]...); err != nil {
			return err
		}
	}
	return shape(ctx, ns, ifb, bps, true)
}

// unshareLink removes what shareLink made: the filters (with the clsact
// qdisc that holds them) and the ifb device with its tbf.
func (b *Bed) unshareLink(ctx context.Context, i, j int) error {
	ns := b.hostNS(i)
	if _, err := run(ctx, "tc", "-n", ns, "qdisc", "del", "dev", b.Dev(b.spec.Hosts[i], j), "clsact"); err != nil {
		return err
	}
	_, err := run(ctx, "ip", "-n", ns, "link", "del", b.shaper(j))
	return err
}

// Burst and queue of the tbf shapers. A bucket of about one packet loses
// throughput, so the bucket holds at least 128µs of the rate and at least
// two 1500-byte packets; the queue holds tbfLatency of the rate.
const (
	tbfMinBurst = 3200
	tbfBurstDur = 128 * time.Microsecond
	tbfLatency  = "25ms"
)

// tbfBurst returns the bucket size in bytes for rate bps.
func tbfBurst(bps int64) int64 {
	return max(tbfMinBurst, bps*int64(tbfBurstDur/time.Microsecond)/8/1e6)
}

// shape installs tbf at bps on dev's egress in ns; bps 0 removes shaping.
// fresh says no qdisc was installed before.
func shape(ctx context.Context, ns, dev string, bps int64, fresh bool) error {
	if bps == 0 {
		if fresh {
			return nil
		}
		_, err := run(ctx, "tc", "-n", ns, "qdisc", "del", "dev", dev, "root")
		return err
	}
	_, err := run(ctx, "tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
		"rate", strconv.FormatInt(bps, 10)+"bit",
		"burst", strconv.FormatInt(tbfBurst(bps), 10),
		"latency", tbfLatency)
	return err
}

// disableIPv6 turns IPv6 off for interfaces created later in ns.
func (b *Bed) disableIPv6(ns string) error {
	return runIn(nsPath(ns), func() error {
		err := os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0)
		if errors.Is(err, os.ErrNotExist) { // kernel without IPv6
			return nil
		}
		return err
	})
}

// waitReady waits until the links are up and forwarding: every link when
// host is -1, else host's link on network net (-1: all its links).
func (b *Bed) waitReady(ctx context.Context, host, net int) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	for {
		if last = b.ready(ctx, host, net); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: links not ready after %v: %w", readyTimeout, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (b *Bed) ready(ctx context.Context, host, net int) error {
	out, err := run(ctx, "bridge", "-n", b.hubNS(), "-j", "link", "show")
	if err != nil {
		return err
	}
	var ports []struct {
		Ifname string `json:"ifname"`
		State  string `json:"state"`
	}
	if err := json.Unmarshal(out, &ports); err != nil {
		return fmt.Errorf("testbed: parse bridge link: %w", err)
	}
	state := map[string]string{}
	for _, p := range ports {
		state[p.Ifname] = p.State
	}
	for i := range b.spec.Hosts {
		if host >= 0 && i != host {
			continue
		}
		out, err := run(ctx, "ip", "-n", b.hostNS(i), "-j", "link", "show")
		if err != nil {
			return err
		}
		var links []struct {
			Ifname    string `json:"ifname"`
			Operstate string `json:"operstate"`
		}
		if err := json.Unmarshal(out, &links); err != nil {
			return fmt.Errorf("testbed: parse ip link: %w", err)
		}
		oper := map[string]string{}
		for _, l := range links {
			oper[l.Ifname] = l.Operstate
		}
		for j := range b.spec.Networks {
			if net >= 0 && j != net {
				continue
			}
			if d := b.Dev(b.spec.Hosts[i], j); oper[d] != "UP" {
				return fmt.Errorf("%s in %s is %q, not UP", d, b.hostNS(i), oper[d])
			}
			if d := b.hubDev(i, j); state[d] != "forwarding" {
				return fmt.Errorf("bridge port %s is %q, not forwarding", d, state[d])
			}
		}
	}
	return nil
}

// Down ends every process inside the bed's namespaces (EndProcesses),
// then removes the namespaces, and with them every interface, bridge and
// qdisc. It is safe to call more than once and after a failed Up.
func (b *Bed) Down() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*cmdTimeout)
	defer cancel()
	var errs []error
	if _, err := endProcesses(ctx, b.created); err != nil {
		errs = append(errs, err)
	}
	// Hosts first, then the hub, so no veth is left without its bridge.
	for _, ns := range slices.Backward(b.created) {
		if !nsExists(ns) {
			continue
		}
		if _, err := run(ctx, "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	b.gone = true
	b.created = nil
	return errors.Join(errs...)
}

var idPattern = regexp.MustCompile(`^[0-9a-f]{6}$`)

// Attach returns the bed that st describes, made by Up in this or another
// process (see State). It does not check that the bed still exists; Down on
// it removes whatever is left.
func Attach(st State) (*Bed, error) {
	if !idPattern.MatchString(st.ID) {
		return nil, fmt.Errorf("testbed: bad bed id %q: want 6 hex digits", st.ID)
	}
	s, err := st.Spec.populate()
	if err != nil {
		return nil, err
	}
	b := newBed(st.ID, s)
	b.created = append(b.created, b.hubNS())
	for i := range s.Hosts {
		b.created = append(b.created, b.hostNS(i))
	}
	return b, nil
}

// State returns what Attach needs to drive this bed from another process.
func (b *Bed) State() State {
	return State{ID: b.id, Spec: b.Spec()}
}

// ID returns the random prefix of every name the bed made.
func (b *Bed) ID() string { return b.id }

// Spec returns the populated spec (default names and subnets filled in)
// with the current rates.
func (b *Bed) Spec() Spec {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Spec{Hosts: slices.Clone(b.spec.Hosts), Networks: slices.Clone(b.spec.Networks)}
	for j := range s.Networks {
		s.Networks[j].Rate = b.rates[j]
	}
	return s
}

// Hosts returns the host names.
func (b *Bed) Hosts() []string { return slices.Clone(b.spec.Hosts) }

// Networks returns the number of networks, and so of paths between hosts.
func (b *Bed) Networks() int { return len(b.spec.Networks) }

// Addr returns host's IPv4 address on network net, or "" if either is
// unknown.
func (b *Bed) Addr(host string, net int) string {
	i := b.hostIndex(host)
	if i < 0 || net < 0 || net >= len(b.spec.Networks) {
		return ""
	}
	return hostAddr(b.spec.Networks[net].Subnet, i).String()
}

// Addrs returns host's addresses, one per network.
func (b *Bed) Addrs(host string) []string {
	if b.hostIndex(host) < 0 {
		return nil
	}
	out := make([]string, len(b.spec.Networks))
	for j := range out {
		out[j] = b.Addr(host, j)
	}
	return out
}

// Namespace returns the name of host's network namespace (for
// `ip netns exec`), or "" if host is unknown.
func (b *Bed) Namespace(host string) string {
	i := b.hostIndex(host)
	if i < 0 {
		return ""
	}
	return b.hostNS(i)
}

// Dev returns the name of host's interface on network net, as seen inside
// host's namespace.
func (b *Bed) Dev(host string, net int) string {
	if b.hostIndex(host) < 0 || net < 0 || net >= len(b.spec.Networks) {
		return ""
	}
	return "bt" + b.id + "n" + strconv.Itoa(net)
}

// Exec returns a command that runs name with args inside host's namespace
// (via `ip netns exec`). For an unknown host the command fails on Start.
func (b *Bed) Exec(ctx context.Context, host, name string, args ...string) *exec.Cmd {
	i := b.hostIndex(host)
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", b.nsOrEmpty(i), name}, args...)...)
	if i < 0 {
		cmd.Err = fmt.Errorf("testbed: %w: %q", ErrUnknownHost, host)
	}
	return cmd
}

// Run runs f on the calling goroutine with its OS thread switched into
// host's namespace, then switches back. Listeners and connections f creates
// belong to host's namespace for their whole life, wherever they are used
// afterwards; goroutines f starts do not run in the namespace, so create
// sockets in f itself.
func (b *Bed) Run(host string, f func() error) error {
	i := b.hostIndex(host)
	if i < 0 {
		return fmt.Errorf("testbed: %w: %q", ErrUnknownHost, host)
	}
	return runIn(nsPath(b.hostNS(i)), f)
}

func (b *Bed) nsOrEmpty(i int) string {
	if i < 0 {
		return ""
	}
	return b.hostNS(i)
}

func (b *Bed) hostIndex(host string) int { return slices.Index(b.spec.Hosts, host) }

// Names. Every name starts with "bt" and the bed id; interface names stay
// within 15 characters for up to 99 hosts and 99 networks.
func (b *Bed) hubNS() string       { return "bt" + b.id + "-hub" }
func (b *Bed) hostNS(i int) string { return "bt" + b.id + "-" + b.spec.Hosts[i] }
func (b *Bed) bridge(j int) string { return "bt" + b.id + "br" + strconv.Itoa(j) }

// shaper is the ifb device, in each host's namespace, that shapes both
// directions of the host's link on half-duplex network j.
func (b *Bed) shaper(j int) string { return "bt" + b.id + "s" + strconv.Itoa(j) }
func (b *Bed) hubDev(i, j int) string {
	return "bt" + b.id + "h" + strconv.Itoa(i) + "n" + strconv.Itoa(j)
}
