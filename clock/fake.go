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
	mu      sync.Mutex // guards now and waiters
	now     time.Time
	waiters []*fakeTimer // timers not yet fired or stopped
}

// fakeTimer is a Timer of a Fake clock.
type fakeTimer struct {
	f  *Fake
	at time.Time
	ch chan time.Time // buffered: firing never blocks
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// Stop removes the timer from its clock's waiters.
func (t *fakeTimer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, w := range f.waiters {
		if w == t {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			return true
		}
	}
	return false
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

// NewTimer returns a timer that fires once the clock has been advanced
// by at least d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- f.now
		return t
	}
	f.waiters = append(f.waiters, t)
	return t
}

// Advance moves the clock forward by d and fires every timer whose time
// has come, in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fire()
}

// Waiters reports how many timers have neither fired nor been stopped.
// Tests use it to wait until the code under test is blocked on the clock
// before moving it.
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
