package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/node"
)

// Admin is a plain Redis client for the harness, the tests, the demo and
// the benchmarks: arbitrary commands, key listings and a look at a lock
// key, on one node. It is test tooling and talks to redigo directly; the
// lock algorithm never goes through it. Safe for concurrent use.
//
// Every call runs within ctx's deadline or the Admin's timeout, whichever
// is sooner: waiting for a pooled connection, dialling, AUTH/SELECT,
// writing and reading. A paused or blackholed node costs a call no more
// than that.
type Admin struct {
	addr    string // host:port, for errors
	timeout time.Duration
	pool    *redis.Pool
}

// adminCheckIdle is how long a pooled connection may sit idle before it
// is PINGed when taken from the pool: a node that restarted leaves dead
// connections behind, and without the check the first command on each
// would fail.
const adminCheckIdle = time.Second

// inspectSrc reads a key's value and remaining TTL in one atomic step;
// PTTL is -2 when the key is absent.
const inspectSrc = `return {redis.call("GET", KEYS[1]), redis.call("PTTL", KEYS[1])}`

// NewAdmin returns an Admin for a redis:// or rediss:// URL (user,
// password and database as redigo's DialURL reads them). timeout bounds
// each call (default 1s). It does not connect: connections are made on
// first use.
func NewAdmin(rawURL string, timeout time.Duration) (*Admin, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: admin URL: %w", err)
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	a := &Admin{addr: u.Host, timeout: timeout}
	a.pool = &redis.Pool{
		MaxIdle:     2,
		IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialURLContext(ctx, rawURL,
				redis.DialReadTimeout(timeout), redis.DialWriteTimeout(timeout))
		},
		TestOnBorrowContext: func(ctx context.Context, c redis.Conn, lastUsed time.Time) error {
			if time.Since(lastUsed) < adminCheckIdle {
				return nil
			}
			_, err := redis.DoContext(c, ctx, "PING")
			return err
		},
	}
	return a, nil
}

// newAdmin returns an Admin for host:port without credentials.
func newAdmin(addr string, timeout time.Duration) *Admin {
	a, err := NewAdmin("redis://"+addr, timeout)
	if err != nil {
		panic(err) // host:port from a backend always parses
	}
	return a
}

// Addr returns the node's host:port.
func (a *Admin) Addr() string { return a.addr }

// Close closes the pooled connections.
func (a *Admin) Close() error { return a.pool.Close() }

// Command runs cmd on the node and returns redigo's reply: string for a
// status reply, []byte for a bulk string, int64, []any, or nil. A call
// that ran out of time wraps node.ErrTimeout; a Redis error reply is an
// error.
func (a *Admin) Command(ctx context.Context, cmd string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	conn, err := a.pool.GetContext(ctx)
	if err != nil {
		return nil, a.fail(cmd, err)
	}
	// DoContext closes the connection when ctx ends mid-call, so a
	// connection that timed out never goes back to the pool.
	reply, err := redis.DoContext(conn, ctx, cmd, args...)
	conn.Close()
	if err != nil {
		return nil, a.fail(cmd, err)
	}
	return reply, nil
}

// Keys returns the keys matching pattern, via SCAN (never KEYS).
func (a *Admin) Keys(ctx context.Context, pattern string) ([]string, error) {
	var keys []string
	cursor := "0"
	for {
		reply, err := a.Command(ctx, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
		if err != nil {
			return nil, err
		}
		vals, err := redis.Values(reply, nil)
		if err != nil || len(vals) != 2 {
			return nil, fmt.Errorf("admin %s: SCAN: unexpected reply %v", a.addr, reply)
		}
		cursor, _ = redis.String(vals[0], nil)
		page, _ := redis.Strings(vals[1], nil)
		keys = append(keys, page...)
		if cursor == "0" {
			return keys, nil
		}
	}
}

// Inspect reads key's value and remaining TTL in one atomic step, as the
// node sees them. An absent key gives the zero Info (Token "", TTL 0); a
// key without expiry a TTL of -1ms.
func (a *Admin) Inspect(ctx context.Context, key string) (node.Info, error) {
	reply, err := a.Command(ctx, "EVAL", inspectSrc, 1, key)
	if err != nil {
		return node.Info{}, err
	}
	vals, err := redis.Values(reply, nil)
	if err != nil || len(vals) != 2 {
		return node.Info{}, fmt.Errorf("admin %s: inspect %s: unexpected reply %v", a.addr, key, reply)
	}
	tok, _ := redis.String(vals[0], nil)
	pttl, _ := redis.Int64(vals[1], nil)
	if pttl == -2 {
		return node.Info{}, nil
	}
	return node.Info{Token: tok, TTL: time.Duration(pttl) * time.Millisecond}, nil
}

// fail wraps err from cmd. A timeout wraps node.ErrTimeout and not the
// deadline error itself, as a node's errors do: the deadline that
// expired may be the Admin's own, not the caller's.
func (a *Admin) fail(cmd string, err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("admin %s: %s: %w (%v)", a.addr, cmd, node.ErrTimeout, err)
	}
	return fmt.Errorf("admin %s: %s: %w", a.addr, cmd, err)
}
