//go:build unix

package server

import "syscall"

// defaultMaxConns is a quarter of RLIMIT_NOFILE, between 64 and 4096.
func defaultMaxConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return int(min(max(lim.Cur/4, 64), 4096))
}
