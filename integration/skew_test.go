package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/integration/skew"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

func TestSkewEmulation(t *testing.T) {
	ctx := context.Background()
	p := prefix(t, 2*time.Second)
	direct := shared.Direct(0)
	// The same node, straight to its backend as direct is, but as the
	// lock client's node.Node.
	n, err := node.Dial("redis://"+shared.Backend.Upstream(0), node.Options{})
	require.NoError(t, err)
	defer n.Close()
	fast := &skew.Node{Node: n, Rate: 2}
	res, err := fast.Acquire(ctx, &node.Key{Name: p + "k", Token: "tok"}, time.Second, false)
	require.NoError(t, err)
	require.Equal(t, node.Done, res.Status)
	info, err := direct.Inspect(ctx, p+"k")
	require.NoError(t, err)
	assert.LessOrEqual(t, info.TTL, 500*time.Millisecond, "a clock running 2x fast expires a 1s key after 0.5s")

	_, err = direct.Command(ctx, "SET", p+"jump:j", "v", "PX", 1000)
	require.NoError(t, err)
	_, err = direct.Command(ctx, "SET", p+"jump:gone", "v", "PX", 300)
	require.NoError(t, err)
	short, deleted, err := skew.Jump(ctx, direct, p+"jump:*", 600*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 2, short+deleted)
	assert.GreaterOrEqual(t, deleted, 1)
	info, err = direct.Inspect(ctx, p+"jump:j")
	require.NoError(t, err)
	assert.LessOrEqual(t, info.TTL, 400*time.Millisecond)
	_, err = direct.Command(ctx, "DEL", p+"k", p+"jump:j")
	require.NoError(t, err)
}

// view returns the shared cluster's nodes as one client sees them: nodes
// in cut are partitioned from it, node fastIdx runs at rate.
func view(t *testing.T, cut []int, fastIdx int, rate float64) []node.Node {
	t.Helper()
	out := make([]node.Node, shared.Size())
	for i := range out {
		n, err := node.Dial(shared.URLs()[i], node.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		out[i] = n
		if i == fastIdx {
			out[i] = &skew.Node{Node: n, Rate: rate}
		}
		for _, c := range cut {
			if c == i {
				out[i] = skew.Cut{Address: n.Addr()}
			}
		}
	}
	return out
}

// TestFastNodeClockBreaksExclusion reproduces Kleppmann's scenario with an
// emulated clock: A holds nodes 0,1,2 (3 and 4 are cut off from it); node 2
// runs 50% fast and drops A's key after 2/3 of the TTL; B, cut off from 0
// and 1, then gets 2,3,4 while A's validity has not run out. A drift factor
// above ρ/(1+ρ) = 1/3 restores exclusion.
func TestFastNodeClockBreaksExclusion(t *testing.T) {
	for _, tc := range []struct {
		drift   float64
		overlap bool
	}{{0.01, true}, {0.4, false}} {
		t.Run("drift="+map[bool]string{true: "0.01", false: "0.4"}[tc.overlap], func(t *testing.T) {
			ctx := context.Background()
			p := prefix(t, 3*time.Second)
			ttl := 900 * time.Millisecond
			opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithDriftFactor(tc.drift), redlock.WithNodeTimeout(100 * time.Millisecond)}
			a, err := redlock.New(view(t, []int{3, 4}, 2, 1.5), opts...)
			require.NoError(t, err)
			defer a.Close()
			b, err := redlock.New(view(t, []int{0, 1}, 2, 1.5), opts...)
			require.NoError(t, err)
			defer b.Close()

			var chk checker.Checker
			la, err := a.TryLock(ctx, p+"k")
			require.NoError(t, err)
			ha := chk.Begin(0, la.Key(), la.Token(), time.Now(), la.Until())
			// B tries until A's validity is over.
			var lb *redlock.Lock
			var gotB time.Time
			for time.Now().Before(la.Until()) {
				lb, err = b.TryLock(ctx, p+"k")
				if err == nil {
					gotB = time.Now()
					break
				}
				require.True(t, errors.Is(err, redlock.ErrNotAcquired), "%v", err)
				time.Sleep(5 * time.Millisecond)
			}
			// A never learns anything: it believes it holds the lock until
			// its Until().
			ha.End(la.Until())
			if lb != nil {
				chk.Begin(1, lb.Key(), lb.Token(), gotB, lb.Until()).End(lb.Until())
				assert.NoError(t, lb.Unlock(ctx))
			}
			_ = la.Unlock(ctx)
			if tc.overlap {
				require.NotEmpty(t, chk.Overlaps(), "a node clock 50%% fast with drift factor %v must let B in early", tc.drift)
				t.Log(chk.Report())
			} else {
				require.Empty(t, chk.Overlaps(), chk.Report())
			}
		})
	}
}
