package redlock_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// proposal matches a queue entry that asks for a fenced grant with a
// proposal (see queue.lua): the fence is the second number after "::".
var proposal = regexp.MustCompile(`^\d+:\d+::\d+,([1-9]\d*),`)

// proposing waits until every node has a waiter of key that asks for a
// fenced grant, and returns the fences proposed.
func proposing(t *testing.T, admins []*redistest.Admin, key string) []int64 {
	t.Helper()
	var fences []int64
	require.Eventually(t, func() bool {
		fences = fences[:0]
		for _, ad := range admins {
			v, err := ad.Do(context.Background(), "HGETALL", node.WaitersKey(key))
			require.NoError(t, err)
			all, _ := v.([]any)
			found := false
			for i := 1; i < len(all); i += 2 {
				e, _ := all[i].([]byte)
				if m := proposal.FindSubmatch(e); m != nil {
					f, _ := strconv.ParseInt(string(m[1]), 10, 64)
					fences, found = append(fences, f), true
				}
			}
			if !found {
				return false
			}
		}
		return true
	}, 10*time.Second, 2*time.Millisecond, "a fenced waiter of %s proposes a fence on every node", key)
	return fences
}

// noKeysLeftBut is noKeysLeft once the fence counter of key, which
// outlives its locks by design, has been deleted.
func noKeysLeftBut(t *testing.T, admins []*redistest.Admin, key, counter string) {
	t.Helper()
	for _, ad := range admins {
		_, err := ad.Do(context.Background(), "DEL", counter)
		require.NoError(t, err)
	}
	noKeysLeft(t, admins, key)
}

// holderAndWaiter dials two clients of urls with a minute's TTL: a
// holder, and a waiter whose retry delay is an hour, so that only the
// nodes' wake-ups serve it. Both are closed at the end of the test.
func holderAndWaiter(t *testing.T, urls []string, a, b []redlock.Option) (*redlock.Client, *redlock.Client) {
	t.Helper()
	ca, err := redlock.Dial(urls, append([]redlock.Option{redlock.WithTTL(time.Minute)}, a...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ca.Close() })
	cb, err := redlock.Dial(urls, append([]redlock.Option{redlock.WithTTL(time.Minute), redlock.WithRetry(redlock.LinearBackoff(time.Hour))}, b...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cb.Close() })
	return ca, cb
}

// settled waits until every node holds key and its counter has reached
// fence (a holder's acquires and confirms have all run: a node whose
// acquire answered after the majority's has a later counter), and
// returns the largest counter.
func settled(t *testing.T, admins []*redistest.Admin, key string, fence int64) int64 {
	t.Helper()
	var top int64
	require.Eventually(t, func() bool {
		top = 0
		for i, c := range counters(t, admins, key) {
			if c < fence || getKey(t, admins[i], key) == "" {
				return false
			}
			top = max(top, c)
		}
		return true
	}, 5*time.Second, time.Millisecond, "the holder's commands have run on every node")
	return top
}

// counters returns key's fence counter on every node.
func counters(t *testing.T, admins []*redistest.Admin, key string) []int64 {
	t.Helper()
	out := make([]int64, len(admins))
	for i, ad := range admins {
		out[i], _ = strconv.ParseInt(getKey(t, ad, node.FenceKey(key)), 10, 64)
	}
	return out
}

// TestRealFencedWaiterIsGrantedItsFence: a fenced waiter of another
// client proposes the fence after the holder's with its registration;
// the holder's Unlock grants it the key on every node with that fence,
// the counters raised to it in the same step, and the waiter holds the
// lock without a confirm round or any other command. Served in turn,
// the first holder's next Lock is granted the fence after that.
func TestRealFencedWaiterIsGrantedItsFence(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	var recA, recB recorder
	a, b := holderAndWaiter(t, urls, []redlock.Option{redlock.WithFencing(), redlock.WithHooks(recA.hooks())},
		[]redlock.Option{redlock.WithFencing(), redlock.WithHooks(recB.hooks())})

	held, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	settled(t, admins, "k", held.Fence())
	got := lockInBackground(ctx, b, "k")
	ps := proposing(t, admins, "k")
	p := ps[0]
	assert.Equal(t, []int64{p, p, p}, ps, "one proposal")
	assert.Greater(t, p, held.Fence())
	require.NoError(t, held.Unlock(ctx))
	r := receiveLock(t, got)
	require.NoError(t, r.err)
	lb := r.l
	assert.Equal(t, p, lb.Fence(), "granted the fence it proposed")
	assert.True(t, strings.HasPrefix(lb.Token(), "~"), "held by the grant: %s", lb.Token())
	// Every node grants (its counter becomes p) or has passed the
	// proposal and reserves instead (the counters of a majority are read
	// by the first plain attempt, and a late node's can be higher).
	// Unlock returns once a majority has released, so the last node's
	// release may still be on its way: wait for it.
	var cs []int64
	require.Eventually(t, func() bool {
		cs = counters(t, admins, "k")
		return slices.Min(cs) >= p
	}, 5*time.Second, time.Millisecond, "every node granted or passed the proposal")
	granted := 0
	for _, c := range cs {
		if c == p {
			granted++
		}
	}
	assert.GreaterOrEqual(t, granted, 2, "the grants raised the counters of a majority to the fence")
	n, _ := recB.callsOf("confirm")
	assert.Zero(t, n, "no confirm round")

	// The other way round: a waits, b unlocks.
	got = lockInBackground(ctx, a, "k")
	proposing(t, admins, "k")
	require.NoError(t, lb.Unlock(ctx))
	r = receiveLock(t, got)
	require.NoError(t, r.err)
	assert.Greater(t, r.l.Fence(), lb.Fence())
	assert.True(t, strings.HasPrefix(r.l.Token(), "~"), "held by the grant: %s", r.l.Token())
	require.NoError(t, r.l.Unlock(ctx))
	n, _ = recA.callsOf("confirm")
	assert.Equal(t, 3, n, "a confirmed its first lock alone")
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	noKeysLeftBut(t, admins, "k", node.FenceKey("k"))
}

// TestRealFencedGrantWhereCountersPassedTheProposal: where a node's
// counter has reached the waiter's proposal by the time the key is
// handed on (a racer's acquire raised it), that node reserves the key
// instead of granting it. With a majority reserving, the waiter takes
// the key by a fenced acquire and a confirm, and its fence is above
// every counter; the node that granted it is taken by that acquire too.
func TestRealFencedGrantWhereCountersPassedTheProposal(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	a, b := holderAndWaiter(t, urls, []redlock.Option{redlock.WithFencing()}, []redlock.Option{redlock.WithFencing()})

	held, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	settled(t, admins, "k", held.Fence())
	got := lockInBackground(ctx, b, "k")
	p := slices.Max(proposing(t, admins, "k"))
	far := p + 1_000_000
	for _, ad := range admins[1:] {
		_, err := ad.Do(ctx, "SET", node.FenceKey("k"), far, "PX", time.Hour.Milliseconds())
		require.NoError(t, err)
	}
	require.NoError(t, held.Unlock(ctx))
	r := receiveLock(t, got)
	require.NoError(t, r.err)
	assert.Greater(t, r.l.Fence(), far, "above every counter")
	assert.False(t, strings.HasPrefix(r.l.Token(), "~"), "taken by an acquire, not held by the grant")
	holds := 0
	for _, ad := range admins {
		if getKey(t, ad, "k") == r.l.Token() {
			holds++
		}
	}
	assert.GreaterOrEqual(t, holds, 2, "the acquire holds a majority")
	require.NoError(t, r.l.Unlock(ctx))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	noKeysLeftBut(t, admins, "k", node.FenceKey("k"))
}

// TestRealResignHandsOverByGrant: the next candidate is granted the
// term after the leader's on Resign, its record kept with the grants:
// Leader reports it at once, and the new leader sent no command to
// take office.
func TestRealResignHandsOverByGrant(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	var rec recorder
	a, b := holderAndWaiter(t, urls, nil, []redlock.Option{redlock.WithHooks(rec.hooks())})
	ea, err := a.Election("e")
	require.NoError(t, err)
	eb, err := b.Election("e")
	require.NoError(t, err)

	la, err := ea.TryCampaign(ctx, "a")
	require.NoError(t, err)
	settled(t, admins, "e", la.Term())
	type result struct {
		ld  *redlock.Leadership
		err error
	}
	got := make(chan result, 1)
	go func() {
		ld, err := eb.Campaign(ctx, "b")
		got <- result{ld, err}
	}()
	term := proposing(t, admins, "e")[0]
	assert.Greater(t, term, la.Term())
	require.NoError(t, la.Resign(ctx))
	var lb *redlock.Leadership
	select {
	case r := <-got:
		require.NoError(t, r.err)
		lb = r.ld
	case <-time.After(10 * time.Second):
		t.Fatal("the candidate was not served")
	}
	assert.Equal(t, term, lb.Term(), "the term proposed, after the leader's")
	for _, op := range []string{"confirm", "announce"} {
		n, _ := rec.callsOf(op)
		assert.Zero(t, n, "the new leader sent no %s", op)
	}
	leader, err := ea.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, redlock.Leader{Value: "b", Term: lb.Term()}, leader, "the record came with the grants")
	require.NoError(t, lb.Resign(ctx))
	_, err = ea.Leader(ctx)
	assert.ErrorIs(t, err, redlock.ErrNoLeader)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	noKeysLeftBut(t, admins, "e", node.FenceKey("e"))
}
