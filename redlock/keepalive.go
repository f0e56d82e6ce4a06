package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumlock/redlock/clock"
)

// KeepAlive keeps the lock alive in the background, extending it by its
// TTL on the schedule ExtendAfter sets, until the returned cancel func is
// called or ctx ends. It returns a child context of ctx for the job that
// the lock protects.
//
// The job context is cancelled with a cause wrapping ErrLost as soon as
// the lock can no longer be proven held: an extend answered ErrNotHeld
// (at once), Until() minus LostMargin arrived without a successful extend
// (a timer on the client's clock, which fires on time even while an
// extend is stuck on slow nodes), or MaxHold was reached. When ctx ends
// first, the job context ends with ctx's cause. An extend that fails for
// another reason (nodes slow, failing or unreachable) is retried at short
// intervals until the validity runs out.
//
// cancel stops the keep-alive and returns once nothing of it is left
// running (at most about one node timeout); it does not unlock. Calling
// Extend or Unlock by hand meanwhile is safe; an Unlock makes the next
// extend find the lock not held, which ends the job context with ErrLost.
// On a nil Lock the job context is already cancelled with ErrLost.
func (l *Lock) KeepAlive(ctx context.Context) (context.Context, context.CancelFunc) {
	job, lose := context.WithCancelCause(ctx)
	if l == nil {
		lose(wrap("redlock", ErrLost, ErrNilLock))
		return job, func() { lose(context.Canceled) }
	}
	kctx, stop := context.WithCancel(job)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.keepAlive(kctx, lose)
	}()
	return job, func() {
		stop()
		<-done
		lose(context.Canceled)
	}
}

// keepAlive is KeepAlive's loop. It returns when ctx ends or the lock is
// lost (after cancelling the job with lose), and never leaves an extend
// or a timer running behind it.
func (l *Lock) keepAlive(ctx context.Context, cancelJob context.CancelCauseFunc) {
	k := &keeper{l: l, p: l.keep}
	defer k.stop()
	restored, ok := k.restoreDue(ctx)
	if !ok {
		return
	}
	k.rearm()
	if restored == nil {
		k.firstExtend()
	}
	var hold <-chan time.Time // nil: no bound
	if k.p.maxHold > 0 {
		h := k.timer(l.taken.Add(k.p.maxHold))
		defer h.Stop()
		hold = h.C()
	}
	retry := max(2*l.ch.timeout, l.ttl/20)
	lose := func(cause error) {
		if h := l.ch.c.cfg.hooks.Lost; h != nil {
			h(l.k.Name, cause)
		}
		cancelJob(cause)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hold:
			lose(fmt.Errorf("%w: held for MaxHold %v", ErrLost, k.p.maxHold))
			return
		case <-k.lost.C():
			lose(k.ranOut())
			return
		case <-restored:
			restored = nil
			k.rearm()
			k.firstExtend()
		case <-nextC(k.next):
			k.ext, k.cancelExt = l.extendAsync(ctx)
		case err := <-k.ext:
			k.ext = nil
			k.cancelExt()
			switch {
			case err == nil:
				k.lastErr = nil
				k.rearm()
				k.schedule(k.from.Add(time.Duration(k.p.extendAfter * float64(l.ttl))))
			case errors.Is(err, ErrNotHeld):
				lose(wrap("redlock", ErrLost, err))
				return
			default:
				k.lastErr = err
				k.schedule(l.ch.c.clk.Now().Add(retry))
			}
		}
	}
}

// keeper is keepAlive's state: the validity it last read from the lock,
// the timer of its end (less the margin), the next extend's timer, and
// the extend in flight.
type keeper struct {
	l           *Lock
	p           keepPolicy
	until, from time.Time          // the lock's validity, as last read
	lost        clock.Timer        // at until less the margin
	next        clock.Timer        // the next extend; nil while a restore is due
	ext         <-chan error       // the extend in flight; nil when none
	cancelExt   context.CancelFunc // ends ext
	lastErr     error              // the last failed extend's error
}

func (k *keeper) timer(at time.Time) clock.Timer {
	return k.l.ch.c.clk.NewTimer(at.Sub(k.l.ch.c.clk.Now()))
}

// stop stops the timers, then ends the extend in flight and waits for
// it.
func (k *keeper) stop() {
	if k.next != nil {
		k.next.Stop()
	}
	if k.lost != nil {
		k.lost.Stop()
	}
	if k.ext != nil {
		k.cancelExt()
		<-k.ext
	}
}

// restoreDue returns the restore (Client.granted) that keepAlive waits
// for before it schedules extends; nil: none. A lock a grant made valid
// for less than its TTL is extended by its restore, half-way through the
// grant's validity; keepAlive extends it only if that fails. Where the
// margin would not leave the restore time to land, the restore is sent
// at once, and waited for here (one round, at most the longest node
// timeout), so that the timers are armed on the validity it restored.
// It reports false when ctx ended first.
func (k *keeper) restoreDue(ctx context.Context) (<-chan struct{}, bool) {
	l := k.l
	l.mu.Lock()
	until, short := l.until, l.short
	l.mu.Unlock()
	rs := l.restoring
	if !short || rs == nil {
		return nil, true
	}
	if !until.Add(-k.p.margin).Before(rs.at.Add(l.ch.maxTimeout)) {
		return rs.done, true
	}
	select {
	case rs.hurry <- struct{}{}:
	default:
	}
	select {
	case <-rs.done:
		return nil, true
	case <-ctx.Done():
		return nil, false
	}
}

// rearm reads the lock's validity and sets the lost timer to its end,
// less the margin.
func (k *keeper) rearm() {
	k.l.mu.Lock()
	k.until, k.from = k.l.until, k.l.from
	k.l.mu.Unlock()
	if k.lost != nil {
		k.lost.Stop()
	}
	k.lost = k.timer(k.until.Add(-k.p.margin))
}

// firstExtend schedules the first extend after a (re)start: the share of
// the TTL after the validity's start, or the share of what the lock was
// given, sooner, for a lock valid for less than its TTL (one a grant made
// whose restore failed, or one extended by a shorter TTL).
func (k *keeper) firstExtend() {
	first := k.l.ttl
	if k.until.Before(clock.Until(k.from, k.l.ttl, k.l.drift)) {
		first = k.until.Sub(k.from)
	}
	k.schedule(k.from.Add(time.Duration(k.p.extendAfter * float64(first))))
}

// schedule sets the next extend for at.
func (k *keeper) schedule(at time.Time) {
	if k.next != nil {
		k.next.Stop()
	}
	k.next = k.timer(at)
}

// ranOut is the cause of a lock whose validity ran out without a
// successful extend, naming the last failed one's error.
func (k *keeper) ranOut() error {
	why := fmt.Errorf("%w: validity ran out without a successful extend", ErrLost)
	if k.lastErr == nil {
		return why
	}
	return &wrapped{msg: why.Error() + " (last extend: " + strings.TrimPrefix(k.lastErr.Error(), "redlock: ") + ")",
		errs: []error{why, k.lastErr}}
}

// nextC is t's channel; nil (never ready) for a nil t.
func nextC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// extendAsync runs one Extend by the lock's TTL in a goroutine; its error
// arrives on the channel. cancel ends it early.
func (l *Lock) extendAsync(ctx context.Context) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan error, 1)
	go func() { ch <- l.Extend(ctx, l.ttl) }()
	return ch, cancel
}

// Do takes key with Lock (retrying as the client's or opts' RetryStrategy
// says), keeps it alive with KeepAlive while fn runs, and unlocks it when
// fn returns, on a context that ctx's cancellation does not end.
//
// fn gets the job context of KeepAlive: it ends with a cause wrapping
// ErrLost as soon as the lock can no longer be proven held, and fn should
// stop its work then. Do returns fn's error; if the lock was lost while fn
// ran (or Unlock found it no longer held), the error also wraps ErrLost,
// and errors.Is works for both. If the lock could not be taken, fn is not
// called and the error is Lock's.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	l, err := c.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	job, stop := l.KeepAlive(ctx)
	ferr := fn(job)
	lost := context.Cause(job)
	stop()
	if !errors.Is(lost, ErrLost) {
		lost = nil
	}
	uerr := l.Unlock(context.WithoutCancel(ctx))
	if lost == nil && errors.Is(uerr, ErrNotHeld) {
		lost = wrap("redlock", ErrLost, uerr)
	}
	switch {
	case lost == nil:
		return ferr
	case ferr == nil:
		return lost
	}
	return fmt.Errorf("%w; %w", ferr, lost)
}
