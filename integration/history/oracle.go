package history

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/redlock"
)

// Oracle names one property a history must keep.
type Oracle string

// The oracles, in the order they are reported.
const (
	// Exclusion: no two exclusive holds of a key overlap, and no writer
	// overlaps a reader (validity windows on this process's clock).
	Exclusion Oracle = "exclusion"
	// Permits: a semaphore never has more holders than permits.
	Permits Oracle = "permits"
	// Release: once the faults stop and the holders have unlocked, every
	// key is free on a majority within one node timeout plus a round
	// trip, not a TTL.
	Release Oracle = "release"
	// Leftover: once every client is closed, nothing of theirs is left on
	// any node (fence counters apart: they outlive locks by design).
	Leftover Oracle = "leftover"
	// Starvation: a waiter is served before more than a bound of other
	// holders are granted the key it waits for.
	Starvation Oracle = "starvation"
	// Leader: an election's terms grow in the order they began, and
	// Leader never reports a term after its Resign returned, before its
	// Campaign began, or with a value its leader did not announce.
	Leader Oracle = "leader"
	// Fence: the fences of a key's fenced holds grow in the order the
	// holds were taken, however each was taken (an acquire and its
	// confirm, or a grant with the fence its waiter proposed).
	Fence Oracle = "fence"
)

// Oracles lists every oracle in report order.
var Oracles = []Oracle{Exclusion, Permits, Release, Leftover, Starvation, Leader, Fence}

// Term is one leadership a Campaign returned.
type Term struct {
	Holder int
	Term   int64
	Values []string  // what it announced (Campaign's value, then Proclaim's)
	Start  time.Time // Campaign called
	Got    time.Time // Campaign returned
	// Resigned is when its Resign returned nil (zero: it did not, or
	// the term ended otherwise).
	Resigned time.Time
}

// Read is one Leader call that returned a leader.
type Read struct {
	Holder     int
	Start, End time.Time
	Leader     redlock.Leader
}

// Stale returns the Leader violations among terms and reads: terms whose
// number does not grow with the order they were granted, and reads of a
// term that had resigned before the read began (its Unlock had freed a
// majority: no majority can hold it again), that had not begun its
// Campaign before the read returned, or with a value it never
// announced. A read of a term no Campaign returned (one that failed
// after its confirm kept the record on a majority) is not checked.
func Stale(terms []Term, reads []Read) []string {
	var out []string
	ts := slices.Clone(terms)
	slices.SortFunc(ts, func(a, b Term) int { return a.Got.Compare(b.Got) })
	for i := 1; i < len(ts); i++ {
		if ts[i].Term <= ts[i-1].Term {
			out = append(out, fmt.Sprintf("term %d (holder %d, at %s) after term %d (holder %d, at %s)",
				ts[i].Term, ts[i].Holder, ts[i].Got.Format("15:04:05.000000"), ts[i-1].Term, ts[i-1].Holder, ts[i-1].Got.Format("15:04:05.000000")))
		}
	}
	by := map[int64]Term{}
	for _, t := range terms {
		by[t.Term] = t
	}
	for _, r := range reads {
		t, ok := by[r.Leader.Term]
		switch {
		case !ok:
		case !t.Resigned.IsZero() && t.Resigned.Before(r.Start):
			out = append(out, fmt.Sprintf("holder %d read term %d at [%s, %s], resigned at %s",
				r.Holder, t.Term, r.Start.Format("15:04:05.000000"), r.End.Format("15:04:05.000000"), t.Resigned.Format("15:04:05.000000")))
		case t.Start.After(r.End):
			out = append(out, fmt.Sprintf("holder %d read term %d at [%s, %s], campaigned at %s",
				r.Holder, t.Term, r.Start.Format("15:04:05.000000"), r.End.Format("15:04:05.000000"), t.Start.Format("15:04:05.000000")))
		case !slices.Contains(t.Values, r.Leader.Value):
			out = append(out, fmt.Sprintf("holder %d read term %d with value %q, announced %q", r.Holder, t.Term, r.Leader.Value, t.Values))
		}
	}
	return out
}

// Wait is one call that waited for a key (Lock, RLock, Semaphore.Acquire).
type Wait struct {
	Holder int
	// Client is the holder's client (host): its writers take turns
	// for a key in the client's local queue (see Starved).
	Client int
	Op     string
	// Group is the key, or for a semaphore the prefix of its slots' keys:
	// the windows that count as the lock moving while the call waits.
	Group      string
	Start, End time.Time
	Served     bool // it returned a lock
	// Cancelled marks a wait its caller gave up early on purpose; it is
	// still checked up to then.
	Cancelled bool
	// Shared marks a reader's wait (RLock): only writers' grants keep it
	// out, so only they count as overtaking it.
	Shared bool
}

// Overlaps returns the exclusion violations among ws: overlapping
// windows of different holds of one key, two reads apart.
func Overlaps(ws []checker.Window) []string {
	var c checker.Checker
	for _, w := range ws {
		c.Record(w)
	}
	var out []string
	for _, o := range c.Overlaps() {
		kind := "exclusive holds"
		if o.A.Shared || o.B.Shared {
			kind = "a writer and a reader"
		}
		out = append(out, kind+": "+o.String())
	}
	return out
}

// TooMany returns a violation when more than permits windows on keys that
// start with prefix were open at one instant.
func TooMany(ws []checker.Window, prefix string, permits int) []string {
	var c checker.Checker
	for _, w := range ws {
		c.Record(w)
	}
	if n, at := c.MostAtOnce(prefix); n > permits {
		return []string{fmt.Sprintf("semaphore %q of %d permits had %d holders at once (at %s)", prefix, permits, n, at.Format("15:04:05.000000"))}
	}
	return nil
}

// Grant is one lock a call returned: who, on which key, when the call
// began and when it returned, and its fence (0: not fenced).
type Grant struct {
	Holder     int
	Key        string
	Start, Got time.Time
	Shared     bool // a read hold
	Fence      int64
}

// Fences returns the fenced grants of a key whose fence is not above
// that of the key's fenced grant returned before it. Exclusive holds of
// a key do not overlap, so a hold returned later was taken later; a
// fence that does not grow would let a paused holder's write through a
// fenced store.
func Fences(grants []Grant) []string {
	var out []string
	gs := slices.Clone(grants)
	slices.SortFunc(gs, func(a, b Grant) int { return a.Got.Compare(b.Got) })
	last := map[string]Grant{}
	for _, g := range gs {
		if g.Fence == 0 || g.Shared {
			continue
		}
		if p, ok := last[g.Key]; ok && g.Fence <= p.Fence {
			out = append(out, fmt.Sprintf("%s: fence %d (holder %d, at %s) after fence %d (holder %d, at %s)",
				g.Key, g.Fence, g.Holder, g.Got.Format("15:04:05.000000"), p.Fence, p.Holder, p.Got.Format("15:04:05.000000")))
		}
		last[g.Key] = g
	}
	return out
}

// StartTie is how far apart two calls of one client may begin, by the
// history's clock, and still reach the client's local queue in either
// order: a torture run on a loaded two-core machine had a fenced Lock
// that began 0.8 ms before its sibling queue behind it (seed 29000633).
const StartTie = 5 * time.Millisecond

// Starved returns the waits that were overtaken more than bound times
// per turn: while the wait went on, a call on the wait's group that began
// after it (by another holder) was granted first. A waiter that queues is
// served before those that come after it but for a few (a TryLock that
// finds the key free between two attempts, a handoff within the
// releaser's client); one passed over without end starves. A bound
// counts grants, not time, so a slow machine does not make it fail. A
// reader that came later and was let in first does not keep a waiting
// reader out (readers hold together): only writers overtake a reader.
//
// A turn is a place in the nodes' line: only the head of a client's
// local queue of writers for a key waits there (redlock's Lock and
// Semaphore.Acquire), so a writer that found k calls of its own client
// waiting or holding ahead of it takes the line k+1 times, and may be
// overtaken bound times at each. Calls of one client that began within
// StartTie of each other reach its local queue in either order (the
// goroutine that read the clock first may run second): a sibling that
// began that little after the writer and was served before it was
// ahead of it there.
func Starved(waits []Wait, grants []Grant, bound int) []string {
	var out []string
	for _, w := range waits {
		turns := 1
		for _, s := range waits {
			if w.Shared || s.Shared || s.Client != w.Client || s.Holder == w.Holder || s.Group != w.Group {
				continue
			}
			before := s.Start.Before(w.Start) && s.End.After(w.Start)
			tie := !s.Start.Before(w.Start) && s.Start.Sub(w.Start) <= StartTie && s.Served && s.End.Before(w.End)
			if before || tie {
				turns++ // a sibling ahead in the client's local queue
			}
		}
		n := 0
		for _, g := range grants {
			if g.Holder != w.Holder && strings.HasPrefix(g.Key, w.Group) && !(w.Shared && g.Shared) &&
				g.Start.After(w.Start) && g.Got.Before(w.End) {
				n++
			}
		}
		bound := bound * turns
		if n > bound {
			how := "unserved"
			switch {
			case w.Served:
				how = "served"
			case w.Cancelled:
				how = "cancelled"
			}
			out = append(out, fmt.Sprintf("holder %d's %s on %q (%s after %v) was overtaken %d times (bound %d)",
				w.Holder, w.Op, w.Group, how, w.End.Sub(w.Start).Round(time.Millisecond), n, bound))
		}
	}
	return out
}
