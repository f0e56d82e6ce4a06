package node

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// lateConn is the network connection under every pooled connection. It
// keeps the connection usable when a call's deadline passes before any
// byte of its reply has arrived, so that the reply can be read later
// (drainLate) and the connection pooled again.
//
// redigo closes a connection whose read failed, timeouts included. A call
// that gives up at its deadline — a short one, by design: the Redlock
// per-node timeout — would then cost the node a new connection (accept,
// AUTH, SELECT) for every late reply, which under a burst of calls that
// time out or are abandoned is most of them, just when the node is
// busiest. Instead, lateConn answers that read with a made-up error reply
// (lateReply), which redigo hands to the caller as a redis.Error without
// condemning the connection; nothing of the real reply has been read, so
// the next read gets it whole. A read that times out after part of a
// reply still breaks the connection.
//
// Only the goroutine that uses the connection touches its fields.
type lateConn struct {
	net.Conn
	ready  bool // dialled, AUTH and SELECT done; until then a timeout breaks it
	unread bool // a command was written and no byte of its reply read yet
}

// lateReply is the error reply lateConn makes up for a reply that had not
// begun to arrive by the read deadline.
const lateReply = "-NODELATE reply not arrived by the deadline\r\n"

// isLate reports whether err is lateReply.
func isLate(err error) bool {
	e, ok := err.(redis.Error)
	return ok && strings.HasPrefix(string(e), "NODELATE ")
}

func (c *lateConn) Write(p []byte) (int, error) {
	c.unread = true
	return c.Conn.Write(p)
}

func (c *lateConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.unread = false
		return n, err
	}
	if c.ready && c.unread && len(p) >= len(lateReply) && errors.Is(err, os.ErrDeadlineExceeded) {
		// Once: the read that drains the reply breaks the connection if
		// it times out too.
		c.unread = false
		return copy(p, lateReply), nil
	}
	return n, err
}

// dial makes a connection for the pool with connect, or hands out a spare.
// connect runs in a goroutine of its own, under the node's Timeout rather
// than ctx: if ctx ends first, dial returns ctx's error at once and the
// connection, once made, becomes a spare for the next dial. Thrown away,
// it would cost the node the accept, handshake, AUTH and SELECT it has
// already done, for every call that gets its turn at the pool with too
// little time left — most calls, under a burst. At most MaxActive dials
// run on like this at once; beyond that, connect runs under ctx.
func (r *Redis) dial(ctx context.Context, connect func(context.Context) (redis.Conn, error)) (redis.Conn, error) {
	if c := r.spare(ctx); c != nil {
		return c, nil
	}
	if int(r.dialing.Add(1)) > cap(r.spares) {
		r.dialing.Add(-1)
		return connect(ctx)
	}
	type dialled struct {
		c   redis.Conn
		err error
	}
	ch := make(chan dialled) // unbuffered: a send succeeds only while dial waits
	go func() {
		defer r.dialing.Add(-1)
		dctx, cancel := context.WithTimeout(r.life, r.timeout)
		defer cancel()
		c, err := connect(dctx)
		select {
		case ch <- dialled{c, err}:
		case <-ctx.Done():
			if err == nil {
				r.keep(c)
			}
		}
	}()
	select {
	case d := <-ch:
		return d.c, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// spare is a connection kept for the pool's next dial, and since when.
type spare struct {
	c    redis.Conn
	kept time.Time
}

// keep makes c a spare, or closes it if there are enough or the node is
// closed.
func (r *Redis) keep(c redis.Conn) {
	if r.closed.Load() {
		c.Close()
		return
	}
	select {
	case r.spares <- spare{c, time.Now()}:
		if r.closed.Load() { // Close may have emptied spares before the send
			r.closeSpares()
		}
	default:
		c.Close()
	}
}

// spare returns a spare connection, checked as the pool checks an idle
// one (IdleTimeout, TestOnBorrowContext), or nil.
func (r *Redis) spare(ctx context.Context) redis.Conn {
	for {
		select {
		case s := <-r.spares:
			if time.Since(s.kept) < r.pool.IdleTimeout &&
				(r.pool.TestOnBorrowContext == nil || r.pool.TestOnBorrowContext(ctx, s.c, s.kept) == nil) {
				return s.c
			}
			s.c.Close()
		default:
			return nil
		}
	}
}

func (r *Redis) closeSpares() {
	for {
		select {
		case s := <-r.spares:
			s.c.Close()
		default:
			return
		}
	}
}
