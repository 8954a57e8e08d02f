//go:build unix

package ctl

import (
	"syscall"
	"time"
)

// CPUTimes returns the user and system CPU time this process used so far.
func CPUTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
