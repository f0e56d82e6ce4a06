package goredis

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/node"
)

// watchIdle is how long the subscriber waits for a message before it
// sends a PING; a second wait as long without anything arriving means the
// connection is dead, and it starts over on a new one. A variable for
// tests.
var watchIdle = 5 * time.Second

// The backoff between attempts to read while the node cannot be reached.
const (
	watchMinBackoff = 10 * time.Millisecond
	watchMaxBackoff = time.Second
)

// Watch watches node.ReleaseChannel(key) and sends on released, without
// blocking, for each release announced there. It returns at once: it
// never waits for the network.
//
// A node's watches share one go-redis PubSub (one connection), which two
// goroutines of the node's serve while any watch is running: one
// subscribes to the channels that have watches and unsubscribes from those
// that no longer have any, the other reads. When the last watch stops,
// they unsubscribe from everything and end; the connection stays open,
// idle, for the node's next watch (a waiter's watch then costs a SUBSCRIBE,
// not a dial and a handshake), until the client is closed. If the
// connection drops, go-redis dials again and subscribes again to every
// channel; a connection that stays silent after a PING is replaced.
// Releases announced while the subscription is down are missed, which is
// why a waiter never relies on them alone.
func (n *redisNode) Watch(key, owner string, released chan<- struct{}) node.Watch {
	return n.hub.watch(node.ReleaseChannel(key), owner, released)
}

// hub is a node's subscriptions: the channels its watches want, and the
// run (goroutines and PubSub) that serves them while there is any.
type hub struct {
	client  redis.UniversalClient
	timeout time.Duration // of a SUBSCRIBE, UNSUBSCRIBE or PING
	// sharded: shard channels (SSUBSCRIBE; a cluster copy whose scripts
	// SPUBLISH, see DialCluster); the PubSub's connection goes to the
	// master of its first channel's slot, which every channel of a copy
	// shares.
	sharded bool

	mu   sync.Mutex // guards everything below and the runs' fields, and sends on watches' channels
	subs map[string]*channel
	run  *hubRun // nil while no watch runs
	// idle is the PubSub of the last run, subscribed to nothing and with
	// every reply read, kept for the next run; nil if there is none.
	idle *redis.PubSub
}

// channel is one channel that watches want.
type channel struct {
	watches map[*watch]struct{}
}

// hubRun is one period of a hub with watches: its goroutines and PubSub.
type hubRun struct {
	ctx    context.Context // cancelled when the last watch stops
	cancel context.CancelFunc
	kick   chan struct{} // cap 1: the wanted channels changed
	done   chan struct{} // closed when the goroutines have ended and the PubSub is closed

	// Guarded by hub.mu:
	ps     *redis.PubSub // the current one
	closed bool          // ps is closed for good
	// draining: the last watch has stopped; the run unsubscribes from
	// everything and ends, unless a watch comes first. drainSent: the
	// UNSUBSCRIBE of everything is sent. drainTimer ends the run if that
	// takes longer than the node's timeout. parked: ended with its
	// PubSub kept as the hub's idle one.
	draining, drainSent, parked bool
	drainTimer                  *time.Timer
	// subscribed are the channels the server confirmed on the current
	// connection and has not confirmed unsubscribed since: a channel can
	// stay subscribed while it has no watch, when it is wanted again
	// before the subscribing goroutine got round to it.
	subscribed map[string]bool
	// pending counts, per channel, the SUBSCRIBE and UNSUBSCRIBE commands
	// sent whose confirmations have not arrived: until they have, what
	// subscribed says of the channel may be about to change.
	pending map[string]int
}

// watch is a node.Watch on one channel of a hub.
type watch struct {
	h        *hub
	run      *hubRun // the run it was made in
	name     string
	owner    string          // wakes for releases that name it or no one; "": for all
	ready    chan struct{}   // closed once the channel is confirmed
	released chan<- struct{} // sent to without blocking, under h.mu
	stopped  bool            // guarded by h.mu
}

// Ready is closed once the node has confirmed the subscription; it stays
// open while the node cannot be subscribed to.
func (w *watch) Ready() <-chan struct{} { return w.ready }

// Stop ends the watch at once, without waiting for the network: nothing
// is sent on its channel after Stop has returned. After the last watch of
// a node stops, the node's subscriber unsubscribes from everything and
// its goroutines end, one round trip later, keeping the connection for the
// next watch; if the server does not answer within the node's timeout,
// the subscriber closes its PubSub (at once, unless go-redis is setting
// up a connection then: it holds the PubSub's lock while it dials and says
// HELLO, within the client's DialTimeout and ReadTimeout). Stop may be
// called more than once.
func (w *watch) Stop() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	ch := h.subs[w.name]
	delete(ch.watches, w)
	if len(ch.watches) > 0 {
		return
	}
	delete(h.subs, w.name)
	r := h.run
	if r == nil {
		return // cannot be: a run ends only without watches
	}
	if len(h.subs) == 0 {
		r.draining = true
		r.drainTimer = time.AfterFunc(h.timeout, func() { h.endDrain(r) })
	}
	r.kicked()
}

// endDrain ends r if it is still draining: its last UNSUBSCRIBE failed,
// or its replies did not come in time. Then its PubSub is closed.
func (h *hub) endDrain(r *hubRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.draining {
		r.cancel()
	}
}

// watch adds a watch of name.
func (h *hub) watch(name, owner string, released chan<- struct{}) *watch {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.run; r != nil && r.draining {
		// The run is unsubscribing on its way out: it serves this watch
		// instead, unless it has already been told to end.
		if r.ctx.Err() == nil {
			r.drainTimer.Stop()
			r.draining, r.drainSent = false, false
		} else {
			h.run = nil
		}
	}
	if h.run == nil {
		h.start()
	}
	w := &watch{h: h, run: h.run, name: name, owner: owner, ready: make(chan struct{}), released: released}
	ch := h.subs[name]
	if ch == nil {
		ch = &channel{watches: map[*watch]struct{}{}}
		h.subs[name] = ch
		h.run.kicked()
	}
	ch.watches[w] = struct{}{}
	if h.run.subscribed[name] && h.run.pending[name] == 0 {
		close(w.ready)
	}
	return w
}

// kicked tells the run's subscribing goroutine that the wanted channels
// changed.
func (r *hubRun) kicked() {
	select {
	case r.kick <- struct{}{}:
	default: // already pending
	}
}

// start starts a run, on the idle PubSub if there is one; the caller
// holds h.mu.
func (h *hub) start() {
	ctx, cancel := context.WithCancel(context.Background())
	ps := h.idle
	h.idle = nil
	if ps == nil {
		ps = h.pubSub(ctx) // no channel yet: no network traffic
	}
	r := &hubRun{ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{}),
		ps: ps, subscribed: map[string]bool{}, pending: map[string]int{}}
	h.run = r
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); h.subscribe(r) }()
	go func() { defer wg.Done(); h.read(r) }()
	// At the end, the PubSub is closed, unless it is kept idle, from a
	// goroutine of its own: that ends a read in progress.
	context.AfterFunc(ctx, func() {
		defer wg.Done()
		h.mu.Lock()
		if h.run == r {
			h.run = nil
		}
		r.closed = true
		ps, parked := r.ps, r.parked
		h.mu.Unlock()
		if !parked {
			_ = ps.Close()
		}
	})
	go func() { wg.Wait(); close(r.done) }()
}

// subscribe keeps the PubSub's subscriptions to the wanted channels, at
// each kick, until the run ends.
func (h *hub) subscribe(r *hubRun) {
	var ps *redis.PubSub
	var sent map[string]bool // channels SUBSCRIBEd on ps and not UNSUBSCRIBEd
	for {
		select {
		case <-r.kick:
		case <-r.ctx.Done():
			return
		}
		h.mu.Lock()
		if h.run != r {
			h.mu.Unlock()
			return // the run is over; h.subs may be the next one's
		}
		if r.ps != ps {
			ps, sent = r.ps, map[string]bool{}
		}
		if r.draining {
			if !r.drainSent {
				h.drain(r, ps, sent)
				sent = map[string]bool{}
			} else {
				h.mu.Unlock()
			}
			continue
		}
		var add, drop []string
		for name := range h.subs {
			if !sent[name] {
				add = append(add, name)
			}
		}
		for name := range sent {
			if h.subs[name] == nil {
				drop = append(drop, name)
			}
		}
		for _, name := range add {
			r.pending[name]++
		}
		for _, name := range drop {
			r.pending[name]++
		}
		h.mu.Unlock()
		// go-redis records the channels even when the command fails, and
		// subscribes to them again on its next connection.
		ctx, cancel := context.WithTimeout(r.ctx, h.timeout)
		if len(add) > 0 {
			h.sent(r, add, h.subscribeTo(ctx, ps, add))
			for _, name := range add {
				sent[name] = true
			}
		}
		if len(drop) > 0 {
			h.sent(r, drop, h.unsubscribeFrom(ctx, ps, drop))
			for _, name := range drop {
				delete(sent, name)
			}
		}
		cancel()
	}
}

// drain unsubscribes ps from every channel, the run's last command; the
// reader parks ps once every reply has come. The caller holds h.mu, which
// drain releases.
func (h *hub) drain(r *hubRun, ps *redis.PubSub, sent map[string]bool) {
	r.drainSent = true
	// One reply per channel, or a single one without a channel when there
	// is none.
	if len(sent) == 0 {
		r.pending[""]++
	}
	for name := range sent {
		r.pending[name]++
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.ctx, h.timeout)
	defer cancel()
	if err := h.unsubscribeFrom(ctx, ps, nil); err != nil {
		h.endDrain(r) // no reply will come, unless a watch came meanwhile
	}
}

// sent records the outcome of a SUBSCRIBE or UNSUBSCRIBE of names: if it
// failed, no confirmation may come (the connection is lost, and go-redis
// subscribes on the next one to what it then wants).
func (h *hub) sent(r *hubRun, names []string, err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range names {
		delete(r.pending, name)
	}
}

// read handles what arrives on the PubSub until the run ends: it confirms
// subscriptions, wakes watches, pings a connection that stays idle and
// replaces one that does not answer.
func (h *hub) read(r *hubRun) {
	backoff := watchMinBackoff
	pinged := false
	for r.ctx.Err() == nil {
		h.mu.Lock()
		ps := r.ps
		h.mu.Unlock()
		msg, err := ps.ReceiveTimeout(r.ctx, watchIdle)
		switch m := msg.(type) {
		case *redis.Subscription:
			pinged = false
			backoff = watchMinBackoff
			if h.confirmed(r, m) {
				return // drained and parked
			}
		case *redis.Message:
			pinged = false
			h.notify(m.Channel, m.Payload)
		case *redis.Pong:
			pinged = false
		}
		if err == nil {
			continue
		}
		var ne net.Error
		switch {
		case r.ctx.Err() != nil:
			return
		case errors.Is(err, redis.ErrClosed):
			// The go-redis client is closed (after the lock client,
			// usually, whose watches are draining): nothing will come,
			// end the run now rather than at the drain's timeout.
			r.cancel()
			return
		case errors.As(err, &ne) && ne.Timeout():
			// go-redis keeps the connection after a read timeout: ask it
			// for a sign of life, and start over if none comes.
			if !pinged {
				pinged = true
				ctx, cancel := context.WithTimeout(r.ctx, h.timeout)
				_ = ps.Ping(ctx)
				cancel()
				continue
			}
			pinged = false
			h.unconfirm(r)
			h.replace(r, ps)
		default:
			// The connection failed; go-redis dials again, and subscribes
			// again, at the next read. Not at once, while the node is down.
			pinged = false
			h.unconfirm(r)
			if !sleep(r.ctx, &backoff) {
				return
			}
		}
	}
}

// replace puts a new PubSub in old's place, unless the run is over, and
// has the wanted channels subscribed on it.
func (h *hub) replace(r *hubRun, old *redis.PubSub) {
	h.mu.Lock()
	if r.closed || r.ps != old {
		h.mu.Unlock()
		return
	}
	r.ps = h.pubSub(r.ctx)
	h.mu.Unlock()
	_ = old.Close()
	r.kicked()
}

// confirmed records what the server confirmed on r's connection: a
// subscribed channel's watches are ready; an unsubscribed channel wanted
// again waits for its new confirmation. When a draining run has the last
// reply it waits for, confirmed parks its PubSub as the hub's idle one,
// ends the run and reports true.
func (h *hub) confirmed(r *hubRun, m *redis.Subscription) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.pending[m.Channel] > 0 {
		r.pending[m.Channel]--
	}
	switch m.Kind {
	case "subscribe", "ssubscribe": // ssubscribe, sunsubscribe: shard channels
		r.subscribed[m.Channel] = true
		if ch := h.subs[m.Channel]; ch != nil && h.run == r && r.pending[m.Channel] == 0 {
			for w := range ch.watches {
				select {
				case <-w.ready:
				default:
					close(w.ready)
				}
			}
		}
	case "unsubscribe", "sunsubscribe":
		delete(r.subscribed, m.Channel)
		if r.draining && r.drainSent && m.Count == 0 && !r.closed && h.run == r && idle(r.pending) {
			r.parked = true
			r.drainTimer.Stop()
			h.run = nil
			if h.idle == nil {
				h.idle = r.ps
			} else {
				r.parked = false // another is kept already: this one is closed
			}
			r.cancel()
			return true
		}
	}
	return false
}

// idle reports whether no command awaits its confirmation.
func idle(pending map[string]int) bool {
	for _, n := range pending {
		if n > 0 {
			return false
		}
	}
	return true
}

// unconfirm forgets every subscription: r's connection is gone, and a
// watch made now is ready only once the next connection confirms.
func (h *hub) unconfirm(r *hubRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(r.subscribed)
	clear(r.pending)
}

// notify wakes the watches of name, without blocking, for a release that
// names to ("": no one, every watch wakes).
func (h *hub) notify(name, to string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch := h.subs[name]; ch != nil {
		for w := range ch.watches {
			if !node.Wakes(w.owner, to) {
				continue // the key is reserved or granted for another waiter
			}
			select {
			case w.released <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
}

// sleep waits *backoff, or less if ctx ends meanwhile (then it reports
// false), and doubles *backoff up to watchMaxBackoff.
func sleep(ctx context.Context, backoff *time.Duration) bool {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	*backoff = min(2**backoff, watchMaxBackoff)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pubSub returns a new PubSub of the hub's kind, subscribed to nothing.
func (h *hub) pubSub(ctx context.Context) *redis.PubSub {
	if h.sharded {
		return h.client.SSubscribe(ctx)
	}
	return h.client.Subscribe(ctx)
}

// subscribeTo subscribes ps to names, shard channels where the hub is
// sharded.
func (h *hub) subscribeTo(ctx context.Context, ps *redis.PubSub, names []string) error {
	if h.sharded {
		return ps.SSubscribe(ctx, names...)
	}
	return ps.Subscribe(ctx, names...)
}

// unsubscribeFrom unsubscribes ps from names (none: from every channel).
func (h *hub) unsubscribeFrom(ctx context.Context, ps *redis.PubSub, names []string) error {
	if h.sharded {
		return ps.SUnsubscribe(ctx, names...)
	}
	return ps.Unsubscribe(ctx, names...)
}
