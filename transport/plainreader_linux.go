package transport

import (
	"errors"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// rcvLowatMax bounds the receive low-water mark a payload read sets (see
// sysReadv).
const rcvLowatMax = 512 << 10

// sysReadv returns a vectored read of conn's socket, or nil where conn is
// not a TCP socket.
//
// A read that finds the socket empty raises its receive low-water mark
// (SO_RCVLOWAT) to the rest of the payload being read, up to rcvLowatMax,
// before it waits: the kernel then wakes the reader once that much has
// arrived instead of at every segment, which on fast paths saves most of
// the reader's system calls and wake-ups. The mark never exceeds what the
// peer has committed to send (the rest of a frame it is writing), and a
// read for headers (a empty) puts it back to one byte before waiting, so
// no read waits for bytes that may never come.
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
	lowat := 1 // the socket's SO_RCVLOWAT as last set
	return func(a, b []byte) (int, int, error) {
		iov[0], iov[1] = a, b
		var n int
		var serr error
		err := raw.Read(func(fd uintptr) bool {
			for {
				n, serr = unix.Readv(int(fd), iov[:])
				if errors.Is(serr, syscall.EINTR) {
					continue
				}
				if !errors.Is(serr, syscall.EAGAIN) {
					return true
				}
				want := 1
				if len(a) >= directRead {
					want = min(len(a), rcvLowatMax)
				}
				if want == lowat {
					return false
				}
				if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, want) != nil {
					return false
				}
				lowat = want
				// Bytes may have come between the read and the new mark,
				// and the mark's wake-up only covers later ones: read again.
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
