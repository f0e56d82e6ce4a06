package integration_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// fencePrefix is prefix, plus a cleanup (run before prefix's check) that
// deletes the fence counters under it: they outlive the lock keys by
// design (a day, see redlock.WithFencing).
func fencePrefix(t *testing.T, wait time.Duration) string {
	t.Helper()
	p := prefix(t, wait)
	t.Cleanup(func() {
		ctx := context.Background()
		for i := range shared.Size() {
			keys, err := shared.Direct(i).Keys(ctx, p+"*:fence")
			if assert.NoError(t, err) {
				for _, k := range keys {
					_, err := shared.Direct(i).Command(ctx, "DEL", k)
					assert.NoError(t, err)
				}
			}
		}
	})
	return p
}

// grantFences takes and releases key n times, rotating over clients, and
// requires every fence to be larger than the one before (starting above
// last). It returns the last fence.
func grantFences(t *testing.T, clients []*redlock.Client, key string, n int, last int64) int64 {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		l, err := clients[i%len(clients)].Lock(ctx, key)
		require.NoError(t, err, "grant %d", i)
		require.Greater(t, l.Fence(), last, "grant %d by client %d", i, i%len(clients))
		last = l.Fence()
		// An unlock whose outcome is unknown (nodes stalled by a fault
		// next door) leaves keys that expire by their TTL; the next Lock
		// waits for them. Only a lock found taken by another is wrong.
		if err := l.Unlock(ctx); err != nil {
			require.NotErrorIs(t, err, redlock.ErrNotHeld)
			t.Logf("grant %d: %v", i, err)
		}
	}
	return last
}

// TestFenceThousandGrants: 1,000 sequential fenced grants by three
// rotating clients give strictly increasing fences.
func TestFenceThousandGrants(t *testing.T) {
	p := fencePrefix(t, 5*time.Second)
	clients := []*redlock.Client{client(t, redlock.WithFencing()), client(t, redlock.WithFencing()), client(t, redlock.WithFencing())}
	first := grantFences(t, clients, p+"k", 1, 0)
	last := grantFences(t, clients, p+"k", 999, first)
	t.Logf("fences from %d to %d", first, last)
}

// TestFenceNodeRestartedWithoutItsCounter: node 0 hands out the largest
// counter (its counter is set an hour ahead, as a node whose clock ran
// fast would have), is killed, stays away for more than the TTL and
// comes back empty, seeding from a clock an hour behind what it gave.
// Grants before, while it is down and after it is back keep increasing:
// the confirm had written the large fence to a majority.
func TestFenceNodeRestartedWithoutItsCounter(t *testing.T) {
	const ttl = time.Second
	p := fencePrefix(t, 5*time.Second)
	key := p + "k"
	ctx := context.Background()
	// A node timeout of 100 ms, not the 5 ms a 1 s TTL derives: a docker
	// kill or start stalls this two-core machine for tens of ms.
	opts := []redlock.Option{redlock.WithFencing(), redlock.WithTTL(ttl), redlock.WithNodeTimeout(100 * time.Millisecond)}
	clients := []*redlock.Client{client(t, opts...), client(t, opts...)}
	last := grantFences(t, clients, key, 50, 0)

	ahead := time.Now().Add(time.Hour).UnixMicro()
	_, err := shared.Direct(0).Command(ctx, "SET", node.FenceKey(key), ahead)
	require.NoError(t, err)
	// A grant returns at a majority: until node 0's reply is among the
	// first three, the fence comes from the others. Grant until it is.
	for i := 0; last <= ahead; i++ {
		require.Less(t, i, 200, "node 0 never among the granting majority")
		last = grantFences(t, clients, key, 1, last)
	}

	require.NoError(t, shared.Kill(ctx, 0))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			require.NoError(t, shared.Start(ctx, 0))
		}
	})
	last = grantFences(t, clients, key, 50, last)
	time.Sleep(ttl + 100*time.Millisecond) // a delayed restart: away longer than the TTL
	require.NoError(t, shared.Start(ctx, 0))
	restarted = true
	v, err := shared.Direct(0).Command(ctx, "EXISTS", node.FenceKey(key))
	require.NoError(t, err)
	require.Equal(t, int64(0), v, "node 0 came back without its counter")
	// Grant until node 0 is back in the majorities (the clients' breakers
	// probe it after their cooldown) and was brought up to the others.
	deadline := time.Now().Add(30 * time.Second)
	var c int64
	for c <= ahead {
		require.True(t, time.Now().Before(deadline), "node 0 never granted again")
		last = grantFences(t, clients, key, 20, last)
		c, err = redis.Int64(shared.Direct(0).Command(ctx, "GET", node.FenceKey(key)))
		if !errors.Is(err, redis.ErrNil) {
			require.NoError(t, err)
		}
	}
	last = grantFences(t, clients, key, 100, last)
	t.Logf("last fence %d, an hour ahead of the clock", last)
}

// fencedStore is a value in Redis that only a writer with a fence at
// least as large as the last accepted one may change: the check and the
// write are one script, so that a holder that woke up late is refused.
type fencedStore struct {
	admin interface {
		Command(ctx context.Context, cmd string, args ...any) (any, error)
	}
	key string
}

// fencedWrite: KEYS[1] the value, KEYS[2] the last fence accepted;
// ARGV[1] the value, ARGV[2] the writer's fence. 1 written, 0 refused.
const fencedWrite = `
local last = tonumber(redis.call("GET", KEYS[2]) or "0")
if tonumber(ARGV[2]) < last then
  return 0
end
redis.call("SET", KEYS[2], ARGV[2])
redis.call("SET", KEYS[1], ARGV[1])
return 1`

var errStaleFence = errors.New("refused: a newer lock holder has written")

func (s fencedStore) write(ctx context.Context, value string, fence int64) error {
	ok, err := redis.Int(s.admin.Command(ctx, "EVAL", fencedWrite, 2, s.key, s.key+":fence", value, strconv.FormatInt(fence, 10)))
	if err != nil {
		return err
	}
	if ok == 0 {
		return errStaleFence
	}
	return nil
}

// TestFencePausedHolderIsRefused is the reason for fencing: client A
// takes the lock with fence Ta and pauses past its validity (a GC pause,
// SIGSTOP); client B takes it with Tb > Ta and writes to the store; A
// wakes up, believes it still holds the lock, and writes with Ta: the
// store refuses.
func TestFencePausedHolderIsRefused(t *testing.T) {
	p := fencePrefix(t, 5*time.Second)
	ctx := context.Background()
	store := fencedStore{admin: shared.Direct(0), key: p + "store"}
	t.Cleanup(func() { _, _ = shared.Direct(0).Command(ctx, "DEL", store.key, store.key+":fence") })
	a := client(t, redlock.WithFencing(), redlock.WithTTL(time.Second), redlock.WithNodeTimeout(100*time.Millisecond))
	b := client(t, redlock.WithFencing(), redlock.WithTTL(10*time.Second))

	la, err := a.Lock(ctx, p+"k")
	require.NoError(t, err)
	require.NoError(t, store.write(ctx, "a1", la.Fence()))
	time.Sleep(time.Until(la.Until()) + 100*time.Millisecond) // A is paused past Until

	lb, err := b.Lock(ctx, p+"k")
	require.NoError(t, err)
	require.Greater(t, lb.Fence(), la.Fence())
	require.NoError(t, store.write(ctx, "b1", lb.Fence()))

	err = store.write(ctx, "a2", la.Fence()) // A wakes up and writes
	require.ErrorIs(t, err, errStaleFence)
	v, err := redis.String(shared.Direct(0).Command(ctx, "GET", store.key))
	require.NoError(t, err)
	assert.Equal(t, "b1", v, "B's write stands")
	require.ErrorIs(t, la.Unlock(ctx), redlock.ErrNotHeld)
	require.NoError(t, lb.Unlock(ctx))
	t.Logf("A's write with fence %d refused after B's with %d", la.Fence(), lb.Fence())
}

// TestFencedWaiterIsWokenByTheRelease: a fenced Lock's waiter queues on
// the nodes (its first attempt does not, and leaves nothing where it is refused), so
// the holder's Unlock reserves the key for it and names it. With an hour's retry delay and the holder's keys
// living 30 s, the waiter holds the lock well before they would expire.
func TestFencedWaiterIsWokenByTheRelease(t *testing.T) {
	p := fencePrefix(t, 3*time.Second)
	key := p + "k"
	h := client(t, redlock.WithFencing())
	w := client(t, redlock.WithFencing(), redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	ctx := context.Background()
	hl, err := h.Lock(ctx, key, redlock.WithTTL(30*time.Second))
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := w.Lock(wctx, key)
		if err == nil {
			assert.Greater(t, l.Fence(), hl.Fence(), "a later grant, a larger fence")
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // w refused, subscribed, refused again
	require.NoError(t, hl.Unlock(ctx))
	require.NoError(t, <-got, "the waiter got the lock before its 10 s context ended (the holder's keys had 29 s left)")
}

// TestFencedWaiterIsServedInTurn: two clients take and release a key in
// tight loops, holding it 5 ms, so that each Unlock finds the other
// queued and hands the key on to it: the key is never free. A fenced Lock of a third client queues like any other
// waiter, so a release reserves the key for it in its turn: it gets the
// lock before its 10 s context ends (in practice within a few turns of
// the others; the bound asserted is the context, not a speed).
func TestFencedWaiterIsServedInTurn(t *testing.T) {
	p := fencePrefix(t, 5*time.Second)
	key := p + "k"
	opt := redlock.WithNodeTimeout(200 * time.Millisecond) // a loaded machine must not cost a waiter its place
	a, b := client(t, opt), client(t, opt)
	w := client(t, opt, redlock.WithFencing())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var cycles atomic.Int64
	for _, c := range []*redlock.Client{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				l, err := c.Lock(ctx, key)
				cancel()
				if err != nil {
					continue
				}
				cycles.Add(1)
				time.Sleep(5 * time.Millisecond) // the other is queued by the Unlock
				_ = l.Unlock(context.Background())
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	// The two have taken turns for a while before the fenced call comes.
	require.Eventually(t, func() bool { return cycles.Load() > 50 }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := cycles.Load()
	l, err := w.Lock(ctx, key)
	require.NoError(t, err, "the fenced waiter got the lock while the others went on (%d cycles meanwhile)", cycles.Load()-before)
	assert.Positive(t, l.Fence())
	t.Logf("fenced Lock held after %d cycles of the others", cycles.Load()-before)
	require.NoError(t, l.Unlock(context.Background()))
}
