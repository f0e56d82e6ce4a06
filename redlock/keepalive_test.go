package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/redlock"
)

// keepAliveSetup takes "k" on three fakes (TTL 9 s on the fake clock) and
// starts KeepAlive on it once the keeper waits on the clock.
func keepAliveSetup(t *testing.T, opts ...redlock.Option) ([]*fakeNode, *clock.Fake, *redlock.Lock, context.Context, context.CancelFunc) {
	t.Helper()
	fakes, clk, c := setup(t, 3, redlock.WithTTL(9*time.Second))
	l, err := c.TryLock(context.Background(), "k", opts...)
	require.NoError(t, err)
	before := clk.Waiters()
	job, cancel := l.KeepAlive(context.Background())
	t.Cleanup(cancel)
	waitWaiters(t, clk, before+2) // the loss timer and the next extend
	return fakes, clk, l, job, cancel
}

// waitWaiters waits until at least n timers wait on clk.
func waitWaiters(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return clk.Waiters() >= n }, 5*time.Second, time.Millisecond, "timers on the fake clock")
}

func extends(fakes []*fakeNode) int {
	n := 0
	for _, f := range fakes {
		n += f.count("extend returned")
	}
	return n
}

// TestKeepAliveExtendsAtTheShare: with the default share (1/3) a 9 s lock
// is extended 3 s after each success, and the job context stays alive.
func TestKeepAliveExtendsAtTheShare(t *testing.T) {
	fakes, clk, l, job, cancel := keepAliveSetup(t)
	for round := 1; round <= 3; round++ {
		clk.Advance(3*time.Second - time.Millisecond)
		time.Sleep(5 * time.Millisecond) // nothing may happen early
		require.Equal(t, 3*(round-1), extends(fakes), "extended before a third of the TTL")
		clk.Advance(time.Millisecond)
		require.Eventually(t, func() bool { return extends(fakes) == 3*round }, 5*time.Second, time.Millisecond)
		waitWaiters(t, clk, 2) // re-armed after the success
		assert.Equal(t, 9*time.Second-92*time.Millisecond, l.TTL(), "validity renewed from the extend's start")
	}
	assert.NoError(t, job.Err())
	cancel()
	assert.ErrorIs(t, job.Err(), context.Canceled)
	assert.NotErrorIs(t, context.Cause(job), redlock.ErrLost)
	clk.Advance(time.Minute)
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, 9, extends(fakes), "an extend after cancel")
	assert.Zero(t, clk.Waiters(), "a timer outlived cancel")
}

// TestKeepAliveShareOption: WithExtendAfter(0.5) extends half-way.
func TestKeepAliveShareOption(t *testing.T) {
	fakes, clk, _, _, _ := keepAliveSetup(t, redlock.WithExtendAfter(0.5))
	clk.Advance(4 * time.Second)
	time.Sleep(5 * time.Millisecond)
	assert.Zero(t, extends(fakes))
	clk.Advance(500 * time.Millisecond)
	require.Eventually(t, func() bool { return extends(fakes) == 3 }, 5*time.Second, time.Millisecond)
}

// TestKeepAliveLostAtUntilWhileExtendHangs: every extend hangs; the job
// context ends at Until() from the client's clock, while the extend is
// still stuck, with ErrLost.
func TestKeepAliveLostAtUntilWhileExtendHangs(t *testing.T) {
	fakes, clk, l, job, cancel := keepAliveSetup(t)
	hang := make(chan struct{})
	defer close(hang)
	for _, f := range fakes {
		f.setBefore(gate("extend", hang))
	}
	until := l.Until()
	clk.Advance(3 * time.Second)
	require.Eventually(t, func() bool { return fakes[0].count("extend") == 1 }, 5*time.Second, time.Millisecond)
	clk.Advance(until.Sub(clk.Now()) - time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, job.Err(), "ended before Until")
	clk.Advance(time.Millisecond)
	select {
	case <-job.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("job context still alive at Until")
	}
	assert.ErrorIs(t, context.Cause(job), redlock.ErrLost)
	assert.Contains(t, context.Cause(job).Error(), "validity ran out")
	assert.Equal(t, 1, fakes[0].count("extend"), "the hung extend was the only one")
	cancel() // returns although the extend was stuck: it is cancelled
}

// TestKeepAliveMargin: LostMargin ends the job that long before Until.
func TestKeepAliveMargin(t *testing.T) {
	fakes, clk, l, job, _ := keepAliveSetup(t, redlock.WithLostMargin(time.Second))
	for _, f := range fakes {
		f.setBefore(failOn("extend"))
	}
	// Step through the extends and their retries (every 2 node timeouts,
	// 1 s here) up to Until - margin.
	lostAt := l.Until().Add(-time.Second)
	for tries := 1; clk.Now().Add(time.Second).Before(lostAt); tries++ {
		waitWaiters(t, clk, 2)
		if tries == 1 {
			clk.Advance(3 * time.Second)
		} else {
			clk.Advance(time.Second)
		}
		require.Eventually(t, func() bool { return fakes[0].count("extend") == tries }, 5*time.Second, time.Millisecond)
	}
	waitWaiters(t, clk, 2)
	clk.Advance(lostAt.Sub(clk.Now()))
	select {
	case <-job.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("job context alive at Until - margin")
	}
	assert.ErrorIs(t, context.Cause(job), redlock.ErrLost)
	assert.ErrorIs(t, context.Cause(job), errInjected, "the last extend's failure is in the cause")
	assert.Positive(t, l.TTL(), "the lock still holds when the job is told")
	assert.Greater(t, fakes[0].count("extend"), 1, "failed extends are retried")
}

// TestKeepAliveNotHeldEndsAtOnce: an extend that finds another token on
// a majority ends the job context at once, long before Until.
func TestKeepAliveNotHeldEndsAtOnce(t *testing.T) {
	fakes, clk, _, job, _ := keepAliveSetup(t)
	for _, f := range fakes[:2] {
		f.put("k", "thief", time.Hour)
	}
	clk.Advance(3 * time.Second)
	select {
	case <-job.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("job context alive after the lock was taken over")
	}
	assert.ErrorIs(t, context.Cause(job), redlock.ErrLost)
	assert.ErrorIs(t, context.Cause(job), redlock.ErrNotHeld)
}

// TestKeepAliveMaxHold: the hold bound ends the job with ErrLost.
func TestKeepAliveMaxHold(t *testing.T) {
	fakes, clk, _, job, _ := keepAliveSetup(t, redlock.WithMaxHold(5*time.Second))
	waitWaiters(t, clk, 3)
	clk.Advance(3 * time.Second)
	require.Eventually(t, func() bool { return extends(fakes) == 3 }, 5*time.Second, time.Millisecond)
	waitWaiters(t, clk, 3)
	clk.Advance(2 * time.Second)
	select {
	case <-job.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("job context alive past MaxHold")
	}
	assert.ErrorIs(t, context.Cause(job), redlock.ErrLost)
	assert.Contains(t, context.Cause(job).Error(), "MaxHold")
}

// TestKeepAliveParentEnds: the parent's cause, not ErrLost.
func TestKeepAliveParentEnds(t *testing.T) {
	_, _, c := setup(t, 3)
	l, err := c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	why := errors.New("shutdown")
	parent, cancelParent := context.WithCancelCause(context.Background())
	job, cancel := l.KeepAlive(parent)
	defer cancel()
	cancelParent(why)
	<-job.Done()
	assert.ErrorIs(t, context.Cause(job), why)
	assert.NotErrorIs(t, context.Cause(job), redlock.ErrLost)
}

func TestKeepAliveNilLock(t *testing.T) {
	var l *redlock.Lock
	job, cancel := l.KeepAlive(context.Background())
	defer cancel()
	assert.ErrorIs(t, context.Cause(job), redlock.ErrLost)
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	fakes, _, c := setup(t, 3)
	ran := false
	err := c.Do(ctx, "k", func(job context.Context) error {
		ran = true
		tok := fakes[0].token("k") + fakes[1].token("k") // one of them granted
		assert.GreaterOrEqual(t, holders(fakes, "k", tok[:32]), 2, "held while fn runs")
		return job.Err()
	})
	require.NoError(t, err)
	assert.True(t, ran)
	// Unlock returns at quorum; the last release may still be on its way.
	require.Eventually(t, func() bool { return holders(fakes, "k", "") == 3 }, 5*time.Second, time.Millisecond, "unlocked after fn")

	boom := errors.New("boom")
	err = c.Do(ctx, "k", func(context.Context) error { return boom })
	assert.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, redlock.ErrLost)

	// Held elsewhere: fn is not called, the error is Lock's.
	for _, f := range fakes {
		f.put("k", "other", time.Hour)
	}
	err = c.Do(ctx, "k", func(context.Context) error {
		t.Error("fn called without the lock")
		return nil
	}, redlock.WithRetry(redlock.NoRetry()))
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
}

// TestDoLost: the lock is taken over while fn runs; fn sees its context
// end with ErrLost, and Do's error wraps both fn's error and ErrLost.
func TestDoLost(t *testing.T) {
	fakes, clk, c := setup(t, 3, redlock.WithTTL(9*time.Second))
	boom := errors.New("job gave up")
	err := c.Do(context.Background(), "k", func(job context.Context) error {
		for _, f := range fakes[1:] {
			f.put("k", "thief", time.Hour)
		}
		waitWaiters(t, clk, 2)
		clk.Advance(3 * time.Second)
		<-job.Done()
		return boom
	})
	assert.ErrorIs(t, err, boom)
	assert.ErrorIs(t, err, redlock.ErrLost)
	assert.Equal(t, "thief", fakes[1].token("k"), "someone else's key is untouched")
}
