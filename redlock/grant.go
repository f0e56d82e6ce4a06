package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
)

// watchWaiting subscribes a waiting Lock call to key's releases (watch;
// a reader's call to the key's channel only) and returns the grant it
// asks for (grantFor, for a call that queues): "" without watches, where
// no one would hear a grant (a reservation lasts a lease at most, a
// grant node.GrantTTL).
func (c *Client) watchWaiting(key string, cfg *config, queued bool) (*watches, string) {
	grant := ""
	if queued {
		grant = c.grantFor(cfg)
	}
	w := c.watch([]string{key}, cfg.reservable(), c.caps.tag, grant != "")
	if w == nil {
		return nil, ""
	}
	return w, grant
}

// grantFor returns a fresh node.Key.Grant for a Lock call that waits with
// cfg, or "" where the nodes would not grant it: semaphores and readers,
// and nodes that are not all Handoffers. (A fenced call asks for it only
// with a fence to propose, see mode.key.)
func (c *Client) grantFor(cfg *config) string {
	if !c.caps.handoff || !cfg.grants() {
		return ""
	}
	return node.GrantValue(c.caps.tag, newToken())
}

// granted returns the lock that a majority of nodes granted this call
// (node.Key.Grant, announced by name) since its last waiting attempt,
// which began at from. The attempt's replies are all in, and its
// rollback has freed every key it set (QuorumError.undone). Each grant
// came after that node had answered: a grant set before would have been
// taken by the attempt (its token in the key), and was announced naming
// the attempt before it. Where the attempt set the key (it was free
// there, reserved for the client, or held an earlier grant), a grant
// came after the rollback's release, which queued the client again
// naming this attempt (see rollback). So no command of this call is left
// to change a grant (a release of an attempt token never frees a grant),
// and the key lives there at least node.GrantTTL from from, which is
// where the validity counts from (then restore extends it, if it is
// still held). It returns nil when more than grantMaxAge has passed
// since from: an attempt then takes the granted keys with a validity
// counted from now.
//
// A fenced call's fence is the one its last attempt proposed (a.fence):
// each node that granted it raised the key's counter to that fence in
// the same step, from below (hand_on in node/scripts/queue.lua), so no
// confirm round is needed. Any earlier holder's confirmed majority
// shares a node with this one, where its counter had reached that
// holder's fence before the grant; any later holder's acquire reads a
// counter of at least this fence on a node of this majority.
func (c *Client) granted(key string, cfg *config, a asks, from time.Time) *Lock {
	age, short := c.clk.Since(from), node.GrantTTL(cfg.ttl)
	if age > grantMaxAge(cfg.ttl) || clock.Validity(short, age, cfg.driftFactor) <= 0 || cfg.fenced && a.fence <= 0 {
		return nil
	}
	k := cfg.key(c, key, a.grant, a) // the grant is its token; a campaign's release takes its record too
	l := newLock(c, k, cfg)
	// The chain as if the grant were the lock's acquire, answered by
	// every node: its release goes to all of them, a grant may come late.
	l.ch.tail = make([]step, len(c.nodes))
	for i := range l.ch.tail {
		l.ch.tail[i] = step{res: node.Result{Status: node.Done}, sent: true, reached: true, done: true}
	}
	l.ch.expires = c.clk.Now().Add(cfg.ttl + node.WaiterLease + 2*l.ch.maxTimeout) // a node may grant while its registration lasts
	l.grant(from, a.fence)
	c.heldByGrant(l)
	if short < cfg.ttl {
		// A node grants for less than the TTL (so that a waiter that
		// died blocks the key for a lease at most), from after the
		// last attempt: valid that long from the attempt's start, then.
		// Most locks are unlocked well before; one that is still held
		// half-way through is extended by its TTL then, in the
		// background (restore).
		l.until, l.short = clock.Until(from, short, l.drift), true
		if c.begin() {
			// Half-way, or sooner where the node timeout needs it to land
			// in time.
			rs := &restoring{hurry: make(chan struct{}, 1), done: make(chan struct{}), at: from.Add(short / 2)}
			if last := l.until.Add(-l.ch.maxTimeout); last.Before(rs.at) {
				rs.at = last
			}
			l.restoring = rs
			go l.restore(c.clk.NewTimer(rs.at.Sub(c.clk.Now())))
		}
	}
	return l
}

// restoring is the restore of a lock a grant made valid for less than its
// TTL: the restore goroutine extends it by its TTL at at, or at once when
// hurry is sent to (by Unlock, so that it ends, and by a KeepAlive whose
// margin cannot wait), and closes done when it has run or found nothing
// to do.
type restoring struct {
	hurry chan struct{}
	done  chan struct{}
	at    time.Time
}

// restore extends by its TTL a lock that a grant made valid for less
// (see granted), when t (due at l.restoring.at) fires or when hurried,
// unless it has been unlocked or extended by then; the caller has
// counted it in the client's bg. If the extend fails, the lock stays
// valid for what the grant gave it, and a KeepAlive extends it before
// then.
func (l *Lock) restore(t clock.Timer) {
	defer l.ch.c.life.bg.Done()
	defer close(l.restoring.done)
	defer t.Stop()
	select {
	case <-t.C():
	case <-l.restoring.hurry:
	case <-l.ch.c.life.done:
		return
	}
	select {
	case l.op <- struct{}{}:
	case <-l.ch.c.life.done:
		return
	}
	defer func() { <-l.op }()
	l.mu.Lock()
	due := l.short && !l.released
	l.mu.Unlock()
	if due {
		_ = l.extend(context.Background(), l.ttl)
	}
}

// grantMaxAge bounds what a lock taken by grants loses of its validity
// against one taken by an attempt: a tenth of its TTL, and at most half
// of node.GrantTTL, so that the restore that may follow is not late (the
// grant's validity counts from the start of the waiter's last attempt,
// usually less than queuePoll before; beyond the bound an attempt takes
// the grants).
func grantMaxAge(ttl time.Duration) time.Duration { return min(ttl/10, node.GrantTTL(ttl)/2) }
