package redlock

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/node"
)

// What a waiting call's Leaves cannot settle at once: a Leave that a
// command of the call may still undo (it timed out, and may run late) is
// owed, and sent again in the background until a registration that
// command makes would have lapsed (owe, resend); Close pays what is
// still owed, and sweeps every queue the client registered in lately
// (leaveOwed, sweep).

// owedLeave is a Leave sent again (see Client.owe): node i may register
// the call after its Leave, or did not answer it.
type owedLeave struct {
	k     node.Key
	i     int
	until time.Time     // on the client's clock: a registration made by then has lapsed
	next  time.Time     // when resend sends it again
	wait  time.Duration // the wait after that
}

// maxOwed bounds the leaves owed; beyond it, registrations lapse with
// their lease (node.WaiterLease), grants with node.GrantTTL.
const maxOwed = 4096

// owe records that the Leave of k on node i may not have taken the
// call's registration out for good: a command of the call there may
// still run (it timed out, and a node may run a command after its
// caller gave up on it), or the Leave itself failed. A registration made
// after that lasts a lease, so the debt ends a lease and two node
// timeouts from now. Until then the Leave is sent again in the
// background (resend), its wait doubling from finishFirst to the node
// timeout (resendMax): the registration, or a key a release reserved or
// granted to it, is gone within that wait of the late command, not a
// lease later. Close sends what is still owed once
// more (leaveOwed). In a semaphore's line, which serves every slot, the
// Leave is owed at every slot: a registration the late command makes may
// have a release of any slot reserve that slot for the client (a torture
// trace, stop 52), and only a Leave at that slot hands it on.
func (c *Client) owe(k node.Key, i int) {
	now := c.clk.Now()
	names := []string{k.Name}
	if slots := lineSlots(k.Queue); slots != nil {
		names = slots
	}
	c.reg.mu.Lock()
	c.reg.owed = slices.DeleteFunc(c.reg.owed, func(o owedLeave) bool { return !now.Before(o.until) })
	for _, name := range names {
		if len(c.reg.owed) >= maxOwed {
			break
		}
		ko := k
		ko.Name = name
		c.reg.owed = append(c.reg.owed, owedLeave{k: ko, i: i, until: now.Add(node.WaiterLease + 2*c.cfg.maxTimeout()),
			next: now.Add(finishFirst), wait: 2 * finishFirst})
	}
	start := !c.reg.reowing
	c.reg.reowing = true
	c.reg.mu.Unlock()
	if start {
		if !c.begin() {
			c.reg.mu.Lock()
			c.reg.reowing = false
			c.reg.mu.Unlock()
			return // closed: Close sends them (leaveOwed)
		}
		go c.resend()
	}
}

// resend sends the owed Leaves again as each one's time comes (see owe),
// until none is owed or the client closes: one goroutine per client.
func (c *Client) resend() {
	defer c.life.bg.Done()
	for {
		c.reg.mu.Lock()
		now := c.clk.Now()
		c.reg.owed = slices.DeleteFunc(c.reg.owed, func(o owedLeave) bool { return !now.Before(o.until) })
		if len(c.reg.owed) == 0 {
			c.reg.reowing = false
			c.reg.mu.Unlock()
			return
		}
		next := c.reg.owed[0].next
		for _, o := range c.reg.owed[1:] {
			if o.next.Before(next) {
				next = o.next
			}
		}
		c.reg.mu.Unlock()
		t := c.clk.NewTimer(next.Sub(now))
		select {
		case <-t.C():
		case <-c.life.done:
			t.Stop()
			c.reg.mu.Lock()
			c.reg.reowing = false
			c.reg.mu.Unlock()
			return
		}
		c.resendDue()
	}
}

// resendDue sends the owed Leaves whose time has come, in parallel, each
// within its node's timeout. A debt without a grant is not sent while a
// waiting call of this client is registered in that queue again: the
// nodes know such a waiter by its client's tag, so the entry is that
// call's, which leaves it when it ends. The debt is kept for after that
// Leave, though, until its own end: the late command it is owed for can
// still register the client once the later call has left (a torture
// trace: the debt ended, the late command came after the later call's
// Leave, and a release reserved the key for a client with no waiter, for
// a lease). A debt with a grant goes on:
// a late command of its call can still turn the entry back into its own
// (and a release then grant the key to it), and leave.lua acts on that
// call's entry and grant only, never on the registered call's. While
// they are on their way the key's next call waits for them before it
// registers (registerAfterLeaves), as for a call's own Leaves.
func (c *Client) resendDue() {
	now := c.clk.Now()
	left := make(chan struct{})
	var due []owedLeave
	var gated []string
	waiting := c.semWaiting()
	c.reg.mu.Lock()
	for j := range c.reg.owed {
		o := &c.reg.owed[j]
		if o.next.After(now) {
			continue
		}
		if o.k.Grant == "" && (c.registered(&o.k) || waiting[o.k.Queue]) {
			// The entry is that call's now: not sent while it is
			// registered, but kept for after it has left.
			o.next = now.Add(o.wait)
			continue
		}
		lk := leavingKey(o.k.Name, o.k.Queue)
		if g := c.reg.leaving[lk]; g != nil && g != left {
			continue // a call's Leaves are on their way: after them
		}
		if c.reg.leaving[lk] == nil {
			c.reg.leaving[lk] = left
			gated = append(gated, lk)
		}
		o.next, o.wait = now.Add(o.wait), min(2*o.wait, c.resendMax(o.i))
		due = append(due, *o)
	}
	c.reg.mu.Unlock()
	c.sendLeaves(due, true)
	c.reg.mu.Lock()
	for _, lk := range gated {
		if c.reg.leaving[lk] == left {
			delete(c.reg.leaving, lk)
		}
	}
	c.reg.mu.Unlock()
	close(left)
}

// semWaiting returns the semaphores' lines (Semaphore.queue) where an
// Acquire of this client waits: the line's entry is that call's (the
// nodes know a waiter by its client's tag), as for a registered Lock
// call in resendDue. Under c.lq.mu, taken apart from c.reg.mu.
func (c *Client) semWaiting() map[string]bool {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	var out map[string]bool
	for local, q := range c.lq.queues {
		if line := localLine(local); line != "" && len(q.waiters) > 0 {
			if out == nil {
				out = map[string]bool{}
			}
			out[line] = true
		}
	}
	return out
}

// resendMax is the longest wait between sends of an owed Leave to node
// i: its node timeout (finishFirst at least). A registration that a late
// command makes is taken out within that wait and a Leave's round trip,
// as the Release oracle of the torture histories asks (a waiter gone
// must not hold a key it was handed for a lease); the doubling wait of a
// watched release (up to watchMax) left such keys for up to 2 s. The
// cost is a Leave per node timeout per debt, for a lease at most, and
// only after a timeout; to a node whose breaker is open, one Leave per
// node timeout in all (see sendLeaves).
func (c *Client) resendMax(i int) time.Duration {
	return max(finishFirst, c.nodeTimeout(i))
}

// touched is a queue where a call of this client registered: the sweep
// at Close takes the client out of it for good (node.LeaveAll) until a
// registration made by then would have lapsed.
type touched struct {
	k     node.Key // Name, Queue and Owner
	until time.Time
}

// maxTouched bounds the queues remembered for the sweep; beyond it,
// what a late command registers lapses with its lease.
const maxTouched = 4096

// touch remembers k's queue for the sweep at Close. Under c.reg.mu. A
// reader call's queue is remembered under its client's reader tag,
// which takes every reader of the client out (node.LeaveAll).
func (c *Client) touch(k *node.Key) {
	now := c.clk.Now()
	owner := k.Owner
	if strings.HasPrefix(owner, c.caps.rtag+":") {
		owner = c.caps.rtag
	}
	lk := leavingKey(k.Name, k.Queue) + "\x00" + owner
	if _, ok := c.reg.touched[lk]; !ok && len(c.reg.touched) >= maxTouched {
		maps.DeleteFunc(c.reg.touched, func(_ string, t touched) bool { return !now.Before(t.until) })
		if len(c.reg.touched) >= maxTouched {
			return
		}
	}
	c.reg.touched[lk] = touched{k: node.Key{Name: k.Name, Queue: k.Queue, Owner: owner},
		until: now.Add(node.WaiterLease + 2*c.cfg.maxTimeout())}
}

// touchQueue is touch for a waiting attempt of client tag owner at key
// name in queue (a semaphore's line), which no register records.
func (c *Client) touchQueue(name, queue, owner string) {
	if !c.caps.handoff {
		return
	}
	c.reg.mu.Lock()
	c.touch(&node.Key{Name: name, Queue: queue, Owner: owner})
	c.reg.mu.Unlock()
}

// heldByGrant records l, a lock taken by grants, until it is unlocked or
// its validity ends: the sweep at Close leaves its key alone, since a
// lock still held at Close is not released (it expires).
func (c *Client) heldByGrant(l *Lock) {
	c.reg.mu.Lock()
	locks := slices.Collect(maps.Keys(c.reg.byGrant))
	c.reg.mu.Unlock()
	var gone []*Lock
	for _, o := range locks {
		o.mu.Lock()
		if o.left() <= 0 {
			gone = append(gone, o)
		}
		o.mu.Unlock()
	}
	c.reg.mu.Lock()
	for _, o := range gone {
		delete(c.reg.byGrant, o)
	}
	c.reg.byGrant[l] = true
	c.reg.mu.Unlock()
}

// sweep is Close's Leave for good (node.LeaveAll) of every queue a call
// of this client registered in lately, on every node: a command of a
// call that gave up can run on a node after the call's Leave (it timed
// out, and the node ran it later) and register the client again, and a
// release then hands the key to that registration, reserved or granted,
// for a lease or a grant TTL that no call of the client will take. Where
// a lock of the client taken by grants still holds the key (Close does
// not release held locks), the sweep sends a plain Leave of the client
// there instead, which leaves any grant alone. It returns the Leaves to
// send (see leaveOwed).
func (c *Client) sweep() []owedLeave {
	now := c.clk.Now()
	c.reg.mu.Lock()
	ts := slices.Collect(maps.Values(c.reg.touched))
	clear(c.reg.touched)
	locks := slices.Collect(maps.Keys(c.reg.byGrant))
	c.reg.mu.Unlock()
	held := map[string]bool{}
	for _, l := range locks {
		l.mu.Lock()
		if l.left() > 0 {
			held[l.k.Name] = true
		}
		l.mu.Unlock()
	}
	var out []owedLeave
	for _, t := range ts {
		if !now.Before(t.until) {
			continue
		}
		k := t.k
		if !held[k.Name] || k.Owner == c.caps.rtag { // readers hold no grant
			k.Grant = node.LeaveAll
		}
		for i := range c.nodes {
			out = append(out, owedLeave{k: k, i: i, until: t.until})
		}
	}
	return out
}

// leaveOwed is Close's last work on the queues: once every operation has
// ended (no command of this client is still on its way but those that
// run late), it sends the Leaves it owes (see owe), and those of the
// waiting calls still registered (a call that Close ended may not have
// begun its leaves yet, and cannot once the client is closed; it leaves
// its registration to this), in parallel, each within its node's
// timeout, so that a client that closes leaves neither a registration
// nor a grant of its calls behind (a Leave hands a grant or reservation
// on to the next head); with them, the sweep (see sweep). A command that
// timed out may still run on its node after these Leaves and register
// the call again, so where Leaves were owed (a command timed out lately)
// they all go once more two node timeouts later (within Close's grace):
// Close then takes that much longer.
func (c *Client) leaveOwed() {
	now := c.clk.Now()
	c.reg.mu.Lock()
	owed := c.reg.owed
	c.reg.owed = nil
	late := len(owed) > 0 // a command timed out lately: it may still run
	for k := range c.reg.live {
		for i := range c.nodes {
			owed = append(owed, owedLeave{k: *k, i: i, until: now.Add(time.Hour)})
		}
	}
	clear(c.reg.live)
	c.reg.mu.Unlock()
	owed = slices.DeleteFunc(owed, func(o owedLeave) bool { return !now.Before(o.until) })
	// With the owed and live Leaves (each of which hands on its own
	// call's grant), the sweep of every queue the client registered in.
	owed = append(owed, c.sweep()...)
	if len(owed) == 0 {
		return
	}
	c.sendLeaves(owed, false)
	if !late {
		return
	}
	t := time.NewTimer(min(2*c.cfg.maxTimeout(), c.closeGrace()))
	<-t.C
	c.sendLeaves(owed, false)
}

// sendLeaves sends each Leave of owed, in parallel, each within its
// node's timeout, and returns when all have returned. With breakers, the
// answers count for the nodes' breakers (see Client.repaired), and a
// node whose breaker is open gets one Leave of owed only, which the
// others wait behind (each debt keeps its schedule): a repair goes past
// the breaker, one call at a time. Close sends every one without
// counting them: its last word to the nodes.
func (c *Client) sendLeaves(owed []owedLeave, breakers bool) {
	var wg sync.WaitGroup
	var probing []int // nodes whose breaker is open and that got their one Leave
	for _, o := range owed {
		var ok bool
		var gen uint64
		if breakers {
			if ok, gen = c.allow(o.i); !ok {
				if slices.Contains(probing, o.i) {
					continue
				}
				probing = append(probing, o.i)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(o.i))
			defer cancel()
			start := c.clk.Now()
			err := c.nodes[o.i].(node.Handoffer).Leave(ctx, &o.k)
			if breakers {
				c.repaired(o.i, ok, gen, err)
			}
			c.callDone(o.i, "leave", c.clk.Since(start), err)
		}()
	}
	wg.Wait()
}
