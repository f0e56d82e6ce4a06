package redlock

import (
	"context"
	"reflect"
	"slices"
	"time"

	"github.com/quorumlock/redlock/node"
)

// A semaphore's waiters of one client take turns (see Semaphore.Acquire):
// the head subscribes to every slot's releases, and passes its
// subscriptions, with what they heard and its place in the nodes' line,
// to the next head when it ends. These are those watches.

// passOn leaves w, a semaphore's subscriptions, round, its count of
// rounds that found every slot held, and p, its place in the nodes'
// line once it has made a waiting attempt there (which unplace leaves),
// to the next waiter in the client's queue key, and reports whether
// there is one to take them (else the caller stops them and leaves).
func (c *Client) passOn(key string, w *watches, round int, p *place, unplace func()) bool {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	q := c.lq.queues[key]
	if q == nil || len(q.waiters) < 2 || q.passed != nil {
		return false
	}
	q.passed, q.rounds, q.place, q.unplace = w, round, nil, nil
	if p != nil && p.tried {
		q.place, q.unplace = p, unplace
	}
	return true
}

// takeOver returns the subscriptions, round count and place in the
// nodes' line (nil: none) that the previous head of the client's queue
// key left (passOn); nil, 0 and nil if none. The place passes with the
// subscriptions: the next head leaves the line when it ends, as the
// previous one would have (see Semaphore.leave); where every waiter
// gives up before its turn, the last one's Client.leave does.
func (c *Client) takeOver(key string) (*watches, int, *place) {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	q := c.lq.queues[key]
	w, n, p := q.passed, q.rounds, q.place
	q.passed, q.rounds, q.place, q.unplace = nil, 0, nil, nil
	return w, n, p
}

// watch subscribes to the releases of every slot (Client.watchKeys, a
// channel per slot) and to the releases that reserve a slot for this
// client (node.ReservedKey), each slot's on a channel of its own
// (watches.mine) with room for one per node. Nil when notifications are
// off or no node offers them.
func (s *Semaphore) watch() *watches {
	c := s.c
	w := c.watchKeys(s.slots, true)
	if w == nil {
		return nil
	}
	w.mine = make([]chan struct{}, len(s.slots))
	for i := range w.mine {
		w.mine[i] = make(chan struct{}, len(c.nodes))
	}
	for _, n := range c.nodes {
		if wn, ok := n.(node.Watcher); ok {
			for i, key := range s.slots {
				w.named = append(w.named, wn.Watch(node.ReservedKey(key, c.caps.tag), "", w.mine[i]))
			}
		}
	}
	return w
}

// forgetSlots drops the reservations of slots (nil: of every slot)
// announced so far: an attempt at them is about to find out what the
// nodes hold (as watches.forget for a Lock).
func (w *watches) forgetSlots(slots []int) {
	if w == nil || w.mine == nil {
		return
	}
	drain := func(ch chan struct{}) {
		for {
			select {
			case <-ch:
			default:
				return
			}
		}
	}
	if slots == nil {
		for _, ch := range w.mine {
			drain(ch)
		}
		return
	}
	for _, i := range slots {
		drain(w.mine[i])
	}
}

// listeningEach reports whether each of the n keys of a watchKeys call
// has at least need confirmed watches (of its releases, and of those
// that name this client where there are such), so that a release of any
// of them on a majority of nodes is heard. False for nil.
func (w *watches) listeningEach(n, need int) bool {
	if w == nil {
		return false
	}
	ready := make([]int, n)
	for j, x := range w.ws { // per node, the keys in order (watchKeys)
		if confirmed(x) && (w.named == nil || confirmed(w.named[j])) {
			ready[j%n]++
		}
	}
	return slices.Min(ready) >= need
}

// pending returns the slots whose releases w has buffered, taking them,
// and those a reservation was announced for; nil when none.
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

// received returns a lock handed to o and not yet taken (nil: none),
// without waiting, and whether o was poked instead (a slot of this
// client was released without a handoff).
func (o *offer) received() (*Lock, bool) {
	if o == nil {
		return nil, false
	}
	select {
	case g := <-o.gift:
		return g, g == nil
	default:
		return nil, false
	}
}

// anyReleased waits for a release of any of a semaphore's slots (see
// Client.watchKeys with perKey; w may be nil: no notifications), for a
// slot handed to o by an Unlock of this client (o may be nil), for d on
// the client's clock, for ctx or for the client's Close. It returns the
// slots released meanwhile (nil: d passed, or a local release that handed
// nothing over: try them all), or the handed-over lock, or ctx's error,
// or ErrClosed. A release heard while a handoff to o is under way (or a
// release by an Unlock of this client that pokes o once it has returned,
// see Client.awaited) does not end the wait: such slots come back as
// dropped, for the caller to try, or to leave to the next waiter
// (watches.rebuffer). A poke of o (no handoff came) ends it with those
// slots as the hint, or, with pokes, with none (every slot is tried);
// without pokes and without such slots, the wait goes on. A slot reserved
// for this client ends the wait at the first node's announcement: waiting
// for a majority of them (as Client.sleep does for a Lock) measured
// slower here, as a line that serves several slots is often split across
// nodes for a moment, and the rollback of a minority hands the slot on.
func (w *watches) anyReleased(ctx context.Context, c *Client, d time.Duration, o *offer, pokes bool) (hint, dropped []int, g *Lock, err error) {
	t := c.clk.NewTimer(d)
	defer t.Stop()
	var gift chan *Lock
	if o != nil {
		gift = o.gift
	}
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.life.done)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(gift)},
	}
	const slot0 = 4
	var per, mine []chan struct{}
	if w != nil {
		per, mine = w.per, w.mine
	}
	for _, ch := range per {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	mine0 := len(cases)
	for _, ch := range mine {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	for {
		chosen, v, _ := reflect.Select(cases)
		switch chosen {
		case 0:
			return nil, dropped, nil, ctx.Err()
		case 1:
			return nil, dropped, nil, ErrClosed
		case 2:
			return nil, nil, nil, nil // every slot is tried
		case 3:
			g, _ = v.Interface().(*Lock)
			switch {
			case g != nil:
				return nil, dropped, g, nil
			case pokes:
				return nil, nil, nil, nil // poked: every slot is tried
			case dropped != nil:
				// The handoff did not come: the slots heard released
				// meanwhile are tried.
				return dropped, nil, nil, nil
			}
			continue
		}
		i := chosen - slot0 // a release of slot i
		if chosen >= mine0 {
			i = chosen - mine0 // a node reserved slot i for this client
		}
		if c.awaited(o) {
			// A handoff under way brings a slot (or a release under
			// way pokes this call once it has returned); this one is
			// kept in case no slot comes.
			dropped = append(dropped, i)
			continue
		}
		hint = append([]int{i}, w.pending()...)
		slices.Sort(hint)
		return slices.Compact(hint), dropped, nil, nil
	}
}

// rebuffer puts the releases of slots back into w's channels (without
// blocking: one pending is enough), for the next waiter that takes w.
func (w *watches) rebuffer(slots []int) {
	for _, i := range slots {
		select {
		case w.per[i] <- struct{}{}:
		default:
		}
	}
}
