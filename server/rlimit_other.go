//go:build !unix

package server

// defaultMaxConns is 1024 where there is no RLIMIT_NOFILE.
func defaultMaxConns() int { return 1024 }
