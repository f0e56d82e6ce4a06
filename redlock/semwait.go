package redlock

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"
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

// semWait is one Semaphore.Acquire call's state across its rounds: the
// target of the wait loop (Client.acquire) for a semaphore's slots. (Its
// config is passed to the methods that read it, as a waiter's is.)
type semWait struct {
	s      *Semaphore
	giveUp time.Time // WithMaxWait's limit, on the client's clock; zero: none

	w          *watches
	o          *offer
	subscribed bool         // w was made or inherited (nil: no watches to be had)
	hint       []int        // the slots released since the last round: tried alone
	heard      []int        // slots heard released and not tried: the next head's to try
	round      int          // rounds that found every slot held, this call's and those of the heads whose watches it took
	own        int          // this call's rounds that found every slot held
	rounds     int          // the attempts of this call's rounds, for the Acquire hook
	qe         *QuorumError // the last round's
	p          *place       // its place in the nodes' queue; nil: its rounds do not queue (yet)
	rolling    []*outcome   // failed attempts whose rollback may still be on its way: settled at the end
	began      bool         // the call's turn came, and begin ran
	wait       bool         // the next try waits instead (begin: nothing heard since the last head's round)
	poked      bool         // a slot of this client was released during the last round
	named      bool         // the next wait ends only for a release heard by name (delay)
}

// turn is the semaphore's local queue: one per permits value.
func (sw *semWait) turn() (local, key string, giveUp time.Time) {
	return sw.s.local, sw.s.slots[0], sw.giveUp
}

// begin readies the call once its turn came: for a slot that an Unlock
// of this client hands over from the start (while a round tries the
// slots one by one, this client's holders' Unlocks hand theirs here
// instead of releasing them to every client's waiters), and with the
// previous head's subscriptions and place (inherit).
func (sw *semWait) begin(cfg *config) {
	s, c := sw.s, sw.s.c
	sw.began = true
	sw.o = c.offer(s.local, cfg)
	sw.wait = !sw.inherit()
	if sw.p == nil && c.caps.handoff {
		// The first attempt is a plain SET, and the round queues
		// from the attempt after the first refusal (place.later): a
		// round over held slots whose replies are slow took up to a
		// node timeout per slot, and callers that came later took
		// the slots released meanwhile (a torture trace, stop 56).
		sw.p = &place{later: true}
	}
}

// try is the call's next round over the slots (tryRound), but none
// at first when the previous head left nothing to try (begin).
func (sw *semWait) try(ctx context.Context, cfg *config) (*Lock, bool, error) {
	if !sw.began {
		sw.begin(cfg)
	}
	sw.poked = false
	if sw.wait {
		sw.wait = false
		return nil, false, nil
	}
	l, poked, done, err := sw.tryRound(ctx, cfg)
	sw.poked = poked
	return l, done, err
}

// backoff is delay's wait. A call past its strategy's end that has not
// made a round of its own yet (it waited on what the previous head
// knew) makes one; one that was poked during its round, and is not
// woken by name, tries again at once: the slot was released perhaps
// after the round had tried it.
func (sw *semWait) backoff(ctx context.Context, cfg *config) (time.Duration, bool, error) {
	d, named, again := sw.delay(cfg)
	sw.named = named
	switch {
	case !again && sw.own == 0:
		return 0, true, nil
	case !again:
		return 0, false, sw.s.ended(sw.qe, ctx, nil)
	case sw.poked && !named:
		sw.hint = nil
		return 0, true, nil
	}
	return d, false, nil
}

// subscribe, once every slot was found held, subscribes to every slot
// (unless the previous head's subscriptions were taken over).
func (sw *semWait) subscribe(ctx context.Context, _ *config, d time.Duration) (bool, error) {
	if sw.w != nil || sw.subscribed {
		return false, nil
	}
	sw.subscribed = true
	if sw.w = sw.s.watch(); sw.w == nil {
		return false, nil
	}
	if err := sw.w.ready(ctx, sw.s.c, d); err != nil {
		return false, sw.s.ended(sw.qe, ctx, err)
	}
	sw.hint = nil
	return true, nil
}

// inherit takes the previous head's subscriptions, if it left them
// (takeOver): every slot was held at its last round, and any release
// since is buffered in them, so with none this call need not try every
// slot (a new head after every handoff would otherwise try them all in
// vain). Where the nodes keep the line, it makes one waiting attempt, at
// a random slot, which queues the client again (the previous head left
// the line when it got its slot); elsewhere it waits at once. It reports
// whether to try the slots before the first wait.
func (sw *semWait) inherit() bool {
	s, c := sw.s, sw.s.c
	if sw.w, sw.round, sw.p = c.takeOver(s.local); sw.w == nil {
		return true
	}
	sw.subscribed = true
	sw.hint = sw.w.pending()
	listening := sw.w.listening(c.quorum)
	if !c.caps.handoff {
		return sw.hint != nil || !listening
	}
	// The previous head's place in the line, if it had one
	// (registered under the client's tag): this call waits there, and
	// leaves it when it ends (its attempts still on their way
	// included).
	if sw.p == nil {
		sw.p = &place{}
	}
	if sw.hint == nil && listening {
		sw.hint = []int{rand.IntN(s.permits)}
	}
	return true
}

// tryRound makes one round over the slots (Semaphore.try, sw.hint
// first). With done the call ends, with the lock or the error (other
// than every slot held; ctx ended). Otherwise every slot was held, and
// poked says a slot of this client was released during the round.
func (sw *semWait) tryRound(ctx context.Context, cfg *config) (l *Lock, poked, done bool, err error) {
	s := sw.s
	sw.w.forget(sw.hint)
	p := sw.p
	if p != nil && s.c.holdsPermit(s.local) {
		// Out of the line while the client holds a permit (see
		// holdsPermit): its holders hand theirs to this call, and a slot
		// free with no one in line takes a plain attempt. A waiting
		// attempt of an earlier round (made while the client held
		// none, or by a previous head) is taken back.
		if p.tried {
			s.leave(p, nil)
			sw.p = &place{}
		}
		p = nil
	}
	l, n, poked, err := s.try(ctx, cfg, sw.hint, sw.o, p, &sw.rolling)
	sw.rounds += n
	if l != nil && sw.hint != nil {
		sw.heard = append(sw.heard, sw.hint[min(n, len(sw.hint)):]...)
	}
	qe, ok := err.(*QuorumError)
	if err == nil || !ok || qe.ctxErr != nil {
		return l, false, true, err
	}
	sw.qe = qe
	qe.Attempts = sw.rounds
	sw.round++
	sw.own++
	if sw.p == nil {
		sw.p = &place{}
	}
	sw.p.later = false // every slot is held: the next rounds queue
	return nil, poked, false, nil
}

// delay is the wait after a round that found every slot held. It grows
// with every round since every slot was last seen free (the earlier
// heads' too); whether to go on (again) is this call's RetryStrategy's
// answer for its own rounds, and WithMaxWait's. Queued on a majority,
// and heard there (named): a release that reserves a slot for this
// client names it, and one that frees a slot with no head to reserve it
// for (every waiter in line has one on its way) is heard too. It wakes
// for those, or to renew its place before its lease ends; a local
// release (a poke) says nothing more.
func (sw *semWait) delay(cfg *config) (d time.Duration, named, again bool) {
	c, retry := sw.s.c, cfg.retry
	d, ok := retry.Backoff(max(sw.round, 1))
	dOwn, again := retry.Backoff(max(sw.own, 1))
	if !ok {
		d = dOwn // the inherited count is past the strategy's end
	}
	named = sw.p != nil && sw.p.queued && sw.w.listening(c.quorum)
	if named {
		d = queuePoll
	}
	if !sw.giveUp.IsZero() {
		left := sw.giveUp.Sub(c.clk.Now())
		again = again && left > 0
		d = min(d, left)
	}
	return d, named, again
}

// sleep waits up to d for a slot released (Client.sleep; named by
// delay: a release heard by name only, a local release says nothing
// more) or handed over. It returns the lock handed over, or the error
// that ends the call, or neither: the slots heard released are the next
// round's hint.
func (sw *semWait) sleep(ctx context.Context, _ *config, d time.Duration) (*Lock, error) {
	wk, err := sw.s.c.sleep(ctx, d, sw.w, sw.o, 0, !sw.named)
	hint, dropped, g := wk.slots, wk.dropped, wk.g
	sw.hint = hint
	switch {
	case g != nil:
		sw.heard = append(append(sw.heard, dropped...), hint...)
		return g, nil
	case err != nil:
		sw.heard = append(sw.heard, dropped...)
		return nil, sw.s.ended(sw.qe, ctx, err)
	case dropped != nil:
		sw.hint = append(sw.hint, dropped...)
		slices.Sort(sw.hint)
		sw.hint = slices.Compact(sw.hint)
	}
	return nil, nil
}

// end is Acquire's last step once its turn came, l the lock it returns:
// it withdraws its offer, and passes its subscriptions and place in the
// line to the client's next waiter, or stops and leaves them.
func (sw *semWait) end(l *Lock) *Lock {
	s, c, p := sw.s, sw.s.c, sw.p
	if l == nil {
		for _, o := range sw.rolling {
			o.settle() // a call that fails leaves no key of its attempts when it returns
		}
	}
	if l != nil {
		c.holding(s.local, l) // before the next waiter's turn: it does not queue
	}
	c.withdraw(s.local, sw.o, l)
	if l != nil && p != nil {
		// The client holds a permit now: it leaves the line, which
		// orders the clients that hold none (holdsPermit), and its next
		// waiter waits for its holders' handoffs, trying free slots by
		// plain attempts. (Before, the next waiter kept the place with
		// a new ticket: clients holding permits stayed in line, and each
		// one's handoff to its own next call yielded the slot to
		// another's, a cross-client release per section.)
		if p.tried {
			s.leave(p, l)
		}
		p = nil
	}
	passed := false
	if sw.w != nil {
		sw.w.rebuffer(sw.heard)
		// The next waiter that takes the place leaves it when it ends;
		// should none take it, the leave runs later, when l may be in
		// its holder's hands (its chain moving on): without l then.
		if passed = c.passOn(s.local, sw.w, sw.round, p, func() { s.leave(p, nil) }); !passed {
			sw.w.stop()
		}
	}
	if p != nil && p.tried && !passed {
		// No waiter of this client takes over its place in the
		// line (and the reservations announced to it).
		s.leave(p, l)
	}
	return nil // the client's next waiter tries the other slots at once
}

// place is a waiting Acquire's place in the nodes' queue of a semaphore
// (Semaphore.queue).
type place struct {
	later  bool  // plain attempts until one is refused: the call's first round
	ticket int64 // the largest ticket a node gave it; 0 before the first
	queued bool  // its last refused attempt was queued on a majority
	tried  bool  // it has made a waiting attempt: it may be registered
	// sent are its waiting attempts per slot whose commands may still
	// register the client on a node (see Client.leaveWaiters).
	sent map[int][]*inflight
}

// leave takes the client out of the nodes' line of the semaphore, in
// the background, when an Acquire that queued there ends and no other
// waiter of the client takes over: on every node (an acquire that set
// its slot left the line there, but a waiting attempt still on its way
// when a handoff came may have queued the client again; on each node the
// Leave waits for p's attempts there, and is owed again when one may
// still run late) and at every slot, so that a slot reserved for the
// client is handed on to the next client in line (Handoffer.Leave). At
// the slot of l, the lock the call took (nil: none), the Leave also
// waits for l's acquire, as a Lock call's does (Client.leaveWaiters): one
// still on its way to a node queues the client again there if it finds
// the slot taken (a torture trace, stop 52: it came 70 ms late, after
// the Leave, and a release then reserved a slot for the client, its call
// gone, for a lease).
func (s *Semaphore) leave(p *place, l *Lock) {
	for i, k := range s.slots {
		var held *Lock
		if l != nil && l.k.Name == k {
			held = l
		}
		s.c.leaveWaiters(s.c.register(k, s.queue, "", s.c.caps.tag), held, p.sent[i], false)
	}
}
