package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. It is meant for tests: the
// time it reports starts at a fixed instant and advances by Advance or Set.
//
// A Fake must be created with NewFake. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a Fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns the fake time elapsed since t.
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// After returns a channel that receives the fake time once the clock has
// been advanced by at least d.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: f.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d and fires every After whose time has
// come, in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fire()
}

// Waiters reports how many After channels have not fired yet. Tests use it
// to wait until the code under test is blocked on the clock before moving it.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

func (f *Fake) fire() {
	sort.Slice(f.waiters, func(i, j int) bool { return f.waiters[i].at.Before(f.waiters[j].at) })
	n := 0
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			break
		}
		w.ch <- f.now
		n++
	}
	f.waiters = append(f.waiters[:0], f.waiters[n:]...)
}
