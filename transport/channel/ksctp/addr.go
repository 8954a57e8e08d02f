package ksctp

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Addr is one end of an SCTP association: one port on one or more
// addresses.
type Addr struct {
	IPs  []net.IPAddr
	Port int
}

// Network implements net.Addr.
func (a *Addr) Network() string { return "sctp" }

// String implements net.Addr: the addresses comma-separated, then the port,
// as Dial and Listen accept it ("10.0.0.1,10.0.1.1:9000").
func (a *Addr) String() string {
	if a == nil {
		return "<nil>"
	}
	var b strings.Builder
	for i, ip := range a.IPs {
		if i == len(a.IPs)-1 {
			b.WriteString(net.JoinHostPort(ip.String(), strconv.Itoa(a.Port)))
			break
		}
		b.WriteString(ip.String())
		b.WriteByte(',')
	}
	if len(a.IPs) == 0 {
		b.WriteString(net.JoinHostPort("", strconv.Itoa(a.Port)))
	}
	return b.String()
}

// hasIPv6 reports whether any address needs an IPv6 socket.
func (a *Addr) hasIPv6() bool {
	for _, ip := range a.IPs {
		if ip.IP.To4() == nil {
			return true
		}
	}
	return false
}

// ParseAddr parses a comma-separated address list (see the package
// documentation). needPort says the list must name a port. Host names are
// resolved with r (nil means net.DefaultResolver). An empty list, or a
// lone ":port", yields no addresses: the wildcard.
func ParseAddr(ctx context.Context, r *net.Resolver, list string, needPort bool) (*Addr, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	a := &Addr{}
	port := ""
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			if list == "" {
				break
			}
			return nil, fmt.Errorf("ksctp: address list %q: empty entry", list)
		}
		host, p, err := net.SplitHostPort(e)
		if err != nil {
			// No port: a bare host, IPv6 possibly in brackets.
			host, p = strings.TrimSuffix(strings.TrimPrefix(e, "["), "]"), ""
		}
		if p != "" {
			if port != "" && p != port {
				return nil, fmt.Errorf("ksctp: address list %q: ports %s and %s differ; one association has one port", list, port, p)
			}
			port = p
		}
		if host == "" {
			if len(strings.Split(list, ",")) > 1 {
				return nil, fmt.Errorf("ksctp: address list %q: the wildcard address cannot be combined with others", list)
			}
			continue
		}
		ips, err := resolve(ctx, r, host)
		if err != nil {
			return nil, fmt.Errorf("ksctp: address list %q: %w", list, err)
		}
		a.IPs = append(a.IPs, ips...)
	}
	if port == "" {
		if needPort {
			return nil, fmt.Errorf("ksctp: address list %q: no port", list)
		}
		return a, nil
	}
	n, err := r.LookupPort(ctx, "tcp", port)
	if err != nil {
		return nil, fmt.Errorf("ksctp: address list %q: %w", list, err)
	}
	a.Port = n
	return a, nil
}

func resolve(ctx context.Context, r *net.Resolver, host string) ([]net.IPAddr, error) {
	h, zone, _ := strings.Cut(host, "%")
	if ip := net.ParseIP(h); ip != nil {
		return []net.IPAddr{{IP: ip, Zone: zone}}, nil
	}
	ips, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("host %q has no addresses", host)
	}
	return ips, nil
}

// Sizes of struct sockaddr_in and struct sockaddr_in6 on Linux.
const (
	sizeofSockaddrInet4 = 16
	sizeofSockaddrInet6 = 28
	afInet              = 2  // AF_INET
	afInet6             = 10 // AF_INET6
)

// packSockaddrs lays the addresses out as the packed array of struct
// sockaddr that sctp_bindx and sctp_connectx take: sockaddr_in for IPv4,
// sockaddr_in6 for IPv6, back to back, each with the port. zoneIndex maps
// an IPv6 zone to its scope id.
func packSockaddrs(a *Addr, zoneIndex func(string) (uint32, error)) ([]byte, error) {
	ips := a.IPs
	if len(ips) == 0 {
		return nil, fmt.Errorf("ksctp: no addresses to pack")
	}
	var b []byte
	for _, ip := range ips {
		if ip4 := ip.IP.To4(); ip4 != nil {
			var sa [sizeofSockaddrInet4]byte
			binary.NativeEndian.PutUint16(sa[0:], afInet)
			binary.BigEndian.PutUint16(sa[2:], uint16(a.Port))
			copy(sa[4:8], ip4)
			b = append(b, sa[:]...)
			continue
		}
		ip16 := ip.IP.To16()
		if ip16 == nil {
			return nil, fmt.Errorf("ksctp: bad IP address %v", ip.IP)
		}
		var sa [sizeofSockaddrInet6]byte
		binary.NativeEndian.PutUint16(sa[0:], afInet6)
		binary.BigEndian.PutUint16(sa[2:], uint16(a.Port))
		// sa[4:8] flow info: zero
		copy(sa[8:24], ip16)
		if ip.Zone != "" {
			id, err := zoneIndex(ip.Zone)
			if err != nil {
				return nil, fmt.Errorf("ksctp: zone of %v: %w", ip, err)
			}
			binary.NativeEndian.PutUint32(sa[24:], id)
		}
		b = append(b, sa[:]...)
	}
	return b, nil
}

// zoneIndex returns the interface index that an IPv6 zone names: an
// interface name or a number.
func zoneIndex(zone string) (uint32, error) {
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return uint32(ifi.Index), nil
}
