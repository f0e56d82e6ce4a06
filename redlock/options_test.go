package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// TestZeroOptionsPickDefaults: options are often filled from config
// values where 0 means "not set". WithNodeTimeout(0) and WithQuorum(0)
// pick the defaults, as their doc comments say; negative values are
// ErrInvalid, with an error that says 0 is the way to ask for the default.
func TestZeroOptionsPickDefaults(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	left := make(chan time.Duration, 1)
	fakes[0].setBefore(func(ctx context.Context, op string) error {
		d, _ := ctx.Deadline()
		left <- time.Until(d)
		return nil
	})
	c, err := redlock.New(asNodes(fakes), redlock.WithClock(clk), redlock.WithTTL(10*time.Second),
		redlock.WithNodeTimeout(0), redlock.WithQuorum(0))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, 3, c.Quorum(), "WithQuorum(0): a majority")
	_, err = c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	d := <-left
	assert.True(t, d > 0 && d <= 50*time.Millisecond, "WithNodeTimeout(0): TTL/200 = 50ms, got %v", d)

	for name, opt := range map[string]redlock.Option{
		"node timeout": redlock.WithNodeTimeout(-time.Millisecond),
		"quorum":       redlock.WithQuorum(-1),
	} {
		c, err := redlock.New(asNodes(fakes), opt)
		assert.Nil(t, c, name)
		require.ErrorIs(t, err, redlock.ErrInvalid, name)
		assert.Contains(t, err.Error(), "0 for the default", name)
	}
}

// TestClientOptionOnOneLock: one Option type serves New and a single
// call, but an option that configures the client as a whole is refused
// by a call, with ErrInvalid naming it, and nothing is sent; options that
// make sense per lock are taken.
func TestClientOptionOnOneLock(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	c, err := redlock.New(asNodes(fakes), redlock.WithClock(clk))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	for _, opt := range []redlock.Option{
		redlock.WithQuorum(5), redlock.WithKeyPrefix("p:"), redlock.WithClock(clk),
		redlock.WithLogger(nil), redlock.WithHooks(redlock.Hooks{}), redlock.WithBreaker(redlock.Breaker{}),
		redlock.WithNotifications(false), redlock.WithNodeOptions(node.Options{}),
	} {
		l, err := c.TryLock(ctx, "k", opt)
		assert.Nil(t, l)
		require.ErrorIs(t, err, redlock.ErrInvalid)
		assert.Contains(t, err.Error(), "configures a client")
	}
	for _, f := range fakes {
		assert.Zero(t, f.count("acquire"), "a refused call sends nothing")
	}
	l, err := c.TryLock(ctx, "k", redlock.WithTTL(time.Minute), redlock.WithDriftFactor(0.02), redlock.WithRetry(redlock.NoRetry()))
	require.NoError(t, err)
	assert.Equal(t, time.Minute-time.Minute/50-2*time.Millisecond, l.TTL(), "the call's TTL and drift factor")
	require.NoError(t, l.Unlock(ctx))
}

// TestTTLTooShortEverToBeValid: a TTL within its drift allowance (TTL×f
// + 2ms) plus the 1ms floor of a node call can never give a positive
// validity; it is ErrInvalid at Dial and New, for one call and for an
// Extend, and nothing is sent. With the default drift factor 4ms is the
// least accepted; with a factor of 0.49, 6ms.
func TestTTLTooShortEverToBeValid(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	urls := []string{"redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"}
	for _, ttl := range []time.Duration{time.Millisecond, 3 * time.Millisecond} {
		c, err := redlock.Dial(urls, redlock.WithTTL(ttl))
		assert.Nil(t, c)
		require.ErrorIs(t, err, redlock.ErrInvalid, "Dial, TTL %v", ttl)
		assert.Contains(t, err.Error(), "can never be valid")
		c, err = redlock.New(asNodes(fakes), redlock.WithClock(clk), redlock.WithTTL(ttl))
		assert.Nil(t, c)
		require.ErrorIs(t, err, redlock.ErrInvalid, "New, TTL %v", ttl)
	}
	_, err := redlock.New(asNodes(fakes), redlock.WithClock(clk), redlock.WithTTL(5*time.Millisecond), redlock.WithDriftFactor(0.49))
	require.ErrorIs(t, err, redlock.ErrInvalid, "5ms with drift factor 0.49")
	c, err := redlock.New(asNodes(fakes), redlock.WithClock(clk), redlock.WithTTL(6*time.Millisecond), redlock.WithDriftFactor(0.49))
	require.NoError(t, err, "6ms with drift factor 0.49")
	require.NoError(t, c.Close())

	c, err = redlock.New(asNodes(fakes), redlock.WithClock(clk), redlock.WithTTL(4*time.Millisecond))
	require.NoError(t, err, "4ms, the least with the default drift factor")
	defer c.Close()
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k", redlock.WithTTL(3*time.Millisecond))
	assert.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrInvalid, "one call's TTL")
	l, err = c.Lock(ctx, "k", redlock.WithTTL(2*time.Millisecond))
	assert.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrInvalid, "one Lock call's TTL")
	for _, f := range fakes {
		assert.Zero(t, f.count("acquire"), "a refused call sends nothing")
	}
	// The fake clock stands still: a 4ms lock stays valid, and its node
	// timeout (a quarter of its TTL, 1ms) is below 3ms.
	l, err = c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.ErrorIs(t, l.Extend(ctx, 3*time.Millisecond), redlock.ErrInvalid, "an Extend's TTL")
	for _, f := range fakes {
		assert.Zero(t, f.count("extend"), "a refused Extend sends nothing")
	}
	require.NoError(t, l.Unlock(ctx))
}
