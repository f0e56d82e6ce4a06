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
	hot    map[string]time.Time  // when a Lock call on the key last had to wait (see hotFor)
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

// hotFor is how long after a Lock call on a key had to wait this client
// counts the key as contended: its next Lock call on the key subscribes
// to the key's releases first and queues on the nodes from its first
// attempt, one round earlier than on a key it found free (a writer
// queued sooner stops new readers sooner, and each turn among waiting
// clients costs one round less). A little shorter than the nodes'
// subscription linger (node/pubsub.go), so that the subscription is
// usually still there and ready at once.
const hotFor = 4 * time.Second

// maxHot bounds how many keys a client remembers as contended.
const maxHot = 64

// contended reports whether a Lock call of this client on key had to
// wait within hotFor.
func (c *Client) contended(key string) bool {
	c.lq.mu.Lock()
	t, ok := c.lq.hot[key]
	c.lq.mu.Unlock()
	return ok && c.clk.Since(t) < hotFor
}

// waited records that a Lock call on key had to wait. With maxHot keys
// remembered, all of them within hotFor, it forgets nothing and does not
// remember key.
func (c *Client) waited(key string) {
	now := c.clk.Now()
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	if _, ok := c.lq.hot[key]; !ok && len(c.lq.hot) >= maxHot {
		for k, t := range c.lq.hot {
			if now.Sub(t) >= hotFor {
				delete(c.lq.hot, k)
			}
		}
		if len(c.lq.hot) >= maxHot {
			return
		}
	}
	c.lq.hot[key] = now
}

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

// watches are one Lock call's subscriptions to its key's releases (a
// semaphore's pass from one waiting Acquire to the next, see passOn).
type watches struct {
	released chan struct{}   // every node's watch sends here, or
	per      []chan struct{} // a semaphore's: one per slot, every node's watch of the slot sends there
	ws       []node.Watch
	named    []node.Watch    // a queued waiter's: per node as ws, its own channel (node.ReservedKey)
	mine     []chan struct{} // a semaphore's: per slot, the named watches' of the slot send there (room for one per node)
	reserved chan struct{}   // every named watch sends here: room for one reservation per node (see Client.sleep)
	channel  string          // with named: the channel they watch (node.ReservedKey)
	grants   []node.Watch    // a waiter that asks for a grant: per node, for its last attempt's grant message (see expect)
	granted  chan struct{}   // every grant watch sends here: room for one grant per node
	nGranted int             // grants heard since the last forget (see Client.sleep); owned by the waiter
}

// watch subscribes to key's releases on every node that offers it, and,
// for a waiter that the nodes may reserve the key for (named: a writer,
// queued under the client's tag), to the releases that name this client
// (node.ReservedKey), which no other client hears; on that channel, a
// waiter that asks for grants hears them apart (see expect). Nil when
// notifications are off or no node offers them.
func (c *Client) watch(key string, named, grants bool) *watches {
	w := c.watchKeys([]string{key}, false)
	if w != nil && named {
		w.channel = node.ReservedKey(key, c.caps.tag)
		w.reserved = make(chan struct{}, len(c.nodes))
		if grants {
			w.granted = make(chan struct{}, len(c.nodes))
		}
		for _, n := range c.nodes {
			if wn, ok := n.(node.Watcher); ok {
				w.named = append(w.named, wn.Watch(w.channel, c.caps.tag, w.reserved))
			}
		}
	}
	return w
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

// watchKeys subscribes to the releases of keys on every node that offers
// it; perKey gives each key a channel of its own (watches.per, in the
// order of keys), else they share watches.released. Nil when
// notifications are off or no node offers them.
func (c *Client) watchKeys(keys []string, perKey bool) *watches {
	if c.cfg.quiet {
		return nil
	}
	w := &watches{released: make(chan struct{}, 1)}
	if perKey {
		w.per = make([]chan struct{}, len(keys))
		for i := range w.per {
			w.per[i] = make(chan struct{}, 1)
		}
	}
	for _, n := range c.nodes {
		if wn, ok := n.(node.Watcher); ok {
			for i, key := range keys {
				ch := w.released
				if perKey {
					ch = w.per[i]
				}
				w.ws = append(w.ws, wn.Watch(key, c.caps.tag, ch))
			}
		}
	}
	if len(w.ws) == 0 {
		return nil
	}
	return w
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

// listening reports whether at least n nodes have confirmed the
// watches, so that a release on a majority of nodes is heard.
func (w *watches) listening(n int) bool {
	if w == nil {
		return false
	}
	for i, x := range w.ws {
		if confirmed(x) && (w.named == nil || confirmed(w.named[i])) {
			n--
		}
	}
	return n <= 0
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

// wake returns the channel a release notification arrives on; nil (never)
// without watches.
func (w *watches) wake() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.released
}

// forget drops the reservations and grants announced so far: an attempt
// is about to find out what the nodes hold, and only announcements that
// come after it began say something it did not see.
func (w *watches) forget() {
	if w == nil {
		return
	}
	w.nGranted = 0
	for {
		select {
		case <-w.reserved:
		case <-w.granted:
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

// reservations returns the channel a reservation for this waiter is
// announced on, once per node; nil (never) without named watches.
func (w *watches) reservations() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.reserved
}

// grantsC returns the channel a grant to this waiter is announced on,
// once per node; nil (never) for a waiter that asked for none.
func (w *watches) grantsC() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.granted
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
