package redlock

import (
	"context"
	"reflect"
	"slices"
	"time"

	"github.com/quorumlock/redlock/clock"
)

// A wake is what ended a waiter's sleep (Client.sleep).
type wake struct {
	// g is a lock an Unlock of this client handed over: the call holds
	// it without another attempt.
	g *Lock
	// slots are the watched keys (a semaphore's slots, by index) heard
	// released or reserved for this client; nil: none said which (the
	// delay passed, or a local release): try them all. Nil for a Lock,
	// which has one key.
	slots []int
	// dropped are the keys heard released while a handoff or a poke was
	// awaited (Client.awaited), and not otherwise reported: a semaphore
	// keeps them for the next waiter of the client.
	dropped []int
}

// sleep is the one wait of every waiting call (Lock, RLock,
// Semaphore.Acquire) between attempts: it waits d on the client's clock
// until w (nil: no notifications) hears a key released or reserved for
// this client, or o (nil: no offer) receives a lock from an Unlock of
// this client, or ctx ends (its error), or the client is closed
// (ErrClosed). Its rules, the same for a lock and a semaphore:
//
//   - A release heard while a handoff to o is under way, or while an
//     Unlock of this client releases and will poke o once it has
//     returned (Client.awaited), does not end the wait: the handoff
//     brings the lock, or the poke says to try. (The nodes announce a
//     release as they yield the key to another client's waiter, or as
//     this client's release lands.) Such keys come back as dropped.
//   - A poke (o received no lock) ends the wait when pokes says so;
//     else it ends it only with the keys dropped meanwhile, as the keys
//     to try. (A semaphore waiter queued by name learns nothing from a
//     local release.)
//   - A release that reserves a key for this client is announced by
//     each node as it gets there: the wait ends once a majority
//     announced it, so that the attempt that follows finds the key
//     reserved on a majority, or grace after the first announcement
//     (another node's may be lost, or that node reserved the key for
//     another waiter); grace 0 ends it at the first, except for a grant,
//     which waits up to a node timeout for the others of a majority
//     (then the call holds the lock without an attempt, see
//     Client.granted), also past a majority of announcements while
//     the nodes not heard yet could still make a majority of grants.
//   - A lock handed over at the moment the wait ends otherwise is taken
//     rather than tried against (given).
func (c *Client) sleep(ctx context.Context, d time.Duration, w *watches, o *offer, grace time.Duration, pokes bool) (wake, error) {
	var gift chan *Lock
	if o != nil {
		gift = o.gift
	}
	t := c.clk.NewTimer(d)
	defer t.Stop()
	a := announced{c: c, w: w, grace: grace}
	defer a.stop()
	cases, nkeys := sleepCases(ctx, c.life.done, t.C(), gift, w)
	var dropped []int
	for {
		chosen, v, _ := reflect.Select(cases)
		i := 0 // the key a release or an announcement concerns
		switch {
		case chosen == caseCtx:
			return wake{dropped: dropped}, ctx.Err()
		case chosen == caseClosed:
			return wake{dropped: dropped}, ErrClosed
		case chosen == caseTimer:
			return wake{g: given(gift)}, nil
		case chosen == caseGift:
			g, _ := v.Interface().(*Lock)
			switch {
			case g != nil:
				return wake{g: g, dropped: dropped}, nil
			case pokes:
				return wake{}, nil // poked: try every key
			case dropped != nil:
				// The handoff did not come: the keys heard released
				// meanwhile are tried.
				return wake{slots: dropped}, nil
			}
			continue
		case chosen == caseLate:
			// grace has passed since the first announcement.
			cases[caseLate] = recv(nil)
			i = a.first
		case chosen >= caseKeys && chosen < caseKeys+nkeys:
			i = chosen - caseKeys // a release of key i
		default:
			// Announced to this client: a reservation of key i, or
			// (caseGrant) the grant it asked for.
			if chosen != caseGrant {
				i = chosen - caseKeys - nkeys
			}
			if late := a.wait(i, chosen == caseGrant); late != nil {
				cases[caseLate] = recv(late)
			}
			if a.more {
				continue
			}
		}
		if c.awaited(o) {
			dropped = append(dropped, i)
			continue
		}
		if nkeys == 1 {
			// A lock's one key: nothing to tell the attempt.
			return wake{g: given(gift), dropped: dropped}, nil
		}
		hint := append([]int{i}, w.pending()...)
		slices.Sort(hint)
		return wake{g: given(gift), slots: slices.Compact(hint), dropped: dropped}, nil
	}
}

// The cases of sleep's select: the fixed ones, then per watched key its
// releases, then per key its reservations for this client.
const (
	caseCtx = iota
	caseClosed
	caseTimer
	caseLate
	caseGift
	caseGrant
	caseKeys
)

// sleepCases returns sleep's select cases (caseLate off), and the number
// of keys w watches.
func sleepCases(ctx context.Context, closed <-chan struct{}, timer <-chan time.Time, gift chan *Lock, w *watches) ([]reflect.SelectCase, int) {
	nkeys := 0
	if w != nil {
		nkeys = len(w.per)
	}
	cases := make([]reflect.SelectCase, caseKeys, caseKeys+2*nkeys)
	for i := range cases {
		cases[i] = recv(nil) // off
	}
	cases[caseCtx] = recv(ctx.Done())
	cases[caseClosed] = recv(closed)
	cases[caseTimer] = recv(timer)
	cases[caseGift] = recv(gift)
	if w == nil {
		return cases, 0
	}
	if w.granted != nil {
		cases[caseGrant] = recv(w.granted)
	}
	for _, ch := range w.per {
		cases = append(cases, recv(ch))
	}
	for _, ch := range w.mine {
		cases = append(cases, recv(ch))
	}
	return cases, nkeys
}

// recv is a select case that receives from ch; nil: a case that is off.
func recv(ch any) reflect.SelectCase {
	return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
}

// announced counts, for sleep, the reservations and grants announced to
// a waiter: the wait ends at a majority of them, or grace after the
// first (see sleep).
type announced struct {
	c     *Client
	w     *watches
	grace time.Duration
	heard int
	first int // the key the first one named
	late  clock.Timer
	more  bool // the last call to wait said: wait for more
}

// wait counts an announcement about key i (grant: the grant the call
// asked for, which counts as a reservation; once a majority granted, the
// call may hold the lock without another attempt, see Client.granted). It
// returns the channel of the grace timer it starts at the first one that
// leaves the wait on, and sets more when the wait goes on.
func (a *announced) wait(i int, grant bool) <-chan time.Time {
	if grant {
		a.w.nGranted++
	}
	g := a.grace
	if g == 0 && a.w.nGranted > 0 {
		// A grant is worth waiting for: the others of a majority come
		// within a release's round.
		g = a.c.cfg.timeout()
	}
	a.heard++
	more := a.heard < a.c.quorum
	if n := a.w.nGranted; n > 0 && n < a.c.quorum && n+len(a.c.nodes)-a.heard >= a.c.quorum {
		// Grants and reservations mixed (a node whose fence counter
		// had passed a fenced call's proposal reserves): a majority
		// of grants, which needs no attempt, may still come.
		more = true
	}
	if a.more = more && g > 0; !a.more || a.late != nil {
		return nil
	}
	a.late, a.first = a.c.clk.NewTimer(g), i
	return a.late.C()
}

func (a *announced) stop() {
	if a.late != nil {
		a.late.Stop()
	}
}

// given returns a lock handed over on gift (nil: none) that came at the
// same moment as the wake-up that ends a sleep, so that the call takes it
// rather than try the nodes against it.
func given(gift chan *Lock) *Lock {
	select {
	case g := <-gift:
		return g
	default:
		return nil
	}
}
