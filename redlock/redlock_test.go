package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goroutines counts the goroutines but the idle workers of package quorum
// (a goroutine that ran a node call waits a moment for the next one, see
// quorum's spawn): those that run something.
func goroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "quorum.(*worker).loop") && !strings.Contains(g, "quorum.(*Round).run") {
			continue
		}
		count++
	}
	return count
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// setup returns n fake nodes on a fake clock and a client over them. The
// client is closed (waiting for background calls) at cleanup.
func setup(t *testing.T, n int, opts ...redlock.Option) ([]*fakeNode, *clock.Fake, *redlock.Client) {
	t.Helper()
	clk := clock.NewFake(epoch)
	fakes := newFakes(n, clk)
	opts = append([]redlock.Option{redlock.WithClock(clk), redlock.WithNodeTimeout(500 * time.Millisecond)}, opts...)
	c, err := redlock.New(asNodes(fakes), opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Releases a test made fail for good are reported as abandoned;
		// a test that cares asserts it itself.
		if err := c.Close(); !errors.Is(err, redlock.ErrAbandoned) {
			require.NoError(t, err)
		}
	})
	return fakes, clk, c
}

func holders(fakes []*fakeNode, key, token string) int {
	n := 0
	for _, f := range fakes {
		if f.token(key) == token {
			n++
		}
	}
	return n
}

func TestTryLockGrantsWithValidityFromFakeClock(t *testing.T) {
	fakes, clk, c := setup(t, 5, redlock.WithTTL(10*time.Second))
	// Nodes 0-2 each take 30ms of client time to answer; nodes 3 and 4
	// answer only after TryLock returned. The validity must lose the 90ms
	// as well as the drift (10s×0.01 + 2ms).
	for _, f := range fakes[:3] {
		f.setBefore(func(_ context.Context, op string) error {
			if op == "acquire" {
				clk.Advance(30 * time.Millisecond)
			}
			return nil
		})
	}
	later := make(chan struct{})
	for _, f := range fakes[3:] {
		f.setBefore(gate("acquire", later))
	}
	l, err := c.TryLock(context.Background(), "job")
	close(later)
	require.NoError(t, err)
	assert.Equal(t, epoch.Add(10*time.Second-102*time.Millisecond), l.Until(),
		"until = start + ttl - drift: the keys were set no earlier than start")
	assert.Equal(t, 10*time.Second-90*time.Millisecond-102*time.Millisecond, l.TTL(),
		"TTL right after the grant = validity = ttl - elapsed - drift")
	assert.Equal(t, "job", l.Key())
	assert.Len(t, l.Token(), 32)
	assert.Equal(t, 3, holders(fakes[:3], "job", l.Token()))

	clk.Advance(l.TTL())
	assert.Equal(t, time.Duration(0), l.TTL(), "TTL is 0 once validity ran out")
	assert.ErrorIs(t, l.Unlock(context.Background()), redlock.ErrNotHeld, "the critical section outran the lock")
}

// TestSlowAcquireKeepsItsValidity: an acquire that used more than half
// the TTL still returns a lock whose TTL is the validity left, never one
// that has already expired (elapsed must be subtracted once, not twice).
func TestSlowAcquireKeepsItsValidity(t *testing.T) {
	fakes, clk, c := setup(t, 3, redlock.WithTTL(time.Second), redlock.WithNodeTimeout(900*time.Millisecond))
	for _, f := range fakes {
		f.setBefore(func(_ context.Context, op string) error {
			if op == "acquire" {
				clk.Advance(200 * time.Millisecond)
			}
			return nil
		})
	}
	l, err := c.TryLock(context.Background(), "slow")
	require.NoError(t, err)
	// The quorum took two 200ms replies (the third may land too).
	assert.Equal(t, epoch.Add(time.Second-12*time.Millisecond), l.Until(), "start + ttl - drift")
	assert.GreaterOrEqual(t, clk.Since(epoch), 400*time.Millisecond)
	assert.Positive(t, l.TTL(), "elapsed was subtracted twice")
	for _, f := range fakes {
		f.setBefore(nil)
	}
	require.NoError(t, l.Unlock(context.Background()))
}

func TestValidityUsedUpIsNotAcquiredAndRolledBack(t *testing.T) {
	fakes, clk, c := setup(t, 5, redlock.WithTTL(time.Second), redlock.WithNodeTimeout(100*time.Millisecond))
	for _, f := range fakes {
		f.setBefore(func(_ context.Context, op string) error {
			if op == "acquire" {
				clk.Advance(400 * time.Millisecond) // 3 replies = 1.2s > TTL
			}
			return nil
		})
	}
	l, err := c.TryLock(context.Background(), "slow")
	require.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.LessOrEqual(t, qe.Validity, time.Duration(0))
	assert.Contains(t, err.Error(), "validity used up")
	require.NoError(t, c.Close()) // wait for late replies and their releases
	for i, f := range fakes {
		assert.Empty(t, f.token("slow"), "node %d still holds a key", i)
	}
}

func TestRollbackIncludesLateReplies(t *testing.T) {
	// Node 0 grants, nodes 1-3 are held by someone else, node 4 is slow:
	// the attempt is decided (3 taken) before node 4 answers, and node 4's
	// late SET must be released once it lands. The refusals wait until
	// node 0's grant is in: a round decided before it would be refused
	// with no node answering Done, and its rollback would wait for node
	// 4's reply instead of going ahead (see TestRollbackWaitsForStragglersWhereAllRefused).
	granted, refuse := make(chan struct{}), make(chan struct{})
	hooks := redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Node == 0 && i.Op == "acquire" {
			close(granted)
		}
	}}
	go func() {
		<-granted
		// Node 0's reply goes to the round right after its hook: give
		// its goroutine that moment.
		time.Sleep(10 * time.Millisecond)
		close(refuse)
	}()
	fakes, _, c := setup(t, 5, redlock.WithHooks(hooks))
	for _, i := range []int{1, 2, 3} {
		fakes[i].put("k", "other", time.Minute)
		fakes[i].setBefore(gate("acquire", refuse))
	}
	slow := make(chan struct{})
	fakes[4].setBefore(gate("acquire", slow))

	_, err := c.TryLock(context.Background(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 3, qe.Count(node.Taken))
	assert.False(t, qe.Replies[4].Answered(), "node 4 had not answered when the attempt was decided")
	require.Equal(t, node.Done, qe.Replies[0].Status)
	assert.Empty(t, fakes[0].token("k"), "node 0 answered Done: released before TryLock returns")
	for _, i := range []int{1, 2, 3} {
		assert.Equal(t, "other", fakes[i].token("k"), "someone else's key is untouched")
		assert.Zero(t, fakes[i].count("release"), "a Taken answer proves our SET did not apply: no release sent")
	}

	require.Eventually(t, func() bool { return fakes[4].count("release") == 1 }, 5*time.Second, time.Millisecond,
		"node 4's release goes before its SET has returned")
	close(slow)
	require.NoError(t, c.Close())
	assert.Empty(t, fakes[4].token("k"), "the late SET on node 4 is rolled back")
	assert.Equal(t, 2, fakes[4].count("release"), "one at once, which found nothing, one after the SET returned")
	assert.Empty(t, fakes[0].token("k"))
	assert.Equal(t, 1, fakes[0].count("release"), "node 0 had answered: one release")
}

// TestUnlockWaitsForAReseedOnItsWay: an Extend returns at the majority
// while node 4's extend is held, so a reseed is queued behind it there.
// Unlock's release must not go ahead of the reseed: the key it would
// find is the acquire's, and a reseed that ran after it would set the
// key again for a TTL.
func TestUnlockWaitsForAReseedOnItsWay(t *testing.T) {
	ctx := context.Background()
	fakes, _, c := setup(t, 5)
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	slow := make(chan struct{})
	fakes[4].setBefore(gate("extend", slow))
	require.NoError(t, l.Extend(ctx, time.Minute))
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	require.NoError(t, <-unlocked, "nodes 0-3 release")
	close(slow)
	require.NoError(t, c.Close())
	for i, f := range fakes {
		assert.Empty(t, f.token("k"), "node %d", i)
	}
	assert.Equal(t, 1, fakes[4].count("release"), "node 4's release waited for the reseed")
}

// replyLate is a fake node whose SETs take effect at once but whose
// replies wait for hold (or the call's deadline): a straggler whose
// command has run.
type replyLate struct {
	*fakeNode
	hold <-chan struct{}
}

func (n *replyLate) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	res, err := n.fakeNode.Acquire(ctx, k, ttl, holderTTL)
	select {
	case <-n.hold:
		return res, err
	case <-ctx.Done():
		return node.Result{}, ctx.Err()
	}
}

// stragglers returns a client over five fake nodes, with a minute's TTL
// and a long node timeout, where node i's replies wait for late[i] to be
// closed (replyLate: its commands take effect at once).
func stragglers(t *testing.T, clk *clock.Fake, fakes []*fakeNode, late map[int]<-chan struct{}, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	nodes := asNodes(fakes)
	for i, hold := range late {
		nodes[i] = &replyLate{fakeNode: fakes[i], hold: hold}
	}
	c, err := redlock.New(nodes, append([]redlock.Option{redlock.WithClock(clk), redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(10 * time.Second)}, opts...)...)
	require.NoError(t, err)
	return c
}

// TestUnlockGoesAheadOfAStragglersReply: Unlock right after an acquire
// that returned at the majority, while two nodes' replies are still on
// their way though their SETs have run. Their release goes at once and
// frees the key in one command (it finds the token): nothing waits for
// the acquire's reply, and nothing is sent twice.
func TestUnlockGoesAheadOfAStragglersReply(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	hold := make(chan struct{})
	c := stragglers(t, clk, fakes, map[int]<-chan struct{}{3: hold, 4: hold})
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 5 }, 5*time.Second, time.Millisecond,
		"the stragglers' SETs run")

	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 0 }, 5*time.Second, time.Millisecond,
		"the stragglers are released before their acquire's replies arrive")
	for _, i := range []int{3, 4} {
		assert.Equal(t, 1, fakes[i].count("release"), "node %d released once", i)
	}
	close(hold)
	require.NoError(t, c.Close())
	for i, f := range fakes {
		assert.Equal(t, 1, f.count("release"), "node %d released once", i)
	}
}

// TestRollbackWhereAllRefusedFreesAStragglersKey: an attempt refused
// by a majority, every answer a refusal, while two nodes' replies are on
// their way, one of them a SET that took effect. The rollback frees that
// node's key and leaves the holder's alone. (Until stop 64 such a
// rollback waited for the stragglers' replies instead of going ahead; it
// saved releases that found another's key, but no make bench scenario
// moved by it: see docs/PERFORMANCE.md, "What each mechanism buys".)
func TestRollbackWhereAllRefusedFreesAStragglersKey(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	hold := make(chan struct{})
	for _, i := range []int{0, 1, 2, 3} {
		fakes[i].put("k", "other", time.Minute)
	}
	c := stragglers(t, clk, fakes, map[int]<-chan struct{}{3: hold, 4: hold})
	_, err := c.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.Eventually(t, func() bool { return fakes[3].count("acquire")+fakes[4].count("acquire") == 2 }, 5*time.Second, time.Millisecond,
		"the stragglers' acquires run (their replies are held)")
	close(hold)
	require.Eventually(t, func() bool { return fakes[4].token("k") == "" }, 5*time.Second, time.Millisecond,
		"node 4's key, set by the straggler, is rolled back")
	require.NoError(t, c.Close())
	for i := range 4 {
		assert.Equal(t, "other", fakes[i].token("k"), "node %d keeps the holder's key", i)
	}
}

// TestRollbackGoesAheadWhenTheCallEndsFirst: the call's context ends
// while every reply is still on its way, two of the SETs having run: with
// no majority of answers the round is not refused, so the rollback goes
// ahead of the replies (a Lock call that ends leaves the queue at once,
// and a release that came after it could queue it again).
func TestRollbackGoesAheadWhenTheCallEndsFirst(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	hold := make(chan struct{})
	for _, i := range []int{0, 1, 2} {
		fakes[i].put("k", "other", time.Minute)
	}
	c := stragglers(t, clk, fakes, map[int]<-chan struct{}{0: hold, 1: hold, 2: hold, 3: hold, 4: hold})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.TryLock(ctx, "k"); errc <- err }()
	require.Eventually(t, func() bool { return fakes[3].token("k") != "" && fakes[4].token("k") != "" }, 5*time.Second, time.Millisecond,
		"the free nodes' SETs run (every reply is held)")
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Eventually(t, func() bool { return fakes[3].token("k") == "" && fakes[4].token("k") == "" }, 5*time.Second, time.Millisecond,
		"released ahead of the replies")
	close(hold)
	require.NoError(t, c.Close())
	for i, f := range fakes[:3] {
		assert.Equal(t, "other", f.token("k"), "node %d keeps the holder's key", i)
	}
}

// TestRollbackGoesAheadWhereANodeGranted: an attempt refused by a
// majority, but granted by one node, while another's reply is on its way
// though its SET has run: the attempt split the nodes, so the straggler's
// release goes at once and frees its key before the reply arrives.
func TestRollbackGoesAheadWhereANodeGranted(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	hold, refuse := make(chan struct{}), make(chan struct{})
	for _, i := range []int{1, 2, 3} {
		fakes[i].put("k", "other", time.Minute)
	}
	granted := make(chan struct{})
	hooks := redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Node == 0 && i.Op == "acquire" {
			close(granted)
		}
	}}
	go func() {
		<-granted
		for fakes[4].token("k") == "" {
			time.Sleep(time.Millisecond)
		}
		// Node 0's reply goes to the round right after its hook: give
		// its goroutine that moment.
		time.Sleep(10 * time.Millisecond)
		close(refuse)
	}()
	// The refusals (nodes 1-3) wait for node 0's grant to be in and node
	// 4's SET to have run: the round is decided with the grant counted,
	// and a release sent then finds node 4's key.
	c := stragglers(t, clk, fakes, map[int]<-chan struct{}{1: refuse, 2: refuse, 3: refuse, 4: hold}, redlock.WithHooks(hooks))
	_, err := c.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Empty(t, fakes[0].token("k"), "node 0's grant is rolled back before TryLock returns")
	require.Eventually(t, func() bool { return fakes[4].count("release") == 1 && fakes[4].token("k") == "" }, 5*time.Second, time.Millisecond,
		"node 4's key is released ahead of its acquire's reply")

	close(hold)
	require.NoError(t, c.Close())
	for i, f := range fakes {
		want := 0
		if i == 0 || i == 4 {
			want = 1
		}
		assert.Equal(t, want, f.count("release"), "node %d: releases", i)
	}
}

// lateSet is a fake node whose SETs time out at the caller and take
// effect only once apply is closed: a command the node held for longer
// than its caller waited (a paused or starved server).
type lateSet struct {
	*fakeNode
	apply   chan struct{}
	held    chan struct{} // closed once a SET is held
	applied chan node.Result
}

func (n *lateSet) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	<-ctx.Done()
	held := *k
	go func() {
		<-n.apply
		res, _ := n.fakeNode.Acquire(context.Background(), &held, ttl, holderTTL)
		n.applied <- res
	}()
	close(n.held)
	return node.Result{}, &node.Error{Addr: n.addr, Op: "acquire", Kind: node.ErrTimeout, Err: ctx.Err()}
}

// TestReleaseWatchesALateSet: a node's SET times out, and the release
// that follows finds nothing there; the node runs the SET after that.
// The release is sent again until it finds the token, so the key does
// not stay for its TTL.
func TestReleaseWatchesALateSet(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	nodes := asNodes(fakes)
	late := &lateSet{fakeNode: fakes[4], apply: make(chan struct{}), held: make(chan struct{}), applied: make(chan node.Result, 1)}
	nodes[4] = late
	answered := make(chan struct{}, 1) // node 4 answered a release
	hooks := redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Node == 4 && i.Op == "release" && i.Err == nil {
			select {
			case answered <- struct{}{}:
			default:
			}
		}
	}}
	c, err := redlock.New(nodes, redlock.WithClock(clk), redlock.WithNodeTimeout(20*time.Millisecond), redlock.WithHooks(hooks))
	require.NoError(t, err)
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	<-late.held
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatal("node 4 never answered a release")
	}
	assert.Empty(t, fakes[4].token("k"), "the release found nothing")

	close(late.apply)
	require.Equal(t, node.Done, (<-late.applied).Status, "the held SET sets the key")
	require.Eventually(t, func() bool { return fakes[4].token("k") == "" }, 5*time.Second, time.Millisecond,
		"the key the late SET left is released")
	require.NoError(t, c.Close(), "a release that found the token is not reported")
	for i, f := range fakes {
		assert.Empty(t, f.token("k"), "node %d", i)
	}
}

// lateFirstSet is lateSet for the first SET only: the later ones (a
// re-seed) run at once.
type lateFirstSet struct {
	lateSet
	once atomic.Bool
}

func (n *lateFirstSet) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	if n.once.Swap(true) {
		return n.fakeNode.Acquire(ctx, k, ttl, holderTTL)
	}
	return n.lateSet.Acquire(ctx, k, ttl, holderTTL)
}

// TestReleaseWatchesALateSetBehindAnExtend: a node's SET times out; an
// Extend finds the key absent there and re-seeds it; the Unlock's release
// finds the token (the re-seed's) and frees it; then the node runs the
// first SET. The command that may still run is two steps back, not the
// release's previous one: the release leaves a tombstone and is watched
// all the same, so the late SET's key does not stay for its TTL.
func TestReleaseWatchesALateSetBehindAnExtend(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	nodes := asNodes(fakes)
	late := &lateFirstSet{lateSet: lateSet{fakeNode: fakes[4], apply: make(chan struct{}), held: make(chan struct{}), applied: make(chan node.Result, 1)}}
	nodes[4] = late
	var reseeded atomic.Bool
	hooks := redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Node == 4 && i.Op == "reseed" && i.Err == nil {
			reseeded.Store(true)
		}
	}}
	c, err := redlock.New(nodes, redlock.WithClock(clk), redlock.WithNodeTimeout(20*time.Millisecond), redlock.WithHooks(hooks))
	require.NoError(t, err)
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	<-late.held
	require.NoError(t, l.Extend(ctx, time.Minute))
	require.Eventually(t, reseeded.Load, 5*time.Second, time.Millisecond, "the extend re-seeds node 4")
	require.Eventually(t, func() bool { return fakes[4].token("k") == l.Token() }, 5*time.Second, time.Millisecond)
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return fakes[4].token("k") == "" }, 5*time.Second, time.Millisecond, "released")

	close(late.apply)
	require.Equal(t, node.Done, (<-late.applied).Status, "the held SET sets the key again")
	// The watch's waits, 3 s of the fake clock at most: well within the
	// late key's TTL (10 s), which would otherwise free it.
	freed := false
	for range 150 {
		clk.Advance(20 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		if freed = fakes[4].token("k") == ""; freed {
			break
		}
	}
	require.True(t, freed, "the key the late SET left is released before its TTL")
	require.NoError(t, c.Close())
	for i, f := range fakes {
		assert.Empty(t, f.token("k"), "node %d", i)
	}
}

// silentSets is a fake node whose SETs time out at the caller and never
// run, but for key "q", whose first release times out instead. It
// records the keys of the releases it is sent, in order.
type silentSets struct {
	*fakeNode
	mu     sync.Mutex
	seq    []string
	failed bool
}

func (n *silentSets) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	if k.Name == "q" {
		return n.fakeNode.Acquire(ctx, k, ttl, holderTTL)
	}
	<-ctx.Done()
	return node.Result{}, &node.Error{Addr: n.addr, Op: "acquire", Kind: node.ErrTimeout, Err: ctx.Err()}
}

func (n *silentSets) Release(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	n.mu.Lock()
	n.seq = append(n.seq, k.Name)
	fail := k.Name == "q" && !n.failed
	n.failed = n.failed || fail
	n.mu.Unlock()
	if fail {
		return node.Result{}, &node.Error{Addr: n.addr, Op: "release", Kind: node.ErrTimeout, Err: context.DeadlineExceeded}
	}
	if k.Name != "q" {
		time.Sleep(5 * time.Millisecond) // a round trip: a burst of watched tries takes time
	}
	return n.fakeNode.Release(ctx, k, announce)
}

// calls returns the keys of the releases sent so far.
func (n *silentSets) calls() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.seq)
}

// TestWatchedReleasesDoNotHoldUpRetries: node 4 never runs the SETs of
// 20 locks, so their releases there find nothing and are watched. The
// release of another lock that timed out there is retried before the
// watched ones are tried again, not behind each of them.
func TestWatchedReleasesDoNotHoldUpRetries(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	nodes := asNodes(fakes)
	n4 := &silentSets{fakeNode: fakes[4]}
	nodes[4] = n4
	c, err := redlock.New(nodes, redlock.WithClock(clk), redlock.WithNodeTimeout(20*time.Millisecond))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	const watched = 20
	for i := range watched {
		l, err := c.TryLock(ctx, fmt.Sprintf("w%d", i))
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	// Each w release is watched once it has been sent three times (the
	// first one or two went in its round or as an ordinary retry).
	require.Eventually(t, func() bool {
		seq := n4.calls()
		for i := range watched {
			w := fmt.Sprintf("w%d", i)
			if len(slices.DeleteFunc(slices.Clone(seq), func(k string) bool { return k != w })) < 3 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the w releases are watched")
	l, err := c.TryLock(ctx, "q")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return slices.Index(n4.calls(), "q") >= 0 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		seq := n4.calls()
		first := slices.Index(seq, "q")
		return slices.Index(seq[first+1:], "q") >= 0
	}, 10*time.Second, time.Millisecond, "q's release is retried")
	seq := n4.calls()
	first := slices.Index(seq, "q")
	between := slices.Index(seq[first+1:], "q")
	// Behind the watched ones (a queue of 20 taking turns), q waited for
	// each of them; now at most one tried while q's retry was queued.
	assert.LessOrEqual(t, between, 2, "watched releases tried between q's failure and its retry: %v", seq[first:])
	assert.Empty(t, fakes[4].token("q"), "q released on node 4")
}

func TestRollbackReleasesFailedNodes(t *testing.T) {
	fakes, _, c := setup(t, 3)
	// Node 1's reply is lost after its SET applied; node 2 is taken.
	fakes[1].setBefore(func(ctx context.Context, op string) error {
		if op == "acquire" {
			return errInjected
		}
		return nil
	})
	fakes[2].put("k", "other", time.Minute)
	// The fake fails before applying; plant the key as if it had applied.
	_, err := c.TryLock(context.Background(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, c.Close())
	assert.Equal(t, 1, fakes[1].count("release"), "a node whose reply was lost is released too")
	// Twice when the rollback reached node 0 before its SET had run (the
	// release went at once, found nothing, and went again after it).
	assert.Contains(t, []int{1, 2}, fakes[0].count("release"))
	assert.Zero(t, fakes[2].count("release"))
	assert.Empty(t, fakes[0].token("k"))
}

func TestContextCancelledMidAcquire(t *testing.T) {
	fakes, _, c := setup(t, 5)
	release := make(chan struct{})
	started := make(chan struct{}, 5)
	for _, f := range fakes[:3] {
		f.setBefore(func(ctx context.Context, op string) error {
			if op == "acquire" {
				started <- struct{}{}
				<-release
			}
			return nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "k")
		errc <- err
	}()
	for range 3 {
		<-started
	}
	cancel()
	err := <-errc
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.ErrorIs(t, err, context.Canceled)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Attempts)

	close(release) // the blocked SETs now apply, late
	require.NoError(t, c.Close())
	for i, f := range fakes {
		assert.Empty(t, f.token("k"), "node %d", i)
	}
}

func TestContextDeadlineDuringBackoff(t *testing.T) {
	fakes, _, c := setup(t, 3, redlock.WithClock(clock.Real{}), redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	for _, f := range fakes {
		f.put("k", "other", time.Hour)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestRetryBudget(t *testing.T) {
	fakes, clk, c := setup(t, 3, redlock.WithRetry(redlock.LimitRetry(redlock.ExponentialBackoff(10*time.Millisecond, time.Second), 4)))
	for _, f := range fakes {
		f.put("k", "other", time.Hour)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "k")
		errc <- err
	}()
	// Each backoff waits on the fake clock: move it until Lock gives up.
	var err error
	for err == nil {
		select {
		case err = <-errc:
		default:
			if clk.Waiters() > 0 {
				clk.Advance(time.Second)
			}
			time.Sleep(time.Millisecond)
		}
	}
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 4, qe.Attempts)
	assert.Contains(t, err.Error(), "after 4 attempts")
	for _, f := range fakes {
		assert.Equal(t, 4, f.count("acquire"))
	}
}

// TestMaxWaitEndsLock: WithMaxWait ends Lock at its first failed
// attempt after the limit, on the client's clock, and no delay runs past
// it (the retry delay here is an hour).
func TestMaxWaitEndsLock(t *testing.T) {
	fakes, clk, c := setup(t, 3, redlock.WithRetry(redlock.LinearBackoff(time.Hour)), redlock.WithNotifications(false))
	for _, f := range fakes {
		f.put("k", "other", 24*time.Hour)
	}
	start := clk.Now()
	rc := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(context.Background(), "k", redlock.WithMaxWait(3*time.Second))
		rc <- lockResult{l: l, err: err}
	}()
	err := drive(t, clk, time.Second, rc).err
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Equal(t, 3*time.Second, clk.Since(start), "gave up at the limit, not after an hour's delay")
	assert.Equal(t, 2, fakes[0].count("acquire"), "one attempt at the start, one at the limit")
	_, err = c.Lock(context.Background(), "k", redlock.WithMaxWait(-time.Second))
	require.ErrorIs(t, err, redlock.ErrInvalid)
}

// TestLockOutlastsAMovingLock: a waiter behind a lock that is busy for far
// more than 32 attempts (the old budget) is not failed by a count; it gets
// the lock when the key is free.
func TestLockOutlastsAMovingLock(t *testing.T) {
	fakes, clk, c := setup(t, 3) // the default retry
	for _, f := range fakes {
		f.put("k", "other", 24*time.Hour)
	}
	type result struct {
		l   *redlock.Lock
		err error
	}
	rc := make(chan result, 1)
	go func() {
		l, err := c.Lock(context.Background(), "k")
		rc <- result{l, err}
	}()
	var r *result
	step := func() {
		select {
		case x := <-rc:
			r = &x
		default:
			if clk.Waiters() > 0 {
				clk.Advance(500 * time.Millisecond)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	for r == nil && fakes[0].count("acquire") < 100 {
		step()
	}
	require.Nil(t, r, "Lock gave up while the key was held")
	for _, f := range fakes {
		f.restart("k")
	}
	for r == nil {
		step()
	}
	require.NoError(t, r.err)
	require.NoError(t, r.l.Unlock(context.Background()))
}

func TestLockRetriesUntilFree(t *testing.T) {
	fakes, clk, c := setup(t, 3)
	for _, f := range fakes {
		f.put("k", "other", 300*time.Millisecond)
	}
	errc := make(chan error, 1)
	var l *redlock.Lock
	go func() {
		var err error
		l, err = c.Lock(context.Background(), "k")
		errc <- err
	}()
	var err error
	done := false
	for !done {
		select {
		case err = <-errc:
			done = true
		default:
			if clk.Waiters() > 0 {
				clk.Advance(100 * time.Millisecond)
			}
			time.Sleep(time.Millisecond)
		}
	}
	require.NoError(t, err)
	// (Lock returns at 2 of 3; the third node's acquire may be on its way.)
	assert.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 3 }, 5*time.Second, time.Millisecond)
	require.NoError(t, l.Unlock(context.Background()))
}

func TestAuthFailureIsNotRetried(t *testing.T) {
	fakes, _, c := setup(t, 3)
	for _, f := range fakes[:2] {
		f.setBefore(func(context.Context, string) error { return node.ErrAuth })
	}
	_, err := c.Lock(context.Background(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, node.ErrAuth)
	require.NoError(t, c.Close()) // let the minority's call finish
	assert.Equal(t, 1, fakes[2].count("acquire"), "bad credentials on a majority: retrying cannot help")
}

func TestExtend(t *testing.T) {
	ctx := context.Background()
	t.Run("moves until", func(t *testing.T) {
		fakes, clk, c := setup(t, 5, redlock.WithTTL(time.Second))
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		clk.Advance(500 * time.Millisecond)
		require.NoError(t, l.Extend(ctx, 2*time.Second))
		assert.Equal(t, 2*time.Second-22*time.Millisecond, l.TTL(), "2s - drift(2s)")
		extended := 0
		for _, f := range fakes {
			f.mu.Lock()
			if f.keys["k"].until.Equal(clk.Now().Add(2 * time.Second)) {
				extended++
			}
			f.mu.Unlock()
		}
		assert.GreaterOrEqual(t, extended, 3, "a majority took the new TTL before Extend returned")
		require.NoError(t, l.Unlock(ctx))
	})
	t.Run("a shorter ttl shortens Until, never a key", func(t *testing.T) {
		fakes, clk, c := setup(t, 3)
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, time.Second))
		assert.Equal(t, time.Second-12*time.Millisecond, l.TTL(), "Until follows the ttl asked for")
		require.Eventually(t, func() bool {
			return fakes[0].count("extend returned")+fakes[1].count("extend returned")+fakes[2].count("extend returned") == 3
		},
			time.Second, time.Millisecond)
		clk.Advance(5 * time.Second)
		assert.Equal(t, 3, holders(fakes, "k", l.Token()), "the keys keep their 10s")
		clk.Advance(5 * time.Second)
		assert.Zero(t, holders(fakes, "k", l.Token()))
	})
	t.Run("expired is not held", func(t *testing.T) {
		_, clk, c := setup(t, 5, redlock.WithTTL(time.Second))
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		clk.Advance(time.Second)
		err = l.Extend(ctx, time.Second)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.NotContains(t, err.Error(), "taken")
		require.ErrorIs(t, l.Unlock(ctx), redlock.ErrNotHeld)
	})
	t.Run("taken over is not held", func(t *testing.T) {
		fakes, _, c := setup(t, 5)
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		for _, f := range fakes[:3] {
			f.put("k", "intruder", time.Minute)
		}
		require.ErrorIs(t, l.Extend(ctx, time.Minute), redlock.ErrNotHeld)
		require.ErrorIs(t, l.Unlock(ctx), redlock.ErrNotHeld)
		for _, f := range fakes[:3] {
			assert.Equal(t, "intruder", f.token("k"), "unlock never deletes another holder's key")
		}
	})
	t.Run("failing nodes leave the lock as it was", func(t *testing.T) {
		fakes, _, c := setup(t, 5)
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		until := l.Until()
		for _, f := range fakes[:3] {
			f.setBefore(failOn("extend"))
		}
		err = l.Extend(ctx, time.Minute)
		require.Error(t, err)
		assert.NotErrorIs(t, err, redlock.ErrNotHeld, "the outcome is unknown, not lost")
		assert.ErrorIs(t, err, errInjected)
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		// Decided at the third negative answer; a node whose acquire reply
		// was still in flight may answer Absent instead of failing.
		assert.Subset(t, []int{0, 1, 2}, qe.Failed(), "%v", err)
		assert.GreaterOrEqual(t, len(qe.Failed()), 2, "%v", err)
		assert.Equal(t, until, l.Until())
		require.NoError(t, l.Unlock(ctx))
	})
	t.Run("bad ttl", func(t *testing.T) {
		_, _, c := setup(t, 3)
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		require.ErrorIs(t, l.Extend(ctx, 0), redlock.ErrInvalid)
		require.ErrorIs(t, l.Extend(ctx, -time.Second), redlock.ErrInvalid)
		require.NoError(t, l.Unlock(ctx))
	})
}

func TestUnlock(t *testing.T) {
	ctx := context.Background()
	fakes, _, c := setup(t, 5)
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 0 }, time.Second, time.Millisecond,
		"the minority is released just after Unlock returns")
	assert.Zero(t, l.TTL())
	require.ErrorIs(t, l.Unlock(ctx), redlock.ErrNotHeld, "twice")
	require.ErrorIs(t, l.Extend(ctx, time.Second), redlock.ErrNotHeld, "after unlock")

	l2, err := c.TryLock(ctx, "k")
	require.NoError(t, err, "free again")
	require.NoError(t, l2.Unlock(ctx))
}

// TestUnlockCountsNodesStillAcquiring: Unlock right after a quorum-return
// acquire, while two nodes' SETs are still in flight and one of the three
// that granted fails to release. Those two nodes are released once their
// SET lands and counted, so Unlock reports success, not "outcome unknown".
func TestUnlockCountsNodesStillAcquiring(t *testing.T) {
	ctx := context.Background()
	fakes, _, c := setup(t, 5)
	slow := make(chan struct{})
	for _, i := range []int{3, 4} {
		fakes[i].setBefore(gate("acquire", slow))
	}
	fakes[2].setBefore(failOn("release"))
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, 3, holders(fakes, "k", l.Token()), "decided at quorum, before nodes 3 and 4 answered")

	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	select {
	case err := <-unlocked:
		t.Fatalf("Unlock returned before nodes 3 and 4 answered the acquire: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.Eventually(t, func() bool { return fakes[3].count("release")+fakes[4].count("release") == 2 }, 5*time.Second, time.Millisecond,
		"nodes 3 and 4 get their release before their SETs have returned")
	close(slow)
	select {
	case err = <-unlocked:
	case <-time.After(5 * time.Second):
		t.Fatal("Unlock did not return")
	}
	require.NoError(t, err)
	// Unlock returned at quorum; Close waits for the last release, and
	// reports node 2's, retried in vain.
	require.ErrorIs(t, c.Close(), redlock.ErrAbandoned)
	for _, i := range []int{0, 1, 3, 4} {
		assert.Empty(t, fakes[i].token("k"), "node %d released", i)
	}
	for _, i := range []int{0, 1} {
		assert.Equal(t, 1, fakes[i].count("release"), "node %d released once", i)
	}
	for _, i := range []int{3, 4} {
		// The release went at once and found nothing (the SET had not
		// run), then again once the SET had returned.
		assert.Equal(t, 2, fakes[i].count("release"), "node %d", i)
	}
	assert.Greater(t, fakes[2].count("release"), 1, "node 2's release is retried")
	assert.Equal(t, l.Token(), fakes[2].token("k"), "node 2 never released; its key expires")
}

// TestExtendsApplyInOrder: a short Extend whose call to a slow node is
// still in flight must not land there after a later, longer Extend, or
// that node would count for the longer one while its key dies early.
func TestExtendsApplyInOrder(t *testing.T) {
	ctx := context.Background()
	fakes, clk, c := setup(t, 3)
	slow := make(chan struct{})
	fakes[2].setBefore(gate("acquire", slow)) // node 2's SET is in flight
	long := make(chan struct{})
	fakes[2].mu.Lock()
	fakes[2].beforeExtend = func(ttl time.Duration) {
		// Hold the short extend back until the long one arrives, or for
		// a while if it never does: the worst order, whenever the
		// client allows it.
		if ttl == time.Minute {
			close(long)
			return
		}
		select {
		case <-long:
		case <-time.After(50 * time.Millisecond):
		}
	}
	fakes[2].mu.Unlock()
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, 3*time.Second), "nodes 0 and 1")

	fakes[1].setBefore(failOn("extend"))
	done := make(chan error, 1)
	go func() { done <- l.Extend(ctx, time.Minute) }() // needs node 2
	require.Eventually(t, func() bool { return fakes[0].count("extend") == 2 }, time.Second, time.Millisecond)
	close(slow)
	require.NoError(t, <-done)
	require.Greater(t, l.TTL(), 50*time.Second)
	require.Eventually(t, func() bool { return fakes[2].count("extend returned") == 2 }, time.Second, time.Millisecond,
		"both extends reached node 2")

	clk.Advance(4 * time.Second) // past the short extend
	assert.Positive(t, l.TTL())
	assert.GreaterOrEqual(t, holders(fakes, "k", l.Token()), 2,
		"the lock claims a validity that a majority of keys no longer backs")
	fakes[1].setBefore(nil)
	require.NoError(t, l.Unlock(ctx))
}

// TestSilentNodeBuildsNoChain: extends issued faster than a silent node
// times out must not queue up behind each other, each with a timeout of
// its own: every round's calls end with that round's deadline, so Close
// (which waits for them all) returns within about one node timeout of
// the last Extend, not one per Extend.
func TestSilentNodeBuildsNoChain(t *testing.T) {
	const timeout, extends = 50 * time.Millisecond, 40
	ctx := context.Background()
	fakes, _, c := setup(t, 3, redlock.WithNodeTimeout(timeout))
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	never := make(chan struct{})
	defer close(never)
	fakes[2].setBefore(gate("extend", never))
	granted := 0
	for range extends {
		// On a loaded machine the fast nodes too may miss a round's
		// deadline; that outcome is unknown, never "not held".
		if err := l.Extend(ctx, time.Minute); err == nil {
			granted++
		} else {
			assert.NotErrorIs(t, err, redlock.ErrNotHeld)
		}
	}
	assert.Positive(t, granted)
	last := time.Now()
	require.NoError(t, c.Close())
	// A chain would take at least extends × timeout (2 s); the bound is
	// half that, so scheduling noise cannot make this pass or fail.
	assert.Less(t, time.Since(last), extends/2*timeout, "calls queued behind the silent node")
}

// TestSilentNodeReseedsOnce: every Extend that returns with a silent
// node's answer still out queues a re-seed of the nodes that answer
// "absent" (see Lock.Extend), which waits for that answer. At most one
// re-seed per lock is in flight: extends in a row against a node that
// never answers hold one goroutine each on it until the round's deadline,
// and the re-seeds add at most one more, not one per Extend. (A count,
// not a time: with the node timeout of a second, the goroutines are
// counted long before any has ended, on the slowest machine too.)
func TestSilentNodeReseedsOnce(t *testing.T) {
	const extends = 300
	ctx := context.Background()
	fakes, _, c := setup(t, 3, redlock.WithNodeTimeout(time.Second))
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == 3 }, 5*time.Second, time.Millisecond)
	fakes[2].setBefore(func(ctx context.Context, _ string) error {
		<-ctx.Done() // silent: every call ends at its deadline
		return ctx.Err()
	})
	before := goroutines()
	for range extends {
		require.NoError(t, l.Extend(ctx, time.Minute))
	}
	grown := goroutines() - before
	t.Logf("%d extends with a silent node: %d more goroutines", extends, grown)
	assert.LessOrEqual(t, grown, extends+10, "one goroutine per extend on the silent node, and at most one re-seed")
	fakes[2].setBefore(nil) // it answers again: the calls still out end at their deadline
	require.NoError(t, l.Unlock(ctx))
}

// TestTTLDoesNotWaitForExtend: TTL answers while an Extend waits on the
// nodes, and already reports no more than the new, shorter TTL allows.
func TestTTLDoesNotWaitForExtend(t *testing.T) {
	ctx := context.Background()
	fakes, _, c := setup(t, 3)
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Greater(t, l.TTL(), 9*time.Second)

	slow := make(chan struct{})
	for _, f := range fakes {
		f.setBefore(gate("extend", slow))
	}
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, time.Second) }()
	require.Eventually(t, func() bool { return fakes[0].count("extend") == 1 }, time.Second, time.Millisecond)

	ttl := make(chan time.Duration, 1)
	go func() { ttl <- l.TTL() }()
	select {
	case got := <-ttl:
		assert.LessOrEqual(t, got, time.Second-12*time.Millisecond, "TTL during a shortening Extend")
		assert.Positive(t, got)
	case <-time.After(200 * time.Millisecond):
		t.Fatal("TTL waited for Extend")
	}
	close(slow)
	require.NoError(t, <-extended)
	assert.LessOrEqual(t, l.TTL(), time.Second-12*time.Millisecond)
	require.NoError(t, l.Unlock(ctx))
}

func TestTwoClientsExclude(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	a, err := redlock.New(asNodes(fakes), redlock.WithClock(clk))
	require.NoError(t, err)
	b, err := redlock.New(asNodes(fakes), redlock.WithClock(clk))
	require.NoError(t, err)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	la, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	_, err = b.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.GreaterOrEqual(t, qe.Count(node.Taken), 3, "decided at the third Taken")
	require.NoError(t, la.Unlock(ctx))
	lb, err := b.TryLock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, lb.Unlock(ctx))
}

func TestNilLock(t *testing.T) {
	var l *redlock.Lock
	assert.Equal(t, "", l.Key())
	assert.Equal(t, "", l.Token())
	assert.Zero(t, l.TTL())
	assert.True(t, l.Until().IsZero())
	assert.ErrorIs(t, l.Extend(context.Background(), time.Second), redlock.ErrNotHeld)
	assert.ErrorIs(t, l.Unlock(context.Background()), redlock.ErrNilLock)
}

func TestBadInput(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := asNodes(newFakes(3, clk))
	dup := asNodes(newFakes(2, clk))
	dup = append(dup, dup[0])
	cases := []struct {
		name  string
		nodes []node.Node
		opts  []redlock.Option
	}{
		{"no nodes", nil, nil},
		{"same node twice", dup, nil},
		{"nil node", []node.Node{fakes[0], nil}, nil},
		{"zero ttl", fakes, []redlock.Option{redlock.WithTTL(0)}},
		{"negative ttl", fakes, []redlock.Option{redlock.WithTTL(-time.Second)}},
		{"sub-millisecond ttl", fakes, []redlock.Option{redlock.WithTTL(time.Second + 500*time.Microsecond)}},
		{"negative drift", fakes, []redlock.Option{redlock.WithDriftFactor(-0.1)}},
		{"drift too big", fakes, []redlock.Option{redlock.WithDriftFactor(0.5)}},
		{"quorum below majority", fakes, []redlock.Option{redlock.WithQuorum(1)}},
		{"quorum above n", fakes, []redlock.Option{redlock.WithQuorum(4)}},
		{"timeout above ttl", fakes, []redlock.Option{redlock.WithTTL(time.Second), redlock.WithNodeTimeout(2 * time.Second)}},
		{"nil retry", fakes, []redlock.Option{redlock.WithRetry(nil)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redlock.New(tc.nodes, tc.opts...)
			assert.Nil(t, c)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
		})
	}

	c, err := redlock.New(fakes, redlock.WithQuorum(3), redlock.WithClock(clk))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.TryLock(context.Background(), "")
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = c.Lock(context.Background(), "k", redlock.WithTTL(0))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = c.TryLock(context.Background(), "k", redlock.WithTTL(1500*time.Microsecond))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), "whole number of milliseconds")
	for _, f := range fakes {
		assert.Zero(t, f.(*fakeNode).count("acquire"), "bad input sends nothing")
	}
}

func TestDialBadURLs(t *testing.T) {
	for _, u := range []string{"", "http://x:1", "redis://", "redis://h:99999", "redis://h:1/abc", "redis://user:s3cret@h:bad"} {
		c, err := redlock.Dial([]string{u})
		assert.Nil(t, c, u)
		require.ErrorIs(t, err, node.ErrBadURL, u)
		assert.NotContains(t, err.Error(), "s3cret")
	}
	_, err := redlock.Dial([]string{"redis://a:1", "redis://A:1"})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "same address twice")
	_, err = redlock.Dial(nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid)
}

func TestClosedClient(t *testing.T) {
	fakes, _, c := setup(t, 3)
	l, err := c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = c.TryLock(context.Background(), "k")
	assert.ErrorIs(t, err, redlock.ErrClosed)
	_, err = c.Lock(context.Background(), "k")
	assert.ErrorIs(t, err, redlock.ErrClosed)
	assert.ErrorIs(t, l.Extend(context.Background(), time.Minute), redlock.ErrClosed)
	assert.ErrorIs(t, l.Unlock(context.Background()), redlock.ErrClosed)
	assert.Equal(t, 1, fakes[0].count("acquire"), "nothing sent after Close")
	assert.Zero(t, fakes[0].count("extend")+fakes[0].count("release"), "nothing sent after Close")
	assert.NoError(t, c.Close(), "Close twice")
}

// TestCloseWhileLocking races Close against operations in flight: under
// -race it must neither race on the client's WaitGroup nor panic, and
// every operation either completes or returns ErrClosed.
func TestCloseWhileLocking(t *testing.T) {
	for range 20 {
		_, _, c := setup(t, 3) // its cleanup closes c once more
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.TryLock(context.Background(), fmt.Sprintf("k%d", g))
				if err != nil {
					assert.ErrorIs(t, err, redlock.ErrClosed)
					return
				}
				if err := l.Unlock(context.Background()); err != nil {
					assert.ErrorIs(t, err, redlock.ErrClosed)
				}
			}()
		}
		closed := make(chan error, 2)
		go func() { closed <- c.Close() }()
		go func() { closed <- c.Close() }()
		require.NoError(t, <-closed)
		require.NoError(t, <-closed)
		wg.Wait()
	}
}

// TestEndedContextSendsNothing: a context that ended before TryLock
// yields ErrNotAcquired and the context's error without any traffic.
func TestEndedContextSendsNothing(t *testing.T) {
	fakes, _, c := setup(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Len(t, qe.Replies, 3)
	require.NoError(t, c.Close()) // every call that was started has run
	for _, f := range fakes {
		assert.Zero(t, f.count("acquire")+f.count("release"), "traffic for an ended context")
	}
}

// TestExtendWithEndedContextSendsNothing: the lock holds as before and
// the error says the context ended, not that the lock is lost.
func TestExtendWithEndedContextSendsNothing(t *testing.T) {
	fakes, _, c := setup(t, 3)
	l, err := c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	until := l.Until()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = l.Extend(ctx, time.Second)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, redlock.ErrNotHeld)
	assert.Equal(t, until, l.Until(), "Until moved for an extend that was never sent")
	require.NoError(t, l.Unlock(context.Background()))
	require.NoError(t, c.Close())
	for _, f := range fakes {
		assert.Zero(t, f.count("extend"), "traffic for an ended context")
	}
}

// TestCustomCauseKeepsContextError: a context ended with a cause of its
// own still matches context.Canceled / DeadlineExceeded, and the cause.
func TestCustomCauseKeepsContextError(t *testing.T) {
	_, _, c := setup(t, 3)
	why := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(why)
	_, err := c.TryLock(ctx, "k")
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, why)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Contains(t, err.Error(), "shutting down")

	ctx, cancel2 := context.WithTimeoutCause(context.Background(), time.Nanosecond, why)
	defer cancel2()
	<-ctx.Done()
	_, err = c.Lock(ctx, "k")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, why)
}

func TestTokensAreUniquePerAttempt(t *testing.T) {
	_, _, c := setup(t, 3)
	seen := map[string]bool{}
	for range 200 {
		// Unlock returns at a majority; a node's release (or an earlier
		// attempt's acquire) may still be on its way and find the next
		// TryLock's key taken there. Under -count=1000 two nodes lagged
		// about once: try again then.
		var l *redlock.Lock
		var err error
		for range 100 {
			if l, err = c.TryLock(context.Background(), "k"); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		require.NoError(t, err)
		require.False(t, seen[l.Token()])
		seen[l.Token()] = true
		require.NoError(t, l.Unlock(context.Background()))
	}
}

func TestRetryStrategies(t *testing.T) {
	s := redlock.ExponentialBackoff(10*time.Millisecond, 80*time.Millisecond)
	for attempt, ceil := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 4: 80 * time.Millisecond, 60: 80 * time.Millisecond, 1000: 80 * time.Millisecond} {
		for range 100 {
			d, ok := s.Backoff(attempt)
			require.True(t, ok)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, ceil, "attempt %d", attempt)
		}
	}
	lim := redlock.LimitRetry(s, 3)
	_, ok := lim.Backoff(2)
	assert.True(t, ok)
	_, ok = lim.Backoff(3)
	assert.False(t, ok)
	_, ok = redlock.NoRetry().Backoff(1)
	assert.False(t, ok)
	for range 100 {
		d, _ := redlock.LinearBackoff(100 * time.Millisecond).Backoff(1)
		require.True(t, d >= 50*time.Millisecond && d <= 150*time.Millisecond, d)
	}
}

func TestQuorumErrorIsMatchesNodeKinds(t *testing.T) {
	fakes, _, c := setup(t, 3)
	for _, f := range fakes {
		f.setBefore(func(context.Context, string) error { return node.ErrTimeout })
	}
	_, err := c.TryLock(context.Background(), "k")
	assert.ErrorIs(t, err, node.ErrTimeout)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's context did not end")
	var ne *redlock.NodeError
	require.True(t, errors.As(err, &ne))
	assert.Contains(t, err.Error(), "failed")
	assert.GreaterOrEqual(t, len(ne.Addr), 1)
}
