//go:build unix

package xfer

import (
	"io/fs"
	"syscall"
)

// umask returns the process's umask without changing it for long.
func umask() fs.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return fs.FileMode(m)
}
