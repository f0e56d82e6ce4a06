package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// Elections on the five shared nodes (redlock.Election).

// TestElectionOneLeaderAtATime: five candidates, one client each,
// campaign, lead for a few milliseconds, resign and campaign again for
// three seconds. No two terms overlap (by this process' clock: a term
// begins when Campaign returned and ends before Resign is called), the
// terms grow in time order, and every candidate leads.
func TestElectionOneLeaderAtATime(t *testing.T) {
	p := fencePrefix(t, 5*time.Second)
	type term struct {
		who        int
		n          int64
		start, end time.Time
	}
	var (
		mu    sync.Mutex
		terms []term
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for i := range 5 {
		e, err := client(t, redlock.WithTTL(5*time.Second)).Election(p + "e")
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				ld, err := e.Campaign(ctx, fmt.Sprint("candidate ", i))
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("candidate %d: %v", i, err)
					}
					return
				}
				start := time.Now()
				time.Sleep(time.Duration(2+rand.IntN(8)) * time.Millisecond)
				end := time.Now()
				assert.NoError(t, ld.Err(), "candidate %d still leads", i)
				mu.Lock()
				terms = append(terms, term{i, ld.Term(), start, end})
				mu.Unlock()
				assert.NoError(t, ld.Resign(context.Background()), "candidate %d", i)
				assert.ErrorIs(t, ld.Err(), redlock.ErrResigned)
			}
		}()
	}
	wg.Wait()
	sort.Slice(terms, func(a, b int) bool { return terms[a].start.Before(terms[b].start) })
	led := map[int]int{}
	for j, tm := range terms {
		led[tm.who]++
		if j == 0 {
			continue
		}
		prev := terms[j-1]
		assert.False(t, tm.start.Before(prev.end), "term %d (candidate %d) began before term %d (candidate %d) ended", tm.n, tm.who, prev.n, prev.who)
		assert.Greater(t, tm.n, prev.n, "terms grow in time order")
	}
	assert.Len(t, led, 5, "every candidate led: %v", led)
	t.Logf("%d terms: %v", len(terms), led)
}

// TestElectionResignHandsOverAtOnce: with a TTL of 30 s, the candidate
// waiting in line leads as soon as the leader resigns, not when its keys
// expire; the announcement and the term follow.
func TestElectionResignHandsOverAtOnce(t *testing.T) {
	p := fencePrefix(t, 2*time.Second)
	ctx := context.Background()
	ea, err := client(t, redlock.WithTTL(30*time.Second)).Election(p + "e")
	require.NoError(t, err)
	eb, err := client(t, redlock.WithTTL(30*time.Second)).Election(p + "e")
	require.NoError(t, err)
	a, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	got := campaignLater(t, eb, "b")
	waitQueued(t, p+"e") // b waits in line on every node
	_, err = eb.TryCampaign(ctx, "c")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a leads")

	resigned := time.Now()
	require.NoError(t, a.Resign(ctx))
	var b *redlock.Leadership
	select {
	case b = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("b does not lead 10 s after a resigned")
	}
	t.Logf("handover: %v", time.Since(resigned))
	require.NotNil(t, b)
	assert.Greater(t, b.Term(), a.Term())
	ldr, err := ea.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, redlock.Leader{Value: "b", Term: b.Term()}, ldr)
	require.NoError(t, b.Resign(ctx))
}

// campaignLater campaigns in e in a goroutine; the leadership comes on
// the channel once it leads.
func campaignLater(t *testing.T, e *redlock.Election, value string) <-chan *redlock.Leadership {
	got := make(chan *redlock.Leadership, 1)
	go func() {
		l, err := e.Campaign(context.Background(), value)
		assert.NoError(t, err, value)
		got <- l
	}()
	return got
}

// waitQueued waits until key's queue has a waiter on every node.
func waitQueued(t *testing.T, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for i := range shared.Size() {
			n, err := shared.Direct(i).Command(context.Background(), "HLEN", node.WaitersKey(key))
			if err != nil || n.(int64) < 2 { // the waiter and the ticket counter
				return false
			}
		}
		return true
	}, 10*time.Second, 2*time.Millisecond, "a waiter in %s", key)
}

// TestElectionLeaderAndObserve: Leader and Observe report nobody, then
// the leader's value and term, a Proclaim, and nobody after Resign; a
// leader is read with two of five nodes cut off, and with three cut off
// Leader fails rather than report what a majority does not hold.
func TestElectionLeaderAndObserve(t *testing.T) {
	p := fencePrefix(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := []redlock.Option{redlock.WithTTL(10 * time.Second), redlock.WithNodeTimeout(200 * time.Millisecond)}
	e, err := client(t, opts...).Election(p + "e")
	require.NoError(t, err)
	watcher, err := client(t, opts...).Election(p + "e")
	require.NoError(t, err)

	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, redlock.ErrNoLeader)
	octx, stop := context.WithCancel(ctx)
	seen := watcher.Observe(octx)
	next := func(what string) redlock.Leader {
		t.Helper()
		select {
		case l, ok := <-seen:
			require.True(t, ok, "Observe's channel is open")
			return l
		case <-time.After(5 * time.Second):
			t.Fatalf("Observe reported no %s", what)
			return redlock.Leader{}
		}
	}
	assert.Equal(t, redlock.Leader{}, next("first value"), "nobody leads")

	ld, err := e.Campaign(ctx, "v1")
	require.NoError(t, err)
	want := redlock.Leader{Value: "v1", Term: ld.Term()}
	assert.Equal(t, want, next("leader"))
	got, err := watcher.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	require.NoError(t, ld.Proclaim(ctx, "v2"))
	want.Value = "v2"
	assert.Equal(t, "v2", ld.Value())
	assert.Equal(t, want, next("proclaimed value"))
	got, err = watcher.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// Cut off, not restarted: a node restarted empty forgets the
	// leader's key, and three of five forgetting it would end the term.
	t.Run("two of five cut off", func(t *testing.T) {
		blackhole(t, 1, 3)
		got, err := watcher.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})
	t.Run("three of five cut off", func(t *testing.T) {
		blackhole(t, 0, 2, 4)
		got, err := watcher.Leader(ctx)
		require.Error(t, err)
		assert.NotErrorIs(t, err, redlock.ErrNoLeader, "nobody can tell, not nobody leads")
		assert.Equal(t, redlock.Leader{}, got)
	})
	require.NoError(t, ld.Err(), "the term outlived the cuts")
	require.Eventually(t, func() bool {
		got, err := watcher.Leader(ctx)
		return err == nil && got == want
	}, 10*time.Second, 20*time.Millisecond, "the leader is read again")
	for len(seen) > 0 { // what Observe reported while nodes were down
		<-seen
	}

	require.NoError(t, ld.Resign(ctx))
	assert.ErrorIs(t, ld.Err(), redlock.ErrResigned)
	assert.ErrorIs(t, ld.Proclaim(ctx, "v3"), redlock.ErrNotHeld, "Proclaim after Resign")
	assert.ErrorIs(t, ld.Resign(ctx), redlock.ErrNotHeld, "Resign twice")
	require.Eventually(t, func() bool {
		select {
		case l := <-seen:
			return l == redlock.Leader{}
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond, "Observe reports nobody")
	_, err = watcher.Leader(ctx)
	require.ErrorIs(t, err, redlock.ErrNoLeader)
	stop()
	for range seen { // closed when its ctx ends
	}
}

// cutNode is a node whose renewals (extends and announcements) fail once
// cut is set: a leader whose traffic to it is dropped.
type cutNode struct {
	*node.Redis
	cut *atomic.Bool
}

var errCut = &node.Error{Op: "cut", Kind: node.ErrTimeout}

func (n cutNode) Extend(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	if n.cut.Load() {
		return node.Result{}, errCut
	}
	return n.Redis.Extend(ctx, k, ttl)
}

func (n cutNode) Announce(ctx context.Context, k *node.Key, text string, ttl time.Duration) (node.Result, error) {
	if n.cut.Load() {
		return node.Result{}, errCut
	}
	return n.Redis.Announce(ctx, k, text, ttl)
}

// TestElectionLeaderThatStopsRenewingIsReplaced: a leader whose
// renewals stop reaching the nodes sees its Context end before its
// validity does, and the candidate in line leads within the TTL plus a
// second.
func TestElectionLeaderThatStopsRenewingIsReplaced(t *testing.T) {
	p := fencePrefix(t, 5*time.Second)
	ctx := context.Background()
	ttl := 2 * time.Second
	var cut atomic.Bool
	nodes := make([]node.Node, shared.Size())
	for i, u := range shared.URLs() {
		r, err := node.Dial(u, node.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		nodes[i] = cutNode{r, &cut}
	}
	c, err := redlock.New(nodes, redlock.WithTTL(ttl))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ea, err := c.Election(p + "e")
	require.NoError(t, err)
	eb, err := client(t, redlock.WithTTL(ttl)).Election(p + "e")
	require.NoError(t, err)

	a, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	got := campaignLater(t, eb, "b")
	waitQueued(t, p+"e")
	cut.Store(true)
	cutAt := time.Now()
	<-a.Context().Done()
	ended := time.Now()
	assert.ErrorIs(t, a.Err(), redlock.ErrLost)
	until := cutAt.Add(ttl) // the validity cannot outlast the last extend's TTL
	assert.True(t, ended.Before(until), "the term's context ended %v after the cut, its validity ends within %v", ended.Sub(cutAt), ttl)
	var b *redlock.Leadership
	select {
	case b = <-got:
	case <-time.After(ttl + time.Second):
		t.Fatalf("b does not lead within the TTL plus a second")
	}
	t.Logf("lost after %v, replaced after %v", ended.Sub(cutAt), time.Since(cutAt))
	assert.Greater(t, b.Term(), a.Term())
	require.NoError(t, b.Resign(ctx))
	cut.Store(false)
	assert.ErrorIs(t, a.Resign(ctx), redlock.ErrNotHeld, "a lost term's Resign")
}

// TestElectionBadInputAndLifecycle: an empty name, a Campaign whose ctx
// ends while it waits, and a client's Close, which resigns its
// leaderships so that the next candidate leads at once.
func TestElectionBadInputAndLifecycle(t *testing.T) {
	p := fencePrefix(t, 2*time.Second)
	ctx := context.Background()
	c := client(t, redlock.WithTTL(30*time.Second))
	_, err := c.Election("")
	require.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = c.Election(p+"e", redlock.WithTTL(-time.Second))
	require.ErrorIs(t, err, redlock.ErrInvalid)

	e, err := c.Election(p + "e")
	require.NoError(t, err)
	ld, err := e.Campaign(ctx, "first")
	require.NoError(t, err)

	other, err := client(t, redlock.WithTTL(30*time.Second)).Election(p + "e")
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = other.Campaign(wctx, "impatient")
	cancel()
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	got := campaignLater(t, other, "next")
	waitQueued(t, p+"e")
	require.NoError(t, c.Close())
	assert.ErrorIs(t, ld.Err(), redlock.ErrResigned, "Close resigned")
	select {
	case next := <-got:
		assert.Greater(t, next.Term(), ld.Term())
		require.NoError(t, next.Resign(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the next candidate does not lead after the leader's client closed")
	}
	_, err = c.Election(p + "e")
	require.ErrorIs(t, err, redlock.ErrClosed)
	_, err = e.Campaign(ctx, "after close")
	require.True(t, errors.Is(err, redlock.ErrClosed), "%v", err)
}
