package redlock

import (
	"context"
	"slices"
	"sync"

	"github.com/quorumlock/redlock/node"
)

// The client half of the nodes' queue (queue.lua, leave.lua): a waiting
// call registers in a key's queue with its first waiting attempt
// (register), and leaves it when it ends (leaveWaiters), on each node
// once the commands of its own that could register it again have
// returned (inflight); a Leave that such a command may still undo is
// owed (owe.go).

// registry is the client half of the nodes' queue, under a mutex of its
// own, never held across I/O.
type registry struct {
	mu      sync.Mutex
	live    map[*node.Key]bool       // the registrations of waiting calls (see register)
	leaving map[string]chan struct{} // per queue, closed once the last call's Leaves have returned (see registerAfterLeaves)
	owed    []owedLeave              // Leaves sent again until their debt ends, and by Close (see owe)
	reowing bool                     // resend is running
	touched map[string]touched       // per queue, where a call of this client registered lately (see sweep)
	byGrant map[*Lock]bool           // locks taken by grants, until unlocked or expired (see sweep)
}

// inflight is a waiting attempt's commands that may register its call
// in a node's queue: the acquire (a waiting Acquire queues the caller)
// and, when it requeues (node.Key.Requeue), its rollback, one step per
// node each. A rollback that does not requeue registers no one
// (release.lua queues no caller without ARGV[4]; a key it hands on goes
// to whoever heads the queue, which a Leave before or after it treats
// alike), so a Leave need not wait for it: a rollback slowed by its own
// node timeout kept a gone waiter's entry a timeout longer (a torture
// trace, stop 50).
type inflight struct {
	ch       *chain
	acq, rb  []step
	requeues bool // the rollback requeues the call where the attempt set the key
}

// settledOn reports whether f's commands that may register the call
// have returned on node i, and none timed out after it was sent
// (step.late): none can register the call there any more.
func (f *inflight) settledOn(i int) bool {
	if !f.ch.landed(&f.acq[i]) || f.acq[i].late {
		return false
	}
	return !f.requeues || f.ch.landed(&f.rb[i]) && !f.rb[i].late
}

// settled reports whether f is settled on every node.
func (f *inflight) settled() bool {
	for i := range f.acq {
		if !f.settledOn(i) {
			return false
		}
	}
	return true
}

// pending drops from sent the attempts that are settled: an attempt
// whose command timed out on a node stays, since it may still run there.
func pending(sent []*inflight) []*inflight {
	return slices.DeleteFunc(sent, (*inflight).settled)
}

// settledOn reports whether every attempt of sent is settled on node i.
func settledOn(sent []*inflight, i int) bool {
	for _, f := range sent {
		if !f.settledOn(i) {
			return false
		}
	}
	return true
}

// registered reports whether a waiting call of this client is registered
// in k's queue under k's owner tag (see register). Under c.reg.mu.
func (c *Client) registered(k *node.Key) bool {
	for r := range c.reg.live {
		if r.Name == k.Name && r.Queue == k.Queue && r.Owner == k.Owner {
			return true
		}
	}
	return false
}

// register records the registration in key's queue that a waiting call
// is about to make (queue "": the key's own) under owner (mode.owner),
// until the call ends
// (leaveWaiters takes it out); Close leaves the queue for the calls it
// ends (leaveOwed).
func (c *Client) register(key, queue, grant, owner string) *node.Key {
	if !c.caps.handoff {
		return nil
	}
	c.reg.mu.Lock()
	defer c.reg.mu.Unlock()
	return c.registerLocked(key, queue, grant, owner)
}

// registerLocked is register under c.reg.mu.
func (c *Client) registerLocked(key, queue, grant, owner string) *node.Key {
	k := &node.Key{Name: key, Owner: owner, Queue: queue, Grant: grant}
	c.reg.live[k] = true
	c.touch(k)
	return k
}

// leavingKey names a key's queue in Client.leaving.
func leavingKey(key, queue string) string { return key + "\x00" + queue }

// registerAfterLeaves registers a waiting call in key's own queue (see
// register) once the Leaves that an earlier call of this client sent
// there have returned: the nodes know a waiter by its client's tag, and
// a Leave that came after the next call's registration would take that
// call's entry out (and hand a key reserved for the client on). Leaves
// of one key go one call after another, as the calls do (the key's
// local queue). The check and the registration are one step under
// c.reg.mu, so that an owed Leave coming due (resendDue) either gates the
// call or finds it registered and waits. It returns ctx's error or
// ErrClosed if either ends the wait first.
func (c *Client) registerAfterLeaves(ctx context.Context, key, grant, owner string) (*node.Key, error) {
	if !c.caps.handoff {
		return nil, nil
	}
	lk := leavingKey(key, "")
	for {
		c.reg.mu.Lock()
		left := c.reg.leaving[lk]
		if left == nil {
			k := c.registerLocked(key, "", grant, owner)
			c.reg.mu.Unlock()
			return k, nil
		}
		c.reg.mu.Unlock()
		select {
		case <-left:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.life.done:
			return nil, ErrClosed
		}
	}
}

// leaveOn is leaveWaiters' Leave of k on node i: after l's acquire
// there (acq, nil for none) and the call's waiting attempts still on
// their way (sent) have returned, up to a node timeout and two of the
// slowest's. A Leave that one of them may undo (it is still on its way,
// or timed out after it was sent, see step.late), or that fails, is
// owed (owe).
func (c *Client) leaveOn(i int, k node.Key, l *Lock, acq *step, sent []*inflight) {
	t := c.nodeTimeout(i)
	wctx, wcancel := context.WithTimeout(context.Background(), t+2*c.cfg.maxTimeout())
	defer wcancel()
	late, set := false, false
	if acq != nil {
		switch {
		case !l.ch.await(acq, wctx.Done()):
			late = true // still on its way: it may register the call after the Leave
		case l.ch.stepSet(acq):
			set = true // the node set the key, and dropped the registration with it
		default:
			// It timed out after it was sent: it may still run, and
			// register the call again after the Leave (a grant then
			// comes to a lock that is gone).
			late = acq.late
		}
	}
	for _, f := range sent {
		// The rollback waits for its acquire, then gets a node timeout
		// of its own at most (see round.late); only one that requeues
		// is waited for (see inflight).
		if !f.ch.await(&f.acq[i], wctx.Done()) || f.requeues && !f.ch.await(&f.rb[i], wctx.Done()) {
			late = true
			continue
		}
		late = late || f.acq[i].late || f.requeues && f.rb[i].late
	}
	if set && !late && !l.handed {
		// No earlier attempt of the call can register it there again
		// (one that timed out, running after the lock's acquire or
		// transfer dropped the registration, did: a torture trace).
		// A lock handed over by a transfer is not such a proof: the
		// transfer came from another call's Unlock while an attempt
		// of this call was on its way, and that attempt, answered in
		// time, may have run after it and registered the call again
		// (a torture trace, stop 50): the Leave goes after it.
		return
	}
	ok, gen := c.allow(i)
	if !ok {
		c.owe(k, i)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t)
	defer cancel()
	start := c.clk.Now()
	err := c.nodes[i].(node.Handoffer).Leave(ctx, &k)
	c.record(i, gen, err)
	c.callDone(i, "leave", c.clk.Since(start), err)
	if late || err != nil {
		c.owe(k, i)
	}
}

// leaveWaiters drops this client's registration as a waiter for key
// from queue ("": the key's own; a semaphore's, see node.Key.Queue)
// (node.Handoffer.Leave), in the background, when a Lock call that waited
// ends: on every node when it gives up, and where its lock l's acquire
// did not set the key when it got the lock (that acquire dropped the
// registration where it did, unless an earlier attempt of the call that
// timed out there may register it again; a lock handed over by a
// transfer leaves everywhere, see leaveOn; an acquire still on its way to
// a node is waited for, up to a node timeout, before deciding). On each node the
// Leave goes once the call's waiting attempts still on their way there
// (sent; nil for none) have returned, acquire and rollback: either may
// register the call, and would do it again after a Leave that overtook
// it. One that has not returned by then (it timed out, and may still
// run), or a Leave that fails, leaves a debt that Close pays (owe). The
// registration k (see register; nil: none) is taken out of the client's
// record of live ones; once the client is closed, Close leaves for it.
// requeued: a rollback of the call's waiting attempts requeued it
// (node.Key.Requeue), which a lock taken by grants must undo too.
func (c *Client) leaveWaiters(reg *node.Key, l *Lock, sent []*inflight, requeued bool) {
	if reg == nil {
		return
	}
	if !c.begin() {
		return // closed: Close leaves for the calls still registered (leaveOwed)
	}
	defer c.life.bg.Done()
	c.reg.mu.Lock()
	live := c.reg.live[reg]
	delete(c.reg.live, reg)
	c.reg.mu.Unlock()
	if !live {
		return // left by Close
	}
	k := *reg
	if l != nil && reg.Grant != "" && l.k.Token == reg.Grant {
		// Granted: the granting nodes dropped the registration; the
		// others may grant later, to l's token, which its Unlock
		// releases (release.lua drops the registration that asks for
		// it). But a rollback that requeued the call with a TTL
		// whose grant would not last a lease registered it asking
		// for a reservation instead (see command.go), which no
		// Unlock drops: a later release there reserved the key for
		// this client, its call gone, for the rest of the lease (a
		// torture trace, stop 51); a fenced call's requeue never asks
		// for its grant. The Leave goes then, without the
		// grant: one that named it would hand on the key l holds by
		// it there (leave.lua).
		if !requeued || node.GrantTTL(l.ttl) >= node.WaiterLease && !l.mode.fenced {
			return
		}
		k.Grant = ""
	}
	var sending sync.WaitGroup // the Leaves below, for the key's next call (registerAfterLeaves)
	left := make(chan struct{})
	lk := leavingKey(k.Name, k.Queue)
	c.reg.mu.Lock()
	c.reg.leaving[lk] = left
	c.reg.mu.Unlock()
	c.life.bg.Add(1)
	defer func() {
		go func() {
			defer c.life.bg.Done()
			sending.Wait()
			c.reg.mu.Lock()
			if c.reg.leaving[lk] == left {
				delete(c.reg.leaving, lk)
			}
			c.reg.mu.Unlock()
			close(left)
		}()
	}()
	for i := range c.nodes {
		var acq *step // l's acquire on node i, which may still be on its way
		if l != nil {
			acq = &l.ch.tail[i]
			if l.ch.stepSet(acq) && settledOn(sent, i) && !l.handed {
				continue
			}
		}
		c.life.bg.Add(1) // within the caller's operation
		sending.Add(1)
		go func() {
			defer c.life.bg.Done()
			defer sending.Done()
			c.leaveOn(i, k, l, acq, sent)
		}()
	}
}
