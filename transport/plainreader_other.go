//go:build !linux

package transport

import "net"

// readvOf returns nil: payloads are read with plain reads.
func readvOf(net.Conn) readvFunc { return nil }
