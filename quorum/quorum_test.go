package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"go.uber.org/goleak"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMajority(t *testing.T) {
	cases := []struct{ n, want int }{
		{1, 1}, {2, 2}, {3, 2}, {4, 3}, {5, 3}, {6, 4}, {7, 4}, {8, 5}, {9, 5},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.n), func(t *testing.T) {
			got := quorum.Majority(c.n)
			assert.Equal(t, c.want, got)
			assert.Greater(t, 2*got, c.n, "a majority is more than half")
			assert.LessOrEqual(t, 2*(got-1), c.n, "and the smallest such")
		})
	}
}

// behaviour is what one fake node does in a round.
type behaviour uint8

const (
	answerDone  behaviour = iota // answers Done at once
	answerTaken                  // answers Taken at once
	answerError                  // fails at once
	answerSlow                   // blocks until released, then answers Done
)

func (b behaviour) String() string { return [...]string{"ok", "taken", "fail", "slow"}[b] }

// decode turns mask, read as n base-4 digits, into one behaviour per node.
func decode(mask, n int) []behaviour {
	bs := make([]behaviour, n)
	for i := range bs {
		bs[i] = behaviour(mask % 4)
		mask /= 4
	}
	return bs
}

// TestExhaustive runs one round for every assignment of {ok, taken, fail,
// slow} to N = 1..7 nodes (4^N patterns each) with need = Majority(N).
func TestExhaustive(t *testing.T) {
	const chunk = 2048 // patterns per parallel subtest
	for n := 1; n <= 7; n++ {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			nodes, errs := fakeNodes(n), nodeErrors(n)
			total := 1 << (2 * n)
			for from := 0; from < total; from += chunk {
				to := min(from+chunk, total)
				t.Run(fmt.Sprintf("%d-%d", from, to-1), func(t *testing.T) {
					t.Parallel() // rounds are independent; spreads the -race cost
					probed := 0
					for mask := from; mask < to; mask++ {
						// Proving that Wait blocks costs a short timer, so
						// it is done for every pattern of N <= 4 and a
						// sample beyond.
						probe := n <= 4 || mask%97 == 0
						p, ok := runPattern(t, nodes, errs, decode(mask, n), probe)
						probed += p
						if !ok {
							return // one pattern's failures are enough to read
						}
					}
					t.Logf("%d patterns, %d probed for blocking", to-from, probed)
				})
			}
		})
	}
}

// TestBeyondInline samples patterns for clusters larger than a Round
// holds inline (7 nodes), whose replies live in slices of their own.
func TestBeyondInline(t *testing.T) {
	for _, n := range []int{8, 9, 11} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			nodes, errs := fakeNodes(n), nodeErrors(n)
			// About 600 masks at an odd stride, so the low digits vary
			// too; mask 0 (all ok) and the last (all slow) included.
			total := 1 << (2 * n)
			masks := []int{0, total - 1}
			for mask := 1; mask < total; mask += total/600 | 1 {
				masks = append(masks, mask)
			}
			for i, mask := range masks {
				if _, ok := runPattern(t, nodes, errs, decode(mask, n), i%50 == 0); !ok {
					return
				}
			}
		})
	}
}

// nodeErrors returns node i's error for each of n nodes.
func nodeErrors(n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = fmt.Errorf("%s: boom", addrOf(i))
	}
	return errs
}

// probeDelay is how long a dependent Wait must stay blocked before the
// slow nodes are released.
const probeDelay = 2 * time.Millisecond

// runPattern runs one round for bs and checks it. It reports whether it
// probed that Wait blocks (0 or 1) and whether every check passed.
// nodes and errs (node i's error) are shared by every pattern of one N.
func runPattern(t *testing.T, nodes []node.Node, errs []error, bs []behaviour, probe bool) (probed int, ok bool) {
	t.Helper()
	n := len(bs)
	need := quorum.Majority(n)
	var nOK, nSlow int
	for _, b := range bs {
		switch b {
		case answerDone:
			nOK++
		case answerSlow:
			nSlow++
		}
	}
	// The fast nodes decide unless reaching need takes a slow node.
	dependent := nOK < need && nOK+nSlow >= need

	want := func(i int) (node.Status, error) {
		switch bs[i] {
		case answerTaken:
			return node.Taken, nil
		case answerError:
			return node.Unknown, errs[i]
		default:
			return node.Done, nil
		}
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	release := newGate()
	defer release.open() // runs before wg.Wait, even when a check fails

	r := quorum.Start(context.Background(), clock.Real{}, &wg, nodes, time.Minute,
		func(ctx context.Context, i int, _ node.Node) (node.Status, error) {
			switch bs[i] {
			case answerDone:
				return node.Done, nil
			case answerTaken:
				return node.Taken, nil
			case answerError:
				// A status returned with an error must be ignored.
				return node.Status(i % 4), errs[i]
			default:
				<-release.wait()
				return node.Done, nil
			}
		})

	msg := func() string { return fmt.Sprintf("pattern %v (need %d)", bs, need) }
	var tl quorum.Tally
	switch {
	case dependent && probe:
		probed = 1
		tallies := waitAsync(r, nil, need)
		if !notYet(t, tallies, probeDelay, msg()+": Wait before the slow nodes were released") {
			return probed, false
		}
		release.open()
		tl = recv(t, tallies, msg()+": Wait after the slow nodes were released")
	case dependent:
		release.open()
		tl = r.Wait(nil, need)
	default:
		// Wait runs here, not in a goroutine (too costly for 21844
		// rounds under -race). Should it wait for the slow nodes, the
		// watchdog releases them after failTimeout and the checks below
		// see slow replies among those Wait received.
		watchdog := time.AfterFunc(failTimeout, release.open)
		tl = r.Wait(nil, need)
		watchdog.Stop()
	}
	release.open()

	replies := slices.Clone(r.Replies)
	var late []quorum.Reply
	r.Rest(func(rep quorum.Reply) { late = append(late, rep) })
	wg.Wait() // Rest's goroutine is counted in wg: late is complete now

	// Plain comparisons: testify on every field of 21844 rounds costs
	// seconds under -race. Problems are reported once, per pattern.
	var problems []string
	check := func(cond bool, format string, args ...any) {
		if !cond {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(slices.Equal(replies, r.Replies), "Rest changed Replies")

	// Outcome and where Wait stopped.
	wantReached := nOK >= need || dependent // released slow nodes answer Done
	check(tl.Reached == wantReached, "Reached = %v, want %v", tl.Reached, wantReached)
	if tl.Reached {
		check(tl.Done == need, "Wait stops at the need-th Done: Done = %d", tl.Done)
	} else {
		check(tl.Other == n-need+1, "Wait stops once need is out of reach: Other = %d, want %d", tl.Other, n-need+1)
	}

	// Replies Wait received, and the Tally they must add up to.
	var got quorum.Tally
	for i, rep := range replies {
		if !rep.Answered() {
			// Answered already implies both; kept explicit as documented.
			check(rep.Status == node.Unknown && rep.Err == nil, "unanswered Replies[%d] = %+v", i, rep)
			got.Pending++
			continue
		}
		check(dependent || bs[i] != answerSlow, "Wait received slow node %d that was never released", i)
		st, err := want(i)
		wantRep := quorum.Reply{Node: i, Addr: nodes[i].Addr(), Status: st, Err: err, Latency: rep.Latency}
		check(rep == wantRep, "Replies[%d] = %+v, want %+v", i, rep, wantRep)
		check(rep.Latency >= 0, "Replies[%d].Latency = %v", i, rep.Latency)
		switch {
		case rep.Status == node.Done:
			got.Done++
		case rep.Err != nil:
			got.Failed++
			got.Other++
		default:
			got.Other++
		}
	}
	got.Reached = got.Done >= need
	check(got == tl, "Tally %+v, Replies add up to %+v", tl, got)
	check(dependent || tl.Pending >= nSlow, "Pending = %d < %d slow nodes", tl.Pending, nSlow)

	// Rest delivers exactly the replies Wait did not receive, once each.
	check(len(late) == tl.Pending, "Rest delivered %d replies, Pending = %d", len(late), tl.Pending)
	seen := make([]int, n)
	for _, rep := range late {
		if rep.Node < 0 || rep.Node >= n {
			check(false, "late reply for node %d", rep.Node)
			continue
		}
		seen[rep.Node]++
		st, err := want(rep.Node)
		wantRep := quorum.Reply{Node: rep.Node, Addr: nodes[rep.Node].Addr(), Status: st, Err: err, Latency: rep.Latency, Late: true}
		check(rep == wantRep, "late reply %+v, want %+v", rep, wantRep)
	}
	for i := range n {
		wantSeen := 1
		if replies[i].Answered() {
			wantSeen = 0
		}
		check(seen[i] == wantSeen, "node %d (%v) delivered %d times by Rest, want %d", i, bs[i], seen[i], wantSeen)
	}
	if len(problems) == 0 {
		return probed, true
	}
	return probed, assert.Empty(t, problems, "%s: tally %+v", msg(), tl)
}

// TestDecidedEarly: three of five nodes answer Done at once, two hang until
// the round's deadline. Wait is decided without them; their replies, with
// the deadline error, come late through Rest.
func TestDecidedEarly(t *testing.T) {
	const timeout = 200 * time.Millisecond
	var wg sync.WaitGroup
	defer wg.Wait()
	clk := clock.Real{}

	r := quorum.Start(context.Background(), clk, &wg, fakeNodes(5), timeout,
		func(ctx context.Context, i int, _ node.Node) (node.Status, error) {
			if i < 3 {
				return node.Done, nil
			}
			<-ctx.Done()
			return node.Unknown, ctx.Err()
		})

	tl := recv(t, waitAsync(r, nil, quorum.Majority(5)), "Wait")
	assert.Less(t, r.Elapsed(), timeout, "Wait must not wait for the hanging nodes")
	assert.Equal(t, quorum.Tally{Done: 3, Pending: 2, Reached: true}, tl)
	for i := range 3 {
		assert.Equal(t, node.Done, r.Replies[i].Status, "node %d", i)
		assert.Equal(t, addrOf(i), r.Replies[i].Addr, "node %d", i)
		assert.Less(t, r.Replies[i].Latency, timeout, "node %d", i)
	}
	for i := 3; i < 5; i++ {
		assert.False(t, r.Replies[i].Answered(), "node %d", i)
		assert.Equal(t, node.Unknown, r.Replies[i].Status, "node %d", i)
		assert.NoError(t, r.Replies[i].Err, "node %d", i)
	}

	late := make(chan quorum.Reply, 5)
	r.Rest(func(rep quorum.Reply) { late <- rep })
	seen := map[int]bool{}
	for range 2 {
		rep := recv(t, late, "a late reply")
		assert.True(t, rep.Late)
		assert.Contains(t, []int{3, 4}, rep.Node)
		assert.False(t, seen[rep.Node], "node %d delivered twice", rep.Node)
		seen[rep.Node] = true
		assert.Equal(t, addrOf(rep.Node), rep.Addr)
		assert.Equal(t, node.Unknown, rep.Status)
		assert.ErrorIs(t, rep.Err, context.DeadlineExceeded)
		assert.GreaterOrEqual(t, rep.Latency, timeout, "the call ended at the round's deadline")
		assert.Less(t, rep.Latency, timeout+failTimeout)
	}
	wg.Wait()
	assert.Empty(t, late, "nothing after the last late reply")
}

// TestStop: Wait gives up when stop closes, even with no reply at all.
func TestStop(t *testing.T) {
	t.Run("nothing answered", func(t *testing.T) {
		var wg sync.WaitGroup
		defer wg.Wait()
		release := newGate()
		defer release.open()
		r := quorum.Start(context.Background(), clock.Real{}, &wg, fakeNodes(3), time.Minute,
			func(context.Context, int, node.Node) (node.Status, error) {
				<-release.wait()
				return node.Done, nil
			})

		stop := make(chan struct{})
		tallies := waitAsync(r, stop, 2)
		notYet(t, tallies, 10*time.Millisecond, "Wait with stop open and no reply")
		close(stop)
		tl := recv(t, tallies, "Wait after stop closed")
		assert.Equal(t, quorum.Tally{Pending: 3}, tl)
		assert.False(t, tl.Reached)
		for i, rep := range r.Replies {
			assert.False(t, rep.Answered(), "node %d", i)
		}

		release.open()
		r.WaitAll()
		for i, rep := range r.Replies {
			assert.Equal(t, node.Done, rep.Status, "node %d after WaitAll", i)
		}
	})

	t.Run("already closed", func(t *testing.T) {
		var wg sync.WaitGroup
		defer wg.Wait()
		release := newGate()
		defer release.open()
		r := quorum.Start(context.Background(), clock.Real{}, &wg, fakeNodes(5), time.Minute,
			func(context.Context, int, node.Node) (node.Status, error) {
				<-release.wait()
				return node.Done, nil
			})
		stop := make(chan struct{})
		close(stop)
		tl := recv(t, waitAsync(r, stop, 3), "Wait")
		assert.Equal(t, quorum.Tally{Pending: 5}, tl)

		release.open()
		late := make(chan quorum.Reply, 5)
		r.Rest(func(rep quorum.Reply) { late <- rep })
		wg.Wait()
		assert.Len(t, late, 5, "every reply comes through Rest")
	})

	t.Run("caller context", func(t *testing.T) {
		// The documented use: stop = ctx.Done() of the caller.
		var wg sync.WaitGroup
		defer wg.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := quorum.Start(ctx, clock.Real{}, &wg, fakeNodes(3), failTimeout,
			func(ctx context.Context, _ int, _ node.Node) (node.Status, error) {
				<-ctx.Done()
				return node.Unknown, ctx.Err()
			})
		tallies := waitAsync(r, ctx.Done(), 2)
		cancel()
		tl := recv(t, tallies, "Wait")
		assert.False(t, tl.Reached)
		assert.Equal(t, 3, tl.Pending+tl.Other, "%+v", tl)
		r.WaitAll()
		for i, rep := range r.Replies {
			assert.ErrorIs(t, rep.Err, context.Canceled, "node %d: the caller's cancellation reaches the calls", i)
		}
	})
}

// TestLatencyUsesInjectedClock: node i moves a fake clock by i×10ms, one
// node after the other, so every Latency and Elapsed is exact.
func TestLatencyUsesInjectedClock(t *testing.T) {
	const n = 5
	start := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := newSteppedClock(start, n)
	var wg sync.WaitGroup
	defer wg.Wait()

	r := quorum.Start(context.Background(), clk, &wg, fakeNodes(n), failTimeout,
		func(ctx context.Context, i int, _ node.Node) (node.Status, error) {
			if i > 0 {
				// Wait until node i-1's Latency has been measured.
				select {
				case <-clk.sinces[i-1]:
				case <-ctx.Done():
					return node.Unknown, ctx.Err()
				}
			}
			clk.Advance(time.Duration(i) * 10 * time.Millisecond)
			return node.Done, nil
		})
	assert.Equal(t, start, r.Started())

	tl := recv(t, waitAsync(r, nil, quorum.Majority(n)), "Wait")
	assert.Equal(t, quorum.Tally{Done: 3, Pending: 2, Reached: true}, tl)
	r.WaitAll()

	ms := time.Millisecond
	want := []time.Duration{0, 10 * ms, 30 * ms, 60 * ms, 100 * ms}
	for i, rep := range r.Replies {
		assert.Equal(t, want[i], rep.Latency, "node %d", i)
	}
	assert.Equal(t, 100*ms, r.Elapsed())
	clk.Advance(time.Second)
	assert.Equal(t, 1100*ms, r.Elapsed(), "Elapsed follows the clock")
	assert.Equal(t, 100*ms, r.Replies[4].Latency, "a Latency is fixed once measured")
}

type ctxKey struct{}

// TestCallContext: every call gets one context, derived from the caller's,
// with the round's deadline; it stays live while any call runs and is
// cancelled once the last one has returned.
func TestCallContext(t *testing.T) {
	const n, timeout = 3, time.Minute
	var wg sync.WaitGroup
	defer wg.Wait()
	release := newGate()
	defer release.open()

	type seen struct {
		ctx      context.Context
		deadline time.Time
		hasDL    bool
		errAtEnd error // ctx.Err() just before the call returned
		value    any
	}
	calls := make([]seen, n) // calls[i] written by call i only; read after wg.Wait

	parent := context.WithValue(context.Background(), ctxKey{}, "from the caller")
	before := time.Now()
	r := quorum.Start(parent, clock.Real{}, &wg, fakeNodes(n), timeout,
		func(ctx context.Context, i int, _ node.Node) (node.Status, error) {
			s := &calls[i]
			s.ctx = ctx
			s.deadline, s.hasDL = ctx.Deadline()
			s.value = ctx.Value(ctxKey{})
			if i > 0 {
				// Runs on after node 0's call has returned.
				<-release.wait()
			}
			s.errAtEnd = ctx.Err()
			return node.Done, nil
		})
	after := time.Now()

	tl := recv(t, waitAsync(r, nil, 1), "Wait")
	require.Equal(t, quorum.Tally{Done: 1, Pending: 2, Reached: true}, tl)
	require.Equal(t, node.Done, r.Replies[0].Status, "node 0 is the only one that can answer")
	release.open()
	r.WaitAll()
	wg.Wait()

	ctx := calls[0].ctx
	require.NotNil(t, ctx)
	for i, s := range calls {
		assert.Same(t, ctx, s.ctx, "call %d: one context for the round", i)
		assert.True(t, s.hasDL, "call %d has a deadline", i)
		assert.False(t, s.deadline.Before(before.Add(timeout)), "call %d: deadline %v", i, s.deadline)
		assert.False(t, s.deadline.After(after.Add(timeout)), "call %d: deadline %v", i, s.deadline)
		assert.Equal(t, "from the caller", s.value, "call %d", i)
		assert.NoError(t, s.errAtEnd, "call %d: context cancelled while a call was running", i)
	}
	assert.ErrorIs(t, ctx.Err(), context.Canceled, "released once the last call returned")
	assert.NotErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	select {
	case <-ctx.Done():
	default:
		t.Error("Done not closed")
	}
}

// TestCallContextWithoutCancel: the documented way to let calls outlive
// the caller's cancellation.
func TestCallContextWithoutCancel(t *testing.T) {
	var wg sync.WaitGroup
	defer wg.Wait()
	release := newGate()
	defer release.open()
	parent, cancel := context.WithCancel(context.Background())
	errs := make([]error, 2)
	r := quorum.Start(context.WithoutCancel(parent), clock.Real{}, &wg, fakeNodes(2), time.Minute,
		func(ctx context.Context, i int, _ node.Node) (node.Status, error) {
			<-release.wait()
			errs[i] = ctx.Err()
			return node.Done, nil
		})
	cancel()
	release.open()
	r.WaitAll()
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "call %d", i)
		assert.Equal(t, node.Done, r.Replies[i].Status, "call %d", i)
	}
}

// TestWaitAll: WaitAll receives every reply, from the start or after Wait,
// and leaves nothing for Rest.
func TestWaitAll(t *testing.T) {
	bs := []behaviour{answerSlow, answerDone, answerError, answerTaken, answerSlow, answerDone, answerSlow}
	errBoom := errors.New("boom")
	for _, afterWait := range []bool{false, true} {
		t.Run(fmt.Sprintf("afterWait=%v", afterWait), func(t *testing.T) {
			var wg sync.WaitGroup
			defer wg.Wait()
			release := newGate()
			defer release.open()
			r := quorum.Start(context.Background(), clock.Real{}, &wg, fakeNodes(len(bs)), time.Minute,
				func(_ context.Context, i int, _ node.Node) (node.Status, error) {
					switch bs[i] {
					case answerTaken:
						return node.Taken, nil
					case answerError:
						return node.Unknown, errBoom
					case answerSlow:
						<-release.wait()
					}
					return node.Done, nil
				})

			if afterWait {
				// 2 ok + 2 not-ok out of 7: need 4 is still reachable.
				tallies := waitAsync(r, nil, quorum.Majority(len(bs)))
				notYet(t, tallies, 10*time.Millisecond, "Wait that depends on slow nodes")
				release.open()
				tl := recv(t, tallies, "Wait")
				assert.True(t, tl.Reached, "%+v", tl)
			} else {
				release.open()
			}
			done := make(chan struct{})
			go func() { r.WaitAll(); close(done) }()
			recv(t, done, "WaitAll")

			for i, rep := range r.Replies {
				assert.True(t, rep.Answered(), "node %d", i)
				assert.Equal(t, i, rep.Node)
				assert.Equal(t, addrOf(i), rep.Addr)
				assert.False(t, rep.Late)
				switch bs[i] {
				case answerTaken:
					assert.Equal(t, node.Taken, rep.Status, "node %d", i)
				case answerError:
					assert.Equal(t, node.Unknown, rep.Status, "node %d", i)
					assert.Equal(t, errBoom, rep.Err, "node %d", i)
				default:
					assert.Equal(t, node.Done, rep.Status, "node %d", i)
					assert.NoError(t, rep.Err, "node %d", i)
				}
			}
			r.Rest(func(rep quorum.Reply) { t.Errorf("Rest after WaitAll delivered %+v", rep) })
			wg.Wait()
		})
	}
}

// TestNoNodes: an empty round is decided at once and never reached.
func TestNoNodes(t *testing.T) {
	var wg sync.WaitGroup
	r := quorum.Start(context.Background(), clock.Real{}, &wg, nil, time.Second,
		func(context.Context, int, node.Node) (node.Status, error) {
			t.Error("no node to call")
			return node.Unknown, nil
		})
	tl := recv(t, waitAsync(r, nil, quorum.Majority(0)), "Wait")
	assert.Equal(t, quorum.Tally{}, tl)
	r.WaitAll()
	r.Rest(func(rep quorum.Reply) { t.Errorf("Rest delivered %+v", rep) })
	wg.Wait()
	assert.Empty(t, r.Replies)
}

// gatedRound starts a round on three nodes: 0 and 1 answer Done at once,
// 2 answers Taken once the gate opens.
func gatedRound() (*quorum.Round, *gate) {
	g := newGate()
	r := quorum.Start(context.Background(), clock.Real{}, nil, fakeNodes(3), time.Second,
		func(ctx context.Context, i int, _ node.Node) (node.Status, error) {
			if i == 2 {
				<-g.wait()
				return node.Taken, nil
			}
			return node.Done, nil
		})
	return r, g
}

// TestAwait: Await from another goroutine waits for one node's call and
// returns its reply, before or after Wait, without touching Replies.
func TestAwait(t *testing.T) {
	r, g := gatedRound()
	tally := r.Wait(nil, 2)
	require.True(t, tally.Reached)
	assert.True(t, r.Landed(0))
	assert.Equal(t, node.Done, r.Await(0).Status)

	got := make(chan quorum.Reply, 1)
	go func() { got <- r.Await(2) }()
	notYet(t, got, 30*time.Millisecond, "Await(2) before node 2 returned")
	assert.False(t, r.Landed(2))
	g.open()
	rep := recv(t, got, "Await(2)")
	assert.Equal(t, node.Taken, rep.Status)
	assert.Equal(t, 2, rep.Node)
	assert.False(t, rep.Late)
	assert.True(t, r.Landed(2))
	assert.False(t, r.Replies[2].Answered(), "Await does not write Replies")
	r.WaitAll()
	assert.Equal(t, node.Taken, r.Replies[2].Status)
}

// TestAwaitContext: AwaitContext returns a landed reply at once, gives up
// with ctx's error when ctx ends first, and otherwise waits like Await.
func TestAwaitContext(t *testing.T) {
	r, g := gatedRound()
	require.True(t, r.Wait(nil, 2).Reached)
	rep, err := r.AwaitContext(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, node.Done, rep.Status)

	ctx, cancel := context.WithCancel(context.Background())
	gave := make(chan error, 1)
	go func() {
		_, err := r.AwaitContext(ctx, 2)
		gave <- err
	}()
	notYet(t, gave, 30*time.Millisecond, "AwaitContext(2) before node 2 returned or ctx ended")
	cancel()
	assert.ErrorIs(t, recv(t, gave, "AwaitContext after cancel"), context.Canceled)

	got := make(chan quorum.Reply, 1)
	go func() {
		rep, err := r.AwaitContext(context.Background(), 2)
		assert.NoError(t, err)
		got <- rep
	}()
	notYet(t, got, 30*time.Millisecond, "AwaitContext(2) before node 2 returned")
	g.open()
	assert.Equal(t, node.Taken, recv(t, got, "AwaitContext(2)").Status)
	r.WaitAll()
}
