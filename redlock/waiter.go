package redlock

import (
	"context"
	"errors"

	"github.com/quorumlock/redlock/node"
)

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
// failed attempt can never delete the keys of a later one. The first
// waiting attempt registers the call, once the Leaves of the client's
// call before it have returned. Only an attempt after a failed one asks
// the nodes for the holder's TTL (by script): the first attempt of a
// Lock or RLock call stays one plain SET per node (as TryLock's only
// one, tryOnce).
func (wt *waiter) prepare(ctx context.Context, cfg *config, attempt int) (string, error) {
	c := wt.c
	tok := newToken()
	if wt.grant != "" {
		wt.w.expect(c, node.GrantMessage(wt.grant, tok))
	}
	wt.w.forget(nil)
	if cfg.shared && cfg.reader == "" && attempt > 1 {
		cfg.reader = c.readerCall() // its place on the nodes, for the whole call
	}
	if wt.reg == nil && attempt > 1 {
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
	if out.counter > 0 {
		// Counters only grow: a proposal above the largest one seen
		// is granted by every node that has not moved past it since.
		wt.propose = max(wt.propose, out.counter+1)
	}
	wt.perm = mergeRefusals(wt.perm, out.perm)
	if out.err.ctxErr != nil || wt.c.hopeless(wt.perm) {
		return prev, true
	}
	return prev, false
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
