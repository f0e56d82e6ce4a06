//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package node

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// peek looks at an idle connection's socket without blocking and without
// a round trip: closed (end of stream, or reset) means the node closed it
// or restarted; readable means something arrived that no command asked
// for; would-block means nothing happened to it. known is false when the
// socket cannot be looked at.
func peek(nc net.Conn) (s sockState, known bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var buf [1]byte
	look := func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			s = sockReadable
		case rerr == nil:
			s = sockClosed // n == 0: end of stream
		case errors.Is(rerr, syscall.EAGAIN), errors.Is(rerr, syscall.EWOULDBLOCK):
			s = sockQuiet
		case errors.Is(rerr, syscall.EINTR):
			return false // try again
		default:
			s = sockClosed // reset, or another error: unusable
		}
		return true // done: do not wait for readability
	}
	err = rc.Read(look)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The read deadline of the connection's last call has passed,
		// which stops the look before it is made. Every call sets its
		// own, so it can go.
		if nc.SetReadDeadline(time.Time{}) == nil {
			err = rc.Read(look)
		}
	}
	return s, err == nil
}
