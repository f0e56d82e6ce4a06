package node

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/gomodule/redigo/redis"
)

// sockState is what peek saw on an idle connection's socket.
type sockState uint8

const (
	sockQuiet    sockState = iota + 1 // nothing to read: usable
	sockClosed                        // end of stream or an error: dead
	sockReadable                      // bytes no command asked for
)

// pooledConn is a redigo connection as the pool dials it, with the
// network connection under it, so that the idle check can look at the
// socket.
type pooledConn struct {
	redis.ConnWithTimeout
	nc net.Conn // under lateConn: TCP, or TLS over TCP
}

// errDeadConn is the idle check's verdict on a connection the node
// closed: the pool drops it and takes or dials another.
var errDeadConn = errors.New("idle connection closed by the node")

// checkIdle checks a connection that sat idle in the pool before a call
// uses it. A node that restarted, or closed idle connections (its
// timeout setting), leaves connections behind whose first command would
// fail. Looking at the socket finds them without a round trip, so the
// check costs nothing of the call's deadline, however far away the node.
// Only where the socket cannot tell (another OS, or TLS bytes that may be
// a session ticket or a close alert) is the connection PINGed, within
// what is left of the call's deadline.
func (r *Redis) checkIdle(ctx context.Context, c redis.Conn) error {
	if pc, ok := c.(*pooledConn); ok {
		nc := pc.nc
		tc, isTLS := nc.(*tls.Conn)
		if isTLS {
			nc = tc.NetConn()
		}
		if s, known := peek(nc); known {
			switch {
			case s == sockQuiet:
				return nil
			case s == sockClosed, !isTLS:
				return errDeadConn
			}
		}
	}
	d, ok := ctx.Deadline()
	left := time.Until(d)
	if !ok || left > r.timeout {
		left = r.timeout
	}
	if left <= 0 {
		// No time to check it, which is no fault of the connection's:
		// call gives it back unused.
		return nil
	}
	_, err := redis.DoWithTimeout(c, left, "PING")
	return err
}
