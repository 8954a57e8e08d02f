//go:build !linux

package transport

import "net"

// sysReadv returns nil: payloads are read with plain reads.
func sysReadv(net.Conn) readvFunc { return nil }
