package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// TestPermanentErrorsEndLockAtOnce: a refusal that no retry can change,
// on a majority, ends Lock after its first attempt with the node package's
// sentinel for it; on a minority Lock goes on and succeeds.
func TestPermanentErrorsEndLockAtOnce(t *testing.T) {
	for _, kind := range []error{node.ErrAuth, node.ErrNoScripts, node.ErrUnsupported, node.ErrWrongType, node.ErrReadOnly, node.ErrOOM} {
		t.Run(node.KindOf(kind), func(t *testing.T) {
			fakes, _, c := setup(t, 5)
			for _, f := range fakes[:3] {
				f.setBefore(func(_ context.Context, op string) error {
					if op == "acquire" {
						return kind
					}
					return nil
				})
			}
			var attempts int
			c2, err := redlock.New(asNodes(fakes), redlock.WithNodeTimeout(500*time.Millisecond),
				redlock.WithHooks(redlock.Hooks{Acquire: func(i redlock.AcquireInfo) { attempts = i.Attempts }}))
			require.NoError(t, err)
			_, err = c2.Lock(context.Background(), "k")
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			require.ErrorIs(t, err, kind)
			require.NoError(t, c2.Close())
			assert.Equal(t, 1, attempts)
			assert.Equal(t, 1, fakes[4].count("acquire"), "one attempt")
			var qe *redlock.QuorumError
			require.ErrorAs(t, err, &qe)
			assert.Len(t, qe.Failed(), 3, "each node's cause is listed")

			// On a minority, a retry can still succeed: Lock is not cut short.
			fakes[2].setBefore(nil)
			l, err := c.Lock(context.Background(), "k2")
			require.NoError(t, err)
			require.NoError(t, l.Unlock(context.Background()))
		})
	}
}

// TestExtendReseedsAbsentNodes: nodes that lost the key (restarted empty)
// get it back after one Extend that a majority granted, also a node whose
// "absent" came only after the majority had decided (a restarted node's
// new connection and script load make it the slowest), and only with SET
// NX: a node where another token holds the key keeps it.
func TestExtendReseedsAbsentNodes(t *testing.T) {
	fakes, _, l := heldEverywhere(t)
	ctx := context.Background()
	fakes[0].restart("k")
	fakes[0].setBefore(func(ctx context.Context, op string) error {
		if op == "extend" {
			select { // answers after the other four
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	fakes[1].restart("k")
	fakes[1].put("k", "someone-else", time.Minute)
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	require.Eventually(t, func() bool { return fakes[0].token("k") == l.Token() }, 5*time.Second, time.Millisecond,
		"the late absent node is re-seeded by the same extend")
	assert.Equal(t, "someone-else", fakes[1].token("k"), "NX never overwrites another holder")
	assert.Equal(t, 4, holders(fakes, "k", l.Token()))
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 0 }, 5*time.Second, time.Millisecond)
	fakes[1].restart("k")
}

// TestExtendWithoutMajorityDoesNotReseed: an extend that failed sets
// nothing anywhere.
func TestExtendWithoutMajorityDoesNotReseed(t *testing.T) {
	fakes, c, l := heldEverywhere(t)
	ctx := context.Background()
	for _, f := range fakes[:3] {
		f.restart("k")
	}
	require.ErrorIs(t, l.Extend(ctx, 10*time.Second), redlock.ErrNotHeld)
	require.NoError(t, c.Close())
	assert.Equal(t, 1, fakes[0].count("acquire"), "no SET after the first acquire")
	for _, f := range fakes[3:] {
		f.restart("k")
	}
}

// flaky makes op fail (as a timeout would: retryable) until heal is
// called.
func flaky(op string) (hook func(context.Context, string) error, heal func()) {
	var healed atomic.Bool
	return func(_ context.Context, o string) error {
		if o == op && !healed.Load() {
			return node.ErrTimeout
		}
		return nil
	}, func() { healed.Store(true) }
}

// TestUnlockFinishesReleasesInBackground: releases lost on two nodes are
// sent again until the nodes answer; the key is then gone everywhere.
func TestUnlockFinishesReleasesInBackground(t *testing.T) {
	fakes, _, c := setup(t, 5)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	// Every node's SET has run (TryLock returns at three): Unlock, which
	// no longer waits for a straggler's SET, then finds the key on all.
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 5 }, 5*time.Second, time.Millisecond)
	hook, heal := flaky("release")
	fakes[0].setBefore(hook)
	fakes[1].setBefore(hook)
	require.NoError(t, l.Unlock(ctx), "three of five released")
	assert.Equal(t, 2, holders(fakes, "k", l.Token()))
	require.Eventually(t, func() bool { return fakes[0].count("release") >= 3 }, 5*time.Second, time.Millisecond, "retried")
	heal()
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 0 }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
}

// TestQueuedReleasesGoTogetherOnceTheNodeAnswers: releases of six locks
// lost on one node are finished one call at a time while the node fails
// them (its queue's head, a probe), and side by side once it answers: a
// node slowed by a loaded machine answered each in 30–60 ms, and the
// fifth release in its queue waited 260 ms (a torture trace, stop 57).
func TestQueuedReleasesGoTogetherOnceTheNodeAnswers(t *testing.T) {
	whileFailed, after := finishQueuedReleases(t, false)
	assert.Equal(t, int32(1), whileFailed, "while the node fails, one release at a time")
	assert.Greater(t, after, int32(1), "once it answers, the queued releases go side by side")
}

// TestQueuedReleasesGoTogetherWhileTheNodeAnswersLate: a node whose
// releases time out while its late replies keep coming is slow, not
// down, and its queued releases go side by side while they fail, not
// one per node timeout: on a loaded machine a node timed out the
// finisher's probes, and a key stayed on a majority 345 ms after the
// faults stopped (torture seed 29001449, stop 57).
func TestQueuedReleasesGoTogetherWhileTheNodeAnswersLate(t *testing.T) {
	whileFailed, after := finishQueuedReleases(t, true)
	assert.Greater(t, whileFailed, int32(1), "slow, not down: side by side while they time out")
	assert.Greater(t, after, int32(1), "and once it answers in time")
}

// lateFake is a fake node that tells when a reply last came in late
// (node.LateAnswerer), as the redigo node does.
type lateFake struct {
	*fakeNode
	at atomic.Int64 // UnixNano of the last late reply; 0: none
}

func (f *lateFake) LastLate() (time.Time, time.Duration) {
	if n := f.at.Load(); n != 0 {
		return time.Unix(0, n), 30 * time.Millisecond
	}
	return time.Time{}, 0
}

// finishQueuedReleases takes six locks on three fake nodes, makes the
// third time out every release (answering each one late, with late),
// unlocks them all, lets the finisher retry three times, then heals the
// node, and returns the most releases the node had in flight at once
// while it failed them (from its third retry on) and after it healed.
// Every key is gone from every node at the end.
func finishQueuedReleases(t *testing.T, late bool) (whileFailed, after int32) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(3, clk)
	slow := &lateFake{fakeNode: fakes[2]}
	c, err := redlock.New([]node.Node{fakes[0], fakes[1], slow}, redlock.WithClock(clk), redlock.WithNodeTimeout(500*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	var locks []*redlock.Lock
	for i := range 6 {
		l, err := c.TryLock(ctx, fmt.Sprintf("k%d", i))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return holders(fakes, l.Key(), l.Token()) == 3 }, 5*time.Second, time.Millisecond)
		locks = append(locks, l)
	}
	var (
		healed          atomic.Bool
		inFlight, most  atomic.Int32
		failedReleases  atomic.Int32
		mostWhileFailed atomic.Int32
	)
	fakes[2].setBefore(func(_ context.Context, op string) error {
		if op != "release" {
			return nil
		}
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if !healed.Load() {
			failedReleases.Add(1)
			for m := mostWhileFailed.Load(); n > m && !mostWhileFailed.CompareAndSwap(m, n); m = mostWhileFailed.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			if late {
				slow.at.Store(time.Now().UnixNano()) // an earlier call's reply, come in late
			}
			return node.ErrTimeout
		}
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(30 * time.Millisecond) // slow, and answering
		return nil
	})
	for _, l := range locks {
		require.NoError(t, l.Unlock(ctx), "two of three released")
	}
	// The Unlocks' own calls there may have overlapped: count from
	// when the finisher has retried three times, over its next three.
	require.Eventually(t, func() bool { return failedReleases.Load() >= 6+3 }, 5*time.Second, time.Millisecond)
	mostWhileFailed.Store(0)
	tries := failedReleases.Load()
	require.Eventually(t, func() bool { return failedReleases.Load() >= tries+3 }, 5*time.Second, time.Millisecond, "retried")
	healed.Store(true)
	require.Eventually(t, func() bool {
		for _, l := range locks {
			if holders(fakes, l.Key(), l.Token()) > 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	return mostWhileFailed.Load(), most.Load()
}

// TestFinishGoesPastAnOpenBreaker: a background release goes on to a node
// whose breaker its failure opened, one call at a time, without waiting
// for the cooldown (an hour here; the clock does not move); once the node
// answers, the key is gone and the breaker closed: a node back must not
// hold a lost release's key, a majority of them the lock, for a cooldown
// (a torture trace: three breakers open, the key kept for their 1 s).
func TestFinishGoesPastAnOpenBreaker(t *testing.T) {
	rec := &recorder{}
	fakes, _, c := setup(t, 5, redlock.WithHooks(rec.hooks()),
		redlock.WithBreaker(redlock.Breaker{Failures: 1, Span: -1, Cooldown: time.Hour}))
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 5 }, 5*time.Second, time.Millisecond)
	hook, heal := flaky("release")
	fakes[0].setBefore(hook)
	require.NoError(t, l.Unlock(ctx))
	state := func() redlock.BreakerState {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.changes) == 0 {
			return redlock.BreakerClosed
		}
		return rec.changes[len(rec.changes)-1].To
	}
	require.Eventually(t, func() bool { return state() == redlock.BreakerOpen }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return fakes[0].count("release") >= 3 }, 5*time.Second, time.Millisecond,
		"retried while the breaker is open")
	assert.Equal(t, 1, holders(fakes, "k", l.Token()))
	heal()
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 0 }, 5*time.Second, time.Millisecond,
		"the key is gone once the node answers, an hour before the cooldown ends")
	// The key goes when the node runs the release; the breaker hears
	// the answer a moment later.
	require.Eventually(t, func() bool { return state() == redlock.BreakerClosed }, 5*time.Second, time.Millisecond,
		"the answer closed the breaker")
	require.NoError(t, c.Close())
}

// TestUnlockWithoutMajorityIsFinishedToo: when most releases are lost,
// Unlock reports it, and the releases are finished all the same.
func TestUnlockWithoutMajorityIsFinishedToo(t *testing.T) {
	fakes, _, c := setup(t, 5)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	hook, heal := flaky("release")
	for _, f := range fakes[:3] {
		f.setBefore(hook)
	}
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, node.ErrTimeout)
	heal()
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 0 }, 5*time.Second, time.Millisecond)
}

// TestPermanentReleaseErrorIsNotRetried: a node that refuses the release
// for good (no scripts) is not asked again.
func TestPermanentReleaseErrorIsNotRetried(t *testing.T) {
	fakes, _, c := setup(t, 5)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	fakes[0].setBefore(failWith("release", node.ErrNoScripts))
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, c.Close())
	assert.Equal(t, 1, fakes[0].count("release"))
	fakes[0].restart("k")
}

func failWith(op string, err error) func(context.Context, string) error {
	return func(_ context.Context, o string) error {
		if o == op {
			return err
		}
		return nil
	}
}

// TestCloseReportsAbandonedReleases: releases still failing at the end of
// Close's grace are named in its error, by key and node, never by token.
func TestCloseReportsAbandonedReleases(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	c, err := redlock.New(asNodes(fakes), redlock.WithClock(clk), redlock.WithNodeTimeout(20*time.Millisecond))
	require.NoError(t, err)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	hook, _ := flaky("release")
	fakes[3].setBefore(hook)
	require.NoError(t, l.Unlock(ctx))
	start := time.Now()
	err = c.Close()
	require.ErrorIs(t, err, redlock.ErrAbandoned)
	assert.Contains(t, err.Error(), `"k" on node[3] fake3:6379`)
	assert.NotContains(t, err.Error(), l.Token())
	assert.Less(t, time.Since(start), 5*time.Second, "Close's wait is bounded")
	assert.True(t, errors.Is(c.Close(), redlock.ErrAbandoned), "a second Close returns the first one's result")
	fakes[3].restart("k")
}

// heldEverywhere returns five fake nodes, a client over them and a lock on
// "k" that all five hold (TryLock returns at three).
func heldEverywhere(t *testing.T) ([]*fakeNode, *redlock.Client, *redlock.Lock) {
	t.Helper()
	fakes, _, c := setup(t, 5, redlock.WithTTL(10*time.Second))
	return fakes, c, lockOnAll(t, context.Background(), c, fakes)
}

// TestLateRefusalsStillEndLock: the attempt is decided (two nodes hold
// the key for someone else) before two of the three refusals come in;
// Lock waits for them rather than retrying, and ends after that attempt.
func TestLateRefusalsStillEndLock(t *testing.T) {
	fakes, _, c := setup(t, 5)
	for _, f := range fakes[3:] {
		f.put("k", "other", time.Minute)
	}
	fakes[0].setBefore(failWith("acquire", node.ErrNoScripts))
	for _, f := range fakes[1:3] {
		f.setBefore(func(_ context.Context, op string) error {
			if op == "acquire" {
				time.Sleep(20 * time.Millisecond)
				return node.ErrNoScripts
			}
			return nil
		})
	}
	// Bounded: without the wait, Lock would retry on the fake clock
	// until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Lock(ctx, "k")
	require.ErrorIs(t, err, node.ErrNoScripts)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Attempts)
	for _, f := range fakes[3:] {
		f.restart("k")
	}
}

// TestPermanentRefusalIsNoUnknownOutcome: an Extend or Unlock that a
// majority refuses for good (here their scripts are gone: EVAL renamed
// after the acquire) did not happen there, and no retry makes it happen:
// the error says so instead of "outcome unknown", and names the kind.
func TestPermanentRefusalIsNoUnknownOutcome(t *testing.T) {
	fakes, _, c := setup(t, 5)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	for _, f := range fakes[:3] {
		f.setBefore(func(_ context.Context, op string) error {
			if op == "extend" || op == "release" {
				return node.ErrNoScripts
			}
			return nil
		})
	}
	err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, node.ErrNoScripts)
	assert.Contains(t, err.Error(), "refused for good by 3 nodes")
	assert.NotContains(t, err.Error(), "outcome unknown")
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, node.ErrNoScripts)
	assert.Contains(t, err.Error(), "refused for good by 3 nodes")
	for _, f := range fakes[:3] {
		f.mu.Lock()
		clear(f.keys) // expired, as their TTL would
		f.mu.Unlock()
	}
}
