package testbed

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Spec describes a bed: every host gets one interface on every network, so
// k networks give k disjoint paths between any two hosts.
type Spec struct {
	// Hosts names the hosts. Names are short ([a-z0-9_-], at most 16
	// characters, starting with a letter) and "hub" is reserved.
	Hosts []string `json:"hosts"`
	// Networks lists the networks; network i is addressed by index i.
	Networks []Network `json:"networks"`
}

// Network is one shaped Ethernet segment joining every host of a bed.
type Network struct {
	// Name labels the network in messages and on the command line;
	// "" means "net<i>".
	Name string `json:"name,omitempty"`
	// Rate is the link rate in bit/s; 0 means unshaped (no shaper at
	// all, whatever FullDuplex says).
	Rate int64 `json:"rate"`
	// FullDuplex gives each direction of every host's link its own Rate
	// (a token bucket per direction), for traffic both ways at once. The
	// default (false) is half duplex: the two directions of a host's link
	// share one bucket of Rate, so that a serial exchange of small
	// messages (a ping-pong, a request and its reply) pays for both
	// messages, as on a wire of Rate. A token bucket holds a lone packet
	// only when it is empty, never for its own transmission time, so on
	// full-duplex links a request and its reply each pass a bucket of
	// their own at once, and a 1 KB ping-pong measures up to twice Rate,
	// which no wire of Rate allows. Half duplex costs one TCP stream a
	// little goodput (about 0.93 of Rate instead of 0.945: its
	// acknowledgements share the bucket), and traffic both ways at once
	// shares Rate (see the package doc).
	FullDuplex bool `json:"full_duplex"`
	// Subnet holds the network's addresses: host i gets the (i+1)th address
	// of it. It must be a private IPv4 prefix; the zero value means
	// 10.<i+1>.0.0/24 for network i.
	Subnet netip.Prefix `json:"subnet,omitzero"`
}

// UnmarshalJSON reads a network, also as written before half duplex was
// the default: then a "half_duplex" key said half duplex and its absence
// full duplex. Network's own encoding always has "full_duplex".
func (n *Network) UnmarshalJSON(data []byte) error {
	type plain Network
	var v struct {
		plain
		FullDuplex *bool `json:"full_duplex"`
		HalfDuplex *bool `json:"half_duplex"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*n = Network(v.plain)
	switch {
	case v.FullDuplex != nil:
		n.FullDuplex = *v.FullDuplex
	default: // an older state file
		n.FullDuplex = v.HalfDuplex == nil || !*v.HalfDuplex
	}
	return nil
}

// Limits of a spec; they keep interface names within 15 characters.
const (
	MaxHosts    = 99
	MaxNetworks = 99
)

var hostName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,15}$`)

// populate fills defaults and validates s, returning a copy.
func (s Spec) populate() (Spec, error) {
	out := Spec{Hosts: append([]string(nil), s.Hosts...), Networks: append([]Network(nil), s.Networks...)}
	if len(out.Hosts) == 0 {
		return Spec{}, fmt.Errorf("testbed: spec has no hosts; name at least two")
	}
	if len(out.Hosts) > MaxHosts {
		return Spec{}, fmt.Errorf("testbed: spec has %d hosts, at most %d are supported", len(out.Hosts), MaxHosts)
	}
	if len(out.Networks) == 0 {
		return Spec{}, fmt.Errorf("testbed: spec has no networks; give at least one")
	}
	if len(out.Networks) > MaxNetworks {
		return Spec{}, fmt.Errorf("testbed: spec has %d networks, at most %d are supported", len(out.Networks), MaxNetworks)
	}
	seen := map[string]bool{}
	for _, h := range out.Hosts {
		if !hostName.MatchString(h) || h == "hub" {
			return Spec{}, fmt.Errorf("testbed: bad host name %q: use a letter then up to 15 of [a-z0-9_-], not \"hub\"", h)
		}
		if seen[h] {
			return Spec{}, fmt.Errorf("testbed: host %q named twice", h)
		}
		seen[h] = true
	}
	names := map[string]bool{}
	for i := range out.Networks {
		n := &out.Networks[i]
		if n.Name == "" {
			n.Name = "net" + strconv.Itoa(i)
		}
		if names[n.Name] {
			return Spec{}, fmt.Errorf("testbed: network %q named twice", n.Name)
		}
		names[n.Name] = true
		if n.Rate < 0 {
			return Spec{}, fmt.Errorf("testbed: network %s: negative rate %d", n.Name, n.Rate)
		}
		if !n.Subnet.IsValid() {
			n.Subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i + 1), 0, 0}), 24)
		}
		n.Subnet = n.Subnet.Masked()
		a := n.Subnet.Addr()
		if !a.Is4() || !a.IsPrivate() {
			return Spec{}, fmt.Errorf("testbed: network %s: subnet %s is not a private IPv4 prefix (10/8, 172.16/12, 192.168/16)", n.Name, n.Subnet)
		}
		if free := 1<<(32-n.Subnet.Bits()) - 2; free < len(out.Hosts) {
			return Spec{}, fmt.Errorf("testbed: network %s: subnet %s has room for %d hosts, need %d", n.Name, n.Subnet, max(free, 0), len(out.Hosts))
		}
		for j := range i {
			if o := out.Networks[j].Subnet; o.Overlaps(n.Subnet) {
				return Spec{}, fmt.Errorf("testbed: networks %s and %s overlap (%s, %s); give each its own subnet", out.Networks[j].Name, n.Name, o, n.Subnet)
			}
		}
	}
	return out, nil
}

// hostAddr returns host i's address on subnet p.
func hostAddr(p netip.Prefix, i int) netip.Addr {
	b := p.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i + 1)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ParseRate parses a rate in bit/s with an optional K, M or G suffix
// (powers of 1000) and an optional "bit", "bps" or "b" unit: "100M",
// "2.5G", "800kbit", "0" (unshaped).
func ParseRate(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, unit := range []string{"bit/s", "bit", "bps", "b"} {
		if strings.HasSuffix(t, unit) {
			t = strings.TrimSuffix(t, unit)
			break
		}
	}
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1e3
		case 'm':
			mult = 1e6
		case 'g':
			mult = 1e9
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult > 1e12 {
		return 0, fmt.Errorf("testbed: bad rate %q: want a number of bit/s with an optional K, M or G suffix, like 100M", s)
	}
	return int64(v * mult), nil
}

// FormatRate formats bit/s for people: "100Mbit/s", "unshaped" for 0.
func FormatRate(bps int64) string {
	switch {
	case bps == 0:
		return "unshaped"
	case bps%1e9 == 0:
		return strconv.FormatInt(bps/1e9, 10) + "Gbit/s"
	case bps%1e6 == 0:
		return strconv.FormatInt(bps/1e6, 10) + "Mbit/s"
	case bps%1e3 == 0:
		return strconv.FormatInt(bps/1e3, 10) + "Kbit/s"
	}
	return strconv.FormatInt(bps, 10) + "bit/s"
}
