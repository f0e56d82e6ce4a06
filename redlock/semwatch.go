package redlock

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

// watch subscribes to the releases of every slot and to the releases
// that reserve a slot for this client (node.ReservedKey), each slot's on
// channels of its own (Client.watch). Nil when notifications are off or
// no node offers them.
func (s *Semaphore) watch() *watches {
	return s.c.watch(s.slots, true, "", false)
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
