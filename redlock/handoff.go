package redlock

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

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
// Its fields other than cfg are guarded by Client.qmu.
type offer struct {
	gift      chan *Lock // buffered (1), sent to under qmu: the handed-over lock, or nil: released, try now
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
	if !c.handoff || cfg.fenced {
		return nil
	}
	o := &offer{gift: make(chan *Lock, 1), cfg: *cfg}
	c.qmu.Lock()
	c.queues[key].head = o
	c.qmu.Unlock()
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
	c.qmu.Lock()
	defer c.qmu.Unlock()
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
	c.qmu.Lock()
	o.withdrawn = true
	if q := c.queues[key]; q.head == o {
		q.head = nil
	}
	select {
	case g = <-o.gift:
	default:
	}
	c.qmu.Unlock()
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
	if !c.handoff {
		return nil, nil
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q := c.queues[l.queue()]
	if q == nil || q.head == nil || q.head.claimed || q.head.withdrawn {
		return nil, nil
	}
	if q.chain >= maxChain || expired || l.fence != 0 || l.ch.shared || ctx.Err() != nil {
		q.chain = 0
		if !l.ch.shared {
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
	c.qmu.Lock()
	defer c.qmu.Unlock()
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
	if q := c.queues[key]; q != nil {
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
	c.qmu.Lock()
	defer c.qmu.Unlock()
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
	c := l.c
	k := node.NewKey(l.k.Name, newToken())
	k.Owner = c.tag
	if l.k.Queue != "" {
		k = k.InQueue(l.k.Queue) // a semaphore's slot
	}
	next := newLock(c, k, &o.cfg)
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
	c.rollback(ctx, next, r, 0)
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
	freed := make([]bool, len(r.Replies))
	for i, rep := range r.Replies {
		freed[i] = rep.Err == nil && (rep.Result.Status == node.Done || rep.Result.Status == node.Absent)
	}
	return freed
}

// releaseRest releases l's key, silently and in the background, on the
// nodes where the handoff round r did not remove it once every transfer
// has returned (those that failed, or were never sent: a breaker open, a
// refused dial).
func (l *Lock) releaseRest(ctx context.Context, r *round) {
	c := l.c
	if !c.begin() {
		return
	}
	go func() {
		defer c.bg.Done()
		r.waitAll(nil)
		freed := r.freed()
		for i, rep := range r.Replies {
			freed[i] = freed[i] || (rep.Err == nil && rep.Result.Status == node.Taken)
		}
		if !slices.Contains(freed, false) {
			return
		}
		l.ch.send(context.WithoutCancel(ctx), command{op: "release", freed: freed})
	}()
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
// more (leaveOwed).
func (c *Client) owe(k node.Key, i int) {
	now := c.clk.Now()
	c.qmu.Lock()
	c.owed = slices.DeleteFunc(c.owed, func(o owedLeave) bool { return !now.Before(o.until) })
	if len(c.owed) < maxOwed {
		c.owed = append(c.owed, owedLeave{k: k, i: i, until: now.Add(node.WaiterLease + 2*c.cfg.maxTimeout()),
			next: now.Add(finishFirst), wait: 2 * finishFirst})
	}
	start := !c.reowing
	c.reowing = true
	c.qmu.Unlock()
	if start {
		if !c.begin() {
			c.qmu.Lock()
			c.reowing = false
			c.qmu.Unlock()
			return // closed: Close sends them (leaveOwed)
		}
		go c.resend()
	}
}

// resend sends the owed Leaves again as each one's time comes (see owe),
// until none is owed or the client closes: one goroutine per client.
func (c *Client) resend() {
	defer c.bg.Done()
	for {
		c.qmu.Lock()
		now := c.clk.Now()
		c.owed = slices.DeleteFunc(c.owed, func(o owedLeave) bool { return !now.Before(o.until) })
		if len(c.owed) == 0 {
			c.reowing = false
			c.qmu.Unlock()
			return
		}
		next := c.owed[0].next
		for _, o := range c.owed[1:] {
			if o.next.Before(next) {
				next = o.next
			}
		}
		c.qmu.Unlock()
		t := c.clk.NewTimer(next.Sub(now))
		select {
		case <-t.C():
		case <-c.done:
			t.Stop()
			c.qmu.Lock()
			c.reowing = false
			c.qmu.Unlock()
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
	c.qmu.Lock()
	for j := range c.owed {
		o := &c.owed[j]
		if o.next.After(now) {
			continue
		}
		if o.k.Grant == "" && c.registered(&o.k) {
			// The entry is that call's now: not sent while it is
			// registered, but kept for after it has left.
			o.next = now.Add(o.wait)
			continue
		}
		lk := leavingKey(o.k.Name, o.k.Queue)
		if g := c.leaving[lk]; g != nil && g != left {
			continue // a call's Leaves are on their way: after them
		}
		if c.leaving[lk] == nil {
			c.leaving[lk] = left
			gated = append(gated, lk)
		}
		o.next, o.wait = now.Add(o.wait), min(2*o.wait, c.resendMax(o.i))
		due = append(due, *o)
	}
	c.qmu.Unlock()
	c.sendLeaves(due, true)
	c.qmu.Lock()
	for _, lk := range gated {
		if c.leaving[lk] == left {
			delete(c.leaving, lk)
		}
	}
	c.qmu.Unlock()
	close(left)
}

// resendMax is the longest wait between sends of an owed Leave to node
// i: its node timeout (finishFirst at least). A registration that a late
// command makes is taken out within that wait and a Leave's round trip,
// as the Release oracle of the torture histories asks (a waiter gone
// must not hold a key it was handed for a lease); the doubling wait of a
// watched release (up to watchMax) left such keys for up to 2 s. The
// cost is a Leave per node timeout per debt, for a lease at most, and
// only after a timeout; an open breaker sends none.
func (c *Client) resendMax(i int) time.Duration {
	return max(finishFirst, c.nodeTimeout(i))
}

// registered reports whether a waiting call of this client is registered
// in k's queue under k's owner tag (see register). Under c.qmu.
func (c *Client) registered(k *node.Key) bool {
	for r := range c.live {
		if r.Name == k.Name && r.Queue == k.Queue && r.Owner == k.Owner {
			return true
		}
	}
	return false
}

// register records the registration in key's queue that a waiting call
// is about to make (queue "": the key's own), until the call ends
// (leaveWaiters takes it out); Close leaves the queue for the calls it
// ends (leaveOwed).
func (c *Client) register(key, queue, grant string, shared bool) *node.Key {
	if !c.handoff {
		return nil
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.registerLocked(key, queue, grant, shared)
}

// registerLocked is register under c.qmu.
func (c *Client) registerLocked(key, queue, grant string, shared bool) *node.Key {
	k := &node.Key{Name: key, Owner: c.tag, Queue: queue, Grant: grant}
	if shared {
		k.Owner = c.rtag
	}
	c.live[k] = true
	c.touch(k)
	return k
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

// touch remembers k's queue for the sweep at Close. Under c.qmu.
func (c *Client) touch(k *node.Key) {
	now := c.clk.Now()
	lk := leavingKey(k.Name, k.Queue) + "\x00" + k.Owner
	if _, ok := c.touched[lk]; !ok && len(c.touched) >= maxTouched {
		maps.DeleteFunc(c.touched, func(_ string, t touched) bool { return !now.Before(t.until) })
		if len(c.touched) >= maxTouched {
			return
		}
	}
	c.touched[lk] = touched{k: node.Key{Name: k.Name, Queue: k.Queue, Owner: k.Owner},
		until: now.Add(node.WaiterLease + 2*c.cfg.maxTimeout())}
}

// touchQueue is touch for a waiting attempt of client tag owner at key
// name in queue (a semaphore's line), which no register records.
func (c *Client) touchQueue(name, queue, owner string) {
	if !c.handoff {
		return
	}
	c.qmu.Lock()
	c.touch(&node.Key{Name: name, Queue: queue, Owner: owner})
	c.qmu.Unlock()
}

// heldByGrant records l, a lock taken by grants, until it is unlocked or
// its validity ends: the sweep at Close leaves its key alone, since a
// lock still held at Close is not released (it expires).
func (c *Client) heldByGrant(l *Lock) {
	c.qmu.Lock()
	locks := slices.Collect(maps.Keys(c.byGrant))
	c.qmu.Unlock()
	var gone []*Lock
	for _, o := range locks {
		o.mu.Lock()
		if o.left() <= 0 {
			gone = append(gone, o)
		}
		o.mu.Unlock()
	}
	c.qmu.Lock()
	for _, o := range gone {
		delete(c.byGrant, o)
	}
	c.byGrant[l] = true
	c.qmu.Unlock()
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
	c.qmu.Lock()
	ts := slices.Collect(maps.Values(c.touched))
	clear(c.touched)
	locks := slices.Collect(maps.Keys(c.byGrant))
	c.qmu.Unlock()
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
		if !held[k.Name] {
			k.Grant = node.LeaveAll
		}
		for i := range c.nodes {
			out = append(out, owedLeave{k: k, i: i, until: t.until})
		}
	}
	return out
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
// c.qmu, so that an owed Leave coming due (resendDue) either gates the
// call or finds it registered and waits. It returns ctx's error or
// ErrClosed if either ends the wait first.
func (c *Client) registerAfterLeaves(ctx context.Context, key, grant string, shared bool) (*node.Key, error) {
	if !c.handoff {
		return nil, nil
	}
	lk := leavingKey(key, "")
	for {
		c.qmu.Lock()
		left := c.leaving[lk]
		if left == nil {
			k := c.registerLocked(key, "", grant, shared)
			c.qmu.Unlock()
			return k, nil
		}
		c.qmu.Unlock()
		select {
		case <-left:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, ErrClosed
		}
	}
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
	c.qmu.Lock()
	owed := c.owed
	c.owed = nil
	late := len(owed) > 0 // a command timed out lately: it may still run
	for k := range c.live {
		for i := range c.nodes {
			owed = append(owed, owedLeave{k: *k, i: i, until: now.Add(time.Hour)})
		}
	}
	clear(c.live)
	c.qmu.Unlock()
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
// node's timeout, and returns when all have returned. With breakers, a
// node whose breaker is open gets none, and the answers count for it
// (Close sends regardless: its last word to the nodes).
func (c *Client) sendLeaves(owed []owedLeave, breakers bool) {
	var wg sync.WaitGroup
	for _, o := range owed {
		var gen uint64
		if breakers {
			var ok bool
			if ok, gen = c.allow(o.i); !ok {
				continue
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
				c.record(o.i, gen, err)
			}
			c.callDone(o.i, "leave", c.clk.Since(start), err)
		}()
	}
	wg.Wait()
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
func (c *Client) leaveWaiters(reg *node.Key, l *Lock, sent []*inflight) {
	if reg == nil {
		return
	}
	if !c.begin() {
		return // closed: Close leaves for the calls still registered (leaveOwed)
	}
	defer c.bg.Done()
	c.qmu.Lock()
	live := c.live[reg]
	delete(c.live, reg)
	c.qmu.Unlock()
	if !live || l != nil && reg.Grant != "" && l.k.Token == reg.Grant {
		// Left by Close; or granted: the granting nodes dropped the
		// registration; the others may grant later, to l's token,
		// which its Unlock releases, or let it lapse.
		return
	}
	k := *reg
	var sending sync.WaitGroup // the Leaves below, for the key's next call (registerAfterLeaves)
	left := make(chan struct{})
	lk := leavingKey(k.Name, k.Queue)
	c.qmu.Lock()
	c.leaving[lk] = left
	c.qmu.Unlock()
	c.bg.Add(1)
	defer func() {
		go func() {
			defer c.bg.Done()
			sending.Wait()
			c.qmu.Lock()
			if c.leaving[lk] == left {
				delete(c.leaving, lk)
			}
			c.qmu.Unlock()
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
		c.bg.Add(1) // within the caller's operation
		sending.Add(1)
		go func() {
			defer c.bg.Done()
			defer sending.Done()
			c.leaveOn(i, k, l, acq, sent)
		}()
	}
}
