package integration_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// TestDoOutlivesTheTTL: a job of three TTLs keeps its lock the whole
// time, and a second client never gets in.
func TestDoOutlivesTheTTL(t *testing.T) {
	const ttl = time.Second
	p := prefix(t, 2*ttl)
	holder := client(t, redlock.WithTTL(ttl), redlock.WithNodeTimeout(100*time.Millisecond))
	other := client(t, redlock.WithTTL(ttl), redlock.WithNodeTimeout(100*time.Millisecond))
	ctx := context.Background()
	var tries, got int
	err := holder.Do(ctx, p+"job", func(job context.Context) error {
		end := time.Now().Add(3 * ttl)
		for time.Now().Before(end) {
			if job.Err() != nil {
				return context.Cause(job)
			}
			tries++
			if l, err := other.TryLock(ctx, p+"job"); err == nil {
				got++
				_ = l.Unlock(ctx)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Zero(t, got, "another client got the lock in %d tries while the job ran", tries)
	l, err := other.TryLock(ctx, p+"job")
	require.NoError(t, err, "free after Do")
	require.NoError(t, l.Unlock(ctx))
}

// TestDoLostWhenAMajorityOfKeysIsDeleted: the keys vanish from three
// nodes behind the holder's back; the job context ends with ErrLost
// within about one extend interval (a third of the TTL), and Do's error
// wraps ErrLost. Repeated, the deletion at a random point of the extend
// interval, with the lateness logged as p50/p99.
func TestDoLostWhenAMajorityOfKeysIsDeleted(t *testing.T) {
	const ttl, runs = 900 * time.Millisecond, 10
	p := prefix(t, 2*ttl)
	c := client(t, redlock.WithTTL(ttl), redlock.WithNodeTimeout(100*time.Millisecond))
	var late []time.Duration
	for run := range runs {
		// A key of its own per run: the last run's Unlock returns at a
		// majority, and its release on another node may land later.
		key := p + "job" + strconv.Itoa(run)
		var deleted time.Time
		err := c.Do(context.Background(), key, func(job context.Context) error {
			// Lock returns at the first three grants; a SET still on its
			// way to another node would land after the DEL below and put
			// the key back (and the lock would rightly still hold on a
			// majority). So the deletion waits until every node has it.
			require.Eventually(t, func() bool {
				for i := range shared.Size() {
					if v, err := shared.Direct(i).Command(context.Background(), "EXISTS", key); err != nil || v != int64(1) {
						return false
					}
				}
				return true
			}, 5*time.Second, 2*time.Millisecond, "the key on every node")
			time.Sleep(rand.N(ttl / 3))
			// Deleted again and again: an extend on its way may have
			// found the key on a majority (it reached node 0 before the
			// DEL) and rightly put it back where it was gone (re-seeding).
			del := func() {
				for i := range 3 {
					_, err := shared.Direct(i).Command(context.Background(), "DEL", key)
					require.NoError(t, err)
				}
			}
			del()
			deleted = time.Now()
			again := time.NewTicker(20 * time.Millisecond)
			defer again.Stop()
			timeout := time.After(5 * ttl)
			for {
				select {
				case <-job.Done():
					late = append(late, time.Since(deleted))
					return errors.New("job stopped")
				case <-again.C:
					del()
				case <-timeout:
					return errors.New("job context still alive")
				}
			}
		})
		require.ErrorIs(t, err, redlock.ErrLost)
		require.ErrorIs(t, err, redlock.ErrNotHeld, "found by an extend, not by running out of time")
		assert.Contains(t, err.Error(), "job stopped")
	}
	slices.Sort(late)
	t.Logf("job context ended %v (p50) / %v (p99, max of %d) after a majority of keys was deleted; extend interval %v",
		late[len(late)/2].Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond), runs, ttl/3)
	assert.Less(t, late[len(late)-1], ttl, "later than one TTL")
}

// TestDoLostWhenThreeNodesStop: extends fail; the job context ends at
// Until(), from the client's own clock, with ErrLost.
func TestDoLostWhenThreeNodesStop(t *testing.T) {
	const ttl = 2 * time.Second
	p := prefix(t, 2*ttl)
	c := client(t, redlock.WithTTL(ttl), redlock.WithNodeTimeout(100*time.Millisecond))
	l, err := c.TryLock(context.Background(), p+"job")
	require.NoError(t, err)
	until := l.Until()
	job, cancel := l.KeepAlive(context.Background())
	defer cancel()
	down(t, 0, 1, 2)
	select {
	case <-job.Done():
	case <-time.After(3 * ttl):
		t.Fatal("job context alive long after Until")
	}
	ended := time.Now()
	assert.ErrorIs(t, context.Cause(job), redlock.ErrLost)
	assert.False(t, ended.Before(until), "ended %v before Until", until.Sub(ended))
	t.Logf("job context ended %v after Until", ended.Sub(until).Round(time.Millisecond))
	cancel()
	_ = l.Unlock(context.Background()) // nodes 3 and 4; the stopped ones lose the key by TTL
}
