package redlock_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/redlock"
)

// TestCloseEndsRetryWait: a Lock sleeping in its retry delay returns
// ErrClosed as soon as Close is called, not when the delay ends (an hour
// here, unbounded with a custom strategy).
func TestCloseEndsRetryWait(t *testing.T) {
	fakes, _, c := setup(t, 3, redlock.WithClock(clock.Real{}), redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	for _, f := range fakes {
		f.put("k", "other", time.Hour)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "k")
		errc <- err
	}()
	require.Eventually(t, func() bool { return fakes[2].count("acquire") == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, redlock.ErrClosed)
	case <-time.After(10 * time.Second): // the delay is an hour
		t.Fatal("Lock still sleeping in its retry delay after Close")
	}
}

// TestLateReleasesRunInParallel: a TryLock cut short by its context
// against silent nodes leaves one release per node to send once each
// SET's call returns. They run side by side, not one after another.
func TestLateReleasesRunInParallel(t *testing.T) {
	const timeout = 100 * time.Millisecond
	fakes, _, c := setup(t, 3, redlock.WithNodeTimeout(timeout))
	var inFlight, most atomic.Int32
	for _, f := range fakes {
		f.setBefore(func(ctx context.Context, op string) error {
			if op == "release" {
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
			}
			<-ctx.Done() // silent: every call ends at its deadline
			return ctx.Err()
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := c.TryLock(ctx, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, c.Close(), redlock.ErrAbandoned, "the nodes never answer: their releases are given up at Close")
	for i, f := range fakes {
		assert.GreaterOrEqual(t, f.count("release"), 1, "node %d: a late release", i)
	}
	assert.Equal(t, int32(3), most.Load(), "late releases ran one after another")
}

// TestWaitForOpHonoursContext: an Unlock queued behind an Extend that
// waits on a silent node gives up when its own context ends, instead of
// waiting for the Extend.
func TestWaitForOpHonoursContext(t *testing.T) {
	fakes, _, c := setup(t, 3, redlock.WithNodeTimeout(time.Second))
	l, err := c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	hold := make(chan struct{})
	for _, f := range fakes {
		f.setBefore(gate("extend", hold))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		assert.NoError(t, l.Extend(context.Background(), time.Minute))
	}()
	require.Eventually(t, func() bool { return fakes[0].count("extend") == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, redlock.ErrNotHeld)
	assert.Positive(t, l.TTL(), "an Unlock that never ran leaves the lock held")
	close(hold)
	wg.Wait()
	for _, f := range fakes {
		f.setBefore(nil)
	}
	require.NoError(t, l.Unlock(context.Background()))
}

// closingHandler is a slog.Handler that closes the client on its first
// record: a logger may shut the client down without deadlocking it.
type closingHandler struct {
	c    **redlock.Client
	once sync.Once
	err  error
}

func (h *closingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *closingHandler) Handle(context.Context, slog.Record) error {
	h.once.Do(func() { h.err = (*h.c).Close() })
	return nil
}
func (h *closingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *closingHandler) WithGroup(string) slog.Handler      { return h }

func TestLoggerMayClose(t *testing.T) {
	var c *redlock.Client
	h := &closingHandler{c: &c}
	fakes, _, c := setup(t, 3, redlock.WithLogger(slog.New(h)))
	for _, f := range fakes {
		f.put("k", "other", time.Hour)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(context.Background(), "k")
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
	case <-time.After(10 * time.Second):
		t.Fatal("TryLock deadlocked on a logger that closes the client")
	}
	require.NoError(t, h.err)
	_, err := c.TryLock(context.Background(), "k")
	assert.ErrorIs(t, err, redlock.ErrClosed)
}

// TestAbandonedCountsPerNodeAndKey: releases of many locks of one key
// that two nodes never finish are reported at Close once per node and
// key, with their count, not once per release.
func TestAbandonedCountsPerNodeAndKey(t *testing.T) {
	const locks = 30
	fakes, _, c := setup(t, 5)
	for _, f := range fakes[:2] {
		f.setBefore(func(_ context.Context, op string) error {
			if op == "release" {
				// The release runs and its reply is lost: a failure
				// that may pass, queued to be finished, every time.
				f.mu.Lock()
				delete(f.keys, "k")
				f.mu.Unlock()
				return errInjected
			}
			return nil
		})
	}
	ctx := context.Background()
	for j := range locks {
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		// TryLock and Unlock return at a majority: the next lock takes
		// nodes 0 and 1 too (and has a release to lose there) once this
		// one's acquire and release have run there. (A slow run, -race,
		// otherwise finds the key still there, and its release passes.)
		require.Eventually(t, func() bool {
			for _, f := range fakes[:2] {
				f.mu.Lock()
				ran := f.calls["acquire"] == j+1 && f.calls["release"] >= j+1
				f.mu.Unlock()
				if !ran || f.token("k") != "" {
					return false
				}
			}
			return true
		}, 5*time.Second, time.Millisecond)
	}
	err := c.Close()
	require.ErrorIs(t, err, redlock.ErrAbandoned)
	msg := err.Error()
	assert.Contains(t, msg, "60 unfinished")
	assert.Equal(t, 1, strings.Count(msg, `"k" on node[0] fake0:6379 (30 releases)`), msg)
	assert.Equal(t, 1, strings.Count(msg, `"k" on node[1] fake1:6379 (30 releases)`), msg)
	assert.NotContains(t, msg, "more", msg)
}
