package redlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

// WithNotifications turns release notifications on or off. On (the
// default), a Lock call that found the key held subscribes to the key's
// release channel (node.ReleaseChannel) on every node that offers it
// (node.Watcher) and retries as soon as the holder releases, or when the
// holder's keys expire on a majority, instead of after its retry delay,
// which becomes a cap. Off, Lock waits its retry delays only.
func WithNotifications(on bool) Option {
	return clientOnly("WithNotifications", func(c *config) { c.quiet = !on })
}

// local is a client's queue of Lock calls per key (turnstile) and the
// handoffs between them (offer, handoff.go), under a mutex of its own,
// never held across I/O.
type local struct {
	mu     sync.Mutex
	queues map[string]*turnstile // per key (or a semaphore's queue, Lock.queue): the calls waiting for it
	freed  map[string]string     // per semaphore (Semaphore.local): the slot this client released last, not tried since (Semaphore.first)
	held   map[string][]*Lock    // per semaphore (Semaphore.local): the permits its Acquire and TryAcquire calls returned, until found unlocked or run out (holdsPermit)
}

// turnstile is the local FIFO queue of one key: the goroutines of one
// Client waiting in Lock for the same key. Only the head competes on the
// nodes; the next one's turn comes when the head is done (it got the
// lock, or gave up).
type turnstile struct {
	// waiters[0] is the head. A waiter is its turn channel, closed when
	// it becomes the head; one that found the queue empty is the head at
	// once and has none (nil): the uncontended Lock makes no channel.
	waiters []chan struct{}
	first   [1]chan struct{} // backing array for the usual single waiter
	head    *offer           // the head's offer to take a handoff; nil until it makes one
	chain   int              // handoffs in a row (see maxChain)
	holder  *Lock            // the lock the last head left with, until its Unlock: the next head waits for its handoff
	passed  *watches         // a semaphore's: the subscriptions the last head left to the next (Client.passOn)
	rounds  int              // with passed: the rounds that found every slot held so far
	place   *place           // with passed: the last head's place in the nodes' line, when it made a waiting attempt (nil: none), and
	unplace func()           // what leaves it, should no waiter take it over
}

// maxRemembered bounds how many semaphores a client remembers (the
// slot it freed last, the permits it holds).
const maxRemembered = 64

// join queues a Lock call for key and returns its turn: nil when it is
// the head already, otherwise a channel closed when it becomes the head.
// leave must be called once with the same turn, whatever happened.
func (c *Client) join(key string) (turn chan struct{}) {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	q := c.lq.queues[key]
	if q == nil {
		q = &turnstile{}
		q.waiters = q.first[:0]
		c.lq.queues[key] = q
	}
	if len(q.waiters) > 0 {
		turn = make(chan struct{})
	}
	q.waiters = append(q.waiters, turn)
	return turn
}

// awaitTurn waits for turn (from join; nil: the call is the head
// already) until it comes, giveUp passes (zero: no limit), ctx ends or
// the client closes: ErrClosed, or an error naming key that wraps
// ErrNotAcquired and ctx's error if it ended.
func (c *Client) awaitTurn(ctx context.Context, turn chan struct{}, giveUp time.Time, key string) error {
	if turn == nil {
		return nil
	}
	var limit <-chan time.Time
	if !giveUp.IsZero() {
		t := c.clk.NewTimer(giveUp.Sub(c.clk.Now()))
		defer t.Stop()
		limit = t.C()
	}
	select {
	case <-turn:
		return nil
	case <-limit:
	case <-ctx.Done():
	case <-c.life.done:
		return ErrClosed
	}
	return notStarted("acquire", key, c, ctx, ErrNotAcquired)
}

// leave takes the Lock call whose turn is turn out of key's queue; l is
// the lock it returns (nil: none), which the next head then waits for.
func (c *Client) leave(key string, turn chan struct{}, l *Lock) {
	var orphan *watches
	var unplace func()
	c.lq.mu.Lock()
	q := c.lq.queues[key]
	i := slices.Index(q.waiters, turn)
	q.waiters = slices.Delete(q.waiters, i, i+1)
	switch {
	case len(q.waiters) == 0:
		// Left for a waiter that gave up before its turn.
		orphan = q.passed
		if q.place != nil {
			unplace = q.unplace
		}
		delete(c.lq.queues, key)
	case i == 0:
		if l != nil {
			q.holder = l
		}
		close(q.waiters[0])
	}
	c.lq.mu.Unlock()
	if orphan != nil {
		orphan.stop() // outside local.mu: it may write to the nodes
	}
	if unplace != nil {
		unplace()
	}
}

// heldHere reports whether a lock this client's queue for key handed out
// still holds it: its Unlock will hand it to the head, so the head need
// not try the nodes meanwhile.
func (c *Client) heldHere(key string) bool {
	c.lq.mu.Lock()
	h := c.lq.queues[key].holder
	c.lq.mu.Unlock()
	return h != nil && h.TTL() > 0
}

// watches are one waiting call's subscriptions to its keys' releases:
// a Lock's to its key, a semaphore's to every slot (passed from one
// waiting Acquire to the next, see passOn). Client.sleep waits on them.
type watches struct {
	ws       []node.Watch    // per node, the keys in order: their releases
	per      []chan struct{} // per key: every node's watch of its releases sends here (room for one)
	named    []node.Watch    // a queued waiter's: per node and key as ws, the releases that reserve the key for this client (node.ReservedKey)
	mine     []chan struct{} // with named, per key: its named watches send here (room for one reservation per node)
	channel  string          // a Lock's with grants: the channel the named watch is on (node.ReservedKey)
	grants   []node.Watch    // a waiter that asks for a grant: per node, for its last attempt's grant message (see expect)
	granted  chan struct{}   // every grant watch sends here: room for one grant per node
	nGranted int             // grants heard since the last forget (see Client.sleep); owned by the waiter
}

// watch subscribes to the releases of keys on every node that offers
// it, each key's on a channel of its own (watches.per, in the order of
// keys). With named (a waiter that the nodes may reserve a key for: a
// writer, or a semaphore's, queued under the client's tag), also to the
// releases that name this client (node.ReservedKey), which no other
// client hears (watches.mine), those that wake owner (node.Watcher): a
// Lock's the client's tag, a semaphore's every one. With grants (one
// key), a waiter that asks for a grant hears it apart on that channel
// (see expect). Nil when notifications are off or no node offers them.
func (c *Client) watch(keys []string, named bool, owner string, grants bool) *watches {
	if c.cfg.quiet {
		return nil
	}
	w := &watches{per: chans(len(keys), 1)}
	if named {
		w.mine = chans(len(keys), len(c.nodes))
	}
	if grants {
		w.channel = node.ReservedKey(keys[0], c.caps.tag)
		w.granted = make(chan struct{}, len(c.nodes))
	}
	for _, n := range c.nodes {
		wn, ok := n.(node.Watcher)
		if !ok {
			continue
		}
		for i, key := range keys {
			w.ws = append(w.ws, wn.Watch(key, c.caps.tag, w.per[i]))
			if named {
				w.named = append(w.named, wn.Watch(node.ReservedKey(key, c.caps.tag), owner, w.mine[i]))
			}
		}
	}
	if len(w.ws) == 0 {
		return nil
	}
	return w
}

// chans returns n channels with room for size each.
func chans(n, size int) []chan struct{} {
	out := make([]chan struct{}, n)
	for i := range out {
		out[i] = make(chan struct{}, size)
	}
	return out
}

// expect points the grant watches at msg, the node.GrantMessage of the
// attempt about to be sent: a node names in it the last attempt whose
// registration it granted, so only grants of this attempt's registration
// are heard (an announcement of an earlier one's may still be on its
// way). The channel is already subscribed: a watch costs no round trip.
func (w *watches) expect(c *Client, msg string) {
	if w == nil || w.granted == nil {
		return
	}
	for _, x := range w.grants {
		x.Stop()
	}
	w.grants = w.grants[:0]
	for _, n := range c.nodes {
		if wn, ok := n.(node.Watcher); ok {
			w.grants = append(w.grants, wn.Watch(w.channel, msg, w.granted))
		}
	}
}

// ready waits until every node confirmed its subscription, or d has
// passed on the client's clock (a node whose pub/sub is down must not
// make Lock slower than its retry delay), or ctx ends or the client is
// closed (then it returns their error).
func (w *watches) ready(ctx context.Context, c *Client, d time.Duration) error {
	t := c.clk.NewTimer(d)
	defer t.Stop()
	for _, x := range slices.Concat(w.ws, w.named, w.grants) {
		select {
		case <-x.Ready():
		case <-t.C():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-c.life.done:
			return ErrClosed
		}
	}
	return nil
}

// listening reports whether each watched key has at least need nodes
// that confirmed its watches (of its releases, and of those that name
// this client where there are such), so that a release of any of them
// on a majority of nodes is heard. False for nil.
func (w *watches) listening(need int) bool {
	if w == nil {
		return false
	}
	n := len(w.per)
	var buf [8]int
	ready := buf[:0]
	if n > len(buf) {
		ready = make([]int, 0, n)
	}
	ready = ready[:n]
	for j, x := range w.ws { // per node, the keys in order (watch)
		if confirmed(x) && (w.named == nil || confirmed(w.named[j])) {
			ready[j%n]++
		}
	}
	return slices.Min(ready) >= need
}

func confirmed(x node.Watch) bool {
	select {
	case <-x.Ready():
		return true
	default:
		return false
	}
}

func (w *watches) stop() {
	for _, x := range w.ws {
		x.Stop()
	}
	for _, x := range w.named {
		x.Stop()
	}
	for _, x := range w.grants {
		x.Stop()
	}
}

// forget drops the reservations of keys (by index; nil: of every key)
// and the grants announced so far: an attempt is about to find out what
// the nodes hold, and only announcements that come after it began say
// something it did not see.
func (w *watches) forget(keys []int) {
	if w == nil {
		return
	}
	w.nGranted = 0
	drain(w.granted)
	if w.mine == nil {
		return
	}
	if keys == nil {
		for _, ch := range w.mine {
			drain(ch)
		}
		return
	}
	for _, i := range keys {
		drain(w.mine[i])
	}
}

// drain empties ch without waiting.
func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// grantedBy reports whether n nodes announced a grant since the last
// forget (counted by Client.sleep).
func (w *watches) grantedBy(n int) bool {
	return w != nil && w.nGranted >= n
}

// pending returns the keys (by index) whose releases w has buffered,
// taking them, and those a reservation was announced for; nil when none.
func (w *watches) pending() []int {
	var hint []int
	for i, ch := range w.per {
		select {
		case <-ch:
			hint = append(hint, i)
			continue
		default:
		}
		if w.mine != nil && len(w.mine[i]) > 0 {
			hint = append(hint, i)
		}
	}
	return hint
}

// rebuffer puts the releases of keys (by index) back into w's channels
// (without blocking: one pending is enough), for the next waiter that
// takes w.
func (w *watches) rebuffer(keys []int) {
	for _, i := range keys {
		select {
		case w.per[i] <- struct{}{}:
		default:
		}
	}
}

// freeIn estimates, from a failed attempt's replies, when the holder's
// keys will have expired on enough nodes for need of them to be free:
// nodes that answered Done (rolled back) or Absent are free now, nodes
// that answered Taken with the holder's TTL are free after it. It returns
// 0 when that cannot be told (too many failures, keys without expiry).
func freeIn(replies []quorum.Reply, need int) time.Duration {
	free := 0
	var ttls []time.Duration
	for _, r := range replies {
		switch {
		case r.Err != nil:
		case r.Result.Status == node.Done, r.Result.Status == node.Absent:
			free++
		case r.Result.Status == node.Taken && r.Result.TTL > 0:
			ttls = append(ttls, r.Result.TTL)
		}
	}
	k := need - free
	if k <= 0 || k > len(ttls) {
		return 0
	}
	slices.Sort(ttls)
	return ttls[k-1]
}
