package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeadlinesAreCutDownAndShared: a round's deadline is never later
// than its start plus its timeout, and earlier by less than the grain
// (a millisecond, or a sixteenth of a shorter timeout); rounds begun
// together share one; it ends as a context deadline does.
func TestDeadlinesAreCutDownAndShared(t *testing.T) {
	var ds deadlines
	for _, timeout := range []time.Duration{250 * time.Millisecond, 20 * time.Millisecond, 4 * time.Millisecond} {
		grain := min(time.Millisecond, timeout/16)
		before := time.Now()
		d := ds.after(timeout)
		after := time.Now()
		assert.False(t, d.at.After(after.Add(timeout)), "%v: later than start + timeout", timeout)
		assert.True(t, d.at.After(before.Add(timeout-grain)), "%v: cut by a grain or more", timeout)
	}
	shared := 0
	for range 100 {
		a, b := ds.after(time.Second), ds.after(time.Second)
		if a == b {
			shared++
		}
	}
	assert.Greater(t, shared, 50, "rounds begun within a grain share a deadline")

	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	x := &roundCtx{base: ctx, d: ds.after(5 * time.Millisecond)}
	dl, ok := x.Deadline()
	require.True(t, ok)
	assert.Equal(t, x.d.at, dl)
	assert.NoError(t, x.Err())
	assert.Equal(t, "v", x.Value(ctxKey{}), "the base's values")
	select {
	case <-x.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline never ended")
	}
	assert.ErrorIs(t, x.Err(), context.DeadlineExceeded)
	assert.False(t, time.Now().Before(dl), "done before the deadline")
}

type ctxKey struct{}
