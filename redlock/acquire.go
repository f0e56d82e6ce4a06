package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/redlock/node"
)

// TryLock makes exactly one attempt to take key. It returns a Lock, or an
// error wrapping ErrNotAcquired (a *QuorumError) when no majority was had
// within the validity window, or ErrInvalid for bad input.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	cfg.retry = NoRetry()
	return c.lock(ctx, c.cfg.prefix+key, &cfg, true)
}

// Lock takes key, retrying with the client's RetryStrategy until it holds
// the lock, the strategy gives up, WithMaxWait's limit passes, or ctx
// ends; with the defaults (no attempt limit, no wait limit) only ctx
// bounds the wait, also while the nodes do not answer. Refusals no retry
// changes (credentials, no scripts, ...) on a majority end it at once. On
// failure the error is a *QuorumError of the last attempt, wrapping
// ErrNotAcquired and, when ctx ended, ctx's error. Goroutines of one
// client waiting for the same key take turns in FIFO order, and the lock
// is handed from one to the next by Unlock (see Lock.Unlock). A lock that
// another client's Unlock handed to this call directly (a grant, see
// Lock.Token) is at first valid for less than its TTL: for
// node.GrantTTL (2 s) from this call's last attempt. If it is still
// held half-way through that, one extend in the background restores
// the TTL (at once under a KeepAlive whose LostMargin needs it), so
// that a short critical section costs no extend.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return c.lock(ctx, c.cfg.prefix+key, &cfg, false)
}

// lock is Lock (or TryLock, once) for a checked configuration and the
// full key; it reports to the Acquire hook.
func (c *Client) lock(ctx context.Context, key string, cfg *config, once bool) (*Lock, error) {
	start := c.clk.Now()
	var (
		l        *Lock
		attempts int
		err      error
	)
	if once {
		l, attempts, err = c.tryOnce(ctx, key, cfg)
	} else {
		// Lock (turns, queue, handoff), and RLock (readers take
		// no turns and do not queue: cfg.takesTurns).
		wt := waiter{c: c, key: key, queued: cfg.takesTurns()}
		if cfg.maxWait > 0 {
			wt.giveUp = start.Add(cfg.maxWait)
		}
		l, err = c.acquire(ctx, cfg, target{k: &wt})
		attempts = wt.made
	}
	if h := c.cfg.hooks.Acquire; h != nil {
		h(AcquireInfo{Key: key, Wait: c.clk.Since(start), Attempts: attempts, Err: err})
	}
	return l, err
}

// tryOnce is TryLock's one plain attempt. It needs nothing of the wait
// loop (no turn, no queue, no subscription, no wait): kept out of it,
// an uncontended TryLock does not move a waiter to the heap.
func (c *Client) tryOnce(ctx context.Context, key string, cfg *config) (*Lock, int, error) {
	l, out, err := c.attempt(ctx, key, cfg, false, asks{}, "", nil)
	if out != nil {
		out.err.Attempts = 1
		return nil, 1, out.err
	}
	return l, 1, err
}

// A target is what one waiting call tries to take: a lock's key (k, a
// waiter: Lock and RLock) or a semaphore's slots (s, a semWait:
// Semaphore.Acquire); one of the two is set. The wait loop
// (Client.acquire) is the same for both; a target answers each of its
// steps. (A struct, not an interface: through an interface the waiter
// and the call's config of every uncontended Lock moved to the heap, two
// allocations and about 580 B per cycle, measured with
// BenchmarkLockUnlock.)
type target struct {
	k *waiter
	s *semWait
}

// turn names the client's local queue the call takes its turn in ("":
// none, it does not take turns), the key its errors name, and
// WithMaxWait's limit (zero: none).
func (t target) turn() (local, key string, giveUp time.Time) {
	if t.s != nil {
		return t.s.turn()
	}
	return t.k.turn()
}

// try makes the call's next attempt at the nodes (a semaphore's: a
// round over its slots). done: the call ends with l or err; otherwise
// the attempt failed and the call may wait.
func (t target) try(ctx context.Context, cfg *config) (l *Lock, done bool, err error) {
	if t.s != nil {
		return t.s.try(ctx, cfg)
	}
	return t.k.try(ctx, cfg)
}

// backoff asks the RetryStrategy and WithMaxWait for the wait after a
// failed try: d, or err when the call gives up, or now when something
// the try learnt says to try again at once.
func (t target) backoff(ctx context.Context, cfg *config) (d time.Duration, now bool, err error) {
	if t.s != nil {
		return t.s.backoff(ctx, cfg)
	}
	return t.k.backoff(ctx, cfg)
}

// subscribe, once, subscribes to the releases of the target and waits
// up to d for the nodes to confirm: now says it subscribed, and the
// loop tries again at once (a release between the failed try and the
// subscription is not missed).
func (t target) subscribe(ctx context.Context, cfg *config, d time.Duration) (now bool, err error) {
	if t.s != nil {
		return t.s.subscribe(ctx, cfg, d)
	}
	return t.k.subscribe(ctx, cfg, d)
}

// sleep waits up to d (Client.sleep) for a release, a reservation, a
// grant or a handoff: it returns a lock handed over or granted, or the
// error that ends the call, or neither: try again.
func (t target) sleep(ctx context.Context, cfg *config, d time.Duration) (*Lock, error) {
	if t.s != nil {
		return t.s.sleep(ctx, cfg, d)
	}
	return t.k.sleep(ctx, cfg, d)
}

// end is the call's last step once its turn came, l the lock it
// returns; it returns the lock the client's next waiter in the local
// queue waits for before it tries the nodes (nil: none).
func (t target) end(l *Lock) (next *Lock) {
	if t.s != nil {
		return t.s.end(l)
	}
	return t.k.end(l)
}

// acquire is the one wait loop of every call that may wait for a lock:
// Lock, RLock and Semaphore.Acquire. (TryLock and TryRLock make one
// plain attempt, tryOnce; TryAcquire one round, Semaphore.try.)
//
//	turn ─► try ──ok/error──► end
//	         ▲  └─failed─► backoff ──give up──► end
//	         │                │ now
//	         ├────────────────┤
//	         │           subscribe (once) ──subscribed──┐
//	         │                │                        │
//	         │              sleep ──lock/error──► end  │
//	         └────────────────┴────────────────────────┘
//
// A call that takes turns waits first for its turn among the client's
// calls for the same key or semaphore (Client.join); only the head of
// that local queue tries the nodes.
func (c *Client) acquire(ctx context.Context, cfg *config, t target) (l *Lock, err error) {
	local, key, giveUp := t.turn()
	if local != "" {
		turn := c.join(local)
		var next *Lock // what the next waiter of the client waits for
		defer func() { c.leave(local, turn, next) }()
		if err := c.awaitTurn(ctx, turn, giveUp, key); err != nil {
			return nil, err
		}
		defer func() { next = t.end(l) }()
	} else {
		defer func() { t.end(l) }()
	}
	for {
		if l, done, err := t.try(ctx, cfg); done {
			return l, err
		}
		d, now, err := t.backoff(ctx, cfg)
		switch {
		case err != nil:
			return nil, err
		case now:
			continue
		}
		if now, err := t.subscribe(ctx, cfg, d); err != nil {
			return nil, err
		} else if now {
			continue
		}
		if l, err := t.sleep(ctx, cfg, d); l != nil || err != nil {
			return l, err
		}
	}
}

// waiter is one Lock or RLock call's state across its attempts: the
// target of the wait loop (Client.acquire) for one key. Its tokens
// are fresh per attempt (see prepare). A Lock call (queued) takes its
// turn in key's local queue, queues on the nodes, and takes the lock
// when an Unlock of this client hands it over (see handoff.go). (Its
// config is passed to the methods that read it, not kept here: a
// pointer in this value would move every Lock call's config to the
// heap.)
type waiter struct {
	c      *Client
	key    string
	queued bool      // Lock: the call heads key's local queue, and queues on the nodes
	giveUp time.Time // WithMaxWait's limit, on the client's clock; zero: none

	made       int      // attempts made
	out        *outcome // the last failed attempt's
	prev       int64    // the ticket before it
	subscribed bool     // subscribe ran

	w      *watches
	o      *offer
	perm   []int8 // per node, as refusals: what its last reply said
	asked  int    // waits so far: each asks cfg.retry with the next number (see RetryStrategy)
	ticket int64  // this call's place in the nodes' queue for key; 0 before it has one
	grant  string // the node.Key.Grant this call asks for once it queues (see granted)
	// propose is, for a fenced call, the fence its next waiting attempt
	// proposes for a grant (node.Key.GrantFence): above every counter
	// its attempts were refused with; 0 before one reported one.
	// proposed is the last attempt's, the fence of a grant it gets.
	propose, proposed int64
	lost              bool        // a waiting attempt left a node's reply unknown: no grant is counted
	sent              []*inflight // waiting attempts whose commands may still register the call on a node
	requeue           bool        // a rollback of a waiting attempt requeued the call (node.Key.Requeue)
	reg               *node.Key   // the call's registration, from its first waiting attempt (see register)
	rolling           []*outcome  // failed attempts whose rollback may still be on its way: settled at the end
}

// turn is the key's local queue for a Lock call; readers take no turns.
func (wt *waiter) turn() (local, key string, giveUp time.Time) {
	if wt.queued {
		local = wt.key
	}
	return local, wt.key, wt.giveUp
}

// try makes the call's next attempt: once no lock of this client holds
// the key or hands it over (awaitHandoff), prepared (prepare), then
// taken in by failed. The first attempt is a plain SET per node; every
// later one waits (queues, and asks the holder's TTL).
func (wt *waiter) try(ctx context.Context, cfg *config) (*Lock, bool, error) {
	c := wt.c
	for {
		g, waited, err := wt.awaitHandoff(ctx, cfg)
		if !waited {
			break
		}
		if g != nil || err != nil {
			return g, true, err
		}
	}
	n := wt.made + 1
	tok, err := wt.prepare(ctx, cfg, n)
	if err != nil {
		return nil, true, err
	}
	p := asks{ticket: wt.ticket, grant: wt.grant, fence: wt.propose}
	l, out, err := c.attempt(ctx, wt.key, cfg, n > 1, p, tok, &wt.rolling)
	wt.proposed = p.fence // the fence of a grant this attempt's registration gets
	wt.made = n
	switch {
	case err != nil:
		return nil, true, err
	case out == nil:
		return l, true, nil
	}
	prev, stop := wt.failed(out, n)
	if stop {
		return nil, true, out.err
	}
	wt.out, wt.prev = out, prev
	return nil, false, nil
}

// backoff is the RetryStrategy's next delay, within WithMaxWait's
// limit. A call whose last attempt the nodes gave different tickets (a
// node's counter had started over) queues again at once with the
// largest, so that every node orders the waiters alike; so does a
// fenced call that has learnt a fence to propose since it registered
// without one (its first attempt's replies showed no counter), or whose
// proposal a majority's counters have reached (no majority could grant
// it), so that the release it waits for grants it. (Counters pass a
// proposal only as other holders take the key.)
func (wt *waiter) backoff(_ context.Context, cfg *config) (time.Duration, bool, error) {
	c := wt.c
	wt.asked++
	d, again := cfg.retry.Backoff(wt.asked)
	if !wt.giveUp.IsZero() {
		left := wt.giveUp.Sub(c.clk.Now())
		again = again && left > 0
		d = min(d, left)
	}
	switch {
	case !again:
		return 0, false, wt.out.err
	case wt.out.split && wt.ticket != wt.prev,
		cfg.fenced && wt.grant != "" && wt.propose > 0 && (wt.proposed == 0 || wt.out.passed >= c.quorum):
		return 0, true, nil
	}
	return d, false, nil
}

// subscribe, after the first failed attempt, readies the call's offer
// for a handoff (Lock) and subscribes to the key's releases (those that
// reserve or grant it to this call included, see watchWaiting).
func (wt *waiter) subscribe(ctx context.Context, cfg *config, d time.Duration) (bool, error) {
	c := wt.c
	if wt.subscribed {
		return false, nil
	}
	wt.subscribed = true
	if wt.queued && wt.o == nil {
		wt.o = c.offer(wt.key, cfg)
	}
	if wt.w, wt.grant = c.watchWaiting(wt.key, cfg, wt.queued); wt.w == nil {
		return false, nil
	}
	if err := wt.w.ready(ctx, c, d); err != nil {
		return false, wt.ended(ctx, err)
	}
	return true, nil
}

// sleep waits for the key: until the first release notification, the
// moment the holder's keys expire on a majority, or the retry delay d,
// whichever comes first. Queued on a majority and heard by a majority,
// the release that reserves the key for this call names it and wakes no
// one else: the call wakes for that, or to renew its place in the queue
// before its lease ends. After the wait, a grant by a majority is the
// lock, without an attempt (Client.granted).
func (wt *waiter) sleep(ctx context.Context, cfg *config, d time.Duration) (*Lock, error) {
	c, out := wt.c, wt.out
	if out.queued && wt.w.listening(c.quorum) {
		d = queuePoll
		if !wt.giveUp.IsZero() {
			d = min(d, max(0, wt.giveUp.Sub(c.clk.Now())))
		}
	}
	if out.freeIn > 0 {
		d = min(d, out.freeIn)
	}
	wk, err := c.sleep(ctx, d, wt.w, wt.o, c.spread(), true)
	switch {
	case wk.g != nil:
		return wk.g, nil
	case err != nil:
		return nil, wt.ended(ctx, err)
	case !wt.lost && out.undone() && wt.w.grantedBy(c.quorum):
		return c.granted(wt.key, cfg, asks{ticket: wt.ticket, grant: wt.grant, fence: wt.proposed}, out.started), nil
	}
	return nil, nil
}

// ended is the call's error when a wait ends it (ctx ended, Close):
// ErrClosed as it is, else the last attempt's error with ctx's end.
func (wt *waiter) ended(ctx context.Context, err error) error {
	if err == ErrClosed {
		return err
	}
	wt.out.err.setContext(ctx)
	return wt.out.err
}

// end is the call's last step, whatever ended it: l the lock it
// returns, which the client's next waiter for the key waits for.
func (wt *waiter) end(l *Lock) *Lock {
	c := wt.c
	if l == nil {
		for _, o := range wt.rolling {
			o.settle() // a call that fails leaves no key of its attempts when it returns
		}
	}
	if wt.w != nil {
		wt.w.stop()
	}
	c.withdraw(wt.key, wt.o, l)
	if wt.reg != nil {
		// Waiting attempts registered this client as a waiter; a
		// node that set the key dropped the registration itself.
		// (None when a local holder handed the key over before
		// this call made a waiting attempt.)
		c.leaveWaiters(wt.reg, l, wt.sent, wt.requeue)
	}
	return l
}
