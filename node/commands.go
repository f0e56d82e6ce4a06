package node

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// The lock commands of a Redis node: each runs its script (see
// LuaScripts), or for a first try a plain SET, through call.

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
	name, _ := k.Boxed()
	args := r.argv.Acquire(append(make([]any, 0, 11), r.sc.acquire.hash, 2, name, k.boxedWaiters()), k, ttl, wait)
	reply, err := r.call(ctx, "acquire", r.sc.acquire, "EVALSHA", args)
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
	name, _ := k.Boxed()
	reply, err := r.call(ctx, "extend", r.sc.extend, "EVALSHA", r.argv.Extend(append(make([]any, 0, 5), r.sc.extend.hash, 1, name), k, ttl))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("extend", err)
}

// Release runs release.lua, which publishes the delete when announce is
// set.
func (r *Redis) Release(ctx context.Context, k *Key, announce bool) (Result, error) {
	name, _ := k.Boxed()
	args := append(make([]any, 0, 12), r.sc.release.hash, 2, name, k.boxedWaiters())
	if k.Record {
		args[1] = 3
		args = append(args, AnnounceKey(k.Name))
	}
	reply, err := r.call(ctx, "release", r.sc.release, "EVALSHA", r.argv.Release(args, k, announce))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("release", err)
}

// AcquireFenced runs acquire_fenced.lua: acquire.lua plus, when the key
// was set, the fence counter raised in the same step (see Fencer).
func (r *Redis) AcquireFenced(ctx context.Context, k *Key, ttl, counterTTL time.Duration) (Result, error) {
	keys := append(make([]any, 0, 16), r.sc.acquireFenced.hash, 3, k.Name, FenceKey(k.Name), k.Waiters())
	reply, err := r.call(ctx, "acquire", r.sc.acquireFenced, "EVALSHA", r.argv.AcquireFenced(keys, k, ttl, counterTTL))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseAcquire(reply)
	return res, r.fail("acquire", err)
}

// ConfirmFence runs confirm_fence.lua (see Fencer).
func (r *Redis) ConfirmFence(ctx context.Context, k *Key, fence int64, counterTTL time.Duration) (Result, error) {
	keys := append(make([]any, 0, 7), r.sc.confirmFence.hash, 2, k.Name, FenceKey(k.Name))
	reply, err := r.call(ctx, "confirm", r.sc.confirmFence, "EVALSHA", r.argv.ConfirmFence(keys, k, fence, counterTTL, "", 0))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("confirm", err)
}

// Transfer runs transfer.lua (see Handoffer).
func (r *Redis) Transfer(ctx context.Context, from, to *Key, ttl time.Duration) (Result, error) {
	name, _ := from.Boxed()
	keys := append(make([]any, 0, 8), r.sc.transfer.hash, 2, name, from.boxedWaiters())
	reply, err := r.call(ctx, "transfer", r.sc.transfer, "EVALSHA", r.argv.Transfer(keys, from, to, ttl))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("transfer", err)
}

// Leave removes k.Owner from the key's waiters (see Handoffer).
func (r *Redis) Leave(ctx context.Context, k *Key) error {
	// k.Name, not a boxed name: an owed Leave's key is a copy renamed
	// for another slot (redlock's owe.go).
	keys := append(make([]any, 0, 6), r.sc.leave.hash, 2, k.Name, k.Waiters())
	_, err := r.call(ctx, "leave", r.sc.leave, "EVALSHA", r.argv.Leave(keys, k))
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
	name, _ := k.Boxed()
	keys := append(make([]any, 0, 10), r.sc.acquireShared.hash, 3, name, k.boxedWaiters(), k.boxedReaders())
	reply, err := r.call(ctx, "acquire", r.sc.acquireShared, "EVALSHA", r.argv.AcquireShared(keys, k, ttl, wait))
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
// it does not look at the queue: on a free key with a writer queued (a
// holder's or the queue head's time ran out; a release reserves the key
// for the head, readers included) one reader may come in ahead of the
// writer, as a writer may (see docs/DESIGN.md, "A reader alone is held
// in the value").
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
	name, _ := k.Boxed()
	keys := append(make([]any, 0, 6), r.sc.extendShared.hash, 2, name, k.boxedReaders())
	reply, err := r.call(ctx, "extend", r.sc.extendShared, "EVALSHA", r.argv.Extend(keys, k, ttl))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("extend", err)
}

// ReleaseShared runs release_shared.lua (see Sharer).
func (r *Redis) ReleaseShared(ctx context.Context, k *Key, announce bool) (Result, error) {
	name, _ := k.Boxed()
	keys := append(make([]any, 0, 8), r.sc.releaseShared.hash, 3, name, k.boxedWaiters(), k.boxedReaders())
	reply, err := r.call(ctx, "release", r.sc.releaseShared, "EVALSHA", r.argv.ReleaseShared(keys, k, announce))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("release", err)
}

// Inspect runs inspect.lua.
func (r *Redis) Inspect(ctx context.Context, key string) (Info, error) {
	reply, err := r.evalKeys(ctx, "inspect", r.sc.inspect, 2, key, ReadersKey(key))
	if err != nil {
		return Info{}, err
	}
	info, err := ParseInspect(reply)
	return info, r.fail("inspect", err)
}

// Announce runs announce.lua (see Announcer).
func (r *Redis) Announce(ctx context.Context, k *Key, text string, ttl time.Duration) (Result, error) {
	if text == "" {
		return Result{}, r.fail("announce", errEmptyText)
	}
	keys := append(make([]any, 0, 7), r.sc.announce.hash, 2, k.Name, AnnounceKey(k.Name))
	reply, err := r.call(ctx, "announce", r.sc.announce, "EVALSHA", r.argv.Announce(keys, k, text, ttl))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("announce", err)
}

// ConfirmAnnounce runs confirm_fence.lua with a record (see Announcer).
func (r *Redis) ConfirmAnnounce(ctx context.Context, k *Key, fence int64, counterTTL time.Duration, text string, ttl time.Duration) (Result, error) {
	if text == "" {
		return Result{}, r.fail("confirm", errEmptyText)
	}
	keys := append(make([]any, 0, 10), r.sc.confirmFence.hash, 3, k.Name, FenceKey(k.Name), AnnounceKey(k.Name))
	reply, err := r.call(ctx, "confirm", r.sc.confirmFence, "EVALSHA", r.argv.ConfirmFence(keys, k, fence, counterTTL, text, ttl))
	if err != nil {
		return Result{}, err
	}
	res, err := ParseStatus(reply)
	return res, r.fail("confirm", err)
}

// errEmptyText refuses an empty announcement: announce.lua reads "" as a
// withdrawal.
var errEmptyText = errors.New("empty announcement")

// InspectAnnounce runs inspect_announce.lua (see Announcer).
func (r *Redis) InspectAnnounce(ctx context.Context, key string) (Announced, error) {
	reply, err := r.evalKeys(ctx, "inspect", r.sc.inspectAnnounce, 2, key, AnnounceKey(key))
	if err != nil {
		return Announced{}, err
	}
	a, err := ParseAnnounced(reply)
	return a, r.fail("inspect", err)
}
