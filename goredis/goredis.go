// Package goredis makes Redlock nodes of go-redis clients
// (github.com/redis/go-redis/v9), for programs that already hold one per
// Redis master:
//
//	client, err := redlock.New(goredis.Nodes(a, b, c), redlock.WithTTL(10*time.Second))
//
// A node runs the same Lua scripts as the library's own redigo driver
// (node.LuaScripts, by EVALSHA with go-redis' EVAL fallback on NOSCRIPT),
// reads their replies with the same parsers (RESP2 and RESP3 replies
// read the same) and reports failures as *node.Error of the same kinds,
// so a redlock.Client behaves the same over either; node/nodetest checks
// it. It is its own Go module, so that the library's module does not
// depend on go-redis.
//
// A node never closes its client, and owns nothing that needs closing:
// the clients stay the caller's, to close after the redlock.Client that
// uses them (redlock.Client.Close does not close nodes it did not make).
// Between watches a node keeps one idle pub/sub connection of its
// client's, which closes with the client. Its goroutines end on their
// own: a call's (see ContextTimeoutEnabled below) after at most a
// handshake and a command have run their course, bounded by the client's
// ReadTimeout and WriteTimeout; its watches' within the node's timeout of
// the last Stop.
//
// # Client options
//
// Any *redis.Client works, with go-redis' defaults. Under Redlock's short
// per-node deadlines (tens of milliseconds) these matter:
//
//   - ContextTimeoutEnabled decides who bounds a call. Without it (go-redis'
//     default) the node runs each command in a goroutine and returns at
//     the deadline; go-redis finishes a late handshake (HELLO) or reads a
//     late reply in the background, for up to its ReadTimeout, and keeps
//     the connection; the node sees to it that no command is written
//     after its call has returned. That costs a goroutine per call, and
//     while a node does not answer, one per abandoned call for up to
//     ReadTimeout: set ReadTimeout and WriteTimeout to about a second.
//     With it, go-redis bounds reads and writes by each call's deadline
//     and the node calls it directly, but go-redis closes every connection
//     whose reply or handshake missed the deadline: a burst of calls on a
//     fresh client, or a loaded moment, then costs new connections whose
//     handshakes miss their deadlines in turn. In this repository's bench
//     (contender E with -goredis-ctx-timeout) 32 goroutines locking at
//     once on fresh clients made a fraction of their usual cycles in
//     their first rounds, the nodes' breakers open; with go-redis' default
//     they did not.
//   - DialerRetries: 1 and MinRetryBackoff: -1. go-redis dials a refused
//     address up to five times, 100 ms apart, and waits 10 ms and more
//     before each retry of a command (MaxRetries): a node that is down
//     then fails with node.ErrTimeout at the deadline instead of
//     node.ErrUnreachable at once.
//   - DisableIdentity: true, and MaintNotificationsConfig with Mode
//     maintnotifications.ModeDisabled, spare a new connection the CLIENT
//     SETINFO round trip and the CLIENT MAINT_NOTIFICATIONS attempt after
//     HELLO.
//
// # Retries
//
// go-redis sends a command again after some failures (MaxRetries, default
// 3, within the call's deadline: an EOF, a failed dial, a read or write
// that outlasted its own ReadTimeout or WriteTimeout, LOADING, READONLY,
// ...), so a command may run twice on the server. The scripts allow it:
// an acquire (plain or fenced) that finds the caller's token answers Done
// and sets the TTL again, an extend or a confirm runs again to the same
// effect; a release that finds its own delete done answers Absent, which
// a client counts as a refusal. A waiting acquire does not ask for a
// grant (node.Key.Grant) through a client that may resend (MaxRetries
// not -1, or not a *redis.Client): a first copy that ran after the grant
// could take it back from the lock it was counted for. Such a waiter
// gets reservations instead, and an acquire round after each.
package goredis

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/node"
)

// DefaultTimeout bounds a call whose context has no deadline, as
// node.Options.Timeout does for the redigo driver. A redlock.Client always
// passes its own, shorter, per-node deadline.
const DefaultTimeout = time.Second

// Options tunes a node. The zero value picks the defaults.
type Options struct {
	// Timeout bounds a call whose context has no earlier deadline.
	// Default DefaultTimeout.
	// A redlock.Client passes shorter per-node deadlines.
	Timeout time.Duration
}

// New returns a Redlock node over client, which must reach one Redis
// master. It does no network traffic and never closes client. It returns
// nil for a nil client (redlock.New refuses a nil node with ErrInvalid).
//
// The node is a node.Node, and also a node.Inspector, a node.Fencer and a
// node.Watcher. Its Addr is client's Options().Addr when client is a
// *redis.Client. A *redis.ClusterClient or *redis.Ring (many masters),
// a Sentinel failover client (whichever master the sentinels name at the
// time) or any other UniversalClient is not one fixed master: its node's
// Addr is "", and redlock.New refuses it with ErrInvalid ("node[i] has no
// address"). The Addr never holds credentials, and neither do the node's
// errors.
//
// Every call returns by its context's deadline or after the node's
// timeout (DefaultTimeout), whichever comes first, whatever client's own
// timeouts: also while dialling, waiting for a pooled connection, or
// waiting for a server that accepted the connection and never answers.
// A client with Options.ContextTimeoutEnabled set bounds its reads and
// writes by that deadline itself. Without it (go-redis' default), the
// node runs the command in a goroutine and returns at the deadline with
// node.ErrTimeout; the command then ends in the background, bounded by
// client's ReadTimeout and WriteTimeout, and gives its connection back
// to the pool if the reply does come. Either way no acquire, extend,
// release or confirm is written after its call has returned (an inspect,
// which changes nothing, may be).
func New(client redis.UniversalClient) node.Node {
	return NewWithOptions(client, Options{})
}

// NewWithOptions is New with a node timeout other than DefaultTimeout:
// the bound of a call whose context has no earlier deadline.
func NewWithOptions(client redis.UniversalClient, opts Options) node.Node {
	if client == nil {
		return nil
	}
	return newNode(client, opts)
}

// newNode is NewWithOptions of a client that is not nil.
func newNode(client redis.UniversalClient, opts Options) *redisNode {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	n := &redisNode{client: client, timeout: opts.Timeout, resends: true, sc: classicScripts,
		hub: &hub{client: client, timeout: opts.Timeout, subs: map[string]*channel{}}}
	if c, ok := client.(*redis.Client); ok {
		o := c.Options()
		n.bounded = o.ContextTimeoutEnabled
		n.resends = o.MaxRetries > 0 // as normalised by NewClient: -1 (none) becomes 0, 0 (default) 3
		n.writeBuf = o.WriteBufferSize
		if o.Addr != failoverAddr {
			n.addr = o.Addr
		}
	}
	return n
}

// Nodes returns New(c) for each client, in order, for redlock.New:
//
//	redlock.New(goredis.Nodes(a, b, c), opts...)
func Nodes(clients ...redis.UniversalClient) []node.Node {
	nodes := make([]node.Node, len(clients))
	for i, c := range clients {
		nodes[i] = New(c)
	}
	return nodes
}

// failoverAddr is the Addr go-redis gives the options of a Sentinel
// failover client (redis.NewFailoverClient): not an address.
const failoverAddr = "FailoverClient"

// redisNode is a node.Node over a go-redis client.
type redisNode struct {
	client  redis.UniversalClient
	addr    string
	timeout time.Duration
	// bounded: the client bounds reads and writes by the context's
	// deadline (ContextTimeoutEnabled), so a call needs no goroutine.
	bounded bool
	// writeBuf is the size of the client's write buffers, 0 when unknown.
	writeBuf int
	// hub is the node's subscriptions, for Watch.
	hub *hub
	// sc is classicScripts, or shardedScripts with hub sharded too.
	sc *scriptSet
	// resends: the client may send a command again (go-redis' MaxRetries),
	// so a waiting acquire asks for no grant (see Retries above).
	resends bool
}

var (
	_ node.Node      = (*redisNode)(nil)
	_ node.Inspector = (*redisNode)(nil)
	_ node.Fencer    = (*redisNode)(nil)
	_ node.Watcher   = (*redisNode)(nil)
	_ node.Handoffer = (*redisNode)(nil)
	_ node.Sharer    = (*redisNode)(nil)
	_ node.Announcer = (*redisNode)(nil)
)

// scriptSet is node.LuaScripts as go-redis scripts (same source, same
// SHA1).
type scriptSet struct {
	acquire, extend, release, inspect, acquireFenced, confirmFence, transfer, leave *redis.Script
	acquireShared, extendShared, releaseShared                                      *redis.Script
	announce, inspectAnnounce                                                       *redis.Script
}

func newScripts(s node.Scripts) *scriptSet {
	var out scriptSet
	out.acquire, out.extend, out.release = redis.NewScript(s.Acquire.Src), redis.NewScript(s.Extend.Src), redis.NewScript(s.Release.Src)
	out.inspect, out.acquireFenced, out.confirmFence = redis.NewScript(s.Inspect.Src), redis.NewScript(s.AcquireFenced.Src), redis.NewScript(s.ConfirmFence.Src)
	out.transfer, out.leave = redis.NewScript(s.Transfer.Src), redis.NewScript(s.Leave.Src)
	out.acquireShared, out.extendShared = redis.NewScript(s.AcquireShared.Src), redis.NewScript(s.ExtendShared.Src)
	out.releaseShared = redis.NewScript(s.ReleaseShared.Src)
	out.announce, out.inspectAnnounce = redis.NewScript(s.Announce.Src), redis.NewScript(s.InspectAnnounce.Src)
	return &out
}

// The scripts: classic, and with shard channels (node.Scripts.Sharded)
// for a cluster's copies whose masters have them.
var classicScripts, shardedScripts = newScripts(node.LuaScripts()), newScripts(node.LuaScripts().Sharded())

// Addr returns the master's host:port, or "" when the client is not one
// fixed master (see New).
func (n *redisNode) Addr() string { return n.addr }

// String names the node by its address, without credentials.
func (n *redisNode) String() string { return "goredis node " + n.addr }

// Acquire runs acquire.lua: SET key token NX PX ttl, and on a held key
// the holder's PTTL, in one round trip, whatever holderTTL asks. (The
// redigo node sends a plain SET NX PX GET when holderTTL is off; this one
// keeps one path: go-redis' own retries and the token guard of run are
// written for n.sc.)
func (n *redisNode) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	reply, err := n.run(ctx, "acquire", n.sc.acquire, []string{k.Name, k.Waiters()}, n.argv().Acquire(nil, k, ttl, holderTTL)...)
	if err != nil {
		return node.Result{}, err
	}
	res, err := node.ParseAcquire(reply)
	return res, n.fail("acquire", err)
}

// Extend runs extend.lua: the key lives at least ttl more if it still
// holds the token, never less than it had.
func (n *redisNode) Extend(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	return n.status(ctx, "extend", n.sc.extend, []string{k.Name}, n.argv().Extend(nil, k, ttl)...)
}

// Release runs release.lua, which hands the key on to the head of its
// queue where anyone is queued (see node.Handoffer: announced on the
// head's channel, or on node.ReleaseChannel(k.Name) with no head to hand
// on to) and deletes it unannounced where no one is.
func (n *redisNode) Release(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	keys := []string{k.Name, k.Waiters()}
	if k.Record {
		keys = append(keys, node.AnnounceKey(k.Name))
	}
	return n.status(ctx, "release", n.sc.release, keys, n.argv().Release(nil, k, announce)...)
}

// argv builds the scripts' arguments: no grant is asked for where
// go-redis may send a script again (see redisNode.resends).
func (n *redisNode) argv() node.Argv { return node.Argv{NoGrants: n.resends} }

// AcquireFenced runs acquire_fenced.lua: Acquire that, when it sets the
// key, raises the key's fence counter in the same step (see node.Fencer).
func (n *redisNode) AcquireFenced(ctx context.Context, k *node.Key, ttl, counterTTL time.Duration) (node.Result, error) {
	reply, err := n.run(ctx, "acquire", n.sc.acquireFenced, []string{k.Name, node.FenceKey(k.Name), k.Waiters()},
		n.argv().AcquireFenced(nil, k, ttl, counterTTL)...)
	if err != nil {
		return node.Result{}, err
	}
	res, err := node.ParseAcquire(reply)
	return res, n.fail("acquire", err)
}

// ConfirmFence runs confirm_fence.lua (see node.Fencer).
func (n *redisNode) ConfirmFence(ctx context.Context, k *node.Key, fence int64, counterTTL time.Duration) (node.Result, error) {
	return n.status(ctx, "confirm", n.sc.confirmFence, []string{k.Name, node.FenceKey(k.Name)},
		n.argv().ConfirmFence(nil, k, fence, counterTTL, "", 0)...)
}

// Transfer runs transfer.lua (see node.Handoffer).
func (n *redisNode) Transfer(ctx context.Context, from, to *node.Key, ttl time.Duration) (node.Result, error) {
	return n.status(ctx, "transfer", n.sc.transfer, []string{from.Name, from.Waiters()},
		n.argv().Transfer(nil, from, to, ttl)...)
}

// Leave runs leave.lua: k.Owner out of the key's queue, and a key
// reserved or granted to it (k.Grant) on to the next head (see
// node.Handoffer).
func (n *redisNode) Leave(ctx context.Context, k *node.Key) error {
	_, err := n.run(ctx, "leave", n.sc.leave, []string{k.Name, k.Waiters()}, n.argv().Leave(nil, k)...)
	return err
}

// AcquireShared runs acquire_shared.lua (see node.Sharer).
func (n *redisNode) AcquireShared(ctx context.Context, k *node.Key, ttl time.Duration, wait bool) (node.Result, error) {
	reply, err := n.run(ctx, "acquire", n.sc.acquireShared,
		[]string{k.Name, k.Waiters(), node.ReadersKey(k.Name)}, n.argv().AcquireShared(nil, k, ttl, wait)...)
	if err != nil {
		return node.Result{}, err
	}
	res, err := node.ParseAcquire(reply)
	return res, n.fail("acquire", err)
}

// ExtendShared runs extend_shared.lua (see node.Sharer).
func (n *redisNode) ExtendShared(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	return n.status(ctx, "extend", n.sc.extendShared, []string{k.Name, node.ReadersKey(k.Name)}, n.argv().Extend(nil, k, ttl)...)
}

// ReleaseShared runs release_shared.lua (see node.Sharer).
func (n *redisNode) ReleaseShared(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	return n.status(ctx, "release", n.sc.releaseShared,
		[]string{k.Name, k.Waiters(), node.ReadersKey(k.Name)}, n.argv().ReleaseShared(nil, k, announce)...)
}

// Inspect runs inspect.lua: the key's token, PTTL and readers in one
// atomic read.
func (n *redisNode) Inspect(ctx context.Context, key string) (node.Info, error) {
	reply, err := n.run(ctx, "inspect", n.sc.inspect, []string{key, node.ReadersKey(key)})
	if err != nil {
		return node.Info{}, err
	}
	info, err := node.ParseInspect(reply)
	return info, n.fail("inspect", err)
}

// Announce runs announce.lua (see node.Announcer).
func (n *redisNode) Announce(ctx context.Context, k *node.Key, text string, ttl time.Duration) (node.Result, error) {
	if text == "" {
		return node.Result{}, n.fail("announce", errEmptyText)
	}
	return n.status(ctx, "announce", n.sc.announce, []string{k.Name, node.AnnounceKey(k.Name)},
		n.argv().Announce(nil, k, text, ttl)...)
}

// ConfirmAnnounce runs confirm_fence.lua with a record (see
// node.Announcer).
func (n *redisNode) ConfirmAnnounce(ctx context.Context, k *node.Key, fence int64, counterTTL time.Duration, text string, ttl time.Duration) (node.Result, error) {
	if text == "" {
		return node.Result{}, n.fail("confirm", errEmptyText)
	}
	return n.status(ctx, "confirm", n.sc.confirmFence, []string{k.Name, node.FenceKey(k.Name), node.AnnounceKey(k.Name)},
		n.argv().ConfirmFence(nil, k, fence, counterTTL, text, ttl)...)
}

// errEmptyText refuses an empty announcement: announce.lua reads "" as a
// withdrawal.
var errEmptyText = errors.New("empty announcement")

// InspectAnnounce runs inspect_announce.lua (see node.Announcer).
func (n *redisNode) InspectAnnounce(ctx context.Context, key string) (node.Announced, error) {
	reply, err := n.run(ctx, "inspect", n.sc.inspectAnnounce, []string{key, node.AnnounceKey(key)})
	if err != nil {
		return node.Announced{}, err
	}
	a, err := node.ParseAnnounced(reply)
	return a, n.fail("inspect", err)
}

// status runs a script whose reply is 1, 0 or -1 (node.ParseStatus).
func (n *redisNode) status(ctx context.Context, op string, s *redis.Script, keys []string, args ...any) (node.Result, error) {
	reply, err := n.run(ctx, op, s, keys, args...)
	if err != nil {
		return node.Result{}, err
	}
	res, err := node.ParseStatus(reply)
	return res, n.fail(op, err)
}

// reply is the outcome of one script run.
type reply struct {
	v   any
	err error
}

// run runs s by EVALSHA, and by EVAL after NOSCRIPT (redis.Script.Run),
// within ctx's deadline or the node's timeout, whichever is sooner.
func (n *redisNode) run(ctx context.Context, op string, s *redis.Script, keys []string, args ...any) (any, error) {
	now := time.Now()
	deadline := now.Add(n.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		// Also ends, once run has returned, whatever the command still
		// waits for in the background (a pooled connection, a dial, a
		// retry's backoff), though not a read or write in progress.
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, n.fail(op, err) // nothing is sent for an ended context
	}
	if !deadline.After(now) {
		return nil, n.fail(op, context.DeadlineExceeded)
	}
	if n.bounded {
		// go-redis bounds the pool wait, the dial, the handshake, the
		// write and the read by ctx's deadline itself.
		v, err := result(s.Run(ctx, n.client, keys, args...))
		if err != nil {
			return nil, n.fail(op, err)
		}
		return v, nil
	}
	// go-redis bounds waiting for a pooled connection or a dial by ctx, and
	// reads and writes (the handshake's included) by its own ReadTimeout and
	// WriteTimeout only. The command runs on its own, then, and the call
	// returns at the deadline if it has not finished: buffered, the channel
	// lets the goroutine end whenever it does. go-redis would still write
	// the command once a handshake that outlasted the deadline ends: the
	// token goes through a guard that refuses to be written after that.
	var g *guard
	if len(args) > 0 {
		if tok, ok := args[0].(string); ok {
			g = &guard{token: tok, keep: n.fits(keys)}
			args[0] = g
		}
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := result(s.Run(ctx, n.client, keys, args...))
		ch <- reply{v, err}
	}()
	var r reply
	select {
	case r = <-ch:
	case <-ctx.Done():
		if g != nil {
			g.late.Store(true)
		}
		select {
		case r = <-ch: // finished at the same moment: the reply counts
		default:
			return nil, n.fail(op, ctx.Err())
		}
	}
	if r.err != nil {
		return nil, n.fail(op, r.err)
	}
	return r.v, nil
}

// guard is the token argument of a command run from a goroutine. go-redis
// serializes it (encoding.BinaryMarshaler) while it writes the command, and
// it refuses once the call has returned, so that a command is never sent
// after its caller was told it timed out: a client rolls an acquire back
// once the call has returned, and an acquire applied after that would
// leave its key behind. Refusing fails the write before anything of the
// command has left go-redis' write buffer.
type guard struct {
	token string
	late  atomic.Bool // set when the call has returned at its deadline
	keep  bool        // the refusal may keep the connection: see fits
}

// MarshalBinary returns the token, or an error once the call is over.
func (g *guard) MarshalBinary() ([]byte, error) {
	if g.late.Load() {
		if g.keep {
			return nil, errRefusedKeep{}
		}
		return nil, errRefused
	}
	return []byte(g.token), nil
}

// errRefused is the guard's refusal when what precedes the token may have
// been flushed: not a reply of the server, so go-redis closes the
// connection.
var errRefused = errors.New("goredis: the call had returned: command not sent")

// errRefusedKeep is the refusal when nothing of the command can have left
// the write buffer: a redis.Error, so that go-redis keeps the connection,
// and resets the buffer before its next write.
type errRefusedKeep struct{}

func (errRefusedKeep) Error() string { return errRefused.Error() }

// RedisError marks errRefusedKeep as a redis.Error.
func (errRefusedKeep) RedisError() {}

// fits reports whether a command on keys surely fits in the client's write
// buffer before its token: then go-redis' buffered writer has sent none of
// it when the guard refuses.
func (n *redisNode) fits(keys []string) bool {
	size := 256 + maxScript // the command name, SHA1 or source, lengths
	for _, k := range keys {
		size += len(k) + 16
	}
	return size <= n.writeBuf
}

// maxScript is the length of the longest script, sent by EVAL.
var maxScript = func() int {
	s := node.LuaScripts()
	return max(len(s.Acquire.Src), len(s.Extend.Src), len(s.Release.Src), len(s.Inspect.Src),
		len(s.AcquireFenced.Src), len(s.ConfirmFence.Src), len(s.Transfer.Src), len(s.Leave.Src),
		len(s.AcquireShared.Src), len(s.ExtendShared.Src), len(s.ReleaseShared.Src),
		len(s.Announce.Src), len(s.InspectAnnounce.Src))
}()

// result is cmd's reply, a nil reply (redis.Nil) included.
func result(cmd *redis.Cmd) (any, error) {
	v, err := cmd.Result()
	if err == redis.Nil {
		return nil, nil
	}
	return v, err
}

// fail wraps err in a *node.Error of its kind; nil stays nil.
func (n *redisNode) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	return node.Fail(n.addr, op, kind(err), err)
}

// kind is the kind of the errors only go-redis makes, or nil for the
// rest, which node.Classify sorts out (net and TLS errors, context
// deadlines, WRONGPASS/NOAUTH/NOPERM).
func kind(err error) error {
	switch {
	case errors.Is(err, redis.ErrClosed):
		return node.ErrClosed
	case errors.Is(err, redis.ErrPoolTimeout):
		return node.ErrTimeout
	case isProtocol(err):
		return node.ErrProtocol
	}
	return nil
}

// isProtocol reports whether err is go-redis' parser failing on what the
// peer sent: not the Redis protocol.
func isProtocol(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		return false // a reply the server sent, in the protocol
	}
	msg := err.Error()
	for _, p := range protocolErrors {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// protocolErrors are the prefixes of the errors of go-redis' RESP reader
// (internal/proto) about malformed replies.
var protocolErrors = []string{
	"redis: can't parse",
	"redis: invalid reply",
	"redis: invalid line",
	"redis: got ", // ... elements in the array/map, wanted ...
	"redis: RESP3 map key",
	"redis: the length of the array must be",
	"redis: can't read raw reply",
	"redis: unsupported pubsub message",
	"expected digit or CRLF",
}
