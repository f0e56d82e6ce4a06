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
	clk, p := l.c.clk, l.keep
	lose := func(cause error) {
		if h := l.c.cfg.hooks.Lost; h != nil {
			h(l.k.Name, cause)
		}
		cancelJob(cause)
	}
	var (
		ext       <-chan error // the extend in flight; nil when none
		cancelExt context.CancelFunc
		lastErr   error // the last failed extend's error
	)
	defer func() {
		if ext != nil {
			cancelExt()
			<-ext
		}
	}()
	timer := func(at time.Time) clock.Timer { return clk.NewTimer(at.Sub(clk.Now())) }
	// A lock a grant made valid for less than its TTL is extended by its
	// restore (Client.granted), half-way through the grant's validity;
	// this extends it only if that fails. Where the margin would not
	// leave the restore time to land, it is sent at once, and the timers
	// are armed once it has returned, on the validity it restored (one
	// round, at most the longest node timeout).
	var restored <-chan struct{} // the restore this waits for; nil: none
	l.mu.Lock()
	until, short := l.until, l.short
	l.mu.Unlock()
	if short && l.restored != nil {
		restored = l.restored
		if until.Add(-p.margin).Before(l.restoreAt.Add(l.ch.maxTimeout)) {
			select {
			case l.hurry <- struct{}{}:
			default:
			}
			select {
			case <-restored:
				restored = nil
			case <-ctx.Done():
				return
			}
		}
	}
	l.mu.Lock()
	until, from := l.until, l.from
	l.mu.Unlock()
	lost := timer(until.Add(-p.margin))
	defer func() { lost.Stop() }()
	// Extends come the share of the TTL after the last success, or the
	// share of what is left, sooner, for a lock valid for less than its
	// TTL (one a grant made whose restore failed, or one extended by a
	// shorter TTL); none while a restore is due.
	var next clock.Timer // nil while a restore is due
	defer func() {
		if next != nil {
			next.Stop()
		}
	}()
	schedule := func(at time.Time) {
		if next != nil {
			next.Stop()
		}
		next = timer(at)
	}
	firstExtend := func() {
		first := l.ttl
		if until.Before(clock.Until(from, l.ttl, l.drift)) {
			first = until.Sub(from)
		}
		schedule(from.Add(time.Duration(p.extendAfter * float64(first))))
	}
	if restored == nil {
		firstExtend()
	}
	var hold <-chan time.Time // nil: no bound
	if p.maxHold > 0 {
		h := timer(l.taken.Add(p.maxHold))
		defer h.Stop()
		hold = h.C()
	}
	retry := max(2*l.ch.timeout, l.ttl/20)

	for {
		select {
		case <-ctx.Done():
			return
		case <-hold:
			lose(fmt.Errorf("%w: held for MaxHold %v", ErrLost, p.maxHold))
			return
		case <-lost.C():
			why := fmt.Errorf("%w: validity ran out without a successful extend", ErrLost)
			if lastErr != nil {
				why = &wrapped{msg: why.Error() + " (last extend: " + strings.TrimPrefix(lastErr.Error(), "redlock: ") + ")",
					errs: []error{why, lastErr}}
			}
			lose(why)
			return
		case <-restored:
			restored = nil
			l.mu.Lock()
			until, from = l.until, l.from
			l.mu.Unlock()
			lost.Stop()
			lost = timer(until.Add(-p.margin))
			firstExtend()
		case <-nextC(next):
			ext, cancelExt = l.extendAsync(ctx)
		case err := <-ext:
			ext = nil
			cancelExt()
			switch {
			case err == nil:
				lastErr = nil
				l.mu.Lock()
				until, from = l.until, l.from
				l.mu.Unlock()
				lost.Stop()
				lost = timer(until.Add(-p.margin))
				schedule(from.Add(time.Duration(p.extendAfter * float64(l.ttl))))
			case errors.Is(err, ErrNotHeld):
				lose(wrap("redlock", ErrLost, err))
				return
			default:
				lastErr = err
				schedule(clk.Now().Add(retry))
			}
		}
	}
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
