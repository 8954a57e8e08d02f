package sctpudp

import (
	"net"

	"golang.org/x/sys/unix"
)

// routeMTU returns the MTU of the route to raddr as the kernel knows it
// (IP_MTU or IPV6_MTU on a UDP socket connected to raddr, which sends
// nothing): 65536 over loopback, the device's MTU or a learned path MTU
// elsewhere. ok is false when the kernel cannot say.
func routeMTU(raddr *net.UDPAddr) (mtu int, ok bool) {
	family, level, opt := unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU
	var sa unix.Sockaddr
	if ip4 := raddr.IP.To4(); ip4 != nil {
		family, level, opt = unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU
		sa = &unix.SockaddrInet4{Port: raddr.Port, Addr: [4]byte(ip4)}
	} else if ip6 := raddr.IP.To16(); ip6 != nil {
		s6 := &unix.SockaddrInet6{Port: raddr.Port, Addr: [16]byte(ip6)}
		if raddr.Zone != "" {
			if ifi, err := net.InterfaceByName(raddr.Zone); err == nil {
				s6.ZoneId = uint32(ifi.Index)
			}
		}
		sa = s6
	} else {
		return 0, false
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return 0, false
	}
	mtu, err = unix.GetsockoptInt(fd, level, opt)
	if err != nil || mtu <= 0 {
		return 0, false
	}
	return mtu, true
}
