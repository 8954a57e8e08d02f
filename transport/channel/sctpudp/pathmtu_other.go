//go:build !linux

package sctpudp

import "net"

// routeMTU reports loopback's 65536 for a loopback address; elsewhere it
// cannot ask the kernel.
func routeMTU(raddr *net.UDPAddr) (int, bool) {
	if raddr.IP.IsLoopback() {
		return 65536, true
	}
	return 0, false
}
