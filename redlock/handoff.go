package redlock

import (
	"context"
	"sync"

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
// before. A node where a waiter of another client is registered releases
// instead of transferring (see node.Handoffer), so handoffs within one
// client never lock other clients out. docs/DESIGN.md has the argument.

// offer is the head of a key's local queue, waiting in Lock after a
// failed attempt, ready to take the lock from an Unlock of this client.
type offer struct {
	gift    chan *Lock // buffered (1): the handed-over lock, or nil: compete
	cfg     *config    // the waiting Lock call's settings
	claimed bool       // guarded by Client.qmu: an Unlock is handing over to it
}

// offer makes the head of key's local queue ready to take a handoff; nil
// when handoffs are off for it (a node that cannot, a fenced lock: its
// fence must come from an acquire).
func (c *Client) offer(key string, cfg *config) *offer {
	if !c.handoff || cfg.fenced {
		return nil
	}
	o := &offer{gift: make(chan *Lock, 1), cfg: cfg}
	c.qmu.Lock()
	c.queues[key].head = o
	c.qmu.Unlock()
	return o
}

// taken records that the head received what o.gift brought.
func (c *Client) taken(o *offer) {
	c.qmu.Lock()
	o.claimed = false
	c.qmu.Unlock()
}

// withdraw ends o before its Lock call returns. A handoff already under
// way is waited for (one round at most), and a lock it brings that the
// call does not return is unlocked.
func (c *Client) withdraw(key string, o *offer, ret *Lock) {
	if o == nil {
		return
	}
	c.qmu.Lock()
	if q := c.queues[key]; q.head == o {
		q.head = nil
	}
	claimed := o.claimed
	c.qmu.Unlock()
	if !claimed {
		return
	}
	if g := <-o.gift; g != nil && g != ret {
		_ = g.Unlock(context.Background())
	}
}

// claim picks the waiter l's Unlock hands the lock to: the head of its
// key's local queue, if it offers, no other Unlock is handing to it, and
// every earlier command of l has returned (the transfer is a command of
// the successor's chain; it must not overtake one of l's).
func (c *Client) claim(l *Lock) *offer {
	if !c.handoff || l.fence != 0 || !l.ch.settled() {
		return nil
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q := c.queues[l.k.Name]
	if q == nil || q.head == nil || q.head.claimed {
		return nil
	}
	q.head.claimed = true
	return q.head
}

// handOff hands l to o's Lock call, or releases l if a majority did not
// transfer; it is Unlock's work for a lock whose key has a waiter here.
func (l *Lock) handOff(ctx context.Context, o *offer) error {
	c := l.c
	k := node.NewKey(l.k.Name, newToken())
	k.Owner = c.tag
	next := newLock(c, k, o.cfg)
	r := next.ch.send(ctx, command{op: "transfer", ttl: next.ttl, from: l})
	t := r.Wait(ctx.Done(), c.quorum)
	validity := clock.Validity(next.ttl, r.Elapsed(), next.drift)
	if t.Reached(c.quorum) && validity > 0 && ctx.Err() == nil {
		next.grant(r.Started(), 0)
		o.gift <- next
		return nil
	}
	// Not handed over. Every node's answer is awaited (a node timeout at
	// most): the successor's keys are rolled back, and the lock is
	// released where the transfer did not already remove its key (it
	// replaced it, or released it for another client's waiter).
	r.Wait(ctx.Done(), len(c.nodes))
	c.rollback(ctx, next, r)
	freed := make([]bool, len(c.nodes))
	for i, rep := range r.Replies {
		freed[i] = rep.Err == nil && (rep.Result.Status == node.Done || rep.Result.Status == node.Absent)
	}
	err := l.release(ctx, false, freed)
	o.gift <- nil
	return err
}

// settled reports whether every command of the chain has returned.
func (ch *chain) settled() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for i := range ch.tail {
		if !ch.tail[i].done {
			return false
		}
	}
	return true
}

// leaveWaiters drops this client's registration as a waiter for key on
// every node (node.Handoffer.Leave), when a Lock call that waited gives
// up; it returns when every node answered or timed out.
func (c *Client) leaveWaiters(key string) {
	if !c.handoff || !c.begin() {
		return
	}
	defer c.bg.Done()
	k := node.Key{Name: key, Owner: c.tag}
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(i))
			defer cancel()
			err := n.(node.Handoffer).Leave(ctx, k)
			c.callDone(i, "leave", 0, err)
		}()
	}
	wg.Wait()
}
