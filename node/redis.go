package node

import (
	"bytes"
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"io"
	"net"
	"strings"
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

	acquireScript = boxed(luaScripts.Acquire)
	extendScript  = boxed(luaScripts.Extend)
	releaseScript = boxed(luaScripts.Release)
	inspectScript = boxed(luaScripts.Inspect)

	acquireFencedScript = boxed(luaScripts.AcquireFenced)
	confirmFenceScript  = boxed(luaScripts.ConfirmFence)
	transferScript      = boxed(luaScripts.Transfer)
	leaveScript         = boxed(luaScripts.Leave)

	acquireSharedScript = boxed(luaScripts.AcquireShared)
	extendSharedScript  = boxed(luaScripts.ExtendShared)
	releaseSharedScript = boxed(luaScripts.ReleaseShared)

	waiterLeaseMS = WaiterLease.Milliseconds()
)

// script is a Lua script's source and SHA1, boxed once for redigo's
// argument lists.
type script struct {
	src  any
	hash any
}

func boxed(s Script) *script { return &script{src: s.Src, hash: s.Hash} }

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
	r := &Redis{ep: ep, addr: ep.Addr(), timeout: opts.Timeout, spares: make(chan spare, opts.MaxActive)}
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

// Acquire runs SET key token NX PX ttl GET: one plain command, which tells
// "set", "ours already" and "someone else's" apart (ParseSet). With
// holderTTL it runs acquire.lua instead, which also returns the holder's
// PTTL; so does a node older than Redis 7.0, which refuses NX with GET.
// So does the first acquire on a new connection, until a script has run
// there: a node that cannot run scripts (EVAL or EVALSHA renamed away,
// an ACL without them) would take a lock by the SET that no extend or
// release could ever act on; the script fails there instead, with
// ErrNoScripts (or ErrAuth), a refusal for good, and sets nothing. It
// costs no round trip more than the SET.
func (r *Redis) Acquire(ctx context.Context, k *Key, ttl time.Duration, holderTTL bool) (Result, error) {
	if holderTTL || r.noSetGet.Load() || !r.scripted.Load() {
		return r.acquireScript(ctx, k, ttl, holderTTL)
	}
	name, token := k.Boxed()
	reply, err := r.call(ctx, "acquire", nil, "SET", []any{name, token, "NX", "PX", r.ms(ttl), "GET"})
	if err != nil {
		if syntaxError(err) {
			// Before 7.0; nothing was set. Scripts from now on.
			r.noSetGet.Store(true)
			return r.acquireScript(ctx, k, ttl, false)
		}
		return Result{}, err
	}
	res, err := ParseSet(reply, k.Token)
	return res, r.fail("acquire", err)
}

// acquireScript is Acquire by acquire.lua; wait registers k.Owner as a
// waiter when the key is taken.
func (r *Redis) acquireScript(ctx context.Context, k *Key, ttl time.Duration, wait bool) (Result, error) {
	owner := ""
	if wait {
		owner = k.Owner
	}
	name, token := k.Boxed()
	args := []any{acquireScript.hash, 2, name, k.boxedWaiters(), token, r.ms(ttl), owner, waiterLeaseMS, k.Ticket}
	if wait && k.Grant != "" {
		args = append(args, k.Grant, GrantTTL(ttl).Milliseconds())
	}
	reply, err := r.call(ctx, "acquire", acquireScript, "EVALSHA", args)
	if err != nil {
		return Result{}, err
	}
	res, err := ParseAcquire(reply)
	return res, r.fail("acquire", err)
}

// syntaxError reports whether err is the reply of a node that does not
// know SET's GET option together with NX (Redis before 7.0).
func syntaxError(err error) bool {
	ne, ok := err.(*Error)
	if !ok {
		return false
	}
	e, ok := ne.Err.(redis.Error)
	return ok && strings.HasPrefix(string(e), "ERR syntax error")
}

// ms returns d in milliseconds, boxed for redigo's argument list. Boxing
// an int64 above 255 allocates; a client mostly uses one TTL, so the last
// value is kept and handed out again.
func (r *Redis) ms(d time.Duration) any {
	v := d.Milliseconds()
	if b := r.lastMS.Load(); b != nil && b.ms == v {
		return b.boxed
	}
	b := &boxedMS{ms: v, boxed: v}
	r.lastMS.Store(b)
	return b.boxed
}

// owner returns a client tag boxed for redigo's argument list: a client
// sends the same one on every call, so the last one is kept and handed
// out again.
func (r *Redis) owner(tag string) any {
	if b := r.lastOwner.Load(); b != nil && b.s == tag {
		return b.boxed
	}
	b := &boxedStr{s: tag, boxed: tag}
	r.lastOwner.Store(b)
	return b.boxed
}

// boxedStr is a string and the same string boxed.
type boxedStr struct {
	s     string
	boxed any
}

// boxedMS is a number of milliseconds and the same number boxed.
type boxedMS struct {
	ms    int64
	boxed any
}

// Extend runs extend.lua.
func (r *Redis) Extend(ctx context.Context, k *Key, ttl time.Duration) (Result, error) {
	return r.script(ctx, "extend", extendScript, k, r.ms(ttl))
}

// Release runs release.lua, which publishes the delete when announce is
// set.
func (r *Redis) Release(ctx context.Context, k *Key, announce bool) (Result, error) {
	flag := announceNo
	if announce {
		flag = announceYes
	}
	name, token := k.Boxed()
	args := []any{releaseScript.hash, 2, name, k.boxedWaiters(), token, flag, r.owner(k.Owner)}
	switch {
	case k.Requeue && !announce && k.Ticket > 0:
		args = append(args, k.Ticket, waiterLeaseMS, k.Grant)
	case k.Tomb > 0:
		args = append(args, 0, 0, "") // no requeue: ARGV[7] comes next
	}
	if k.Tomb > 0 {
		args = append(args, max(k.Tomb.Milliseconds(), 1))
	}
	reply, err := r.call(ctx, "release", releaseScript, "EVALSHA", args)
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("release", err)
}

// The boxed values of release.lua's ARGV[2].
var announceYes, announceNo any = "1", "0"

// AcquireFenced runs acquire_fenced.lua: acquire.lua plus, when the key
// was set, the fence counter raised in the same step (see Fencer).
func (r *Redis) AcquireFenced(ctx context.Context, k *Key, ttl, counterTTL time.Duration) (Result, error) {
	reply, err := r.evalKeys(ctx, "acquire", acquireFencedScript, 3, k.Name, FenceKey(k.Name), k.Waiters(), k.Token, ttl.Milliseconds(), counterTTL.Milliseconds(), waiterLeaseMS,
		k.Owner, k.Ticket)
	if err != nil {
		return Result{}, err
	}
	res, err := ParseAcquire(reply)
	return res, r.fail("acquire", err)
}

// ConfirmFence runs confirm_fence.lua (see Fencer).
func (r *Redis) ConfirmFence(ctx context.Context, k *Key, fence int64, counterTTL time.Duration) (Result, error) {
	reply, err := r.evalKeys(ctx, "confirm", confirmFenceScript, 2, k.Name, FenceKey(k.Name), k.Token, fence, counterTTL.Milliseconds())
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("confirm", err)
}

// Transfer runs transfer.lua (see Handoffer).
func (r *Redis) Transfer(ctx context.Context, from, to *Key, ttl time.Duration) (Result, error) {
	reply, err := r.evalKeys(ctx, "transfer", transferScript, 2, from.Name, from.Waiters(), from.Token, to.Token, ttl.Milliseconds(), from.Owner)
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("transfer", err)
}

// Leave removes k.Owner from the key's waiters (see Handoffer).
func (r *Redis) Leave(ctx context.Context, k *Key) error {
	_, err := r.evalKeys(ctx, "leave", leaveScript, 2, k.Name, k.Waiters(), k.Owner, k.Grant)
	return err
}

// AcquireShared runs acquire_shared.lua (see Sharer); a first try (not
// wait) runs acquireAlone, and the script only when readers hold the key
// (or, as for Acquire, until a script has run on the connection).
func (r *Redis) AcquireShared(ctx context.Context, k *Key, ttl time.Duration, wait bool) (Result, error) {
	if !wait && !r.noSetGet.Load() && r.scripted.Load() && !r.readersLikely(k.Name) {
		res, readers, err := r.acquireAlone(ctx, k, ttl)
		if !readers {
			return res, err
		}
	}
	owner := ""
	if wait {
		owner = k.Owner
	}
	name, token := k.Boxed()
	reply, err := r.call(ctx, "acquire", acquireSharedScript, "EVALSHA",
		[]any{acquireSharedScript.hash, 3, name, k.boxedWaiters(), k.boxedReaders(), token, r.ms(ttl), owner, waiterLeaseMS, k.Ticket})
	if err != nil {
		return Result{}, err
	}
	res, err := ParseAcquire(reply)
	return res, r.fail("acquire", err)
}

// acquireAlone is a reader's first try: SET key SharedValue:token NX PX
// ttl GET, a writer's plain command, takes a free key for a reader alone
// as acquire_shared.lua would (see shared.lua). readers reports that
// readers hold the key: the script must join them. Like a writer's SET,
// it does not look at the queue: on a free key with a writer queued (the
// readers queued before it are having their turn, or a holder's time ran
// out) one reader may come in ahead of the writer, as a writer may (see
// docs/DESIGN.md, "A reader alone is held in the value").
func (r *Redis) acquireAlone(ctx context.Context, k *Key, ttl time.Duration) (res Result, readers bool, err error) {
	name, _ := k.Boxed()
	mine, boxed := k.aloneValue()
	reply, err := r.call(ctx, "acquire", nil, "SET", []any{name, boxed, "NX", "PX", r.ms(ttl), "GET"})
	if err != nil {
		if syntaxError(err) {
			r.noSetGet.Store(true) // before 7.0; nothing was set
			return Result{}, true, nil
		}
		return Result{}, false, err
	}
	if v, ok := reply.([]byte); ok && bytes.HasPrefix(v, sharedPrefix) && string(v) != mine {
		r.readHot.Store(&readHot{name: k.Name, until: time.Now().Add(readHotFor)})
		return Result{}, true, nil
	}
	res, err = ParseSet(reply, mine)
	return res, false, r.fail("acquire", err)
}

var sharedPrefix = []byte(SharedValue)

// readHot is the last key whose readers acquireAlone found, and until
// when AcquireShared goes straight to the script for it: a key many
// readers share (the case read/write locks are for) would otherwise cost
// every reader a SET and then the script, two round trips. After
// readHotFor the SET is tried again, and finds out whether readers still
// hold the key. One key per node: a client reading several shared keys
// in turn costs at most the round trip it would without the hint.
type readHot struct {
	name  string
	until time.Time
}

const readHotFor = time.Second

// readersLikely reports whether readers held key name at a recent first
// try (see readHot).
func (r *Redis) readersLikely(name string) bool {
	h := r.readHot.Load()
	return h != nil && h.name == name && time.Now().Before(h.until)
}

// ExtendShared runs extend_shared.lua (see Sharer).
func (r *Redis) ExtendShared(ctx context.Context, k *Key, ttl time.Duration) (Result, error) {
	name, token := k.Boxed()
	reply, err := r.call(ctx, "extend", extendSharedScript, "EVALSHA",
		[]any{extendSharedScript.hash, 2, name, k.boxedReaders(), token, r.ms(ttl)})
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("extend", err)
}

// ReleaseShared runs release_shared.lua (see Sharer).
func (r *Redis) ReleaseShared(ctx context.Context, k *Key, announce bool) (Result, error) {
	flag := announceNo
	if announce {
		flag = announceYes
	}
	name, token := k.Boxed()
	args := []any{releaseSharedScript.hash, 3, name, k.boxedWaiters(), k.boxedReaders(), token, flag}
	if k.Tomb > 0 {
		args = append(args, max(k.Tomb.Milliseconds(), 1))
	}
	reply, err := r.call(ctx, "release", releaseSharedScript, "EVALSHA", args)
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("release", err)
}

// Inspect runs inspect.lua.
func (r *Redis) Inspect(ctx context.Context, key string) (Info, error) {
	reply, err := r.evalKeys(ctx, "inspect", inspectScript, 2, key, ReadersKey(key))
	if err != nil {
		return Info{}, err
	}
	info, err := ParseInspect(reply)
	return info, r.fail("inspect", err)
}

// script runs s on k with arg and maps its reply (1, 0, -1) to a Status.
// It is eval and ParseStatus in one frame: Release runs it on the path
// every lock takes (see call).
func (r *Redis) script(ctx context.Context, op string, s *script, k *Key, arg any) (Result, error) {
	name, token := k.Boxed()
	reply, err := r.call(ctx, op, s, "EVALSHA", []any{s.hash, 1, name, token, arg})
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail(op, err)
}

// evalKeys runs s, a script of nkeys keys, by EVALSHA, and by EVAL (which
// also loads it) after NOSCRIPT (a restart, SCRIPT FLUSH): args holds the
// keys, then the script's arguments.
func (r *Redis) evalKeys(ctx context.Context, op string, s *script, nkeys int, args ...any) (any, error) {
	cmd := make([]any, 0, 2+len(args))
	cmd = append(cmd, s.hash, nkeys)
	cmd = append(cmd, args...)
	return r.call(ctx, op, s, "EVALSHA", cmd)
}

// do runs one command within ctx's deadline (or the node timeout, if
// sooner). The deadline covers waiting for a pooled connection, dialling,
// writing and reading, so a node that never answers costs no more.
func (r *Redis) do(ctx context.Context, op, cmd string, args ...any) (any, error) {
	return r.call(ctx, op, nil, cmd, args)
}

// call is do, plus, when s is not nil (cmd is then EVALSHA of s), the
// EVAL fallback after NOSCRIPT: on the same connection, within the same
// deadline.
//
// It runs at the bottom of a goroutine that a client starts for every
// call, under redigo's own frames: the common path is kept to small
// frames (what is rare is in callTimeout and failed), so that the
// goroutine fits the stack it starts with instead of copying it to a
// larger one on every call.
func (r *Redis) call(ctx context.Context, op string, s *script, cmd string, args []any) (any, error) {
	if r.closed.Load() {
		return nil, r.fail(op, ErrClosed)
	}
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok || deadline.Sub(start) > r.timeout {
		return r.callTimeout(ctx, op, s, cmd, args)
	}
	if !deadline.After(start) {
		return nil, r.fail(op, context.DeadlineExceeded)
	}
	if r.muxConn != nil {
		return r.callMux(ctx, start, op, s, cmd, args)
	}
	conn, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, r.getFailed(op, err)
	}
	left := time.Until(deadline)
	if left <= 0 {
		conn.Close()
		return nil, r.fail(op, context.DeadlineExceeded)
	}
	reply, err := redis.DoWithTimeout(conn, left, cmd, args...)
	if err != nil {
		return r.failed(conn, op, s, args, start, deadline, err)
	}
	conn.Close()
	if s != nil {
		r.ran()
	}
	return reply, nil
}

// ran records that a script ran on the node (see Acquire).
func (r *Redis) ran() {
	if !r.scripted.Load() {
		r.scripted.Store(true)
	}
}

// getFailed is the error of a call that got no connection: ErrTimeout
// with ErrPoolWait when the deadline passed while every pooled connection
// was in use.
func (r *Redis) getFailed(op string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && r.pool.ActiveCount() >= r.pool.MaxActive {
		return Fail(r.addr, op, ErrTimeout, ErrPoolWait)
	}
	return r.fail(op, err)
}

// callTimeout is call for a context without a deadline, or with one
// later than the node's Timeout: the node's Timeout bounds it.
func (r *Redis) callTimeout(ctx context.Context, op string, s *script, cmd string, args []any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.call(ctx, op, s, cmd, args)
}

// failed finishes a call whose command on conn returned err: it resends a
// script the node did not know as EVAL, leaves a reply that is late to be
// read in the background, and otherwise gives conn back and fails.
func (r *Redis) failed(conn redis.Conn, op string, s *script, args []any, start, deadline time.Time, err error) (any, error) {
	if s != nil && noScript(err) {
		// EVAL on the connection that answered NOSCRIPT, not on one taken
		// from the pool again: with other calls queued for the pool (as
		// after timed-out replies cost it connections) that second wait
		// could outlast the deadline, and the EVAL — of a release, say —
		// would never be sent.
		left := time.Until(deadline)
		if left <= 0 {
			conn.Close()
			return nil, r.fail(op, context.DeadlineExceeded)
		}
		src := make([]any, len(args))
		copy(src, args)
		src[0] = s.src
		var reply any
		if reply, err = redis.DoWithTimeout(conn, left, "EVAL", src...); err == nil {
			conn.Close()
			r.ran()
			return reply, nil
		}
	}
	if isLate(err) {
		// The reply had not begun to arrive by the deadline (see
		// lateConn): read it in the background, for as long again as
		// the call had, and give the connection back then. Only a reply
		// later still, or one that stopped half-way, costs the
		// connection.
		go r.drainLate(conn, start, deadline.Sub(start))
		return nil, r.fail(op, context.DeadlineExceeded)
	}
	conn.Close()
	return nil, r.fail(op, err)
}

// drainLate reads and drops the late reply on c, waiting at most wait,
// then gives c back to the pool (which drops it if the read failed).
// Until then c counts against MaxActive, which bounds these goroutines.
// A reply that comes (an error reply too) is recorded for LastLate, with
// its round trip from the call's start.
func (r *Redis) drainLate(c redis.Conn, start time.Time, wait time.Duration) {
	_, err := redis.ReceiveWithTimeout(c, wait)
	if _, answer := err.(redis.Error); err == nil || answer {
		now := time.Now()
		r.lastLate.Store(&late{at: now, rtt: now.Sub(start)})
	}
	c.Close()
}

// LastLate returns when a reply last came in after its call had given up,
// and its round trip (see LateAnswerer); the zero Time if none has.
func (r *Redis) LastLate() (time.Time, time.Duration) {
	if l := r.lastLate.Load(); l != nil {
		return l.at, l.rtt
	}
	return time.Time{}, 0
}

// noScript reports whether err is a node's NOSCRIPT reply (EVALSHA of a
// script it has not cached).
func noScript(err error) bool {
	e, ok := err.(redis.Error)
	return ok && strings.HasPrefix(string(e), "NOSCRIPT")
}

// fail wraps err in an *Error of its kind; nil stays nil.
func (r *Redis) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	return Fail(r.addr, op, redigoKind(err), err)
}

// redigoKind is the kind of the errors only redigo makes, or nil.
func redigoKind(err error) error {
	msg := err.Error()
	switch {
	case msg == "redigo: get on closed pool":
		// Close raced a call past its closed check.
		return ErrClosed
	case strings.HasPrefix(msg, "redigo: ") && !strings.Contains(msg, "connection pool"):
		// redigo's protocolError is unexported; its messages all start so.
		return ErrProtocol
	}
	return nil
}
