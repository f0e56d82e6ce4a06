package redlock

import (
	"context"
	"slices"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
)

// Local handoff. When a goroutine of this client waits in Lock for a key
// (the head of the key's local queue, after a failed attempt) and the
// holder, also of this client, unlocks it, Unlock hands the lock over in
// one round: a transfer on every node (node.Handoffer) replaces the
// holder's token with a fresh one for the successor where the key still
// holds the holder's token or nothing. The successor holds the lock iff a
// majority transferred, with its validity counted from when the transfer
// was sent, as for an acquire: mutual exclusion rests on the same
// majority of keys that SET NX could not have set for anyone else.
// Otherwise the successor's keys are rolled back, the lock is released
// as by a plain Unlock (announced), and the successor competes as
// before. A node where a waiter of another client is queued releases
// instead of transferring, reserving the key for the head of its queue
// (see node.Handoffer), so handoffs within one client never lock other
// clients out: the successor queues behind them. docs/DESIGN.md has the
// argument.

// offer is the head of a key's local queue, waiting in Lock after a
// failed attempt, ready to take the lock from an Unlock of this client.
// Its fields other than cfg are guarded by local.mu.
type offer struct {
	gift      chan *Lock // buffered (1), sent to under local.mu: the handed-over lock, or nil: released, try now
	cfg       config     // the waiting Lock call's settings (a copy: the call's own stays on its stack)
	claimed   bool       // an Unlock is handing over to it
	releasing int        // Unlocks of write locks releasing instead, which poke it once their release has returned (see claim; a read hold's pokes uncounted)
	withdrawn bool       // its Lock call has returned: a handoff under way releases what it would bring
}

// maxChain is how many handoffs in a row a key's local queue may take
// before an Unlock releases instead: a bound on what a client that does
// not register as a waiter (TryLock pollers, other libraries, a waiter
// whose lease lapsed between long retry delays) can be made to wait.
const maxChain = 16

// offer makes the head of key's local queue ready to take a handoff; nil
// when handoffs are off for it (a node that cannot, a fenced lock: its
// fence must come from an acquire).
func (c *Client) offer(key string, cfg *config) *offer {
	if !c.caps.handoff || !cfg.handsOn() {
		return nil
	}
	o := &offer{gift: make(chan *Lock, 1), cfg: *cfg}
	c.lq.mu.Lock()
	c.lq.queues[key].head = o
	c.lq.mu.Unlock()
	return o
}

// awaited reports whether a handoff to o is under way, or a release that
// pokes o once it has returned (see claim), so that a release heard
// meanwhile (the nodes announce one when they yield to another client,
// or as they get the release) is not a reason to attempt, nor, for a
// Lock call, a retry delay that ends.
func (c *Client) awaited(o *offer) bool {
	if o == nil {
		return false
	}
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	return o.claimed || o.releasing > 0
}

// withdraw ends o as its Lock call returns ret (nil: no lock). A handoff
// still under way releases what it brings (see handOff); one already
// delivered and not taken is unlocked here.
func (c *Client) withdraw(key string, o *offer, ret *Lock) {
	if o == nil {
		return
	}
	var g *Lock
	c.lq.mu.Lock()
	o.withdrawn = true
	if q := c.lq.queues[key]; q.head == o {
		q.head = nil
	}
	select {
	case g = <-o.gift:
	default:
	}
	c.lq.mu.Unlock()
	if g != nil && g != ret {
		// With the client closed this fails and the keys expire, as
		// those of any lock held at Close.
		_ = g.Unlock(context.Background())
	}
}

// claim picks the waiter l's Unlock hands the lock to: the head of its
// local queue (Lock.queue: its key's, or its semaphore's), if it offers,
// no other Unlock is handing to it, the queue has not had maxChain
// handoffs in a row, and l is still valid (not expired). Otherwise it
// returns the head that waits for a handoff it will not get (to poke
// once the lock is released, see Lock.unlock), or nil. Unless l is a read
// hold, the head counts as awaiting that poke until then (offer.releasing):
// the first node's release announcement, or for a Lock call a retry delay
// that ends meanwhile, would otherwise send it to the nodes while the
// others still hold the key, and its attempt would fail there and sleep
// out another retry delay. Another Unlock may still hand it a lock
// meanwhile (a semaphore's other slot).
func (c *Client) claim(ctx context.Context, l *Lock, expired bool) (to, waiting *offer) {
	if !c.caps.handoff {
		return nil, nil
	}
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	q := c.lq.queues[l.queue()]
	if q == nil || q.head == nil || q.head.claimed || q.head.withdrawn {
		return nil, nil
	}
	if q.chain >= maxChain || expired || !l.mode.handsOn() || ctx.Err() != nil {
		q.chain = 0
		if l.mode.takesTurns() {
			q.head.releasing++
		}
		return nil, q.head
	}
	q.head.claimed = true
	return q.head, nil
}

// deliver hands o what a handoff brought (nil: the lock was released
// instead) and reports whether o took it: false when o's Lock call has
// returned meanwhile.
func (c *Client) deliver(key string, o *offer, g *Lock) bool {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	o.claimed = false
	if o.withdrawn {
		return false
	}
	select {
	case old := <-o.gift: // a poke not yet taken; a lock cannot be (one claim at a time)
		if old != nil {
			o.gift <- old
			return false
		}
	default:
	}
	if q := c.lq.queues[key]; q != nil {
		if g != nil {
			q.chain++
		} else {
			q.chain = 0
		}
	}
	o.gift <- g
	return true
}

// poke tells o, the head of a key's local queue, that the lock was
// released without a handoff: it tries the nodes now (unless a handoff
// to it is under way). released: by an Unlock counted in o.releasing.
func (c *Client) poke(o *offer, released bool) {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	if released {
		o.releasing--
	}
	if o.claimed || o.withdrawn {
		return
	}
	select {
	case o.gift <- nil:
	default:
	}
}

// handOff hands l to o's Lock call, or releases l if a majority did not
// transfer; it is Unlock's work for a lock whose key has a waiter here.
func (l *Lock) handOff(ctx context.Context, o *offer) error {
	c := l.ch.c
	// The waiter's kind: a writer of the key, or of a semaphore's slot
	// (in the semaphore's queue, as l).
	next := newLock(c, o.cfg.key(c, l.k.Name, newToken(), asks{}), &o.cfg)
	r := next.ch.send(ctx, command{op: "transfer", ttl: next.ttl, from: l, fromTail: l.ch.tail})
	t := r.Wait(ctx.Done(), c.quorum)
	validity := clock.Validity(next.ttl, r.Elapsed(), next.drift)
	if t.Reached(c.quorum) && validity > 0 && ctx.Err() == nil {
		next.grant(r.Started(), 0)
		next.handed = true
		if t.Done < len(c.nodes) {
			// A node that has not transferred (yet) may keep l's key.
			l.releaseRest(ctx, r)
		}
		if !c.deliver(l.queue(), o, next) {
			// Its Lock call returned meanwhile: nobody wants the lock.
			return next.release(ctx, false, nil)
		}
		return nil
	}
	// Not handed over: every transfer's answer is awaited (a node
	// timeout at most; a release sent before a transfer still out lands
	// would find the successor's key or another client's, and Unlock
	// would report a lock it did release as not held), the successor's
	// keys are rolled back, and the lock is released where the transfer
	// did not already remove its key (it replaced it, or reserved it for
	// the head of the nodes' queue, another client's waiter). The
	// successor then queues behind that waiter.
	r.waitAll(ctx.Done())
	next.ch.wait(c.rollback(ctx, next, r, 0))
	err := l.release(ctx, false, r.freed())
	c.deliver(l.queue(), o, nil)
	return err
}

// stepSet reports whether step s of the chain has returned Done (for a
// lock just granted, the acquire's step on a node: it set the key there).
func (ch *chain) stepSet(s *step) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return s.done && s.err == nil && s.res.Status == node.Done
}

// waitAll waits until every call of r has returned, or stop is closed.
// (Round.Wait(stop, n) returns as soon as n Done answers are out of
// reach.)
func (r *round) waitAll(stop <-chan struct{}) {
	n := r.Collect()
	for n.Pending > 0 {
		n = r.Wait(stop, n.Done+n.Pending)
		select {
		case <-stop:
			return
		default:
		}
	}
}

// freed marks the nodes where the transfer round r has removed the
// handed-over lock's key: it replaced it (Done) or released it (Absent).
func (r *round) freed() []bool {
	r.Collect()
	freed := make([]bool, len(r.next))
	for i := range freed {
		rep := r.Reply(i)
		freed[i] = rep.Err == nil && (rep.Result.Status == node.Done || rep.Result.Status == node.Absent)
	}
	return freed
}

// releaseRest releases l's key, silently and in the background, on the
// nodes where the handoff round r did not remove it once every transfer
// has returned (those that failed, or were never sent: a breaker open, a
// refused dial).
func (l *Lock) releaseRest(ctx context.Context, r *round) {
	c := l.ch.c
	if !c.begin() {
		return
	}
	go func() {
		defer c.life.bg.Done()
		r.waitAll(nil)
		freed := r.freed()
		for i := range freed {
			rep := r.Reply(i)
			freed[i] = freed[i] || (rep.Err == nil && rep.Result.Status == node.Taken)
		}
		if !slices.Contains(freed, false) {
			return
		}
		l.ch.send(context.WithoutCancel(ctx), command{op: "release", freed: freed})
	}()
}
