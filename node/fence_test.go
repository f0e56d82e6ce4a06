package node_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
)

// TestFencedAcquireAgainstRedis: the counter is seeded from the node's
// clock, grows by at least one per grant, is not touched by a refused
// acquire, is raised (never lowered) by a confirm only under the token,
// and lives the counter TTL; the scripts are reloaded after SCRIPT FLUSH.
func TestFencedAcquireAgainstRedis(t *testing.T) {
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	r, err := node.Dial(url, node.Options{})
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	counter := func() int64 {
		v, err := admin.Do(ctx, "GET", node.FenceKey("k"))
		require.NoError(t, err)
		n, err := strconv.ParseInt(string(v.([]byte)), 10, 64)
		require.NoError(t, err)
		return n
	}
	a := node.Key{Name: "k", Token: "a"}
	b := node.Key{Name: "k", Token: "b"}

	before := time.Now().UnixMicro()
	res, err := r.AcquireFenced(ctx, &a, time.Minute, time.Hour)
	require.NoError(t, err)
	require.Equal(t, node.Done, res.Status)
	after := time.Now().UnixMicro()
	// Seeded from the node's TIME (the same host's clock here).
	assert.GreaterOrEqual(t, res.Fence, before-1000)
	assert.LessOrEqual(t, res.Fence, after+1000)
	assert.Equal(t, res.Fence, counter())
	pttl, err := admin.Do(ctx, "PTTL", node.FenceKey("k"))
	require.NoError(t, err)
	assert.InDelta(t, time.Hour.Milliseconds(), pttl.(int64), 5000, "the counter's TTL")

	// A refused acquire reports the holder and the counter, and leaves
	// the counter alone.
	taken, err := r.AcquireFenced(ctx, &b, time.Minute, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, node.Taken, taken.Status)
	assert.Equal(t, res.Fence, taken.Fence)
	assert.InDelta(t, time.Minute, taken.TTL, float64(5*time.Second))
	assert.Equal(t, res.Fence, counter())

	// A confirm raises the counter under the token, never lowers it, and
	// does nothing for another token.
	high := res.Fence + 1_000_000
	c, err := r.ConfirmFence(ctx, &a, high, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, node.Done, c.Status)
	assert.Equal(t, high, counter())
	c, err = r.ConfirmFence(ctx, &a, res.Fence, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, node.Done, c.Status)
	assert.Equal(t, high, counter(), "a confirm never lowers the counter")
	c, err = r.ConfirmFence(ctx, &b, high+5, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, node.Taken, c.Status)
	assert.Equal(t, high, counter())

	// The next grant reads the raised counter: high + 1 (the clock is
	// a second behind it).
	_, err = r.Release(ctx, &a, false)
	require.NoError(t, err)
	c, err = r.ConfirmFence(ctx, &a, high+5, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, node.Absent, c.Status)
	_, err = admin.Do(ctx, "SCRIPT", "FLUSH")
	require.NoError(t, err)
	res, err = r.AcquireFenced(ctx, &b, time.Minute, time.Hour)
	require.NoError(t, err, "EVAL after NOSCRIPT")
	require.Equal(t, node.Done, res.Status)
	assert.Equal(t, high+1, res.Fence)

	// A lost counter starts again from the clock, above what it gave.
	_, err = r.Release(ctx, &b, false)
	require.NoError(t, err)
	_, err = admin.Do(ctx, "DEL", node.FenceKey("k"))
	require.NoError(t, err)
	res2, err := r.AcquireFenced(ctx, &a, time.Minute, time.Hour)
	require.NoError(t, err)
	assert.Greater(t, res2.Fence, after)
	_, err = r.Release(ctx, &a, false)
	require.NoError(t, err)
	_, err = admin.Do(ctx, "DEL", node.FenceKey("k"))
	require.NoError(t, err)
}
