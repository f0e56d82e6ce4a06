package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// behaviour is what one node does in one fenced attempt.
type behaviour uint8

const (
	grants    behaviour = iota // grants and confirms
	down                       // the acquire fails (nothing set)
	noConfirm                  // grants; the confirm fails
	restarted                  // lost the key's counter (restart without persistence, after more than a TTL), then grants
)

func (b behaviour) String() string { return [...]string{"grants", "down", "noConfirm", "restarted"}[b] }

// fenceRun drives fenced attempts on one key of a set of fakes, each with
// the nodes' behaviours of the moment, and checks every grant's fence
// against the last.
type fenceRun struct {
	t     *testing.T
	fakes []*fakeNode
	clk   *clock.Fake
	ttl   time.Duration
}

// attempt makes one fenced TryLock with behaviours bs and unlocks what
// it got; it returns the fence (0: not granted). Every call of the
// attempt has landed when it returns (the client is closed), so the next
// attempt's hooks cannot leak into this one.
func (r *fenceRun) attempt(key string, bs []behaviour) int64 {
	r.t.Helper()
	q := len(r.fakes)/2 + 1
	ok := 0
	for i, b := range bs {
		f := r.fakes[i]
		switch b {
		case down:
			f.setBefore(failOn("acquire"))
		case noConfirm:
			f.setBefore(failOn("confirm"))
		default:
			f.setBefore(nil)
		}
		if b == grants || b == restarted {
			ok++
		}
	}
	for i, b := range bs {
		if b == restarted {
			// A delayed restart: down for more than a TTL.
			r.clk.Advance(r.ttl + time.Millisecond)
			r.fakes[i].restart(key)
		}
	}
	c, err := redlock.New(asNodes(r.fakes), redlock.WithClock(r.clk), redlock.WithTTL(r.ttl),
		redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithFencing())
	require.NoError(r.t, err)
	l, err := c.TryLock(context.Background(), key)
	if ok < q {
		require.ErrorIs(r.t, err, redlock.ErrNotAcquired, "%v", bs)
		require.NoError(r.t, c.Close())
		return 0
	}
	require.NoError(r.t, err, "%v: a majority grants and confirms", bs)
	require.NoError(r.t, l.Unlock(context.Background()))
	// Only once the client is closed has every call returned: a down
	// node's acquire may still be on its way after TryLock, and would
	// raise that node's counter if its failure were lifted before it ran
	// (TestFenceWhereMaxOfIncrGoesBackwards read 4 where 3 is right).
	require.NoError(r.t, c.Close())
	for _, f := range r.fakes {
		f.setBefore(nil)
	}
	return l.Fence()
}

// patterns returns every assignment of the behaviours in set to n nodes.
func patterns(n int, set []behaviour) [][]behaviour {
	out := [][]behaviour{nil}
	for range n {
		var next [][]behaviour
		for _, p := range out {
			for _, b := range set {
				next = append(next, append(append([]behaviour(nil), p...), b))
			}
		}
		out = next
	}
	return out
}

// TestFenceIncreasesForEveryPattern: for N = 3 and 5, every sequence of
// fenced attempts in which each node grants, is down, loses its confirm,
// or restarted without its counter, grants exactly when a majority
// grants and confirms, and each grant's fence is larger than the last.
// The nodes' clocks disagree by up to 300 ms (less than the TTL a
// restarted node stays away), and the fake clock stands still between
// attempts, so the counters, not the time seed, carry the order: the
// node with the largest counter is often outside the next majority.
func TestFenceIncreasesForEveryPattern(t *testing.T) {
	all := []behaviour{grants, down, noConfirm, restarted}
	cases := []struct {
		n     int
		steps [][]behaviour // behaviours allowed at each step of a sequence
	}{
		// N=3: every pattern at each of two steps (64² sequences).
		{3, [][]behaviour{all, all}},
		// N=5: every pattern at the first step; at the second, every
		// choice of nodes down (1024 × 32 sequences; all 1024² would
		// take many minutes under -race).
		{5, [][]behaviour{all, {grants, down}}},
	}
	skews := []time.Duration{300 * time.Millisecond, 0, -200 * time.Millisecond, 100 * time.Millisecond, -50 * time.Millisecond}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("N=%d", tc.n), func(t *testing.T) {
			clk := clock.NewFake(epoch)
			fakes := newFakes(tc.n, clk)
			for i, f := range fakes {
				f.skew = skews[i]
			}
			r := &fenceRun{t: t, fakes: fakes, clk: clk, ttl: time.Second}
			var steps [][][]behaviour
			for _, set := range tc.steps {
				steps = append(steps, patterns(tc.n, set))
			}
			// Every sequence replays from a fresh key: a grant by all
			// nodes (counters spread by the skews), then one attempt
			// per step.
			seqs, grantsSeen := 0, 0
			idx := make([]int, len(steps))
			for {
				key := fmt.Sprintf("k%d", seqs)
				last := r.attempt(key, make([]behaviour, tc.n))
				require.NotZero(t, last)
				var hist [][]behaviour
				for d, i := range idx {
					p := steps[d][i]
					hist = append(hist, p)
					if f := r.attempt(key, p); f != 0 {
						grantsSeen++
						require.Greater(t, f, last, "history %v", hist)
						last = f
					}
				}
				seqs++
				// The next sequence: idx counts in mixed radix.
				d := len(idx) - 1
				for d >= 0 {
					if idx[d]++; idx[d] < len(steps[d]) {
						break
					}
					idx[d] = 0
					d--
				}
				if d < 0 {
					break
				}
			}
			t.Logf("N=%d: %d sequences, %d grants checked", tc.n, seqs, grantsSeen)
			for _, f := range fakes {
				f.mu.Lock()
				left := len(f.keys)
				f.mu.Unlock()
				assert.Zero(t, left, "%s: lock keys left", f.addr)
			}
		})
	}
}

// TestFenceWhereMaxOfIncrGoesBackwards: three nodes, the clock standing
// still (so the time seed adds nothing). Node 0 is in the first four
// majorities, nodes 1 and 2 in two each; the fifth majority is {1, 2}.
// The maximum of a per-node INCR over the granting majority goes from 4
// back to 3; the fences keep increasing because every confirm wrote the
// fence back to a majority.
func TestFenceWhereMaxOfIncrGoesBackwards(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(3, clk)
	r := &fenceRun{t: t, fakes: fakes, clk: clk, ttl: time.Second}
	majorities := [][]behaviour{
		{grants, grants, down},
		{grants, down, grants},
		{grants, grants, down},
		{grants, down, grants},
		{down, grants, grants},
	}
	var fences, naive []int64
	for _, bs := range majorities {
		f := r.attempt("k", bs)
		require.NotZero(t, f)
		fences = append(fences, f)
		var top int64
		for i, b := range bs {
			if b == grants {
				_, n := fakes[i].counters("k")
				top = max(top, n)
			}
		}
		naive = append(naive, top)
	}
	t.Logf("max of INCR: %v; fences minus the seed: %v", naive, minus(fences, epoch.UnixMicro()))
	assert.Equal(t, []int64{1, 2, 3, 4, 3}, naive, "the naive token goes backwards")
	for i := 1; i < len(fences); i++ {
		assert.Greater(t, fences[i], fences[i-1])
	}
}

func minus(xs []int64, d int64) []int64 {
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i] = x - d
	}
	return out
}

// TestFenceLostConfirmIsNotAGrant: a majority grants but only a minority
// confirms: the attempt is rolled back everywhere and fails.
func TestFenceLostConfirmIsNotAGrant(t *testing.T) {
	fakes, _, c := setup(t, 3, redlock.WithFencing())
	fakes[0].setBefore(failOn("confirm"))
	fakes[1].setBefore(failOn("confirm"))
	_, err := c.TryLock(context.Background(), "k")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Equal(t, "confirm", qe.Op)
	// TryLock waits for the release on the nodes that had answered by
	// the decision; the rest are released in the background.
	require.Eventually(t, func() bool { return holders(fakes, "k", "") == 3 }, 5*time.Second, time.Millisecond, "rolled back")
}

// TestFenceConfirmAfterValidityIsNotAGrant: confirms that come back
// after the validity has run out do not make a grant.
func TestFenceConfirmAfterValidityIsNotAGrant(t *testing.T) {
	fakes, clk, c := setup(t, 3, redlock.WithFencing(), redlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(2*time.Second))
	fakes[2].setBefore(failOn("confirm"))
	for _, f := range fakes[:2] {
		f.setBefore(func(_ context.Context, op string) error {
			if op == "confirm" {
				clk.Advance(4950 * time.Millisecond) // two confirms: 9.9 s of a 10 s TTL, drift 102 ms
			}
			return nil
		})
	}
	_, err := c.TryLock(context.Background(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.LessOrEqual(t, qe.Validity, time.Duration(0))
	for _, f := range fakes {
		f.setBefore(nil)
	}
	// Released everywhere: two keys still held the token, one confirm
	// failed (its key may be there).
	require.Eventually(t, func() bool {
		n := 0
		for _, f := range fakes {
			n += f.count("release")
		}
		return n == 3
	}, 5*time.Second, time.Millisecond, "rolled back")
}

// TestFenceOnlyWhenAsked: a plain lock sends no confirm and has fence 0;
// WithFencing() given to one call on a plain client fences that lock only; Extend keeps the fence.
func TestFenceOnlyWhenAsked(t *testing.T) {
	fakes, _, c := setup(t, 3)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "a")
	require.NoError(t, err)
	assert.Zero(t, l.Fence())
	require.NoError(t, l.Unlock(ctx))
	for _, f := range fakes {
		assert.Zero(t, f.count("confirm"))
		fence, _ := f.counters("a")
		assert.Zero(t, fence)
	}
	l, err = c.TryLock(ctx, "b", redlock.WithFencing())
	require.NoError(t, err)
	fence := l.Fence()
	assert.Greater(t, fence, epoch.UnixMicro()-1)
	require.NoError(t, l.Extend(ctx, 20*time.Second))
	assert.Equal(t, fence, l.Fence(), "Extend keeps the fence")
	require.NoError(t, l.Unlock(ctx))
	var nilLock *redlock.Lock
	assert.Zero(t, nilLock.Fence())
}

// plainNode is a node.Node and nothing more: not a node.Fencer, nor a
// node.Sharer.
type plainNode struct{ node.Node }

func TestFenceNeedsFencers(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(3, clk)
	nodes := asNodes(fakes)
	nodes[1] = plainNode{nodes[1]}
	_, err := redlock.New(nodes, redlock.WithClock(clk), redlock.WithFencing())
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), "node[1] (fake1:6379) cannot fence")

	c, err := redlock.New(nodes, redlock.WithClock(clk))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.TryLock(context.Background(), "k", redlock.WithFencing())
	require.ErrorIs(t, err, redlock.ErrInvalid)
	for _, f := range fakes {
		assert.Zero(t, f.count("acquire"), "nothing sent")
	}
}
