//go:build !unix

package ctl

import "time"

// CPUTimes is not available on this platform; it reports zero.
func CPUTimes() (user, sys time.Duration) { return 0, 0 }
