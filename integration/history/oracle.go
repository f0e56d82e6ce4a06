package history

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/quorumlock/redlock/integration/checker"
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
)

// Oracles lists every oracle in report order.
var Oracles = []Oracle{Exclusion, Permits, Release, Leftover, Starvation}

// Wait is one call that waited for a key (Lock, RLock, Semaphore.Acquire).
type Wait struct {
	Holder int
	Op     string
	// Group is the key, or for a semaphore the prefix of its slots' keys:
	// the windows that count as the lock moving while the call waits.
	Group      string
	Start, End time.Time
	Served     bool // it returned a lock
	// Cancelled marks a wait its caller gave up early on purpose; it is
	// still checked up to then.
	Cancelled bool
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

// Starved returns the waits during which more than bound windows of
// other holders on the wait's group began: the lock kept moving and the
// waiter was passed over. A bound counts grants, not time, so a slow
// machine does not make it fail.
func Starved(waits []Wait, ws []checker.Window, bound int) []string {
	sorted := append([]checker.Window(nil), ws...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Acquired.Before(sorted[j].Acquired) })
	var out []string
	for _, w := range waits {
		n := 0
		for _, x := range sorted {
			if !x.Acquired.After(w.Start) {
				continue
			}
			if !x.Acquired.Before(w.End) {
				break
			}
			if x.Holder != w.Holder && strings.HasPrefix(x.Key, w.Group) {
				n++
			}
		}
		if n > bound {
			how := "unserved"
			switch {
			case w.Served:
				how = "served"
			case w.Cancelled:
				how = "cancelled"
			}
			out = append(out, fmt.Sprintf("holder %d's %s on %q (%s after %v) saw %d grants to others (bound %d)",
				w.Holder, w.Op, w.Group, how, w.End.Sub(w.Start).Round(time.Millisecond), n, bound))
		}
	}
	return out
}
