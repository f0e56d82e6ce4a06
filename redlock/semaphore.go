package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A Semaphore lets at most its number of permits hold it at once, across
// every client that uses its name on the same nodes. Each permit is a
// slot: an ordinary lock on its own key, name + ":permit:" + i for i in
// [0, permits). A holder owns one slot on a majority of the nodes, so by
// the argument for Lock no two holders own the same slot, and there are
// at most permits holders. (A counter per node would not do: two
// majorities can each count a different set of holders.) The slots are
// independent locks, so everything said of a Lock holds for a permit:
// validity, drift, rollback, Extend, KeepAlive, the loss signal, fencing
// (per slot), release notifications, the breaker and hooks.
//
// Two clients that use one name with different permits share the slots
// by index: together they admit at most the larger number of holders,
// and a client with fewer permits competes only for its own slots. Each
// permits value has its own line of waiters on the nodes, and a release
// serves the releasing client's line first, so under steady contention
// from both kinds one can wait long: give every client the same permits.
//
// A Semaphore is safe for concurrent use; it holds nothing on the nodes
// itself, so it needs no closing.
type Semaphore struct {
	c       *Client
	name    string   // as given, without the client's prefix
	permits int      // len(slots)
	slots   []string // the slots' keys, prefix included
	local   string   // the key of the client's own queue of its waiters (Client.join)
	queue   string   // the nodes' queue of every client's waiters for a permit (node.Key.Queue)
}

// Semaphore returns the semaphore name with permits permits. An empty name
// or permits < 1 is ErrInvalid; a closed client gives ErrClosed. It sends
// nothing to the nodes.
func (c *Client) Semaphore(name string, permits int) (*Semaphore, error) {
	switch {
	case name == "":
		return nil, fmt.Errorf("%w: empty semaphore name", ErrInvalid)
	case permits < 1:
		return nil, fmt.Errorf("%w: semaphore %q with %d permits (at least 1)", ErrInvalid, name, permits)
	}
	c.life.mu.Lock()
	closed := c.life.closed
	c.life.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	s := &Semaphore{c: c, name: name, permits: permits, slots: make([]string, permits)}
	for i := range s.slots {
		s.slots[i] = c.cfg.prefix + PermitKey(name, i)
	}
	// Lock calls queue under their key, and no lock key is this one in
	// practice (NUL bytes); Unlock of a permit hands its slot to this
	// queue's head (Lock.queue). The number of permits is part of it: a
	// Semaphore of the same name with other permits has its own queue,
	// subscriptions and handoffs (its waiters may not take every slot).
	s.local = semLocal(permits, s.slots[0])
	// One queue on the nodes for every slot, its line, with the
	// permits in its name for the same reason: a release hands its slot
	// to the longest-waiting client that has no slot reserved yet. Not
	// a lock's queue (node.WaitersKey): the scripts tell a queue that
	// serves several keys by that.
	s.queue = semLine(c.cfg.prefix+name, permits)
	return s, nil
}

// semLocal is the key of a client's local queue of waiters for the
// semaphore of permits whose first slot is slot0.
func semLocal(permits int, slot0 string) string {
	return "\x00sem\x00" + strconv.Itoa(permits) + "\x00" + slot0
}

// semLine is the nodes' queue (its line) of the semaphore of permits
// whose slots' keys begin with base (the client's prefix and the name).
func semLine(base string, permits int) string {
	return base + ":permits:" + strconv.Itoa(permits) + ":line"
}

// lineSlots returns the keys of the slots a semaphore's line serves
// (queue, see semLine); nil when queue is not a semaphore's line, or
// serves more than maxLineSlots.
func lineSlots(queue string) []string {
	rest, ok := strings.CutSuffix(queue, ":line")
	i := strings.LastIndex(rest, ":permits:")
	if !ok || i < 0 {
		return nil
	}
	permits, err := strconv.Atoi(rest[i+len(":permits:"):])
	if err != nil || permits < 1 || permits > maxLineSlots {
		return nil
	}
	slots := make([]string, permits)
	for j := range slots {
		slots[j] = rest[:i] + ":permit:" + strconv.Itoa(j)
	}
	return slots
}

// localLine returns the line of the semaphore whose client queue is
// local (see semLocal); "" when local is a lock's key.
func localLine(local string) string {
	rest, ok := strings.CutPrefix(local, "\x00sem\x00")
	p, slot0, found := strings.Cut(rest, "\x00")
	permits, err := strconv.Atoi(p)
	base, isSlot0 := strings.CutSuffix(slot0, ":permit:0")
	if !ok || !found || err != nil || !isSlot0 {
		return ""
	}
	return semLine(base, permits)
}

// maxLineSlots bounds the slots an owed Leave is sent again at (see
// Client.owe): beyond it, a slot reserved for a gone call lapses with
// its lease.
const maxLineSlots = 64

// PermitKey is the key of slot i of the semaphore name, without a
// client's prefix: name + ":permit:" + i.
func PermitKey(name string, i int) string {
	return name + ":permit:" + strconv.Itoa(i)
}

// Name returns the semaphore's name, as given to Client.Semaphore.
func (s *Semaphore) Name() string { return s.name }

// Permits returns how many holders the semaphore admits at once.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire makes one attempt at each slot, starting from the one this
// client released last (else a random one),
// until one is granted, and returns it as a Lock (its Key is the slot's).
// It never waits: when every slot is held, or no majority answered, the
// error wraps ErrNotAcquired and is the *QuorumError of the last slot
// tried. opts are the Lock options (WithTTL, WithFencing, ...).
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, err := s.c.lockConfig(s.name, opts)
	if err != nil {
		return nil, err
	}
	cfg.local, cfg.queue = s.local, s.queue
	start := s.c.clk.Now()
	l, attempts, _, err := s.try(ctx, &cfg, nil, nil, nil, nil)
	s.c.holding(s.local, l)
	s.report(l, start, attempts, err)
	return l, err
}

// Acquire waits for a permit: it tries every slot, as TryAcquire, and
// when all are held waits for a release of any of them (or for the
// client's retry delay) and tries again, until it holds one, the
// RetryStrategy gives up, WithMaxWait's limit passes or ctx ends; the
// error is then the *QuorumError of the last slot tried, wrapping
// ErrNotAcquired and, when ctx ended, ctx's error (when it ended before
// this call tried a slot, a QuorumError without replies). The goroutines
// of one client waiting on the same semaphore take turns in FIFO order:
// only the longest waiting one tries the nodes; it takes over the
// subscriptions of the one before it, and waits on them without trying
// when no slot was heard released since that one's last round. An
// Unlock of a permit of this client hands its slot straight to it (one
// transfer round, as a Lock's handoff; at most 16 in a row, then the
// slot is released). Across clients, the nodes keep one line of the
// clients waiting for any slot, in the order they came: a release
// reserves its slot for the client at the head of the line that has no
// slot reserved yet, and wakes only that client (docs/DESIGN.md,
// "Semaphores"). A client joins the line from the attempt after the
// first that found its slot held.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	c := s.c
	cfg, err := c.lockConfig(s.name, opts)
	if err != nil {
		return nil, err
	}
	cfg.local, cfg.queue = s.local, s.queue
	start := c.clk.Now()
	sw := semWait{s: s}
	if cfg.maxWait > 0 {
		sw.giveUp = start.Add(cfg.maxWait)
	}
	l, err := c.acquire(ctx, &cfg, target{s: &sw}) // (semWait.end records the permit: holding)
	s.report(l, start, sw.rounds, err)
	return l, err
}

// try makes one attempt at each slot in only (nil: at every slot, from
// a random one) until one is granted; it returns the lock, the attempts
// made and, when none was granted, the last attempt's error. With p
// (nil: plain attempts) the attempts queue on the nodes in p's place,
// and take a slot reserved for this client; from the attempt after the
// first refusal when p.later says so. It stops
// early on an error that is not a refusal (ErrClosed), when ctx ends, and
// when so many nodes refuse for good (credentials, no scripts, ...) that
// no slot can be had. Waiters woken by a release try the released slot
// alone: they would find the others held, and only add load for the
// holders' releases. A slot handed to o (nil: none) meanwhile ends the
// round with it; poked says o was poked during the round (a slot of this
// client was released, perhaps after the round had tried it). rolling
// (nil: none) keeps the failed attempts whose rollback is on its way
// (Client.attempt); without it each attempt waits for its rollback.
func (s *Semaphore) try(ctx context.Context, cfg *config, only []int, o *offer, p *place, rolling *[]*outcome) (l *Lock, attempts int, poked bool, err error) {
	n, first := len(only), 0
	if n == 0 {
		n, first = s.permits, s.first()
	}
	for j := range n {
		g, pk := o.received()
		if g != nil {
			return g, j, poked, nil
		}
		poked = poked || pk
		slot := (first + j) % s.permits
		if only != nil {
			slot = only[j]
		}
		var ticket int64
		wait := p != nil && !p.later
		if wait {
			p.tried, ticket = true, p.ticket
			// A waiting attempt registers the client in the line:
			// Close's sweep leaves it for good, also where this call's
			// place passes to a waiter that ends before its turn.
			s.c.touchQueue(s.slots[slot], s.queue, s.c.caps.tag)
		}
		l, out, aerr := s.c.attempt(ctx, s.slots[slot], cfg, wait, asks{ticket: ticket}, "", rolling)
		switch {
		case aerr != nil:
			return nil, j + 1, poked, aerr
		case out == nil:
			return l, j + 1, poked, nil
		}
		err = out.err
		if p != nil && !wait {
			p.later = false // a slot is held: the round's next attempts queue
		} else if p != nil {
			p.ticket, p.queued = max(p.ticket, out.ticket), out.queued
			if out.sent != nil {
				if p.sent == nil {
					p.sent = map[int][]*inflight{}
				}
				p.sent[slot] = append(pending(p.sent[slot]), out.sent)
			}
		}
		if out.err.ctxErr != nil || s.c.hopeless(out.perm) {
			return nil, j + 1, poked, out.err
		}
	}
	return nil, n, poked, err
}

// first is the slot a round over every slot starts at: the one this
// client released last, if no round has tried it since (its own holders'
// slots are held, and the one it released is free unless another client
// took it or the nodes reserved it for one in line), else a random one.
// Four clients of one goroutine cycling on four permits kept 2.38–2.68
// of them in use with a random start, their attempts colliding with
// each other's held slots; 3.33–3.38 with this (docs/PERFORMANCE.md).
func (s *Semaphore) first() int {
	c := s.c
	c.lq.mu.Lock()
	name := c.lq.freed[s.local]
	delete(c.lq.freed, s.local)
	c.lq.mu.Unlock()
	if i := slices.Index(s.slots, name); i >= 0 {
		return i
	}
	return rand.IntN(s.permits)
}

// holding records that l (nil: none), a permit of the semaphore whose
// local queue is local, was handed to a caller: until it is unlocked or
// runs out, this client's waiters for another permit stay out of the
// nodes' line (holdsPermit).
func (c *Client) holding(local string, l *Lock) {
	if l == nil {
		return
	}
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	if _, ok := c.lq.held[local]; !ok && len(c.lq.held) >= maxRemembered {
		c.lq.held = prune(c.lq.held)
	}
	if !slices.Contains(c.lq.held[local], l) {
		c.lq.held[local] = append(c.lq.held[local], l)
	}
}

// holdsPermit reports whether this client holds a permit of the
// semaphore whose local queue is local: one its calls returned that is
// neither unlocked nor run out. A client holding one does not wait in
// the nodes' line (see semWait.round): the line orders the clients that
// hold nothing, and a transfer (transfer.lua) yields a slot only to its
// head, so that clients holding permits pass them among their own calls
// without handing each one across (docs/PERFORMANCE.md, "Permits in
// use").
func (c *Client) holdsPermit(local string) bool {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	held := stillHeld(c.lq.held[local])
	if len(held) == 0 {
		delete(c.lq.held, local)
		return false
	}
	c.lq.held[local] = held
	return true
}

// prune drops from held the permits unlocked or run out, and the
// semaphores left with none.
func prune(held map[string][]*Lock) map[string][]*Lock {
	for k, ls := range held {
		if ls = stillHeld(ls); len(ls) == 0 {
			delete(held, k)
		} else {
			held[k] = ls
		}
	}
	return held
}

// stillHeld drops from ls the permits unlocked or run out.
func stillHeld(ls []*Lock) []*Lock {
	return slices.DeleteFunc(ls, func(l *Lock) bool { return l.TTL() <= 0 })
}

// freedSlot records that an Unlock of this client released slot, of the
// semaphore whose local queue is local, on a majority (see
// Semaphore.first). With maxRemembered semaphores remembered it forgets them.
func (c *Client) freedSlot(local, slot string) {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	if _, ok := c.lq.freed[local]; !ok && len(c.lq.freed) >= maxRemembered {
		clear(c.lq.freed)
	}
	c.lq.freed[local] = slot
}

// ended is Acquire's error when its wait ended early: ErrClosed as it is,
// else the last round's error with ctx's end, or, when the call made no
// round (it waited on what the previous head knew), a QuorumError
// without replies.
func (s *Semaphore) ended(qe *QuorumError, ctx context.Context, err error) error {
	switch {
	case err == ErrClosed:
		return err
	case qe == nil:
		// It waited on what the previous head knew and made no round.
		return notStarted("acquire", s.slots[0], s.c, ctx, ErrNotAcquired)
	}
	qe.setContext(ctx)
	return qe
}

// report calls the Acquire hook: the key is the slot's when one was
// granted, else the semaphore's first slot.
func (s *Semaphore) report(l *Lock, start time.Time, attempts int, err error) {
	h := s.c.cfg.hooks.Acquire
	if h == nil {
		return
	}
	key := s.slots[0]
	if l != nil {
		key = l.k.Name
	}
	h(AcquireInfo{Key: key, Wait: s.c.clk.Since(start), Attempts: attempts, Err: err})
}
