package redlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// keysOn returns how many keys a fake node holds now.
func keysOn(f *fakeNode) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys)
}

// holdAll takes every permit of s by TryAcquire and returns them by slot
// key.
func holdAll(t *testing.T, s *redlock.Semaphore) map[string]*redlock.Lock {
	t.Helper()
	held := map[string]*redlock.Lock{}
	for range s.Permits() {
		l, err := s.TryAcquire(context.Background())
		require.NoError(t, err)
		held[l.Key()] = l
	}
	return held
}

// TestSemaphoreBadInput: bad arguments are ErrInvalid and write nothing;
// a closed client is ErrClosed.
func TestSemaphoreBadInput(t *testing.T) {
	fakes, _, c := setup(t, 5)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		permits int
	}{{"", 2}, {"s", 0}, {"s", -1}} {
		_, err := c.Semaphore(tc.name, tc.permits)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "%q with %d permits", tc.name, tc.permits)
	}
	s, err := c.Semaphore("s", 2)
	require.NoError(t, err)
	assert.Equal(t, "s", s.Name())
	assert.Equal(t, 2, s.Permits())
	for _, ttl := range []time.Duration{0, -time.Second} {
		_, err = s.TryAcquire(ctx, redlock.WithTTL(ttl))
		assert.ErrorIs(t, err, redlock.ErrInvalid)
		_, err = s.Acquire(ctx, redlock.WithTTL(ttl))
		assert.ErrorIs(t, err, redlock.ErrInvalid)
	}
	for _, f := range fakes {
		assert.Zero(t, f.count("acquire"), "bad input sent nothing")
		assert.Zero(t, keysOn(f))
	}
	require.NoError(t, c.Close())
	_, err = c.Semaphore("s", 2)
	assert.ErrorIs(t, err, redlock.ErrClosed)
	_, err = s.TryAcquire(ctx)
	assert.ErrorIs(t, err, redlock.ErrClosed)
	_, err = s.Acquire(ctx)
	assert.ErrorIs(t, err, redlock.ErrClosed)
}

// TestSemaphoreAdmitsAtMostPermits: three permits are three holders on
// three different slots; a fourth is refused with a QuorumError, and gets
// in once one holder unlocks.
func TestSemaphoreAdmitsAtMostPermits(t *testing.T) {
	fakes, _, c := setup(t, 5)
	ctx := context.Background()
	s, err := c.Semaphore("s", 3)
	require.NoError(t, err)
	held := holdAll(t, s)
	assert.Len(t, held, 3, "each holder has its own slot")
	for i := range 3 {
		assert.Contains(t, held, redlock.PermitKey("s", i))
	}
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.True(t, errors.As(err, &qe))
	assert.Equal(t, 1, qe.Attempts)

	l := held[redlock.PermitKey("s", 1)]
	require.NoError(t, l.Unlock(ctx))
	l2, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, redlock.PermitKey("s", 1), l2.Key(), "the freed slot")
	delete(held, l.Key())
	held[l2.Key()] = l2

	// Extend works on a permit as on any lock.
	require.NoError(t, l2.Extend(ctx, time.Minute))
	for _, h := range held {
		require.NoError(t, h.Unlock(ctx))
	}
	require.Eventually(t, func() bool {
		for _, f := range fakes {
			if keysOn(f) != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "keys left behind")
}

// TestSemaphoreAcquireWaitsForARelease: with every permit held, Acquire
// waits (the retry delay is an hour) and is granted as soon as a holder
// unlocks any slot.
func TestSemaphoreAcquireWaitsForARelease(t *testing.T) {
	ws, _, c := wakeSetup(t)
	ctx := context.Background()
	s, err := c.Semaphore("s", 2)
	require.NoError(t, err)
	a, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := s.TryAcquire(ctx)
	require.NoError(t, err)

	got := make(chan *redlock.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx)
		errc <- err
		got <- l
	}()
	require.Eventually(t, func() bool {
		return ws[0].watching(redlock.PermitKey("s", 0)) == 1 && ws[0].watching(redlock.PermitKey("s", 1)) == 1
	}, 5*time.Second, time.Millisecond, "the waiter watches every slot")
	time.Sleep(5 * time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("Acquire returned while both permits were held: %v", err)
	default:
	}
	require.NoError(t, b.Unlock(ctx))
	require.NoError(t, recvErr(t, errc, "Acquire after Unlock"))
	l := <-got
	assert.Equal(t, b.Key(), l.Key())
	for _, w := range ws {
		assert.Zero(t, w.watching(redlock.PermitKey("s", 0)), "a watch outlived its Acquire call")
	}
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, a.Unlock(ctx))
}

// TestSemaphoreAcquireEndsWithItsContext: a waiting Acquire whose context
// ends returns the last round's QuorumError with the context's error.
func TestSemaphoreAcquireEndsWithItsContext(t *testing.T) {
	_, _, c := wakeSetup(t)
	s, err := c.Semaphore("s", 1)
	require.NoError(t, err)
	a, err := s.TryAcquire(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, a.Unlock(context.Background()))
}

// TestSemaphoreWaitersOfOneClientInOrder: goroutines of one client take
// permits in the order they started waiting.
func TestSemaphoreWaitersOfOneClientInOrder(t *testing.T) {
	ws, _, c := wakeSetup(t)
	ctx := context.Background()
	s, err := c.Semaphore("s", 1)
	require.NoError(t, err)
	holder, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			l, err := s.Acquire(ctx)
			if err != nil {
				order <- -1
				return
			}
			order <- i
			_ = l.Unlock(ctx)
		}()
		// The next one starts once this one waits: the first watches
		// the slot, the later ones queue behind it.
		if i == 0 {
			require.Eventually(t, func() bool { return ws[0].watching(redlock.PermitKey("s", 0)) == 1 }, 5*time.Second, time.Millisecond)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.NoError(t, holder.Unlock(ctx))
	for want := range 3 {
		select {
		case got := <-order:
			assert.Equal(t, want, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d never got the permit", want)
		}
	}
}

// watchHandoff is a fake node that offers both node.Handoffer and
// node.Watcher, as the redigo node does.
type watchHandoff struct {
	*handoffNode
	w *watchingNode
}

func (n watchHandoff) Watch(key, owner string, released chan<- struct{}) node.Watch {
	return n.w.Watch(key, owner, released)
}

// semHandoffSetup is a client over three such nodes, with an hour's retry
// delay: a waiter is woken only by a release or a handoff.
func semHandoffSetup(t *testing.T) ([]*fakeNode, []*watchingNode, *clock.Fake, *redlock.Client) {
	t.Helper()
	fakes, ws, nodes, clk := watchHandoffNodes()
	return fakes, ws, clk, handoffClient(t, nodes, clk, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
}

func watchHandoffNodes() ([]*fakeNode, []*watchingNode, []node.Node, *clock.Fake) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(3, clk)
	hs := asHandoff(fakes)
	ws := make([]*watchingNode, len(fakes))
	nodes := make([]node.Node, len(fakes))
	for i, f := range fakes {
		ws[i] = newWatching(f)
		nodes[i] = watchHandoff{handoffNode: hs[i].(*handoffNode), w: ws[i]}
	}
	return fakes, ws, nodes, clk
}

type acquired struct {
	l   *redlock.Lock
	err error
}

func acquireAsync(ctx context.Context, s *redlock.Semaphore) <-chan acquired {
	out := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx)
		out <- acquired{l, err}
	}()
	return out
}

func counts(fakes []*fakeNode, op string) []int {
	out := make([]int, len(fakes))
	for i, f := range fakes {
		out[i] = f.count(op)
	}
	return out
}

// TestSemaphoreHandsASlotWithinClient: with every permit held, an Unlock
// of a permit hands its slot to the client's waiting Acquire by one
// transfer per node: no release, no retry delay (an hour), a fresh token
// on every node.
func TestSemaphoreHandsASlotWithinClient(t *testing.T) {
	fakes, ws, clk, c := semHandoffSetup(t)
	ctx := context.Background()
	s, err := c.Semaphore("s", 2)
	require.NoError(t, err)
	a, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	rc := acquireAsync(ctx, s)
	require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond, "the waiter sleeps")
	releases := counts(fakes, "release")

	require.NoError(t, a.Unlock(ctx))
	var r acquired
	select {
	case r = <-rc:
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return")
	}
	require.NoError(t, r.err)
	assert.Equal(t, a.Key(), r.l.Key(), "the slot handed over")
	assert.NotEqual(t, a.Token(), r.l.Token())
	require.Eventually(t, func() bool { return holders(fakes, a.Key(), r.l.Token()) == 3 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, releases, counts(fakes, "release"), "no release: the transfer replaced the token")
	require.Eventually(t, func() bool { return slices.Equal([]int{1, 1, 1}, counts(fakes, "transfer")) }, 5*time.Second, time.Millisecond)
	require.NoError(t, r.l.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	for _, w := range ws {
		assert.Zero(t, w.watching(a.Key()), "a watch outlived its Acquire call")
	}
}

// oneSlotAwaited is a semaphore of one permit on semHandoffSetup's
// client, held by held, with a first Acquire asleep behind it (its
// result to come on first).
type oneSlotAwaited struct {
	fakes []*fakeNode
	ws    []*watchingNode
	clk   *clock.Fake
	s     *redlock.Semaphore
	held  *redlock.Lock
	first <-chan acquired
}

func awaitOneSlot(t *testing.T) oneSlotAwaited {
	t.Helper()
	fakes, ws, clk, c := semHandoffSetup(t)
	s, err := c.Semaphore("s", 1)
	require.NoError(t, err)
	h, err := s.TryAcquire(context.Background())
	require.NoError(t, err)
	first := acquireAsync(context.Background(), s)
	require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond, "the first waiter sleeps")
	return oneSlotAwaited{fakes: fakes, ws: ws, clk: clk, s: s, held: h, first: first}
}

// TestSemaphoreNextHeadTakesOverTheWatches: when a waiting Acquire gets a
// slot, the next waiter of the client takes over its subscriptions and
// sleeps on them without trying the slots, which it knows to be held
// (before, every new head tried every slot in vain after each handoff);
// it gets the slot by the next handoff, and the subscriptions end with
// the last waiter.
func TestSemaphoreNextHeadTakesOverTheWatches(t *testing.T) {
	a := awaitOneSlot(t)
	fakes, ws, clk, h, first := a.fakes, a.ws, a.clk, a.held, a.first
	ctx := context.Background()
	slot := redlock.PermitKey("s", 0)
	second := acquireAsync(ctx, a.s)
	time.Sleep(20 * time.Millisecond) // the second one queues behind the first
	watched := ws[0].watched[slot]

	require.NoError(t, h.Unlock(ctx))
	r1 := <-first
	require.NoError(t, r1.err)
	require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond, "the second waiter sleeps")
	acquires := counts(fakes, "acquire")
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, acquires, counts(fakes, "acquire"), "the new head does not try a slot it knows is held")
	ws[0].wmu.Lock()
	assert.Equal(t, watched, ws[0].watched[slot], "nor subscribe again")
	ws[0].wmu.Unlock()

	require.NoError(t, r1.l.Unlock(ctx))
	var r2 acquired
	select {
	case r2 = <-second:
	case <-time.After(5 * time.Second):
		t.Fatal("the second Acquire did not return")
	}
	require.NoError(t, r2.err)
	require.Eventually(t, func() bool { return slices.Equal([]int{2, 2, 2}, counts(fakes, "transfer")) }, 5*time.Second, time.Millisecond,
		"both got the slot by a handoff (Unlock returns at a majority)")
	require.NoError(t, r2.l.Unlock(ctx))
	for _, w := range ws {
		assert.Zero(t, w.watching(slot), "the subscriptions end with the last waiter")
	}
}

// TestSemaphoreWatchesOfAWaiterThatGaveUp: subscriptions left to a
// waiter whose call ends before its turn end with it.
func TestSemaphoreWatchesOfAWaiterThatGaveUp(t *testing.T) {
	a := awaitOneSlot(t)
	ws, s, h, first := a.ws, a.s, a.held, a.first
	ctx := context.Background()
	slot := redlock.PermitKey("s", 0)
	gctx, giveUp := context.WithCancel(ctx)
	second := acquireAsync(gctx, s)
	time.Sleep(20 * time.Millisecond)
	third := acquireAsync(gctx, s)
	time.Sleep(20 * time.Millisecond)

	require.NoError(t, h.Unlock(ctx))
	r1 := <-first
	require.NoError(t, r1.err)
	giveUp()
	for _, rc := range []<-chan acquired{second, third} {
		r := <-rc
		require.ErrorIs(t, r.err, redlock.ErrNotAcquired)
		require.ErrorIs(t, r.err, context.Canceled)
	}
	require.Eventually(t, func() bool { return ws[0].watching(slot) == 0 }, 5*time.Second, time.Millisecond, "a watch outlived every waiter")
	require.NoError(t, r1.l.Unlock(ctx))
}

// TestSemaphoreInheritedRoundsDoNotEndACall: a waiter that takes over an
// earlier head's subscriptions (and its count of rounds) still makes a
// round of its own before its RetryStrategy may end it: with NoRetry it
// tries the held slot once and reports what the nodes said.
func TestSemaphoreInheritedRoundsDoNotEndACall(t *testing.T) {
	a := awaitOneSlot(t)
	s, h, first := a.s, a.held, a.first
	ctx := context.Background()
	second := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx, redlock.WithRetry(redlock.NoRetry()))
		if l != nil {
			_ = l.Unlock(ctx)
		}
		second <- err
	}()
	time.Sleep(20 * time.Millisecond) // queued behind the first

	require.NoError(t, h.Unlock(ctx))
	r1 := <-first
	require.NoError(t, r1.err)
	err := recvErr(t, second, "the second Acquire")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.True(t, errors.As(err, &qe))
	taken := 0
	for _, r := range qe.Replies {
		if r.Status == node.Taken {
			taken++
		}
	}
	assert.GreaterOrEqual(t, taken, 2, "a round of its own found the slot held: %v", err)
	require.NoError(t, r1.l.Unlock(ctx))
}

// TestSemaphoresOfOneNameWithOtherPermitsQueueApart: in one client, a
// Semaphore of 2 permits does not queue behind one of 4 with the same
// name: it is never handed slot 3, which it does not have, and takes
// slot 1 when that is released.
func TestSemaphoresOfOneNameWithOtherPermitsQueueApart(t *testing.T) {
	fakes, _, clk, c := semHandoffSetup(t)
	ctx := context.Background()
	s4, err := c.Semaphore("s", 4)
	require.NoError(t, err)
	s2, err := c.Semaphore("s", 2)
	require.NoError(t, err)
	held := holdAll(t, s4)
	a := acquireAsync(ctx, s4)
	require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond)
	b := acquireAsync(ctx, s2)
	require.Eventually(t, func() bool { return clk.Waiters() >= 2 }, 5*time.Second, time.Millisecond, "b waits on its own")

	require.NoError(t, held[redlock.PermitKey("s", 0)].Unlock(ctx))
	ra := <-a
	require.NoError(t, ra.err)
	assert.Equal(t, redlock.PermitKey("s", 0), ra.l.Key(), "handed to the 4-permit waiter")
	require.NoError(t, held[redlock.PermitKey("s", 3)].Unlock(ctx))
	select {
	case rb := <-b:
		t.Fatalf("the 2-permit waiter got %q (err %v)", rb.l.Key(), rb.err)
	case <-time.After(50 * time.Millisecond):
	}
	require.Eventually(t, func() bool { return holders(fakes, redlock.PermitKey("s", 3), "") == 3 }, 5*time.Second, time.Millisecond, "slot 3 released")
	require.NoError(t, held[redlock.PermitKey("s", 1)].Unlock(ctx))
	rb := <-b
	require.NoError(t, rb.err)
	assert.Equal(t, redlock.PermitKey("s", 1), rb.l.Key())
	for _, l := range []*redlock.Lock{ra.l, rb.l, held[redlock.PermitKey("s", 2)]} {
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestSemaphoreReleaseGoesToTheLongestWaitingClient: with every permit
// held by one client, a client that waits first gets the first permit
// released, and the one that waits next the next, released at once
// after it, though both hear every release: the nodes keep one line of
// waiting clients for all the slots (node.Key.Queue), and a release
// reserves its slot for the head of the line that has no slot reserved
// yet (without that, the second slot would be reserved for the first
// client too, and the second would wait for an hour).
func TestSemaphoreReleaseGoesToTheLongestWaitingClient(t *testing.T) {
	fakes, _, nodes, clk := watchHandoffNodes()
	opts := redlock.WithRetry(redlock.LinearBackoff(time.Hour))
	a, b, c := handoffClient(t, nodes, clk, opts), handoffClient(t, nodes, clk, opts), handoffClient(t, nodes, clk, opts)
	ctx := context.Background()
	sems := make([]*redlock.Semaphore, 3)
	for i, cl := range []*redlock.Client{a, b, c} {
		var err error
		sems[i], err = cl.Semaphore("s", 2)
		require.NoError(t, err)
	}
	q := "s:permits:2:line"
	counts := func() []int {
		var out []int
		for _, nd := range nodes {
			out = append(out, nd.(watchHandoff).queued(q))
		}
		return out
	}
	queued := func(n int) func() bool {
		return func() bool {
			for _, nd := range nodes {
				if nd.(watchHandoff).queued(q) != n {
					return false
				}
			}
			return true
		}
	}
	// a holds both permits on every node (TryAcquire returns at a
	// majority, and a slot may stay free on the third node: b would take
	// it there and leave the line until its next poll, an hour away).
	var held map[string]*redlock.Lock
	for try := 0; ; try++ {
		held = holdAll(t, sems[0])
		everywhere := func() bool {
			for _, l := range held {
				if holders(fakes, l.Key(), l.Token()) != len(fakes) {
					return false
				}
			}
			return true
		}
		for end := time.Now().Add(time.Second); !everywhere() && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		if everywhere() {
			break
		}
		require.Less(t, try, 5, "a holds both permits on every node")
		for _, l := range held {
			require.NoError(t, l.Unlock(ctx))
		}
	}
	rb := acquireAsync(ctx, sems[1])
	if !assert.Eventually(t, queued(1), 5*time.Second, time.Millisecond) {
		t.Fatalf("b queues: %v", counts())
	}
	require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond)
	rc := acquireAsync(ctx, sems[2])
	if !assert.Eventually(t, queued(2), 5*time.Second, time.Millisecond) {
		t.Fatalf("c queues behind b: %v", counts())
	}
	require.Eventually(t, func() bool { return clk.Waiters() >= 2 }, 5*time.Second, time.Millisecond)

	require.NoError(t, held[redlock.PermitKey("s", 1)].Unlock(ctx))
	require.NoError(t, held[redlock.PermitKey("s", 0)].Unlock(ctx))
	var gb, gc acquired
	for _, r := range []struct {
		out *acquired
		in  <-chan acquired
	}{{&gb, rb}, {&gc, rc}} {
		select {
		case *r.out = <-r.in:
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not served")
		}
	}
	require.NoError(t, gb.err, "b waited longest")
	require.NoError(t, gc.err)
	assert.Equal(t, redlock.PermitKey("s", 1), gb.l.Key(), "b gets the first slot released")
	assert.Equal(t, redlock.PermitKey("s", 0), gc.l.Key(), "c the second")
	require.Eventually(t, queued(0), 5*time.Second, time.Millisecond, "nobody is left in the line")
	for _, l := range []*redlock.Lock{gb.l, gc.l} {
		require.NoError(t, l.Unlock(ctx))
		require.Eventually(t, func() bool { return holders(fakes, l.Key(), "") == len(fakes) }, 5*time.Second, time.Millisecond, "%s is free", l.Key())
	}
}

// TestSemaphoreHandoffWhileAnotherSlotReleases: while one permit's Unlock
// releases (a fenced permit's: its successor's fence must come from an
// acquire) and will poke the waiting Acquire once its release has
// returned, another permit's Unlock still hands its slot to that waiter
// at once, by transfer.
func TestSemaphoreHandoffWhileAnotherSlotReleases(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(3, clk)
	// (A node timeout long enough for the held release to outlast a
	// loaded machine.)
	c := handoffClient(t, asHandoff(fakes), clk, redlock.WithNodeTimeout(5*time.Second),
		redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	ctx := context.Background()
	s, err := c.Semaphore("s", 2)
	require.NoError(t, err)
	a, err := s.TryAcquire(ctx, redlock.WithFencing())
	require.NoError(t, err)
	require.NotZero(t, a.Fence())
	b, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	w := acquireAsync(ctx, s)
	require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond, "the waiter sleeps")
	before := counts(fakes, "release")
	gateC := make(chan struct{})
	for _, f := range fakes {
		f.setBefore(gate("release", gateC))
	}
	aDone := make(chan error, 1)
	go func() { aDone <- a.Unlock(ctx) }()
	require.Eventually(t, func() bool { return !slices.Equal(counts(fakes, "release"), before) },
		5*time.Second, time.Millisecond, "the fenced permit's release is on its way, held at the nodes")
	bDone := make(chan error, 1)
	go func() { bDone <- b.Unlock(ctx) }()
	select {
	case r := <-w:
		require.NoError(t, r.err)
		assert.Equal(t, b.Key(), r.l.Key(), "the waiter got the other permit's slot")
		require.NoError(t, <-bDone)
		close(gateC)
		require.NoError(t, <-aDone)
		require.NoError(t, r.l.Unlock(ctx))
	case <-time.After(5 * time.Second):
		close(gateC)
		t.Fatal("the waiter got no slot while the other permit's release was held")
	}
}

// TestSemaphoreLineLeftWhenEveryWaiterGivesUp (issue 43, a torture
// trace): a client's head waiter, queued in the nodes' line, and the
// waiter behind it give up together. The head passes its place on to
// the next (passOn); that one ends too, at its turn or before it, and
// the client's registration goes with it, before Close: otherwise the
// next release reserves the slot for a client that no longer waits, for
// a lease.
func TestSemaphoreLineLeftWhenEveryWaiterGivesUp(t *testing.T) {
	for run := range 10 {
		fakes, _, nodes, clk := watchHandoffNodes()
		opts := redlock.WithRetry(redlock.LinearBackoff(time.Hour))
		a, b := handoffClient(t, nodes, clk, opts), handoffClient(t, nodes, clk, opts)
		ctx := context.Background()
		sa, err := a.Semaphore("s", 1)
		require.NoError(t, err)
		sb, err := b.Semaphore("s", 1)
		require.NoError(t, err)
		q := "s:permits:1:line"
		queued := func(n int) func() bool {
			return func() bool {
				for _, nd := range nodes {
					if nd.(watchHandoff).queued(q) != n {
						return false
					}
				}
				return true
			}
		}
		held := holdAll(t, sa)[redlock.PermitKey("s", 0)]
		require.Eventually(t, func() bool { return holders(fakes, held.Key(), held.Token()) == len(fakes) }, 5*time.Second, time.Millisecond)
		gctx, giveUp := context.WithCancel(ctx)
		first := acquireAsync(gctx, sb)
		require.Eventually(t, queued(1), 5*time.Second, time.Millisecond, "b queues")
		require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond)
		second := acquireAsync(gctx, sb)
		time.Sleep(10 * time.Millisecond) // behind the first, in b's own queue
		giveUp()
		for _, rc := range []<-chan acquired{first, second} {
			require.ErrorIs(t, (<-rc).err, context.Canceled)
		}
		require.Eventually(t, queued(0), 5*time.Second, time.Millisecond, "run %d: b is still in the line after both gave up", run)
		require.NoError(t, held.Unlock(ctx))
		require.Eventually(t, func() bool { return holders(fakes, held.Key(), "") == len(fakes) }, 5*time.Second, time.Millisecond,
			"run %d: the slot is free, not reserved for b", run)
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	}
}

// TestSemaphoreTriesTheSlotItReleasedFirst: a client's round over the
// slots starts at the slot it released last, so a client that cycles on
// a semaphore whose other slots are held elsewhere makes one attempt per
// Acquire, not one per held slot it happens to start at.
func TestSemaphoreTriesTheSlotItReleasedFirst(t *testing.T) {
	fakes, clk, other := setup(t, 3)
	ctx := context.Background()
	var attempts []int
	c, err := redlock.New(asNodes(fakes), redlock.WithClock(clk), redlock.WithNodeTimeout(500*time.Millisecond),
		redlock.WithHooks(redlock.Hooks{Acquire: func(i redlock.AcquireInfo) { attempts = append(attempts, i.Attempts) }}))
	require.NoError(t, err)
	defer c.Close()
	busy, err := other.Semaphore("s", 4)
	require.NoError(t, err)
	for range 3 {
		l, err := busy.TryAcquire(ctx)
		require.NoError(t, err)
		defer l.Unlock(ctx)
	}
	s, err := c.Semaphore("s", 4)
	require.NoError(t, err)
	for range 20 {
		l, err := s.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	require.Len(t, attempts, 20)
	assert.Equal(t, slices.Repeat([]int{1}, 19), attempts[1:], "after the first, each Acquire starts at the slot it released")
}
