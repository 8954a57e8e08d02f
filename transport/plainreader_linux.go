package transport

import (
	"errors"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysReadv returns a vectored read of conn's socket, or nil where conn is
// not a TCP socket.
func sysReadv(conn net.Conn) readvFunc {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	var iov [2][]byte
	return func(a, b []byte) (int, int, error) {
		iov[0], iov[1] = a, b
		var n int
		var serr error
		err := raw.Read(func(fd uintptr) bool {
			for {
				n, serr = unix.Readv(int(fd), iov[:])
				if !errors.Is(serr, syscall.EINTR) {
					return !errors.Is(serr, syscall.EAGAIN)
				}
			}
		})
		iov[0], iov[1] = nil, nil
		if err != nil {
			return 0, 0, err // the deadline passed, or the socket was closed
		}
		if serr != nil {
			return 0, 0, &net.OpError{Op: "read", Net: "tcp", Source: tc.LocalAddr(), Addr: tc.RemoteAddr(), Err: os.NewSyscallError("readv", serr)}
		}
		if n > len(a) {
			return len(a), n - len(a), nil
		}
		return n, 0, nil
	}
}
