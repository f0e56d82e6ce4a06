package integration_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// semaphores returns the semaphore name with permits permits of each
// client.
func semaphores(t *testing.T, clients []*redlock.Client, name string, permits int) []*redlock.Semaphore {
	t.Helper()
	sems := make([]*redlock.Semaphore, len(clients))
	for i, c := range clients {
		s, err := c.Semaphore(name, permits)
		require.NoError(t, err)
		sems[i] = s
	}
	return sems
}

// semContend has every worker (workers per semaphore, one per client)
// Acquire a permit until d has passed; each hold lasts hold and is
// recorded in chk under its slot's key (holder = worker index). It
// returns the failed Acquires per worker. It does not touch t, so it may
// run in a goroutine.
func semContend(sems []*redlock.Semaphore, workers int, d, hold time.Duration, chk *checker.Checker) []int {
	stop := time.Now().Add(d)
	failed := make([]int, len(sems)*workers)
	var wg sync.WaitGroup
	for ci, s := range sems {
		for g := range workers {
			w := ci*workers + g
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					ctx, cancel := context.WithDeadline(context.Background(), stop)
					l, err := s.Acquire(ctx)
					cancel()
					if err != nil {
						failed[w]++
						continue
					}
					h := chk.Begin(w, l.Key(), l.Token(), time.Now(), l.Until())
					time.Sleep(hold)
					h.End(time.Now())
					_ = l.Unlock(context.Background())
				}
			}()
		}
	}
	wg.Wait()
	return failed
}

// faultCase is a fault a contention test runs under: inject starts it on
// the shared cluster and returns its undo (also run at cleanup).
type faultCase struct {
	name   string
	inject func(t *testing.T) (undo func())
}

// faultCases are the fault scenarios a minority of nodes can suffer: none,
// a node paused, one cut off, one stopped for longer than the tests' TTL
// and started empty (a key it lost had expired everywhere by then).
func faultCases() []faultCase {
	return []faultCase{
		{"healthy", func(*testing.T) func() { return func() {} }},
		{"paused", func(t *testing.T) func() { return scPause(t, shared, 2) }},
		{"blackholed", func(t *testing.T) func() { return scCut(t, shared, 1) }},
		{"killed-and-restarted", func(t *testing.T) func() { return scStop(t, shared, 4) }},
	}
}

// TestSemaphoreNeverMoreThanPermits: nine workers on three clients share
// a semaphore of three permits, on healthy nodes and with each of the
// fault scenarios: never two holders of one slot, never more than three
// holders at once, every worker served. A fault that costs a minority of
// nodes costs the semaphore nothing of its safety.
func TestSemaphoreNeverMoreThanPermits(t *testing.T) {
	const (
		permits = 3
		ttl     = time.Second
		hold    = 5 * time.Millisecond
		run     = 2500 * time.Millisecond
	)
	for _, f := range faultCases() {
		t.Run(f.name, func(t *testing.T) {
			p := prefix(t, 2*ttl+2*time.Second)
			clients := scClients(t, 3, scOpts(ttl, 150*time.Millisecond)...)
			var chk checker.Checker
			done := make(chan []int, 1)
			sems := semaphores(t, clients, p+"s", permits)
			go func() { done <- semContend(sems, 3, run, hold, &chk) }()
			t.Cleanup(func() { <-done }) // before the clients close, also on failure
			time.Sleep(300 * time.Millisecond)
			undo := f.inject(t)
			time.Sleep(ttl + 300*time.Millisecond)
			undo()
			failed := <-done
			done <- failed // for the cleanup

			require.Empty(t, chk.Overlaps(), chk.Report())
			most, at := chk.MostAtOnce(p + "s:permit:")
			assert.LessOrEqual(t, most, permits, "%d holders at %v", most, at)
			assert.GreaterOrEqual(t, most, 2, "the permits were never used together")
			grants := chk.Grants()
			for w := range 9 {
				assert.Positive(t, grants[w], "worker %d was never served: %v", w, grants)
			}
			t.Logf("%s: grants per worker %v, at most %d at once, failed Acquires %v", f.name, grants, most, failed)
		})
	}
}

// TestSemaphoreDeadHolderFreesItsPermitAfterTTL: a holder that stops
// without unlocking blocks its permit until its TTL, not longer.
func TestSemaphoreDeadHolderFreesItsPermitAfterTTL(t *testing.T) {
	const ttl = time.Second
	p := prefix(t, 2*ttl+time.Second)
	dead, live := client(t, redlock.WithTTL(ttl)), client(t, redlock.WithTTL(ttl))
	ds, err := dead.Semaphore(p+"s", 2)
	require.NoError(t, err)
	ls, err := live.Semaphore(p+"s", 2)
	require.NoError(t, err)
	ctx := context.Background()
	// Acquire, not TryAcquire: a new client's first calls dial and load
	// scripts within the 20 ms node timeout of a 1 s TTL.
	a, err := ds.Acquire(ctx)
	require.NoError(t, err)
	b, err := ds.Acquire(ctx)
	require.NoError(t, err)
	// The dead holders are never unlocked.
	_, err = ls.TryAcquire(ctx)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "both permits are held")

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := ls.Acquire(wctx)
	require.NoError(t, err)
	at := time.Now()
	first := a.Until()
	if b.Until().Before(first) {
		first = b.Until()
	}
	assert.True(t, at.After(first), "granted %v before a dead holder's validity ended", first.Sub(at))
	assert.Less(t, at.Sub(first), ttl, "granted %v after the first dead holder's validity ended", at.Sub(first))
	require.NoError(t, l.Unlock(ctx))
}

// TestSemaphoreClientsWithDifferentPermits: clients that use one name
// with 2 and with 4 permits share slots 0 and 1; together they never
// exceed 4 holders, and the 2-permit client uses only its two slots.
func TestSemaphoreClientsWithDifferentPermits(t *testing.T) {
	p := prefix(t, 3*time.Second)
	small, big := client(t, scOpts(time.Second, 150*time.Millisecond)...), client(t, scOpts(time.Second, 150*time.Millisecond)...)
	ss, err := small.Semaphore(p+"s", 2)
	require.NoError(t, err)
	bs, err := big.Semaphore(p+"s", 4)
	require.NoError(t, err)
	ctx := context.Background()
	var held []*redlock.Lock
	for range 2 {
		l, err := ss.TryAcquire(ctx)
		require.NoError(t, err)
		assert.Contains(t, []string{redlock.PermitKey(p+"s", 0), redlock.PermitKey(p+"s", 1)}, l.Key())
		held = append(held, l)
	}
	_, err = ss.TryAcquire(ctx)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "the small client's slots are full")
	for range 2 {
		l, err := bs.TryAcquire(ctx)
		require.NoError(t, err, "the big client has two slots free")
		held = append(held, l)
	}
	_, err = bs.TryAcquire(ctx)
	var qe *redlock.QuorumError
	assert.True(t, errors.As(err, &qe) && errors.Is(err, redlock.ErrNotAcquired), "five holders: %v", err)
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
}

// lineLength counts the clients in the semaphore's line on node i of
// the shared cluster (its hash, less the ticket counter).
func lineLength(t *testing.T, i int, line string) int {
	t.Helper()
	v, err := shared.Direct(i).Command(context.Background(), "HLEN", line)
	require.NoError(t, err)
	n, _ := v.(int64)
	return max(0, int(n)-1)
}

// semHoldEverywhere takes every permit of s and returns them once each
// slot holds its token on every node (see lockEverywhere).
func semHoldEverywhere(t *testing.T, s *redlock.Semaphore) []*redlock.Lock {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		var held []*redlock.Lock
		for range s.Permits() {
			if l, err := s.TryAcquire(ctx); err == nil {
				held = append(held, l)
			}
		}
		all := len(held) == s.Permits()
		for _, l := range held {
			for i := range shared.Size() {
				all = all && scToken(t, shared, i, l.Key()) == l.Token()
			}
		}
		if all {
			return held
		}
		for _, l := range held {
			_ = l.Unlock(ctx)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the permits are not held on every node after 10 tries")
	return nil
}

// TestSemaphoreServesClientsInTheOrderTheyCame: with both permits held,
// three clients wait in turn; the two permits released one right after
// the other go to the first two, and the next release to the third,
// though every waiting client hears every release: the nodes keep one
// line of waiting clients for the semaphore's slots, and each release
// reserves its slot for the next client in line that has none reserved.
func TestSemaphoreServesClientsInTheOrderTheyCame(t *testing.T) {
	const ttl = 5 * time.Second
	p := prefix(t, ttl+node.WaiterLease+time.Second)
	opts := scOpts(ttl, 500*time.Millisecond)
	holder := client(t, opts...)
	hs, err := holder.Semaphore(p+"s", 2)
	require.NoError(t, err)
	line := p + "s:permits:2:line"
	held := semHoldEverywhere(t, hs)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type grant struct {
		who int
		l   *redlock.Lock
		err error
	}
	grants := make(chan grant, 3)
	for who := range 3 {
		s, err := client(t, opts...).Semaphore(p+"s", 2)
		require.NoError(t, err)
		go func() {
			l, err := s.Acquire(ctx)
			grants <- grant{who, l, err}
		}()
		require.Eventually(t, func() bool {
			for i := range shared.Size() {
				if lineLength(t, i, line) != who+1 {
					return false
				}
			}
			return true
		}, 10*time.Second, 5*time.Millisecond, "client %d in line on every node", who)
	}

	require.NoError(t, held[0].Unlock(ctx))
	require.NoError(t, held[1].Unlock(ctx))
	var first []grant
	for range 2 {
		select {
		case g := <-grants:
			require.NoError(t, g.err, "client %d", g.who)
			first = append(first, g)
		case <-ctx.Done():
			t.Fatal("two permits released, and not two clients served")
		}
	}
	assert.ElementsMatch(t, []int{0, 1}, []int{first[0].who, first[1].who}, "the first two in line are served first")
	select {
	case g := <-grants:
		t.Fatalf("client %d served with both permits held", g.who)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, first[0].l.Unlock(ctx))
	select {
	case g := <-grants:
		require.NoError(t, g.err)
		assert.Equal(t, 2, g.who)
		require.NoError(t, g.l.Unlock(ctx))
	case <-ctx.Done():
		t.Fatal("the third client was not served")
	}
	require.NoError(t, first[1].l.Unlock(ctx))
}
