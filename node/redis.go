package node

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Options tunes a Redis node. The zero value of each field picks the
// default given in its comment.
type Options struct {
	// Timeout bounds a call whose context has no earlier deadline: getting
	// a connection, dialling, AUTH/SELECT, writing and reading. Default 1s.
	// A Redlock client always passes its own, much shorter, per-node
	// deadline.
	Timeout time.Duration
	// MaxIdle is how many idle connections are kept. Default 16.
	MaxIdle int
	// MaxActive caps the connections open at once; a call waits (within
	// its deadline) for one to free up. Default 64.
	MaxActive int
	// IdleTimeout closes connections idle for longer. Default 5 minutes.
	IdleTimeout time.Duration
	// TLSConfig is used for rediss:// URLs. Default: system roots, the
	// URL's host as server name.
	TLSConfig *tls.Config
	// CheckIdle is how long a pooled connection may sit idle before it is
	// checked with a PING (within the caller's deadline) when taken from
	// the pool. A node that restarted leaves dead connections behind;
	// without the check the first command on each fails. Default 1s;
	// negative disables the check.
	CheckIdle time.Duration
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.MaxIdle <= 0 {
		o.MaxIdle = 16
	}
	if o.MaxActive <= 0 {
		o.MaxActive = 64
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.CheckIdle == 0 {
		o.CheckIdle = time.Second
	}
	return o
}

var (
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/inspect.lua
	inspectLua string

	extendScript  = newScript(extendLua)
	releaseScript = newScript(releaseLua)
	inspectScript = newScript(inspectLua)
)

// script is a Lua script with its SHA1, both already boxed so that a call
// does not allocate them again.
type script struct {
	src  any
	hash any
}

func newScript(src string) *script {
	return &script{src: src, hash: redis.NewScript(1, src).Hash()}
}

// Redis is a Node backed by a redigo connection pool.
type Redis struct {
	ep      Endpoint
	addr    string
	timeout time.Duration
	pool    *redis.Pool
	closed  atomic.Bool
}

var _ Node = (*Redis)(nil)

// Dial returns a Redis node for a URL (see ParseURL). It does not connect:
// connections are made on first use, so a node that is down when the
// client starts can join later. Errors wrap ErrBadURL.
func Dial(rawURL string, opts Options) (*Redis, error) {
	ep, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return New(ep, opts), nil
}

// New returns a Redis node for a parsed endpoint. It does not connect.
func New(ep Endpoint, opts Options) *Redis {
	opts = opts.withDefaults()
	r := &Redis{ep: ep, addr: ep.Addr(), timeout: opts.Timeout}
	dialOpts := []redis.DialOption{
		// Dialling, the TLS handshake, AUTH and SELECT run within the
		// caller's deadline (the pool passes its context through), and
		// every read gets the caller's remaining deadline (see do). A
		// write is bounded by Timeout: redigo sets write deadlines per
		// connection, not per call. A lock command is far smaller than a
		// socket's send buffer and a connection that timed out is
		// dropped, so in practice a write never waits.
		redis.DialWriteTimeout(opts.Timeout),
		redis.DialReadTimeout(opts.Timeout),
		redis.DialDatabase(ep.DB),
	}
	if ep.Password != "" {
		dialOpts = append(dialOpts, redis.DialPassword(ep.Password))
	}
	if ep.Username != "" {
		dialOpts = append(dialOpts, redis.DialUsername(ep.Username))
	}
	if ep.TLS {
		cfg := opts.TLSConfig
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		// Not redigo's DialUseTLS: it bounds the handshake by a timeout
		// of its own (10 s), not by the caller's deadline, so a node that
		// accepts and never answers would cost seconds per connection.
		// tls.Dialer runs the handshake under the dial context and takes
		// the server name from the address when cfg leaves it empty.
		d := &tls.Dialer{Config: cfg}
		dialOpts = append(dialOpts, redis.DialContextFunc(d.DialContext))
	}
	r.pool = &redis.Pool{
		MaxIdle:     opts.MaxIdle,
		MaxActive:   opts.MaxActive,
		IdleTimeout: opts.IdleTimeout,
		Wait:        true,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", r.addr, dialOpts...)
		},
	}
	if opts.CheckIdle > 0 {
		checkIdle := opts.CheckIdle
		r.pool.TestOnBorrowContext = func(ctx context.Context, c redis.Conn, lastUsed time.Time) error {
			if time.Since(lastUsed) < checkIdle {
				return nil
			}
			d, ok := ctx.Deadline()
			left := time.Until(d)
			if !ok || left > r.timeout {
				left = r.timeout
			}
			if left <= 0 {
				return context.DeadlineExceeded
			}
			_, err := redis.DoWithTimeout(c, left, "PING")
			return err
		}
	}
	return r
}

// Addr returns host:port.
func (r *Redis) Addr() string { return r.addr }

// String returns the node's URL with the password masked.
func (r *Redis) String() string { return r.ep.String() }

// Close closes the pool. Calls in flight finish; later calls fail with
// ErrClosed.
func (r *Redis) Close() error {
	r.closed.Store(true)
	return r.pool.Close()
}

// Acquire runs SET key token NX PX ttl, with k's prepared arguments when
// ttl is k.TTL.
func (r *Redis) Acquire(ctx context.Context, k *Key, ttl time.Duration) (Status, error) {
	var args []any
	if ttl == k.TTL && k.prepared() {
		args = k.set[:]
	} else {
		args = []any{k.Name, k.Token, "NX", "PX", ttl.Milliseconds()}
	}
	reply, err := r.do(ctx, "acquire", "SET", args...)
	if err != nil {
		return Unknown, err
	}
	switch reply {
	case "OK":
		return Done, nil
	case nil:
		return Taken, nil
	}
	return Unknown, r.fail("acquire", fmt.Errorf("unexpected reply %v", reply))
}

// Extend runs extend.lua.
func (r *Redis) Extend(ctx context.Context, k *Key, ttl time.Duration) (Status, error) {
	return r.script(ctx, "extend", extendScript, []any{extendScript.hash, 1, k.Name, k.Token, ttl.Milliseconds()})
}

// Release runs release.lua, with k's prepared arguments.
func (r *Redis) Release(ctx context.Context, k *Key) (Status, error) {
	var args []any
	if k.prepared() {
		args = k.release[:]
	} else {
		args = []any{releaseScript.hash, 1, k.Name, k.Token}
	}
	return r.script(ctx, "release", releaseScript, args)
}

// Inspect runs inspect.lua.
func (r *Redis) Inspect(ctx context.Context, key string) (Info, error) {
	reply, err := r.eval(ctx, "inspect", inspectScript, []any{inspectScript.hash, 1, key})
	if err != nil {
		return Info{}, err
	}
	vals, err := redis.Values(reply, nil)
	if err != nil || len(vals) != 2 {
		return Info{}, r.fail("inspect", fmt.Errorf("unexpected reply %v", reply))
	}
	tok, _ := redis.String(vals[0], nil)
	pttl, _ := redis.Int64(vals[1], nil)
	if pttl == -2 {
		return Info{}, nil
	}
	return Info{Token: tok, TTL: time.Duration(pttl) * time.Millisecond}, nil
}

func (r *Redis) script(ctx context.Context, op string, s *script, args []any) (Status, error) {
	reply, err := r.eval(ctx, op, s, args)
	if err != nil {
		return Unknown, err
	}
	switch reply {
	case int64(1):
		return Done, nil
	case int64(0):
		return Taken, nil
	case int64(-1):
		return Absent, nil
	}
	return Unknown, r.fail(op, fmt.Errorf("unexpected reply %v", reply))
}

// eval runs a script by EVALSHA with args (the script's hash first, then
// numkeys, keys and arguments) and falls back to EVAL (which also loads
// the script) when the node answers NOSCRIPT, e.g. after a restart. args
// may be shared with other calls and is never modified.
func (r *Redis) eval(ctx context.Context, op string, s *script, args []any) (any, error) {
	reply, err := r.do(ctx, op, "EVALSHA", args...)
	if err == nil {
		return reply, nil
	}
	// Declared here, not above: errors.As makes it escape, and the happy
	// path should not pay for that allocation.
	var rerr *Error
	if errors.As(err, &rerr) && rerr.Err != nil && strings.HasPrefix(rerr.Err.Error(), "NOSCRIPT") {
		src := make([]any, len(args))
		copy(src, args)
		src[0] = s.src
		reply, err = r.do(ctx, op, "EVAL", src...)
	}
	return reply, err
}

// do runs one command within ctx's deadline (or the node timeout, if
// sooner). The deadline covers waiting for a pooled connection, dialling,
// writing and reading, so a node that never answers costs no more.
func (r *Redis) do(ctx context.Context, op, cmd string, args ...any) (any, error) {
	if r.closed.Load() {
		return nil, r.fail(op, ErrClosed)
	}
	now := time.Now()
	deadline := now.Add(r.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if !deadline.After(now) {
		return nil, r.fail(op, context.DeadlineExceeded)
	}
	conn, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, r.fail(op, err)
	}
	left := time.Until(deadline)
	if left <= 0 {
		conn.Close()
		return nil, r.fail(op, context.DeadlineExceeded)
	}
	reply, err := redis.DoWithTimeout(conn, left, cmd, args...)
	// A connection that timed out mid-reply is broken; the pool drops it on
	// Close because redigo marked it failed.
	conn.Close()
	if err != nil {
		return nil, r.fail(op, err)
	}
	return reply, nil
}

func (r *Redis) fail(op string, err error) error {
	if errors.Is(err, ErrClosed) {
		return &Error{Addr: r.addr, Op: op, Kind: ErrClosed}
	}
	var ne *Error
	if errors.As(err, &ne) {
		return err
	}
	return &Error{Addr: r.addr, Op: op, Kind: classify(err), Err: err}
}

// Command runs any Redis command on this node within ctx's deadline. It is
// an escape hatch for tools and tests (SCAN, FLUSHALL, PEXPIRE, INFO); the
// lock algorithm never uses it.
func (r *Redis) Command(ctx context.Context, cmd string, args ...any) (any, error) {
	return r.do(ctx, "command", cmd, args...)
}

// Keys returns the keys matching pattern, via SCAN (never KEYS), for tests
// and tools.
func (r *Redis) Keys(ctx context.Context, pattern string) ([]string, error) {
	var keys []string
	cursor := "0"
	for {
		reply, err := r.do(ctx, "scan", "SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
		if err != nil {
			return nil, err
		}
		vals, err := redis.Values(reply, nil)
		if err != nil || len(vals) != 2 {
			return nil, r.fail("scan", fmt.Errorf("unexpected reply %v", reply))
		}
		cursor, _ = redis.String(vals[0], nil)
		page, _ := redis.Strings(vals[1], nil)
		keys = append(keys, page...)
		if cursor == "0" {
			return keys, nil
		}
	}
}
