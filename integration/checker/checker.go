// Package checker verifies mutual exclusion from the outside.
//
// Every grant is recorded as a window [acquired, end) on one monotonic
// clock: acquired is when Lock returned, end is the lock's Until() — or
// the moment its holder started to unlock, if that came first. Two windows
// of different holders on the same key that overlap are a violation: both
// holders believed they held the lock at the same instant.
//
// A second, end-to-end oracle is Counter: a read-modify-write with a pause
// in the middle, done only under the lock. Lost updates mean exclusion
// broke, whatever the windows say.
package checker

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Window is one grant as a holder saw it.
type Window struct {
	Holder   int    // which client (e.g. worker index)
	Key      string // the locked key
	Token    string // the lock's token
	Acquired time.Time
	End      time.Time // min(Until, start of Unlock)
	// Shared marks a read hold (RLock): it may overlap other read holds
	// of the key, never a write hold.
	Shared bool
}

// Overlap is two windows of different holders that intersect.
type Overlap struct {
	A, B Window
	By   time.Duration // length of the intersection
}

// String describes the overlap in one line.
func (o Overlap) String() string {
	return fmt.Sprintf("key %q: holder %d [%s] and holder %d [%s] overlap by %v",
		o.A.Key, o.A.Holder, short(o.A.Token), o.B.Holder, short(o.B.Token), o.By)
}

func short(tok string) string {
	if len(tok) > 8 {
		return tok[:8]
	}
	return tok
}

// Checker collects windows. Its zero value is ready; it is safe for
// concurrent use.
type Checker struct {
	mu      sync.Mutex
	windows []Window
}

// Hold is an open window; End closes it.
type Hold struct {
	c *Checker
	w Window
}

// Begin opens a window for a lock just acquired. until is the lock's
// Until(); acquired should be time.Now() taken right after Lock returned.
func (c *Checker) Begin(holder int, key, token string, acquired, until time.Time) *Hold {
	return &Hold{c: c, w: Window{Holder: holder, Key: key, Token: token, Acquired: acquired, End: until}}
}

// BeginShared is Begin for a read hold (RLock).
func (c *Checker) BeginShared(holder int, key, token string, acquired, until time.Time) *Hold {
	h := c.Begin(holder, key, token, acquired, until)
	h.w.Shared = true
	return h
}

// Extend moves the end of the window to a new Until().
func (h *Hold) Extend(until time.Time) { h.w.End = until }

// End closes the window at now (call it just before Unlock), or at its
// Until() if that came first, and records it.
func (h *Hold) End(now time.Time) Window {
	if now.Before(h.w.End) {
		h.w.End = now
	}
	h.c.mu.Lock()
	h.c.windows = append(h.c.windows, h.w)
	h.c.mu.Unlock()
	return h.w
}

// Record adds a closed window directly.
func (c *Checker) Record(w Window) {
	c.mu.Lock()
	c.windows = append(c.windows, w)
	c.mu.Unlock()
}

// Windows returns a copy of every recorded window.
func (c *Checker) Windows() []Window {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Window(nil), c.windows...)
}

// Grants returns how many windows were recorded, per holder.
func (c *Checker) Grants() map[int]int {
	out := map[int]int{}
	for _, w := range c.Windows() {
		out[w.Holder]++
	}
	return out
}

// Overlaps returns every pair of windows of different holds on the same
// key that intersect, but for two read holds, sorted by key and start.
func (c *Checker) Overlaps() []Overlap {
	byKey := map[string][]Window{}
	for _, w := range c.Windows() {
		byKey[w.Key] = append(byKey[w.Key], w)
	}
	var out []Overlap
	for _, ws := range byKey {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Acquired.Before(ws[j].Acquired) })
		// Sweep: compare each window with the later ones that start before
		// it ends.
		for i := range ws {
			for j := i + 1; j < len(ws) && ws[j].Acquired.Before(ws[i].End); j++ {
				if ws[i].Holder == ws[j].Holder && ws[i].Token == ws[j].Token || ws[i].Shared && ws[j].Shared {
					continue
				}
				end := ws[i].End
				if ws[j].End.Before(end) {
					end = ws[j].End
				}
				if by := end.Sub(ws[j].Acquired); by > 0 {
					out = append(out, Overlap{A: ws[i], B: ws[j], By: by})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].A.Key != out[j].A.Key {
			return out[i].A.Key < out[j].A.Key
		}
		return out[i].A.Acquired.Before(out[j].A.Acquired)
	})
	return out
}

// MostAtOnce returns the largest number of windows on keys that start
// with prefix (the slots of one semaphore, say) that were open at one
// instant, and that instant: a semaphore of N permits must never show
// more than N. A window ends where the next begins (they do not overlap).
func (c *Checker) MostAtOnce(prefix string) (n int, at time.Time) {
	type edge struct {
		t     time.Time
		delta int
	}
	var edges []edge
	for _, w := range c.Windows() {
		if strings.HasPrefix(w.Key, prefix) && w.Acquired.Before(w.End) {
			edges = append(edges, edge{w.Acquired, 1}, edge{w.End, -1})
		}
	}
	// Ends before starts at the same instant.
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].t.Equal(edges[j].t) {
			return edges[i].t.Before(edges[j].t)
		}
		return edges[i].delta < edges[j].delta
	})
	open := 0
	for _, e := range edges {
		if open += e.delta; open > n {
			n, at = open, e.t
		}
	}
	return n, at
}

// Report is a multi-line summary: grants per holder and every overlap.
func (c *Checker) Report() string {
	var b strings.Builder
	g := c.Grants()
	holders := make([]int, 0, len(g))
	for h := range g {
		holders = append(holders, h)
	}
	sort.Ints(holders)
	fmt.Fprintf(&b, "%d grants:", len(c.Windows()))
	for _, h := range holders {
		fmt.Fprintf(&b, " holder %d: %d;", h, g[h])
	}
	ov := c.Overlaps()
	fmt.Fprintf(&b, "\n%d overlaps\n", len(ov))
	for _, o := range ov {
		b.WriteString("  ")
		b.WriteString(o.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Counter is the end-to-end oracle: Increment reads, pauses, then writes,
// so two holders inside it at once lose an update.
type Counter struct {
	mu    sync.Mutex
	value int
	want  int
}

// Increment does value = value + 1 as a read, a pause of d and a write. It
// must be called only while holding the lock.
func (c *Counter) Increment(d time.Duration) {
	c.mu.Lock()
	v := c.value
	c.want++
	c.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	c.mu.Lock()
	c.value = v + 1
	c.mu.Unlock()
}

// Lost returns how many increments were lost (0 when exclusion held) and
// the counts.
func (c *Counter) Lost() (lost, value, want int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.want - c.value, c.value, c.want
}
