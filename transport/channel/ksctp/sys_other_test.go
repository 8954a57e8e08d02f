//go:build !linux

package ksctp

import (
	"net"
	"testing"
)

func getNoDelay(t *testing.T, _ net.Conn) int {
	t.Skip("SCTP_NODELAY is read on Linux only")
	return 0
}

// withoutSCTP does nothing: off Linux there is never kernel SCTP.
func withoutSCTP(testing.TB) {}
