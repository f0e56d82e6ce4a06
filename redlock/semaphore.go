package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
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
// and a client with fewer permits competes only for its own slots.
//
// A Semaphore is safe for concurrent use; it holds nothing on the nodes
// itself, so it needs no closing.
type Semaphore struct {
	c       *Client
	name    string   // as given, without the client's prefix
	permits int      // len(slots)
	slots   []string // the slots' keys, prefix included
	local   string   // the key of the client's own queue of its waiters (Client.join)
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
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	s := &Semaphore{c: c, name: name, permits: permits, slots: make([]string, permits)}
	for i := range s.slots {
		s.slots[i] = c.cfg.prefix + PermitKey(name, i)
	}
	// No lock can have this key (a NUL byte), so Unlock never hands a
	// slot to the queue.
	s.local = "\x00sem\x00" + s.slots[0]
	return s, nil
}

// PermitKey is the key of slot i of the semaphore name, without a
// client's prefix: name + ":permit:" + i.
func PermitKey(name string, i int) string {
	return name + ":permit:" + strconv.Itoa(i)
}

// Name returns the semaphore's name, as given to Client.Semaphore.
func (s *Semaphore) Name() string { return s.name }

// Permits returns how many holders the semaphore admits at once.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire makes one attempt at each slot, starting from a random one,
// until one is granted, and returns it as a Lock (its Key is the slot's).
// It never waits: when every slot is held, or no majority answered, the
// error wraps ErrNotAcquired and is the *QuorumError of the last slot
// tried. opts are the Lock options (WithTTL, WithFencing, ...).
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, err := s.c.lockConfig(s.name, opts)
	if err != nil {
		return nil, err
	}
	start := s.c.clk.Now()
	l, attempts, err := s.try(ctx, &cfg, nil)
	s.report(l, start, attempts, err)
	return l, err
}

// Acquire waits for a permit: it tries every slot, as TryAcquire, and
// when all are held waits for a release of any of them (or for the
// client's retry delay) and tries again, until it holds one, the
// RetryStrategy gives up, WithMaxWait's limit passes or ctx ends; the
// error is then the *QuorumError of the last slot tried, wrapping
// ErrNotAcquired and, when ctx ended, ctx's error. The goroutines of one
// client waiting on the same semaphore take turns in FIFO order: only
// the longest waiting one tries the nodes.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (l *Lock, err error) {
	c := s.c
	cfg, err := c.lockConfig(s.name, opts)
	if err != nil {
		return nil, err
	}
	start := c.clk.Now()
	var giveUp time.Time
	if cfg.maxWait > 0 {
		giveUp = start.Add(cfg.maxWait)
	}
	rounds := 0
	defer func() { s.report(l, start, rounds, err) }()

	turn := c.join(s.local)
	defer c.leave(s.local, turn, nil)
	if turn != nil {
		var limit <-chan time.Time
		if !giveUp.IsZero() {
			t := c.clk.NewTimer(giveUp.Sub(start))
			defer t.Stop()
			limit = t.C()
		}
		select {
		case <-turn:
		case <-limit:
			return nil, notStarted("acquire", s.slots[0], c, ctx, ErrNotAcquired)
		case <-ctx.Done():
			return nil, notStarted("acquire", s.slots[0], c, ctx, ErrNotAcquired)
		case <-c.done:
			return nil, ErrClosed
		}
	}

	var (
		w    *watches
		hint []int // the slots released since the last round: tried alone
	)
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	for round := 1; ; round++ {
		l, n, err := s.try(ctx, &cfg, hint)
		rounds += n
		qe, ok := err.(*QuorumError)
		if err == nil || !ok || qe.ctxErr != nil {
			return l, err
		}
		qe.Attempts = rounds
		d, again := cfg.retry.Backoff(round)
		if !giveUp.IsZero() {
			left := giveUp.Sub(c.clk.Now())
			again = again && left > 0
			d = min(d, left)
		}
		if !again {
			return nil, qe
		}
		if round == 1 {
			// Subscribed on every slot, try once more at once: a
			// release between the round and the subscription is not
			// missed.
			if w = c.watchKeys(s.slots, true); w != nil {
				if err := w.ready(ctx, c, d); err != nil {
					return nil, s.ended(qe, ctx, err)
				}
				hint = nil
				continue
			}
		}
		if w == nil {
			_, err = c.sleep(ctx, d, nil, nil)
		} else {
			hint, err = w.anyReleased(ctx, c, d)
		}
		if err != nil {
			return nil, s.ended(qe, ctx, err)
		}
	}
}

// anyReleased waits for a release of any of a semaphore's slots (see
// Client.watchKeys with perKey), for d on the client's clock, for ctx
// or for the client's Close. It returns the slots released meanwhile
// (nil: d passed), or ctx's error, or ErrClosed.
func (w *watches) anyReleased(ctx context.Context, c *Client, d time.Duration) ([]int, error) {
	t := c.clk.NewTimer(d)
	defer t.Stop()
	cases := make([]reflect.SelectCase, 3, 3+len(w.per))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.done)}
	cases[2] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C())}
	for _, ch := range w.per {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	chosen, _, _ := reflect.Select(cases)
	switch chosen {
	case 0:
		return nil, ctx.Err()
	case 1:
		return nil, ErrClosed
	case 2:
		return nil, nil
	}
	hint := []int{chosen - 3}
	for i, ch := range w.per { // others released meanwhile
		select {
		case <-ch:
			hint = append(hint, i)
		default:
		}
	}
	return hint, nil
}

// try makes one attempt at each slot in only (nil: at every slot, from
// a random one) until one is granted; it returns the lock, the attempts
// made and, when none was granted, the last attempt's error. It stops
// early on an error that is not a refusal (ErrClosed), when ctx ends, and
// when so many nodes refuse for good (credentials, no scripts, ...) that
// no slot can be had. Waiters woken by a release try the released slot
// alone: they would find the others held, and only add load for the
// holders' releases.
func (s *Semaphore) try(ctx context.Context, cfg *config, only []int) (*Lock, int, error) {
	n, first := len(only), 0
	if n == 0 {
		n = s.permits
		first = rand.IntN(s.permits)
	}
	var err error
	for j := range n {
		slot := (first + j) % s.permits
		if only != nil {
			slot = only[j]
		}
		l, qe, aerr := s.c.attempt(ctx, s.slots[slot], cfg, false, 0)
		switch {
		case aerr != nil:
			return nil, j + 1, aerr
		case qe == nil:
			return l, j + 1, nil
		}
		err = qe
		if qe.ctxErr != nil || s.c.hopeless(qe.perm) {
			return nil, j + 1, qe
		}
	}
	return nil, n, err
}

// ended is Acquire's error when its wait ended early: ErrClosed as it is,
// else the last round's error with ctx's end.
func (s *Semaphore) ended(qe *QuorumError, ctx context.Context, err error) error {
	if err == ErrClosed {
		return err
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
