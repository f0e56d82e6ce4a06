package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
)

// Lock is a lock held on a majority of nodes until Until(). Its methods
// are safe for concurrent use; those of a nil *Lock return ErrNilLock or
// zero values and never panic.
type Lock struct {
	// Set when the lock is made and never changed. (Its client is its
	// chain's, ch.c.)
	k     node.Key
	ttl   time.Duration // the TTL it was taken with; KeepAlive extends by it
	drift float64
	keep  keepPolicy
	mode  mode // the kind of hold: its local queue (see queue), whether it is handed on
	// Set by grant, before the Lock is handed out, and never changed.
	taken time.Time // start of the acquisition, for MaxHold
	fence int64     // 0 unless fenced

	// op is a one-slot semaphore: Extend and Unlock hold it while they
	// send and count, so that the lock's commands enter ch one at a time.
	// Waiting for it honours the caller's context.
	op chan struct{}
	// ch is the lock's command chain: its commands are issued by the
	// attempt that made the lock, then by whoever holds op.
	ch chain
	// reseed is the last re-seed round sent (see extend), nil before
	// the first; owned by whoever holds op.
	reseed *round

	// restoring is set, for a lock a grant made valid for less than its
	// TTL, by Client.granted before the Lock is handed out (nil
	// otherwise; see restoring).
	restoring *restoring

	// mu guards until, short and released and is held only briefly, so
	// that TTL and Until never wait for the network.
	mu       sync.Mutex
	until    time.Time // end of validity, on the client's clock
	from     time.Time // start of the last round that set until
	short    bool      // until is still a grant's (Client.granted): no extend has succeeded
	released bool      // Unlock was called

	handed bool // it came by a handoff (a transfer), not an acquire; set before it is handed out, never changed
}

// newLock returns the lock an attempt of c with cfg tries to take as k;
// it holds nothing until grant.
func newLock(c *Client, k node.Key, cfg *config) *Lock {
	l := &Lock{k: k, ttl: cfg.ttl, drift: cfg.driftFactor, keep: cfg.keep, mode: cfg.mode}
	l.ch = chain{c: c, k: &l.k, shared: cfg.shared, timeout: cfg.timeout(), maxTimeout: cfg.maxTimeout()}
	return l
}

// queue is the key of the client's local queue whose head l's Unlock
// hands it to: its own key's, or a semaphore's for a permit (any slot
// will do for the semaphore's waiters).
func (l *Lock) queue() string {
	if l.mode.local != "" {
		return l.mode.local
	}
	return l.k.Name
}

// grant makes l held from a round that began at start, with fence (0
// unless fenced).
func (l *Lock) grant(start time.Time, fence int64) {
	l.op = make(chan struct{}, 1)
	l.taken, l.from, l.fence = start, start, fence
	l.until = clock.Until(start, l.ttl, l.drift)
}

// Key returns the locked key, prefix included.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.k.Name
}

// Token returns the random value stored under the key on the nodes: 32
// hex digits from crypto/rand, or, for a lock the nodes granted to a
// waiting Lock call, "~" + the client's tag + ":" + 32 hex digits
// (node.GrantValue). Use it for check-and-set against the nodes; it is
// not a fencing token (it does not increase).
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.k.Token
}

// Fence returns the lock's fencing token: larger than that of every
// earlier grant of the same key, by any client, so that storage which
// remembers the largest token it has seen can reject the writes of a
// holder that outlived its lock (a pause, a slow network) with a smaller
// one. It is 0 for a lock taken without fencing (see Fenced), and fixed
// for the life of the lock: Extend does not change it. docs/FENCING.md
// says which failures can still break the order.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Until returns the end of the validity window: the lock is exclusive
// before this instant and not after it. It is measured on the client's
// monotonic clock; compare it with time.Now() of this process only.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// TTL returns the validity left now, 0 once it has run out or after
// Unlock.
func (l *Lock) TTL() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left()
}

func (l *Lock) left() time.Duration {
	if l.released {
		return 0
	}
	return max(0, -l.ch.c.clk.Since(l.until))
}

// Extend makes the lock's keys live at least ttl more on the nodes that
// still hold its token (a node never shortens a key: a late, stale extend
// must not undo a newer one). It succeeds only if a majority did so before
// the current validity ran out. On success, nodes that answered that the
// key is absent (restarted empty, say) get it back by SET NX PX ttl, in
// the background: the holder's margin is restored, and NX never takes a
// key that another holder set (docs/DESIGN.md, "Re-seeding"); one re-seed
// per lock runs at a time, and an Extend while one is out sends none.
// Until then moves to the start of the call
// plus ttl minus drift, which leaves a validity of ttl minus the call's
// duration minus drift — also when ttl is shorter than what was left.
//
// Errors: ErrNotHeld when the lock had expired, was unlocked, or a
// majority no longer holds the token; ErrInvalid for a ttl that is not a
// positive whole number of milliseconds above the node timeout, or that
// is too short ever to be valid (see WithTTL); ErrClosed
// after the client's Close; otherwise a *QuorumError without a sentinel
// (nodes failed or ctx ended), after which the lock still holds until
// Until() — which never moves later on failure, but moves earlier if the
// new ttl is shorter than what was left. An Extend that sends nothing
// (ctx had already ended, the lock was unlocked or had expired) leaves
// Until unchanged.
//
// Extend and Unlock on one Lock run one at a time: each waits for the one
// in progress unless ctx ends first, and waits on the nodes for about one
// node timeout at most. TTL and Until never wait for them. While Extend
// runs, Until is at most its start plus ttl minus drift.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return ErrNilLock
	}
	if err := checkTTL(ttl, l.drift); err != nil {
		return err
	}
	if ttl <= l.ch.timeout {
		return fmt.Errorf("%w: TTL %v must be above the node timeout %v", ErrInvalid, ttl, l.ch.timeout)
	}
	if err := l.begin(ctx, "extend"); err != nil {
		return err
	}
	defer l.end()
	c, k := l.ch.c, l.k
	// Until follows the ttl asked for, also when it is shorter than what
	// was left (the nodes keep the longer TTL, which errs on the safe
	// side): it drops to what ttl promises at once, and stays there if
	// the extend fails. Keys that take ttl expire no sooner than the
	// bound, since the calls start after it is read.
	start := c.clk.Now()
	bound := clock.Until(start, ttl, l.drift)
	l.mu.Lock()
	released, left, ended := l.released, l.left(), ctx.Err() != nil
	if !ended && left > 0 && bound.Before(l.until) {
		l.until = bound
	}
	l.mu.Unlock()
	switch {
	case released:
		return l.notHeld("extend", "already unlocked")
	case left <= 0:
		return l.notHeld("extend", "validity ran out")
	case ended:
		// Nothing is sent for a context that has already ended; the lock
		// holds as before.
		return notStarted("extend", k.Name, c, ctx, nil)
	}
	err := l.extend(ctx, ttl)
	if h := c.cfg.hooks.Extend; h != nil {
		h(OpInfo{Key: k.Name, Duration: c.clk.Since(start), Err: err})
	}
	return err
}

// extend sends an extend round and counts it; Extend has checked
// everything else.
func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	c, k := l.ch.c, l.k
	r := l.ch.send(ctx, command{op: "extend", ttl: ttl})
	t := r.Wait(ctx.Done(), c.quorum)
	validity := clock.Validity(ttl, r.Elapsed(), l.drift)
	newUntil := clock.Until(r.Started(), ttl, l.drift)
	l.mu.Lock()
	inTime := l.left() > 0
	ok := t.Reached(c.quorum) && inTime && validity > 0
	if ok {
		l.until, l.from, l.short = newUntil, r.Started(), false
	}
	l.mu.Unlock()
	if ok {
		// A node that restarted empty answers "absent", often after the
		// majority has decided (a new connection, a script to load), so
		// a reseed is queued whenever an answer was still out; it calls
		// only the nodes whose extend ends up Absent (round.passes).
		// One at a time: a node that never answers holds each reseed
		// for a node timeout, and extends in a row would otherwise pile
		// one up per Extend; the next Extend after it ends sends one.
		if (t.Absent > 0 || t.Pending > 0) && (l.reseed == nil || l.reseed.left.Load() == 0) {
			l.reseed = l.ch.send(ctx, command{op: "reseed", ttl: ttl})
		}
		return nil
	}
	qe := newQuorumError("extend", k.Name, c, r.Snapshot(nil), nil, ctx)
	qe.Validity = validity
	if !inTime || t.Refused(c.quorum) {
		qe.sentinel = ErrNotHeld
	}
	return qe
}

// Unlock deletes the key on every node where it still holds the lock's
// token. It returns nil when the lock was still valid when Unlock was
// called and a majority released it; ErrNotHeld (a *QuorumError, or a
// plain error if the validity had already run out) when the lock had
// expired, was already unlocked or was taken over — the caller's critical
// section outran the lock; ErrClosed after the client's Close; another
// *QuorumError when too many nodes failed to tell (the keys then expire by
// their TTL). After Unlock, TTL is 0 whatever the outcome.
//
// When another goroutine of the same client waits in Lock for the key and
// no other client is registered as waiting on the nodes, Unlock hands the
// lock to it instead, in one round (a transfer on every node; the nodes
// must be node.Handoffers): nil means a majority transferred, or, when it
// did not, that the lock was released as above (docs/DESIGN.md, "Handing
// over within one client").
func (l *Lock) Unlock(ctx context.Context) error {
	if l == nil {
		return ErrNilLock
	}
	if err := l.begin(ctx, "unlock"); err != nil {
		return err
	}
	defer l.end()
	c, k := l.ch.c, l.k
	l.mu.Lock()
	released, expired := l.released, l.left() <= 0
	l.released = true // TTL is 0 from now on, whatever the nodes say
	l.mu.Unlock()
	if released {
		return l.notHeld("unlock", "already unlocked")
	}
	if l.restoring != nil {
		select {
		case l.restoring.hurry <- struct{}{}: // a pending restore ends, once this returns
		default:
		}
	}
	start := c.clk.Now()
	err := l.unlock(ctx, expired)
	if h := c.cfg.hooks.Unlock; h != nil {
		h(OpInfo{Key: k.Name, Duration: c.clk.Since(start), Held: start.Sub(l.taken), Err: err})
	}
	return err
}

// unlock hands the lock to this client's next waiter for its key, if
// one is ready (see handoff.go), or releases it; expired says the
// validity had run out before Unlock was called.
func (l *Lock) unlock(ctx context.Context, expired bool) error {
	to, waiting := l.ch.c.claim(ctx, l, expired)
	if to != nil {
		return l.handOff(ctx, to)
	}
	err := l.release(ctx, expired, nil)
	if err == nil && l.mode.local != "" {
		l.ch.c.freedSlot(l.mode.local, l.k.Name)
	}
	if waiting != nil {
		l.ch.c.poke(waiting, l.mode.takesTurns())
	}
	return err
}

// release sends a release round and counts it; freed (nil: none) marks
// the nodes where a transfer already removed the key.
func (l *Lock) release(ctx context.Context, expired bool, freed []bool) error {
	c := l.ch.c
	r := l.ch.send(ctx, command{op: "release", announce: true, freed: freed})
	t := r.Wait(ctx.Done(), c.quorum)
	switch {
	case expired:
		return l.notHeld("unlock", "validity ran out before unlock")
	case t.Reached(c.quorum):
		return nil
	}
	qe := newQuorumError("unlock", l.k.Name, c, r.Snapshot(nil), nil, ctx)
	if t.Refused(c.quorum) {
		qe.sentinel = ErrNotHeld
	}
	return qe
}

// begin starts an Extend or Unlock (op names it in errors): it takes the
// op slot, waiting for an Extend or Unlock in progress unless ctx ends
// first, and begins an operation on the client. It returns ErrClosed once
// the client is closed, or a *QuorumError with ctx's error. end undoes a
// successful begin.
func (l *Lock) begin(ctx context.Context, op string) error {
	select {
	case l.op <- struct{}{}:
	case <-ctx.Done():
		return notStarted(op, l.k.Name, l.ch.c, ctx, nil)
	}
	if !l.ch.c.begin() {
		<-l.op
		return ErrClosed
	}
	return nil
}

func (l *Lock) end() {
	l.ch.c.life.bg.Done()
	<-l.op
}

func (l *Lock) notHeld(op, why string) error {
	return wrap(fmt.Sprintf("redlock: %s %q: %s", op, l.k.Name, why), ErrNotHeld)
}
