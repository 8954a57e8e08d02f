//go:build !unix

package cli

import "time"

// cpuTimes is not available on this platform; it reports zero.
func cpuTimes() (user, sys time.Duration) { return 0, 0 }
