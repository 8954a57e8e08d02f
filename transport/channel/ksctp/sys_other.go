//go:build !linux

package ksctp

import (
	"context"
	"fmt"
	"net"
)

var errNotLinux = fmt.Errorf("%w: ksctp drives Linux lksctp only", ErrUnavailable)

// Available reports whether the kernel offers SCTP: never, off Linux.
func Available() error { return errNotLinux }

func dial(context.Context, *Config, *Addr, *Addr) (net.Conn, error) { return nil, errNotLinux }

func listen(*Config, *Addr) (net.Listener, error) { return nil, errNotLinux }

func setNoDelay(net.Conn, func(int, bool) error, bool) error { return nil }
