package redlock

import (
	"context"
	"errors"
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
	var giveUp time.Time // WithMaxWait's limit, on the client's clock
	if cfg.maxWait > 0 {
		giveUp = start.Add(cfg.maxWait)
	}
	if once || !cfg.takesTurns() {
		// TryLock, and readers: they neither queue nor take turns.
		l, attempts, err = c.retry(ctx, key, cfg, false, giveUp)
	} else {
		l, attempts, err = c.wait(ctx, key, cfg, giveUp)
	}
	if h := c.cfg.hooks.Acquire; h != nil {
		h(AcquireInfo{Key: key, Wait: c.clk.Since(start), Attempts: attempts, Err: err})
	}
	return l, err
}

// wait is Lock's retry loop behind the key's local queue: it waits for
// this call's turn among the client's waiters for key, then retries.
func (c *Client) wait(ctx context.Context, key string, cfg *config, giveUp time.Time) (l *Lock, attempts int, err error) {
	turn := c.join(key)
	defer func() { c.leave(key, turn, l) }()
	if err := c.awaitTurn(ctx, turn, giveUp, key); err != nil {
		return nil, 0, err
	}
	return c.retry(ctx, key, cfg, true, giveUp)
}

// retry makes attempts until one succeeds, cfg.retry gives up or cfg.maxWait has passed; it
// returns the number of attempts made. After the first failure it
// subscribes to the key's releases and, once subscribed, tries once more
// at once (a release in between is not missed); later waits end at the
// first release notification, at the moment the holder's keys expire on a
// majority, or after the retry delay, whichever comes first. A call that
// heads key's local queue (queued) also takes the lock when an Unlock of
// this client hands it over (see handoff.go).
func (c *Client) retry(ctx context.Context, key string, cfg *config, queued bool, giveUp time.Time) (l *Lock, attempt int, err error) {
	// A key this client had to wait for lately is likely held again: the
	// call subscribes first and queues from its first attempt (see
	// hotFor) instead of spending a round on a plain SET to learn that.
	// (Lock only, as queued says: TryLock never queues, readers take no turns.)
	wt := waiter{c: c, key: key, queued: queued, giveUp: giveUp, hot: queued && c.contended(key)}
	defer func() { wt.end(l, err) }()
	for attempt = 1; ; attempt++ {
		if g, waited, err := wt.awaitHandoff(ctx, cfg); waited {
			if g != nil || err != nil {
				return g, attempt - 1, err
			}
			attempt-- // no attempt made: the loop checks the holder again
			continue
		}
		tok, err := wt.prepare(ctx, cfg, attempt)
		if err != nil {
			return nil, attempt - 1, err
		}
		l, out, err := c.attempt(ctx, key, cfg, attempt > 1 || wt.hot, wt.ticket, wt.grant, tok)
		switch {
		case err != nil:
			return nil, attempt, err
		case out == nil:
			return l, attempt, nil
		}
		prev, stop := wt.failed(out, attempt)
		if stop {
			return nil, attempt, out.err
		}
		if g, err := wt.pause(ctx, cfg, out, attempt, prev); g != nil || err != nil {
			return g, attempt, err
		}
	}
}

// waiter is one retry call's state across its attempts. (The call's
// config is passed to the methods that read it, not kept here: a
// pointer in this value would move the config of every TryLock to the
// heap, one allocation per uncontended cycle.)
type waiter struct {
	c      *Client
	key    string
	queued bool      // Lock: the call heads key's local queue, and queues on the nodes
	giveUp time.Time // WithMaxWait's limit, on the client's clock; zero: none
	hot    bool      // the key was contended lately: subscribe and queue from the first attempt

	w       *watches
	o       *offer
	perm    []int8      // per node, as refusals: what its last reply said
	asked   int         // waits so far: each asks cfg.retry with the next number (see RetryStrategy)
	ticket  int64       // this call's place in the nodes' queue for key; 0 before it has one
	grant   string      // the node.Key.Grant this call asks for once it queues (see granted)
	lost    bool        // a waiting attempt left a node's reply unknown: no grant is counted
	refused bool        // an attempt failed for a reason a retry may change: this call waited
	sent    []*inflight // waiting attempts whose commands may still register the call on a node
	requeue bool        // a rollback of a waiting attempt requeued the call (node.Key.Requeue)
	reg     *node.Key   // the call's registration, from its first waiting attempt (see register)
}

// end is retry's last step, whatever ended it: l the lock it returns,
// err its error.
func (wt *waiter) end(l *Lock, err error) {
	c := wt.c
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
	if wt.refused && wt.queued {
		// Also when a grant or a handoff ended the wait after the
		// first attempt (attempt is 1 then): a key whose holders
		// hand it on by grant stays hot.
		c.waited(wt.key)
	}
}

// awaitHandoff waits, instead of trying the nodes, while a lock of this
// client holds the key, or its Unlock is handing it to this call, or
// releasing it and will poke this call once the release has returned:
// for the handoff or the poke, its retry delay apart (a delay that ends
// while awaited sends nothing). (A retry delay that ended while the
// transfer was on its way sent an attempt that the nodes could only
// refuse: about one handoff in seven with eight goroutines and 1 ms
// holds.) waited is false when the call should try the nodes; with it,
// the lock handed over, or the error that ends the call, or neither:
// look again.
func (wt *waiter) awaitHandoff(ctx context.Context, cfg *config) (g *Lock, waited bool, err error) {
	c := wt.c
	if !wt.queued || !c.heldHere(wt.key) && !c.awaited(wt.o) {
		return nil, false, nil
	}
	if wt.o == nil {
		wt.o = c.offer(wt.key, cfg)
	}
	if wt.o == nil {
		return nil, false, nil
	}
	wt.asked++
	d, again := cfg.retry.Backoff(wt.asked)
	if !wt.giveUp.IsZero() {
		d = max(0, min(d, wt.giveUp.Sub(c.clk.Now())))
	}
	wk, err := c.sleep(ctx, d, nil, wt.o, 0, true)
	switch {
	case wk.g != nil:
		return wk.g, true, nil
	case err == ErrClosed:
		return nil, true, err
	case err != nil, !again, !wt.giveUp.IsZero() && !c.clk.Now().Before(wt.giveUp):
		return nil, true, notStarted("acquire", wt.key, c, ctx, ErrNotAcquired)
	}
	return nil, true, nil
}

// prepare readies attempt number attempt and returns its token: fresh
// per attempt, not just per Lock call, so that a late rollback of a
// failed attempt can never delete the keys of a later one. A hot key's
// call subscribes before its first attempt; the first waiting attempt
// registers the call, once the Leaves of the client's call before it
// have returned. Only an attempt after a failed one asks the nodes for
// the holder's TTL (by script): the first attempt of a Lock call, and
// TryLock's only one, stay one plain SET per node, unless the key is
// hot.
func (wt *waiter) prepare(ctx context.Context, cfg *config, attempt int) (string, error) {
	c := wt.c
	if wt.hot && wt.w == nil && attempt == 1 {
		// Subscribed before the first attempt, which queues; only
		// when this call tries the nodes (not while a lock of this
		// client will hand the key over).
		if wt.w, wt.grant = c.watchWaiting(wt.key, cfg, true); wt.w != nil {
			// Not a wait between attempts: the retry strategy is
			// not asked (it sees each wait once, numbered from 1).
			// A subscription confirms in a round trip.
			_ = wt.w.ready(ctx, c, cfg.timeout()) // an ended ctx or Close ends the attempt
		}
	}
	tok := newToken()
	if wt.grant != "" {
		wt.w.expect(c, node.GrantMessage(wt.grant, tok))
	}
	wt.w.forget(nil)
	if wt.reg == nil && (attempt > 1 || wt.hot) {
		reg, err := c.registerAfterLeaves(ctx, wt.key, wt.grant, cfg.owner(c))
		switch {
		case err == ErrClosed:
			return "", err
		case err != nil:
			return "", notStarted("acquire", wt.key, c, ctx, ErrNotAcquired)
		}
		wt.reg = reg
	}
	return tok, nil
}

// failed takes in failed attempt number attempt (its outcome out): its
// commands that may still register the call, its ticket, its refusals.
// It returns the ticket the call had before it, and stop when no retry
// can help: ctx ended, or the refusals put a majority out of reach.
func (wt *waiter) failed(out *outcome, attempt int) (prev int64, stop bool) {
	out.err.Attempts = attempt
	if out.sent != nil {
		wt.sent = append(pending(wt.sent), out.sent)
		wt.requeue = wt.requeue || out.sent.requeues
	}
	wt.lost = wt.lost || out.lost
	prev = wt.ticket
	if out.queued {
		// Only a round that queued the call on a majority gives a
		// ticket worth keeping: any call that queues later meets
		// that majority on some node, whose counter has reached
		// it, and gets a larger one. A ticket from a minority (a
		// node whose counter lags, the others silent) could put
		// this call ahead of one already queued on a majority.
		wt.ticket = max(wt.ticket, out.ticket)
	}
	wt.perm = mergeRefusals(wt.perm, out.perm)
	if out.err.ctxErr != nil || wt.c.hopeless(wt.perm) {
		return prev, true
	}
	wt.refused = true
	return prev, false
}

// pause is the wait after failed attempt number attempt (its outcome out;
// prev the ticket before it). After the first failure it subscribes to
// the key's releases and, once subscribed, tries once more at once (a
// release in between is not missed); later waits end at the first
// release notification, at the moment the holder's keys expire on a
// majority, or after the retry delay, whichever comes first. It returns
// the lock a handoff or a grant brought meanwhile, or the error that
// ends the call, or neither: attempt again.
func (wt *waiter) pause(ctx context.Context, cfg *config, out *outcome, attempt int, prev int64) (*Lock, error) {
	c := wt.c
	wt.asked++
	d, again := cfg.retry.Backoff(wt.asked)
	if !wt.giveUp.IsZero() {
		left := wt.giveUp.Sub(c.clk.Now())
		again = again && left > 0
		d = min(d, left)
	}
	if !again {
		return nil, out.err
	}
	var err error
	if attempt == 1 {
		if wt.queued && wt.o == nil {
			wt.o = c.offer(wt.key, cfg)
		}
		if wt.w == nil {
			if wt.w, wt.grant = c.watchWaiting(wt.key, cfg, wt.queued); wt.w != nil {
				if err = wt.w.ready(ctx, c, d); err == nil {
					return nil, nil
				}
			}
		}
	}
	if err == nil && out.split && wt.ticket != prev {
		// The nodes gave this call different tickets (a node's
		// counter had started over): queue again at once with the
		// largest, so that every node orders the waiters alike.
		return nil, nil
	}
	if err == nil {
		if out.queued && wt.w.listening(c.quorum) {
			// Queued on a majority, and heard by a majority: the
			// release that reserves the key for this call names
			// it, and wakes no one else. Wake for that, or to
			// renew the place in the queue before its lease ends.
			d = queuePoll
			if !wt.giveUp.IsZero() {
				d = min(d, max(0, wt.giveUp.Sub(c.clk.Now())))
			}
		}
		if out.freeIn > 0 {
			d = min(d, out.freeIn)
		}
		var wk wake
		if wk, err = c.sleep(ctx, d, wt.w, wt.o, c.spread(), true); wk.g != nil {
			return wk.g, nil
		}
		if err == nil && !wt.lost && out.undone() && wt.w.grantedBy(c.quorum) {
			if g := c.granted(wt.key, cfg, wt.grant, wt.ticket, out.started); g != nil {
				return g, nil
			}
		}
	}
	if err != nil {
		if err == ErrClosed {
			return nil, err
		}
		out.err.setContext(ctx)
		return nil, out.err
	}
	return nil, nil
}

// unsent reports whether err says a node call was never sent (its
// breaker was open, or the lock's previous command there had not
// returned): it cannot act later.
func unsent(err error) bool {
	return errors.Is(err, node.ErrCircuitOpen) || errors.Is(err, errPrevPending)
}

// queuePoll is how long a waiter queued on the nodes, and woken by name
// when its turn comes, sleeps between attempts: often enough to renew
// its place (node.WaiterLease) and to find a key reserved for it whose
// announcement it missed.
const queuePoll = node.WaiterLease / 3
