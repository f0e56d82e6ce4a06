package node

import (
	"context"
	"crypto/tls"
	_ "embed"
	"io"
	"net"
	"sync"
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
	// deadline. Timeout also bounds a dial that goes on after the call
	// that started it gave up (see Redis.dial).
	Timeout time.Duration
	// MaxIdle is how many idle connections are kept (with Pooled).
	// Default: MaxActive.
	// A connection given back while MaxIdle are idle is closed, so a
	// smaller MaxIdle costs a new connection per call in any burst of
	// more than MaxIdle calls at once; IdleTimeout closes the surplus.
	MaxIdle int
	// MaxActive caps the connections open at once (with Pooled); a call
	// waits (within its deadline) for one to free up. Default 64.
	MaxActive int
	// IdleTimeout closes pooled connections idle for longer (with
	// Pooled). Default 5 minutes.
	IdleTimeout time.Duration
	// TLSConfig is used for rediss:// URLs. Default: system roots, the
	// URL's host as server name.
	TLSConfig *tls.Config
	// CheckIdle is how long a pooled connection (Pooled) may sit idle
	// before the next call checks it. A node that restarted leaves dead
	// connections behind; without the check the first command on each
	// fails. The check looks at the socket for a close or reset, with no
	// round trip; only where that cannot tell (TLS bytes waiting, or an
	// OS without the look) is the connection PINGed, within the call's
	// deadline. A connection found dead is replaced within the call. A
	// connection reused sooner (a busy client) is not checked, so the
	// check costs one non-blocking system call, and only to a client
	// that calls the node less often than this. Default 100ms; negative
	// disables the check. The shared connection needs none: its reader
	// sees the node close it when it does.
	CheckIdle time.Duration
	// Pooled sends each command over a pooled connection of its own
	// (MaxIdle, MaxActive, IdleTimeout), as redigo's pool does, instead
	// of the default: every command over one connection to the node
	// (pub/sub apart), written together with the commands other
	// goroutines issue at the same moment and answered in order, so that
	// a burst of N calls costs the node and the client one write and one
	// read rather than N of each, with no goroutine and no socket
	// deadline per call.
	// Either way a call waits for its reply only until its context's
	// deadline. On the shared connection, a reply that comes after its
	// call gave up is read and dropped; a connection on which replies are
	// due and none has come for Timeout is closed, and the next call
	// dials another. A call that gives up also sends a PING behind its
	// command, whose reply proves the replies still in step with the
	// commands; a connection that lost a command on the way (a proxy
	// that dropped bytes and kept the connection) is closed at that
	// reply, the calls still on it failing with ErrTimeout.
	Pooled bool
	// ShardChannels, for a lock's copy on a Redis Cluster (FollowSlot),
	// announces releases and grants as shard messages (the scripts'
	// SPUBLISH, Scripts.Sharded) and watches them with SSUBSCRIBE on the
	// slot's master, instead of PUBLISH, which the cluster sends to every
	// node. Redis 7 or later on every master; DialCluster sets it when
	// each master it reaches has SPUBLISH. Other nodes ignore it.
	ShardChannels bool
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.MaxActive <= 0 {
		o.MaxActive = 64
	}
	if o.MaxIdle <= 0 {
		o.MaxIdle = o.MaxActive
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.CheckIdle == 0 {
		o.CheckIdle = 100 * time.Millisecond
	}
	return o
}

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/acquire_fenced.lua
	acquireFencedLua string
	//go:embed scripts/confirm_fence.lua
	confirmFenceLua string
	//go:embed scripts/transfer.lua
	transferLua string
	//go:embed scripts/queue.lua
	queueLua string
	//go:embed scripts/leave.lua
	leaveLua string
	//go:embed scripts/shared.lua
	sharedLua string
	//go:embed scripts/acquire_shared.lua
	acquireSharedLua string
	//go:embed scripts/extend_shared.lua
	extendSharedLua string
	//go:embed scripts/release_shared.lua
	releaseSharedLua string
	//go:embed scripts/announce.lua
	announceLua string
	//go:embed scripts/inspect_announce.lua
	inspectAnnounceLua string

	classicScripts = boxAll(luaScripts)
	shardedScripts = boxAll(luaScripts.Sharded())
)

// script is a Lua script's source and SHA1, boxed once for redigo's
// argument lists.
type script struct {
	src  any
	hash any
}

func boxed(s Script) *script { return &script{src: s.Src, hash: s.Hash} }

// scriptSet is a node's scripts, boxed: the classic ones, or, on a
// lock's copy on a Redis Cluster that has shard channels, the Sharded
// ones.
type scriptSet struct {
	acquire, extend, release, inspect            *script
	acquireFenced, confirmFence, transfer, leave *script
	acquireShared, extendShared, releaseShared   *script
	announce, inspectAnnounce                    *script
}

func boxAll(s Scripts) *scriptSet {
	return &scriptSet{
		acquire: boxed(s.Acquire), extend: boxed(s.Extend), release: boxed(s.Release), inspect: boxed(s.Inspect),
		acquireFenced: boxed(s.AcquireFenced), confirmFence: boxed(s.ConfirmFence), transfer: boxed(s.Transfer), leave: boxed(s.Leave),
		acquireShared: boxed(s.AcquireShared), extendShared: boxed(s.ExtendShared), releaseShared: boxed(s.ReleaseShared),
		announce: boxed(s.Announce), inspectAnnounce: boxed(s.InspectAnnounce),
	}
}

// Redis is a Node backed by a redigo connection pool.
type Redis struct {
	ep      Endpoint
	addr    string
	timeout time.Duration
	pool    *redis.Pool
	closed  atomic.Bool

	noSetGet  atomic.Bool              // the node refused SET NX GET: acquire by script
	lastMS    atomic.Pointer[boxedMS]  // see ms
	lastOwner atomic.Pointer[boxedStr] // see owner
	readHot   atomic.Pointer[readHot]  // see acquireAlone

	// Connections whose dial finished after the call that started it
	// had given up, for the pool's next dial (see dial).
	spares  chan spare
	dialing atomic.Int32       // dials still running for calls that gave up
	life    context.Context    // bounds those dials
	stop    context.CancelFunc // ends them, at Close

	sub *subscriber // the pub/sub connection for Watch
	sc  *scriptSet  // classicScripts, or shardedScripts with sub sharded too

	argv Argv // every script's ARGV, with the TTL and the tag boxed by ms and owner

	// In a Redis Cluster (FollowSlot): ask returns the node an ASK reply
	// names, where the command goes again (nil: ASK is not followed);
	// asking, set on such a node, sends every command after ASKING, on a
	// pooled connection (see callPool).
	ask    func(addr string) *Redis
	asking bool

	// Unless Options.Pooled: the connection every command goes over
	// (nil before the first), the dial in progress (guarded by muxMu),
	// and how to make one.
	mux     atomic.Pointer[mux]
	muxMu   sync.Mutex
	muxDial *muxDialing
	muxConn func(ctx context.Context) (redis.Conn, net.Conn, error)

	lastLate atomic.Pointer[late] // the last late reply; nil before the first

	// scripted: a script has run on the node since its last connection
	// was set up, so it runs scripts, and an acquire may be a plain SET
	// (see Acquire).
	scripted atomic.Bool
}

// late is when a late reply came in, and its round trip.
type late struct {
	at  time.Time
	rtt time.Duration
}

var (
	_ Node      = (*Redis)(nil)
	_ Inspector = (*Redis)(nil)
	_ Fencer    = (*Redis)(nil)
	_ Watcher   = (*Redis)(nil)
	_ Handoffer = (*Redis)(nil)
	_ Sharer    = (*Redis)(nil)
	_ Announcer = (*Redis)(nil)
	_ io.Closer = (*Redis)(nil)

	_ LateAnswerer = (*Redis)(nil)
)

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
	r := &Redis{ep: ep, addr: ep.Addr(), timeout: opts.Timeout, spares: make(chan spare, opts.MaxActive), sc: classicScripts}
	r.argv = Argv{MS: r.ms, Tag: r.owner}
	r.life, r.stop = context.WithCancel(context.Background())
	dialOpts, netDial := dialOptions(ep, opts)
	// The pub/sub connection: the same address, credentials and TLS, no
	// read timeout of its own (it waits for messages; see subscriber).
	subOpts := append(dialOpts[:len(dialOpts):len(dialOpts)], redis.DialContextFunc(netDial))
	r.sub = newSubscriber(func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", r.addr, subOpts...)
	}, opts.Timeout)
	r.pool = &redis.Pool{
		MaxIdle:     opts.MaxIdle,
		MaxActive:   opts.MaxActive,
		IdleTimeout: opts.IdleTimeout,
		Wait:        true,
		DialContext: r.pooledDial(dialOpts, netDial),
	}
	if !opts.Pooled {
		r.muxConn = r.muxDialer(dialOpts, netDial)
	}
	if opts.CheckIdle > 0 {
		checkIdle := opts.CheckIdle
		r.pool.TestOnBorrowContext = func(ctx context.Context, c redis.Conn, lastUsed time.Time) error {
			if time.Since(lastUsed) < checkIdle {
				return nil
			}
			return r.checkIdle(ctx, c)
		}
	}
	return r
}

// netDialer dials a node's TCP (or TLS) connection within ctx.
type netDialer func(ctx context.Context, network, addr string) (net.Conn, error)

// dialOptions returns redigo's options for a connection to ep, and the
// dialer of its socket.
func dialOptions(ep Endpoint, opts Options) ([]redis.DialOption, netDialer) {
	dialOpts := []redis.DialOption{
		// A call waits for dialling, the TLS handshake, AUTH and SELECT
		// within its deadline (see dial), and every read gets the
		// caller's remaining deadline (see call). A write is bounded by
		// Timeout: redigo sets write deadlines per connection, not per
		// call. A lock command is far smaller than a socket's send
		// buffer, so in practice a write never waits.
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
	netDial := (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext // as redigo's
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
		netDial = (&tls.Dialer{Config: cfg}).DialContext
	}
	return dialOpts, netDial
}

// pooledDial is the pool's DialContext: a connection whose late replies
// are read and dropped (lateConn), dialled within the call's deadline.
func (r *Redis) pooledDial(dialOpts []redis.DialOption, netDial netDialer) func(context.Context) (redis.Conn, error) {
	return func(ctx context.Context) (redis.Conn, error) {
		return r.dial(ctx, func(ctx context.Context) (redis.Conn, error) {
			var lc *lateConn
			opts := append(dialOpts[:len(dialOpts):len(dialOpts)], redis.DialContextFunc(
				func(ctx context.Context, network, addr string) (net.Conn, error) {
					nc, err := netDial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					lc = &lateConn{Conn: nc}
					return lc, nil
				}))
			c, err := redis.DialContext(ctx, "tcp", r.addr, opts...)
			if err != nil {
				return nil, err
			}
			r.scripted.Store(false) // perhaps a restarted node: see Acquire
			lc.ready = true         // AUTH and SELECT done: see lateConn
			// redigo's connection implements ConnWithTimeout.
			return &pooledConn{ConnWithTimeout: c.(redis.ConnWithTimeout), nc: lc.Conn}, nil
		})
	}
}

// muxDialer dials the shared (multiplexed) connection: after AUTH and
// SELECT the mux keeps the socket's deadlines.
func (r *Redis) muxDialer(dialOpts []redis.DialOption, netDial netDialer) func(context.Context) (redis.Conn, net.Conn, error) {
	return func(ctx context.Context) (redis.Conn, net.Conn, error) {
		var sock *muxSocket
		opts := append(dialOpts[:len(dialOpts):len(dialOpts)], redis.DialContextFunc(
			func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := netDial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				sock = &muxSocket{Conn: c}
				return sock, nil
			}))
		c, err := redis.DialContext(ctx, "tcp", r.addr, opts...)
		if err != nil {
			return nil, nil, err
		}
		r.scripted.Store(false) // perhaps a restarted node: see Acquire
		// AUTH and SELECT are done: from now on the mux keeps the
		// deadlines, and the dial's must not stay.
		sock.muxed = true
		if err := sock.Conn.SetDeadline(time.Time{}); err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, sock.Conn, nil
	}
}

// Addr returns host:port.
func (r *Redis) Addr() string { return r.addr }

// String returns the node's URL with the password masked.
func (r *Redis) String() string { return r.ep.String() }

// Close closes the pool and the spare connections, and ends dials still
// running. Calls in flight finish; later calls fail with ErrClosed.
func (r *Redis) Close() error {
	r.closed.Store(true)
	r.sub.close()
	r.stop()
	// Under muxMu: a dial that ends now either stored its connection
	// before (closed here) or sees closed and closes it (dialMux).
	r.muxMu.Lock()
	if m := r.mux.Load(); m != nil {
		m.close()
	}
	r.muxMu.Unlock()
	r.closeSpares()
	return r.pool.Close()
}
