package integration_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/redlock"
)

// rwContend has, on every client, readers goroutines take key shared
// (holding readHold) and one goroutine take it exclusively (holding
// writeHold) until d has passed, recording every hold in chk (holder:
// client*10 + goroutine, the writer 9). It does not touch t.
func rwContend(clients []*redlock.Client, readers int, d, readHold, writeHold time.Duration, key string, chk *checker.Checker) {
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for ci, c := range clients {
		for g := range readers + 1 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				write := g == readers
				for time.Now().Before(stop) {
					ctx, cancel := context.WithDeadline(context.Background(), stop)
					var l *redlock.Lock
					var err error
					if write {
						l, err = c.Lock(ctx, key)
					} else {
						l, err = c.RLock(ctx, key)
					}
					cancel()
					if err != nil {
						continue
					}
					now := time.Now()
					var h *checker.Hold
					hold := readHold
					if write {
						h, hold = chk.Begin(ci*10+9, l.Key(), l.Token(), now, l.Until()), writeHold
					} else {
						h = chk.BeginShared(ci*10+g, l.Key(), l.Token(), now, l.Until())
					}
					time.Sleep(hold)
					h.End(time.Now())
					_ = l.Unlock(context.Background())
				}
			}()
		}
	}
	wg.Wait()
}

// TestRWLockNeverAWriterWithAnother: three clients, each with three
// readers and a writer on one key, on healthy nodes and with each fault
// scenario: never a writer with a reader or with another writer; readers
// do share the key; every writer gets it.
func TestRWLockNeverAWriterWithAnother(t *testing.T) {
	const (
		ttl = time.Second
		run = 2500 * time.Millisecond
	)
	for _, f := range faultCases() {
		t.Run(f.name, func(t *testing.T) {
			p := prefix(t, 2*ttl+2*time.Second)
			clients := scClients(t, 3, scOpts(ttl, 150*time.Millisecond)...)
			var chk checker.Checker
			done := make(chan struct{})
			go func() {
				defer close(done)
				rwContend(clients, 3, run, 10*time.Millisecond, 5*time.Millisecond, p+"k", &chk)
			}()
			t.Cleanup(func() { <-done })
			time.Sleep(300 * time.Millisecond)
			undo := f.inject(t)
			time.Sleep(ttl + 300*time.Millisecond)
			undo()
			<-done

			require.Empty(t, chk.Overlaps(), chk.Report())
			most, _ := chk.MostAtOnce(p + "k")
			assert.GreaterOrEqual(t, most, 2, "readers never shared the key")
			grants := chk.Grants()
			for ci := range 3 {
				assert.Positive(t, grants[ci*10+9], "client %d's writer never got the key: %v", ci, grants)
			}
			t.Logf("%s: grants %v, at most %d holds at once", f.name, grants, most)
		})
	}
}

// TestRWLockWriterIsNotStarved: readers keep the key held shared without
// a gap (each re-takes it at once, their holds overlap); a writer still
// gets it, typically within about the longest read hold (43-95 ms for
// 50 ms holds): once it waits, no new reader goes in. Without that it
// would wait for ever. The bound asserted is loose: once, on a loaded
// machine, a writer waited seconds (readers queued before it go first).
func TestRWLockWriterIsNotStarved(t *testing.T) {
	const readHold = 50 * time.Millisecond
	p := prefix(t, 3*time.Second)
	key := p + "k"
	readers, writer := client(t), client(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				l, err := readers.RLock(ctx, key)
				cancel()
				if err != nil {
					continue
				}
				time.Sleep(readHold)
				_ = l.Unlock(context.Background())
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	require.Eventually(t, func() bool { return scToken(t, shared, 0, key) != "" }, 5*time.Second, time.Millisecond, "readers hold")
	time.Sleep(200 * time.Millisecond)

	for range 3 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		w, err := writer.Lock(ctx, key)
		cancel()
		require.NoError(t, err, "the writer was starved")
		waited := time.Since(start)
		assert.Less(t, waited, 5*time.Second, "the writer waited %v behind readers that hold %v", waited, readHold)
		t.Logf("writer waited %v", waited.Round(time.Millisecond))
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, w.Unlock(context.Background()))
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRWLockDeadHoldersBlockUntilTheirTTL: a reader and a writer that
// stop without unlocking keep the other kind out until their TTL ends,
// not longer.
func TestRWLockDeadHoldersBlockUntilTheirTTL(t *testing.T) {
	const ttl = time.Second
	p := prefix(t, 2*ttl+time.Second)
	dead, live := client(t, redlock.WithTTL(ttl)), client(t, redlock.WithTTL(ttl))
	ctx := context.Background()

	// The dead holders take their holds with RLock and Lock, not the
	// Try forms: a new client's first calls dial and load scripts within
	// the 20 ms node timeout of a 1 s TTL, which a loaded CI machine
	// missed once on three nodes.
	t.Run("reader", func(t *testing.T) {
		r, err := dead.RLock(ctx, p+"r")
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		w, err := live.Lock(wctx, p+"r")
		require.NoError(t, err)
		at := time.Now()
		assert.True(t, at.After(r.Until()), "a writer %v before the dead reader's validity ended", r.Until().Sub(at))
		assert.Less(t, at.Sub(r.Until()), ttl, "a writer %v after the dead reader's validity ended", at.Sub(r.Until()))
		require.NoError(t, w.Unlock(ctx))
	})
	t.Run("writer", func(t *testing.T) {
		w, err := dead.Lock(ctx, p+"w")
		require.NoError(t, err)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := live.RLock(rctx, p+"w")
		require.NoError(t, err)
		at := time.Now()
		assert.True(t, at.After(w.Until()), "a reader %v before the dead writer's validity ended", w.Until().Sub(at))
		assert.Less(t, at.Sub(w.Until()), ttl, "a reader %v after the dead writer's validity ended", at.Sub(w.Until()))
		require.NoError(t, r.Unlock(ctx))
	})
}

// TestRWLockWriterThatGivesUpStopsBlockingReaders: a waiting writer keeps
// new readers out; once its context ends, a new reader goes in at once.
func TestRWLockWriterThatGivesUpStopsBlockingReaders(t *testing.T) {
	p := prefix(t, 3*time.Second)
	key := p + "k"
	a, b := client(t), client(t)
	ctx := context.Background()
	r, err := a.TryRLock(ctx, key)
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	wc := lockIn(wctx, b, key)
	queuedEverywhere(t, key, 1)
	_, err = a.TryRLock(ctx, key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a new reader while a writer waits")

	cancel()
	res := <-wc
	require.ErrorIs(t, res.err, redlock.ErrNotAcquired)
	queuedEverywhere(t, key, 0)
	r2, err := a.TryRLock(ctx, key)
	require.NoError(t, err, "the writer gave up: readers go in again")
	require.NoError(t, r2.Unlock(ctx))
	require.NoError(t, r.Unlock(ctx))
}
