package redlock_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// lateNode is a real node (node.Redis) whose chosen commands run late,
// as on a node driver with one connection per command (a pool) where a
// command that timed out is still in its socket: the call answers a
// timeout at its deadline without running it, and the test runs it on
// the node later (runLate), after whatever the client sent since. While
// gated, acquires wait for the gate to open (or their deadline: a
// timeout, never run), so that the test decides what runs first.
type lateNode struct {
	*node.Redis
	mu       sync.Mutex
	delay    func(op string, holderTTL bool) bool // under mu: delay this call until delayed is closed (see delayFirst)
	delayed  chan struct{}
	isDelay  chan struct{}                        // closed once a call is delayed
	hold     func(op string, holderTTL bool) bool // under mu: hold this call
	held     []func() node.Status                 // the held commands, to run late
	heldTok  []string                             // their tokens (the successor's, for a transfer)
	gate     chan struct{}                        // nil: open
	timedOut map[string]bool                      // token: its held command's call has returned
	released map[string]node.Status               // token: its last release's answer, after its held call returned
	tombs    map[string]time.Duration             // token: the Key.Tomb that release asked for
}

func newLateNodes(t *testing.T, urls []string) []*lateNode {
	t.Helper()
	var ns []*lateNode
	for _, u := range urls {
		r, err := node.Dial(u, node.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() }) // a client made by New does not close its nodes
		ns = append(ns, &lateNode{Redis: r, timedOut: map[string]bool{}, released: map[string]node.Status{}, tombs: map[string]time.Duration{}})
	}
	return ns
}

func asRedlockNodes(ns []*lateNode) []node.Node {
	out := make([]node.Node, len(ns))
	for i, n := range ns {
		out[i] = n
	}
	return out
}

// take reports whether the call is held, recording run for runLate and
// closing the gate for the acquires after it; otherwise it waits for
// the gate.
func (n *lateNode) take(ctx context.Context, op string, holderTTL bool, token string, run func() node.Status) (held bool, err error) {
	n.mu.Lock()
	if n.hold != nil && n.hold(op, holderTTL) {
		n.held, n.heldTok = append(n.held, run), append(n.heldTok, token)
		if n.gate == nil {
			n.gate = make(chan struct{})
		}
		n.mu.Unlock()
		<-ctx.Done()
		n.mu.Lock()
		n.timedOut[token] = true
		n.mu.Unlock()
		return true, &node.Error{Addr: n.Addr(), Op: op, Kind: node.ErrTimeout}
	}
	gate := n.gate
	n.mu.Unlock()
	if gate != nil && op == "acquire" {
		select {
		case <-gate:
		case <-ctx.Done():
			return false, &node.Error{Addr: n.Addr(), Op: op, Kind: node.ErrTimeout}
		}
	}
	return false, nil
}

func (n *lateNode) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	return n.call(ctx, "acquire", holderTTL, k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.Redis.Acquire(ctx, k, ttl, holderTTL)
	})
}

func (n *lateNode) Transfer(ctx context.Context, from, to *node.Key, ttl time.Duration) (node.Result, error) {
	fc := *from
	return n.call(ctx, "transfer", false, to, func(ctx context.Context, to *node.Key) (node.Result, error) {
		return n.Redis.Transfer(ctx, &fc, to, ttl)
	})
}

// call runs do for k on the node now, or holds it (take) to run late,
// or delays it (wait): op and holderTTL are what hold and delay pick by.
// A held command runs on a copy of k, as the caller left it.
func (n *lateNode) call(ctx context.Context, op string, holderTTL bool, k *node.Key, do func(context.Context, *node.Key) (node.Result, error)) (node.Result, error) {
	if err := n.wait(ctx, op, holderTTL); err != nil {
		return node.Result{}, err
	}
	kc := *k
	held, err := n.take(ctx, op, holderTTL, k.Token, func() node.Status {
		res, _ := do(context.Background(), &kc)
		return res.Status
	})
	if held || err != nil {
		return node.Result{}, err
	}
	return do(ctx, k)
}

func (n *lateNode) Release(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	res, err := n.Redis.Release(ctx, k, announce)
	n.record(k, res, err)
	return res, err
}

// delayFirst makes n delay the first call that pick picks until run is
// called, then send it, within the call's deadline: a command that is
// answered in time but runs after commands sent after it (on another
// connection, say). held is closed once that call is waiting.
func (n *lateNode) delayFirst(pick func(op string, holderTTL bool) bool) (held <-chan struct{}, run func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delayed, n.isDelay = make(chan struct{}), make(chan struct{})
	n.delay = pick
	delayed := n.delayed
	return n.isDelay, func() { close(delayed) }
}

// wait delays the call if it is the one delayFirst picks; a timeout if
// its deadline passes first (it was never sent).
func (n *lateNode) wait(ctx context.Context, op string, holderTTL bool) error {
	n.mu.Lock()
	if n.delay == nil || !n.delay(op, holderTTL) {
		n.mu.Unlock()
		return nil
	}
	n.delay = nil
	delayed := n.delayed
	close(n.isDelay)
	n.mu.Unlock()
	select {
	case <-delayed:
		return nil
	case <-ctx.Done():
		return &node.Error{Addr: n.Addr(), Op: op, Kind: node.ErrTimeout}
	}
}

// AcquireShared holds as Acquire does: op "acquire-shared", holderTTL
// standing for wait (a waiting attempt runs the script).
func (n *lateNode) AcquireShared(ctx context.Context, k *node.Key, ttl time.Duration, wait bool) (node.Result, error) {
	return n.call(ctx, "acquire-shared", wait, k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.Redis.AcquireShared(ctx, k, ttl, wait)
	})
}

// AcquireFenced holds as Acquire does: op "acquire-fenced", holderTTL
// standing for an attempt that queues (k.Owner set).
func (n *lateNode) AcquireFenced(ctx context.Context, k *node.Key, ttl, counterTTL time.Duration) (node.Result, error) {
	return n.call(ctx, "acquire-fenced", k.Owner != "", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.Redis.AcquireFenced(ctx, k, ttl, counterTTL)
	})
}

// ReleaseShared records as Release does.
func (n *lateNode) ReleaseShared(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	res, err := n.Redis.ReleaseShared(ctx, k, announce)
	n.record(k, res, err)
	return res, err
}

// record notes the answer to a release of k on the node, and the
// tombstone it asked for.
func (n *lateNode) record(k *node.Key, res node.Result, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil && (n.timedOut[k.Token] || !slices.Contains(n.heldTok, k.Token)) {
		// (A release sent ahead of its acquire, before the call
		// returned, is sent again after it: that one counts.)
		n.released[k.Token], n.tombs[k.Token] = res.Status, k.Tomb
	}
}

// rolledBack reports whether every held command's token has been
// released on the node since its call returned (its rollback ran
// first).
func (n *lateNode) rolledBack() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, tok := range n.heldTok {
		if _, ok := n.released[tok]; !ok {
			return false
		}
	}
	return len(n.heldTok) > 0
}

// tombOf returns the Key.Tomb of token's last release on the node.
func (n *lateNode) tombOf(token string) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tombs[token]
}

// releasedAs returns the answer to token's last release on the node.
func (n *lateNode) releasedAs(token string) node.Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.released[token]
}

// runLate runs the held commands on the node now, stops holding, and
// returns their answers.
func (n *lateNode) runLate() []node.Status {
	n.mu.Lock()
	held := n.held
	n.held, n.hold = nil, nil
	n.mu.Unlock()
	var out []node.Status
	for _, run := range held {
		out = append(out, run())
	}
	return out
}

// lateTokens returns the tokens of the held commands.
func (n *lateNode) lateTokens() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.heldTok...)
}

// notLate asserts that the key on nodes 1 and 2 holds none of their held
// commands' tokens: they ran, and did not take it.
func notLate(t *testing.T, ns []*lateNode, admins []*redistest.Admin, key string) {
	t.Helper()
	for i := 1; i < 3; i++ {
		v := getKey(t, admins[i], key)
		assert.NotContains(t, ns[i].lateTokens(), v, "node %d: the late command took the key for its token, rolled back", i)
	}
}

// open opens the gate.
func (n *lateNode) open() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gate != nil {
		close(n.gate)
		n.gate = nil
	}
}

// holdOn makes nodes 1 and 2 hold the calls hold picks (node 0 holds
// none), and waits until each held one, and its rollback, has run on
// both.
func holdOn(t *testing.T, ns []*lateNode, hold func(i int, op string, holderTTL bool) bool) func() {
	for i, n := range ns[1:] {
		n.mu.Lock()
		n.hold = func(op string, holderTTL bool) bool { return hold(i+1, op, holderTTL) }
		n.mu.Unlock()
	}
	return func() {
		t.Helper()
		require.Eventually(t, func() bool { return ns[1].rolledBack() && ns[2].rolledBack() },
			5*time.Second, time.Millisecond, "the held commands' rollbacks")
	}
}

// keysLeft returns the keys on the node, tombstones (node.TombKey of key)
// deleted first.
func keysLeft(t *testing.T, a *redistest.Admin, key string) []string {
	t.Helper()
	ctx := context.Background()
	v, err := a.Do(ctx, "KEYS", "*")
	require.NoError(t, err)
	var left []string
	for _, k := range v.([]any) {
		name := string(k.([]byte))
		if strings.HasPrefix(name, node.TombKey(key, "")) {
			_, err := a.Do(ctx, "DEL", name)
			require.NoError(t, err)
			continue
		}
		left = append(left, name)
	}
	return left
}

// everywhere waits until the key holds token on every node: a lock's
// call returns at a majority, and its straggler lands a moment later.
func everywhere(t *testing.T, admins []*redistest.Admin, key, token string) {
	t.Helper()
	seen := make([]string, len(admins))
	require.Eventually(t, func() bool {
		for i, ad := range admins {
			seen[i] = getKey(t, ad, key)
		}
		return !slices.ContainsFunc(seen, func(v string) bool { return v != token })
	}, 5*time.Second, time.Millisecond, "the key on every node: want %q, the nodes hold %q", token, seen)
}

// liveHolds asserts that the key holds token on a majority of the
// nodes, and no held command's token anywhere.
func liveHolds(t *testing.T, ns []*lateNode, admins []*redistest.Admin, key, token string) {
	t.Helper()
	held := 0
	for i, ad := range admins {
		v := getKey(t, ad, key)
		if v == token {
			held++
		}
		for _, n := range ns {
			assert.NotContains(t, n.lateTokens(), v, "node %d: a late command's token", i)
		}
	}
	assert.GreaterOrEqual(t, held, 2, "the live lock holds the key on a majority")
}

// noKeysLeft waits until no key is left on any node but tombstones of
// key, which it deletes: a grant to the waiter on a node it did not
// need lapses by itself within node.GrantTTL.
func noKeysLeft(t *testing.T, admins []*redistest.Admin, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, ad := range admins {
			if len(keysLeft(t, ad, key)) > 0 {
				return false
			}
		}
		return true
	}, node.WaiterLease+time.Second, 20*time.Millisecond, "keys left")
}

func getKey(t *testing.T, a *redistest.Admin, key string) string {
	t.Helper()
	v, err := a.Do(context.Background(), "GET", key)
	require.NoError(t, err)
	b, _ := v.([]byte)
	return string(b)
}

// lateClient returns the late nodes over urls, and a client of them with
// the node timeout whose commands run late (tombTimeout) and opts; the
// test's end closes it.
func lateClient(t *testing.T, urls []string, opts ...redlock.Option) ([]*lateNode, *redlock.Client) {
	t.Helper()
	ns := newLateNodes(t, urls)
	b, err := redlock.New(asRedlockNodes(ns), append([]redlock.Option{redlock.WithTTL(tombTTL), redlock.WithNodeTimeout(tombTimeout)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return ns, b
}

// holderClient returns a client of the nodes at urls (not late ones)
// for the holder of the tests' lock, with a node timeout long enough
// that its stragglers land; the test's end closes it.
func holderClient(t *testing.T, urls []string) *redlock.Client {
	t.Helper()
	a, err := redlock.Dial(urls, redlock.WithTTL(tombTTL), redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// takeAndClose asserts that the holder's client a takes "k" at once
// (what says why it must be free), unlocks it, and closes both clients.
func takeAndClose(t *testing.T, a, b *redlock.Client, what string) {
	t.Helper()
	ctx := context.Background()
	l, err := a.TryLock(ctx, "k")
	require.NoError(t, err, what)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, b.Close())
	require.NoError(t, a.Close())
}

// watchFrees waits until key is gone from the node a, where a late
// command has just set it: a watched release frees it within its longest
// wait between tries (2 s) and a round trip, not a TTL.
func watchFrees(t *testing.T, a *redistest.Admin, key, what string) {
	t.Helper()
	ran := time.Now()
	require.Eventually(t, func() bool { return getKey(t, a, key) == "" },
		2*time.Second+tombTimeout+500*time.Millisecond, 5*time.Millisecond, what)
	t.Logf("freed %v after the late command ran", time.Since(ran).Round(time.Millisecond))
}

// lockInBackground calls c.Lock(key) in the background, with a 5 s deadline
// (receiveLock waits for it).
func lockInBackground(ctx context.Context, c *redlock.Client, key string) <-chan lockResult {
	done := make(chan lockResult, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := c.Lock(lctx, key)
		done <- lockResult{l, err, time.Now()}
	}()
	return done
}

// holdFirst makes n hold the first call that pick picks, and no other.
func (n *lateNode) holdFirst(pick func(op string, holderTTL bool) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	held := false
	n.hold = func(op string, holderTTL bool) bool { // under n.mu
		if held || !pick(op, holderTTL) {
			return false
		}
		held = true
		return true
	}
}

// waitTimedOut waits until the call n holds for token has returned: its
// caller saw it time out.
func (n *lateNode) waitTimedOut(t *testing.T, token, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.timedOut[token]
	}, 5*time.Second, time.Millisecond, what)
}

const (
	tombTTL     = 30 * time.Second       // far above every bound the tests assert
	tombTimeout = 200 * time.Millisecond // the node timeout of the client whose commands run late
)

// TestLateWaitingAcquireAfterRollback (issue 43): a waiting attempt's
// acquire.lua times out on two of three nodes and runs there only after
// its rollback, which found the holder's token; the holder's Unlock
// then reserves (or grants) the key to the waiter, and the late attempt
// runs. It must not take the key for its token, already rolled back:
// the waiter's next attempt gets the lock within a node timeout, not
// after the holder's TTL.
func TestLateWaitingAcquireAfterRollback(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	a := holderClient(t, urls)
	ns, b := lateClient(t, urls, redlock.WithRetry(redlock.LinearBackoff(30*time.Millisecond)))

	holder, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	everywhere(t, admins, "k", holder.Token())
	// The waiter's second waiting attempt is held on nodes 1 and 2; its
	// first registered it there, so the Unlock hands the key on to it.
	var waiting [3]int // waiting acquires per node (under the node's mu)
	rolledBack := holdOn(t, ns, func(i int, op string, holderTTL bool) bool {
		if op != "acquire" || !holderTTL {
			return false
		}
		waiting[i]++
		return waiting[i] == 2 // the second attempt's (a straggler of the first may come after it elsewhere)
	})
	done := lockInBackground(ctx, b, "k")
	rolledBack()
	require.NoError(t, holder.Unlock(ctx))
	// (Unlock returns at a majority: one of the two may be the late one.)
	for i := 1; i < 3; i++ {
		require.Eventually(t, func() bool { return strings.HasPrefix(getKey(t, admins[i], "k"), "~") },
			5*time.Second, time.Millisecond, "node %d: the Unlock handed the key on to the waiter", i)
	}
	for i := 1; i < 3; i++ {
		assert.Equal(t, []node.Status{node.Taken}, ns[i].runLate(), "node %d: the late command is refused", i)
	}
	notLate(t, ns, admins, "k")
	opened := time.Now()
	ns[1].open()
	ns[2].open()
	g := receiveLock(t, done)
	require.NoError(t, g.err, "the waiter gets the lock")
	assert.Less(t, g.at.Sub(opened), tombTimeout+500*time.Millisecond, "within a node timeout and a round trip, not a TTL")
	liveHolds(t, ns, admins, "k", g.l.Token())
	require.NoError(t, g.l.Unlock(ctx))
	require.NoError(t, b.Close())
	require.NoError(t, a.Close())
	noKeysLeft(t, admins, "k")
}

// TestLateTransferAfterRollback (issue 43): a local handoff's transfer
// times out on two of three nodes, the handoff fails, the successor's
// keys are rolled back and the holder's released; then the transfers
// run. They must not set the key to the successor's token, already
// rolled back: the local waiter gets the lock within a node timeout.
func TestLateTransferAfterRollback(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	ns, b := lateClient(t, urls, redlock.WithRetry(redlock.LinearBackoff(30*time.Millisecond)))

	holder, err := b.TryLock(ctx, "k")
	require.NoError(t, err)
	everywhere(t, admins, "k", holder.Token())
	done := lockInBackground(ctx, b, "k")
	// The waiter has tried (and queued on the nodes) before the Unlock.
	require.Eventually(t, func() bool {
		n, err := admins[0].Do(ctx, "EXISTS", node.WaitersKey("k"))
		return err == nil && n == int64(1)
	}, 5*time.Second, time.Millisecond)
	rolledBack := holdOn(t, ns, func(_ int, op string, _ bool) bool { return op == "transfer" })
	unlocked := make(chan error, 1)
	go func() { unlocked <- holder.Unlock(ctx) }()
	rolledBack()
	require.NoError(t, <-unlocked)
	for i := 1; i < 3; i++ {
		assert.Equal(t, []node.Status{node.Taken}, ns[i].runLate(), "node %d: the late command is refused", i)
	}
	notLate(t, ns, admins, "k")
	opened := time.Now()
	ns[1].open()
	ns[2].open()
	g := receiveLock(t, done)
	require.NoError(t, g.err, "the local waiter gets the lock")
	assert.Less(t, g.at.Sub(opened), tombTimeout+500*time.Millisecond, "within a node timeout and a round trip, not a TTL")
	liveHolds(t, ns, admins, "k", g.l.Token())
	require.NoError(t, g.l.Unlock(ctx))
	require.NoError(t, b.Close())
	noKeysLeft(t, admins, "k")
}

// TestLatePlainSetAfterRollback (issue 43): a TryLock's plain SET NX
// times out on two of three nodes and runs there only after its
// rollback, which found the holder's token, and after the holder's
// Unlock deleted the key: it sets the key, which no script could stop.
// The rollback keeps watching those nodes, and frees the key within its
// longest wait between tries (2 s) and a round trip, not a TTL.
func TestLatePlainSetAfterRollback(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	a := holderClient(t, urls)
	ns, b := lateClient(t, urls)

	// The uncontended cycle asks for no tombstone.
	l, err := b.TryLock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	everywhere(t, admins, "k", "") // Unlock returns at a majority
	for i, n := range ns {
		assert.Zero(t, n.tombOf(l.Token()), "node %d: an Unlock after an acquire that answered asks for no tombstone", i)
	}

	holder, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	everywhere(t, admins, "k", holder.Token())
	rolledBack := holdOn(t, ns, func(_ int, op string, holderTTL bool) bool { return op == "acquire" && !holderTTL })
	_, err = b.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	rolledBack()
	for i := 1; i < 3; i++ {
		tok := ns[i].lateTokens()[0]
		assert.Equal(t, node.Taken, ns[i].releasedAs(tok), "node %d: the rollback found the holder's token", i)
		// (A release sent ahead of the SET's timeout, which asks for
		// none, may be recorded first; the one after it follows.)
		require.Eventually(t, func() bool { return ns[i].tombOf(tok) > 0 }, 5*time.Second, time.Millisecond,
			"node %d: the rollback after a timed-out SET asks for a tombstone", i)
		tomb := ns[i].tombOf(tok)
		assert.LessOrEqual(t, tomb, 2*time.Second+tombTimeout, "node %d: until the watch's next try, not a TTL", i)
		v, err := admins[i].Do(ctx, "EXISTS", node.TombKey("k", tok))
		require.NoError(t, err)
		assert.Equal(t, int64(1), v, "node %d: the tombstone is there", i)
	}
	require.NoError(t, holder.Unlock(ctx))
	everywhere(t, admins, "k", "") // Unlock returns at a majority
	for i := 1; i < 3; i++ {
		require.Equal(t, []node.Status{node.Done}, ns[i].runLate(), "node %d: the late SET set the key", i)
	}
	ran := time.Now()
	require.Eventually(t, func() bool {
		for _, ad := range admins {
			if getKey(t, ad, "k") != "" {
				return false
			}
		}
		return true
	}, 2*time.Second+tombTimeout+500*time.Millisecond, 5*time.Millisecond, "the late keys are released, not left for a TTL")
	t.Logf("freed %v after the late SETs ran", time.Since(ran).Round(time.Millisecond))
	takeAndClose(t, a, b, "the key is free")
	// The tombstones go by themselves once the watches have ended (at
	// Close): within the longest wait between tries and a node timeout.
	require.Eventually(t, func() bool {
		for _, ad := range admins {
			v, err := ad.Do(ctx, "DBSIZE")
			if err != nil || v != int64(0) {
				return false
			}
		}
		return true
	}, 2*time.Second+tombTimeout+time.Second, 20*time.Millisecond, "keys left (tombstones included)")
}

// TestLateAcquireOfAHandedOverLock (issue 43, a torture trace): a lock's
// plain SET times out on one of three nodes and runs there only after
// the lock was handed on within its client and the successor unlocked.
// No release of the handed-over lock follows on that node (the transfer
// removed its key there), so without a watch the late SET's key stays
// for the TTL; the transfer watches the old token there, and frees it
// within the longest wait between tries (2 s) and a round trip.
func TestLateAcquireOfAHandedOverLock(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	ns, b := lateClient(t, urls)

	ns[2].holdFirst(func(op string, holderTTL bool) bool { return op == "acquire" && !holderTTL })
	holder, err := b.TryLock(ctx, "k")
	require.NoError(t, err, "nodes 0 and 1 are a majority")
	require.Eventually(t, func() bool { return slices.Equal([]string{holder.Token()}, ns[2].lateTokens()) },
		5*time.Second, time.Millisecond, "node 2 holds the holder's SET") // TryLock returns at a majority

	done := lockInBackground(ctx, b, "k")
	require.Eventually(t, func() bool {
		n, err := admins[0].Do(ctx, "EXISTS", node.WaitersKey("k"))
		return err == nil && n == int64(1)
	}, 5*time.Second, time.Millisecond, "the waiter has queued")
	require.NoError(t, holder.Unlock(ctx), "handed on to the local waiter")
	g := receiveLock(t, done)
	require.NoError(t, g.err)
	everywhere(t, admins, "k", g.l.Token()) // the transfer took node 2 too: the key was absent there
	require.NoError(t, g.l.Unlock(ctx))
	everywhere(t, admins, "k", "")

	require.Equal(t, []node.Status{node.Done}, ns[2].runLate(), "the late SET set the key, free again")
	ns[2].open()
	watchFrees(t, admins[2], "k", "the handed-over lock's late key is released, not left for a TTL")
	require.NoError(t, b.Close())
	noKeysLeft(t, admins, "k")
}

// TestLateAcquireAfterAnExtendFoundAnotherHolder (issue 43, torture
// traces): a lock's SET times out on one of three nodes, and its Extend
// finds another token there. That answer says nothing of the SET still
// on its way, so the Unlock releases on that node all the same (with a
// tombstone, watched) instead of passing it by: once the late SET sets
// the key, it is freed within the longest wait between tries (2 s) and a
// round trip, not left for the TTL.
func TestLateAcquireAfterAnExtendFoundAnotherHolder(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	var extended atomic.Bool // node 2 answered the Extend
	ns, b := lateClient(t, urls, redlock.WithHooks(redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Node == 2 && i.Op == "extend" && i.Err == nil {
			extended.Store(true)
		}
	}}))

	ns[2].holdFirst(func(op string, holderTTL bool) bool { return op == "acquire" && !holderTTL })
	l, err := b.TryLock(ctx, "k")
	require.NoError(t, err, "nodes 0 and 1 are a majority")
	ns[2].open()
	ns[2].waitTimedOut(t, l.Token(), "node 2's SET timed out (the Extend goes there after it)")
	_, err = admins[2].Do(ctx, "SET", "k", "someone-else", "PX", 60000)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, tombTTL), "nodes 0 and 1 extend")
	// Extend returns at a majority: node 2's must find the other token
	// before it goes.
	require.Eventually(t, extended.Load, 5*time.Second, time.Millisecond, "node 2 answered the Extend")
	_, err = admins[2].Do(ctx, "DEL", "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	everywhere(t, admins, "k", "")

	require.Equal(t, []node.Status{node.Done}, ns[2].runLate(), "the late SET set the key, free again")
	watchFrees(t, admins[2], "k", "the late key is released, not left for a TTL")
	require.NoError(t, b.Close())
	noKeysLeft(t, admins, "k")
}

// TestLateTransferOfAHandedOverLock (issue 43, a torture trace): the
// transfer that hands a lock to S1 runs late on one of three nodes,
// after S1 was handed on to S2, whose transfer found another token on
// that node, and after S2 unlocked. S1's key, set there by the late
// transfer, is released within the longest wait between tries (2 s) and
// a round trip, not left for the TTL.
func TestLateTransferOfAHandedOverLock(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	var attempts atomic.Int32  // acquires answered by node 0
	var transfers atomic.Int32 // transfers answered by node 2
	ns, b := lateClient(t, urls, redlock.WithHooks(redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Node == 0 && i.Op == "acquire" {
			attempts.Add(1)
		}
		if i.Node == 2 && i.Op == "transfer" && i.Err == nil {
			transfers.Add(1)
		}
	}}))
	receive := func(c <-chan lockResult) *redlock.Lock {
		t.Helper()
		g := receiveLock(t, c)
		require.NoError(t, g.err)
		return g.l
	}
	// lockInBackground's call has tried the nodes once (and waits for a
	// handoff): node 0 answered an acquire more than before.
	tried := func(before int32) {
		t.Helper()
		require.Eventually(t, func() bool { return attempts.Load() > before }, 5*time.Second, time.Millisecond, "the waiter has tried")
		time.Sleep(50 * time.Millisecond) // its attempt's other nodes answer, and it waits for the handoff
	}

	holder, err := b.TryLock(ctx, "k")
	require.NoError(t, err)
	everywhere(t, admins, "k", holder.Token())
	ns[2].holdFirst(func(op string, _ bool) bool { return op == "transfer" })
	n := attempts.Load()
	first := lockInBackground(ctx, b, "k")
	tried(n)
	require.NoError(t, holder.Unlock(ctx))
	s1 := receive(first)
	ns[2].waitTimedOut(t, s1.Token(), "the transfer to S1 timed out on node 2")
	ns[2].open()
	// The holder's key there is released in the background; then
	// another token takes node 2, so that S2's transfer finds it.
	require.Eventually(t, func() bool { return getKey(t, admins[2], "k") == "" }, 5*time.Second, time.Millisecond)
	_, err = admins[2].Do(ctx, "SET", "k", "someone-else", "PX", 60000)
	require.NoError(t, err)
	n = attempts.Load()
	second := lockInBackground(ctx, b, "k")
	tried(n)
	require.NoError(t, s1.Unlock(ctx), "handed on to S2")
	s2 := receive(second)
	// The handoff returns at a majority: S2's transfer must find the
	// other token on node 2 before it goes (S1's timed out there).
	require.Eventually(t, func() bool { return transfers.Load() == 1 }, 5*time.Second, time.Millisecond, "node 2 answered S2's transfer")
	_, err = admins[2].Do(ctx, "DEL", "k")
	require.NoError(t, err)
	require.NoError(t, s2.Unlock(ctx))
	everywhere(t, admins, "k", "")

	// The watch's first try may have left S1's tombstone already: then
	// the late transfer is refused (Taken); else it sets S1's token.
	late := ns[2].runLate()
	require.Len(t, late, 1)
	require.Contains(t, []node.Status{node.Done, node.Taken}, late[0])
	watchFrees(t, admins[2], "k", "S1's late key is released, not left for a TTL")
	require.NoError(t, b.Close())
	noKeysLeft(t, admins, "k")
}

// TestLateAttemptAfterAHandoffIsLeft (issue 43, a torture trace): a
// waiter's waiting attempt times out on one of three nodes; the holder
// of the same client then hands it the lock, whose transfer drops the
// waiter's registration on every node; then the attempt runs on that
// node and registers the call again. The call holds the lock, but its
// Leave is still owed there, and sent again until the late attempt has
// had its chance: the registration goes within a lease, and is not
// granted the key when the lock is unlocked.
func TestLateAttemptAfterAHandoffIsLeft(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	ns, b := lateClient(t, urls)

	holder, err := b.TryLock(ctx, "k")
	require.NoError(t, err)
	everywhere(t, admins, "k", holder.Token())
	ns[2].holdFirst(func(op string, holderTTL bool) bool { return op == "acquire" && holderTTL })
	done := lockInBackground(ctx, b, "k")
	require.Eventually(t, func() bool {
		ns[2].mu.Lock()
		defer ns[2].mu.Unlock()
		return len(ns[2].heldTok) == 1 && ns[2].timedOut[ns[2].heldTok[0]]
	}, 5*time.Second, time.Millisecond, "the waiter's waiting attempt timed out on node 2")
	ns[2].open()
	require.NoError(t, holder.Unlock(ctx), "handed on to the waiter")
	g := receiveLock(t, done)
	require.NoError(t, g.err)
	everywhere(t, admins, "k", g.l.Token())

	// It registers the call again (the owed Leave, resent, may take it
	// out at once).
	require.Equal(t, []node.Status{node.Taken}, ns[2].runLate(), "the late attempt finds the lock's key")
	ran := time.Now()
	require.Eventually(t, func() bool {
		n, err := admins[2].Do(ctx, "EXISTS", node.WaitersKey("k"))
		return err == nil && n == int64(0)
	}, node.WaiterLease*3/4, 5*time.Millisecond, "the late registration is left before its lease ends")
	t.Logf("left %v after the late attempt ran", time.Since(ran).Round(time.Millisecond))
	require.NoError(t, g.l.Unlock(ctx))
	everywhere(t, admins, "k", "")
	require.NoError(t, b.Close())
	noKeysLeft(t, admins, "k")
}

// TestLateSharedAcquireAfterRollback (issue 43, a torture trace): a
// reader's waiting attempt (acquire_shared.lua) times out on two of
// three nodes, where a writer holds the key, and runs there only after
// its rollback, the reader's giving up and the writer's Unlock. It must
// not add the rolled-back token as a reader of the free key: that marker
// would block writers on a majority for the TTL, and only a watched
// release (after up to 2 s) would remove it.
func TestLateSharedAcquireAfterRollback(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	a := holderClient(t, urls)
	ns, b := lateClient(t, urls, redlock.WithRetry(redlock.LinearBackoff(30*time.Millisecond)))

	writer, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	everywhere(t, admins, "k", writer.Token())
	var waiting [3]int // waiting shared acquires per node (under the node's mu)
	rolledBack := holdOn(t, ns, func(i int, op string, wait bool) bool {
		if op != "acquire-shared" || !wait {
			return false
		}
		waiting[i]++
		return waiting[i] == 1
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.RLock(rctx, "k")
		done <- err
	}()
	rolledBack()
	for i := 1; i < 3; i++ {
		tok := ns[i].lateTokens()[0]
		require.Eventually(t, func() bool { return ns[i].tombOf(tok) > 0 }, 5*time.Second, time.Millisecond,
			"node %d: the rollback after a timed-out shared acquire asks for a tombstone", i)
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, writer.Unlock(ctx))
	everywhere(t, admins, "k", "")
	for i := 1; i < 3; i++ {
		assert.Equal(t, []node.Status{node.Taken}, ns[i].runLate(), "node %d: the late shared acquire is refused", i)
		assert.Empty(t, getKey(t, admins[i], "k"), "node %d: no reader's marker", i)
	}
	ns[1].open()
	ns[2].open()
	takeAndClose(t, a, b, "the key is free at once")
	noKeysLeft(t, admins, "k")
}

// TestLateAttemptOfAnEarlierCallIsLeft (issue 43, a torture trace): a
// fenced waiter (no grant: the nodes know it by its client's tag alone)
// gives up while its waiting attempt, timed out on two of three nodes,
// may still run there: its Leave is owed. The client's next call on the
// key registers (the debt is not sent meanwhile: by tag it would take
// that call's entry out), gives up too, and leaves. Then the first
// call's attempt runs and registers the client again, and the holder's
// Unlock reserves the key for it on a majority. The debt, kept for after
// the second call, takes the reservation out within its resend wait, not
// a lease later.
func TestLateAttemptOfAnEarlierCallIsLeft(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	a := holderClient(t, urls)
	ns, b := lateClient(t, urls, redlock.WithFencing(), redlock.WithRetry(redlock.LinearBackoff(30*time.Millisecond)))
	queued := func(want int64) func() bool {
		return func() bool {
			for _, ad := range admins {
				if n, err := ad.Do(ctx, "EXISTS", node.WaitersKey("k")); err != nil || n != want {
					return false
				}
			}
			return true
		}
	}

	holder, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	everywhere(t, admins, "k", holder.Token())
	var waiting [3]int // waiting attempts per node (under the node's mu)
	rolledBack := holdOn(t, ns, func(i int, op string, queues bool) bool {
		if op != "acquire-fenced" || !queues {
			return false
		}
		waiting[i]++
		return waiting[i] == 1
	})
	ctx1, cancel1 := context.WithCancel(ctx)
	first := lockInBackground(ctx1, b, "k")
	rolledBack()
	cancel1()
	require.ErrorIs(t, receiveLock(t, first).err, context.Canceled)
	ns[1].open()
	ns[2].open()
	require.Eventually(t, queued(0), 5*time.Second, 5*time.Millisecond, "the first call left")

	ctx2, cancel2 := context.WithCancel(ctx)
	second := lockInBackground(ctx2, b, "k")
	require.Eventually(t, queued(1), 5*time.Second, 5*time.Millisecond, "the second call is registered")
	time.Sleep(2 * tombTimeout) // the first call's debt comes due meanwhile
	assert.True(t, queued(1)(), "the debt did not take the second call's entry out")
	cancel2()
	require.ErrorIs(t, receiveLock(t, second).err, context.Canceled)
	require.Eventually(t, queued(0), 5*time.Second, 5*time.Millisecond, "the second call left")

	for i := 1; i < 3; i++ {
		require.Equal(t, []node.Status{node.Taken}, ns[i].runLate(), "node %d: the first call's late attempt queues the client again", i)
	}
	require.NoError(t, holder.Unlock(ctx))
	ran := time.Now()
	require.Eventually(t, func() bool {
		for i := 1; i < 3; i++ {
			if strings.HasPrefix(getKey(t, admins[i], "k"), "~") {
				return false
			}
		}
		return true
	}, node.WaiterLease*3/4, 5*time.Millisecond, "the key reserved for a client with no waiter is handed on before the lease ends")
	t.Logf("handed on %v after the Unlock", time.Since(ran).Round(time.Millisecond))
	takeAndClose(t, a, b, "the key is free")
	noKeysLeft(t, admins, "k")
}

// TestAttemptRunAfterAHandoffIsLeft (issue 43, a torture trace): a
// waiter's waiting attempt is on its way to two of three nodes when the
// holder, of the same client, unlocks and hands it the lock. The
// transfer runs first there and drops the waiter's registration; then
// the attempt runs, answered in time, and registers the call again. The
// call, which got its lock by the handoff, must leave there all the
// same: the transfer is no proof that no attempt of the call comes after
// it, and the entry would otherwise stay for a lease (and take a key a
// release hands on).
func TestAttemptRunAfterAHandoffIsLeft(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	ns, b := lateClient(t, urls)
	queuedOn := func(i int) bool {
		n, err := admins[i].Do(ctx, "EXISTS", node.WaitersKey("k"))
		return err == nil && n == int64(1)
	}

	holder, err := b.TryLock(ctx, "k")
	require.NoError(t, err)
	everywhere(t, admins, "k", holder.Token())
	done := lockInBackground(ctx, b, "k")
	require.Eventually(t, func() bool { return queuedOn(0) && queuedOn(1) && queuedOn(2) }, 5*time.Second, time.Millisecond,
		"the waiter's waiting attempt registered it")
	var held [3]<-chan struct{}
	var run [3]func()
	for i := 1; i < 3; i++ {
		held[i], run[i] = ns[i].delayFirst(func(op string, holderTTL bool) bool { return op == "acquire" && holderTTL })
	}
	for i := 1; i < 3; i++ {
		select {
		case <-held[i]:
		case <-time.After(5 * time.Second):
			t.Fatalf("node %d: the waiter's next attempt never came", i)
		}
	}
	require.NoError(t, holder.Unlock(ctx), "handed over to the waiter")
	for i := 1; i < 3; i++ {
		run[i]() // the attempt runs after the transfer
	}
	g := receiveLock(t, done)
	require.NoError(t, g.err)
	require.Eventually(t, func() bool { return !queuedOn(1) && !queuedOn(2) }, node.WaiterLease*3/4, 5*time.Millisecond,
		"the registration the attempt made after the transfer is left before its lease ends")
	require.NoError(t, g.l.Unlock(ctx))
	require.NoError(t, b.Close())
	noKeysLeft(t, admins, "k")
}
