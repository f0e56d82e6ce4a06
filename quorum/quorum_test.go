package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

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

// done, taken, absent are the answers the tests have nodes give.
var (
	done   = node.Result{Status: node.Done}
	taken  = node.Result{Status: node.Taken}
	absent = node.Result{Status: node.Absent}
)

// TestCount: the three verdicts on a Count, for need = 3 of 5 nodes unless
// the case says otherwise. Reached: need Done. Decided: reached, or out of
// reach even if every pending call answers Done. Refused: the answers that
// the key is not ours (Taken, Absent) alone put need out of reach, i.e.
// Taken+Absent > n-need; failures and pending calls never refuse.
func TestCount(t *testing.T) {
	cases := []struct {
		name                      string
		c                         quorum.Count
		need                      int
		reached, decided, refused bool
	}{
		{"nothing yet", quorum.Count{Pending: 5}, 3, false, false, false},
		{"need Done", quorum.Count{Done: 3, Pending: 2}, 3, true, true, false},
		{"more than need", quorum.Count{Done: 5}, 3, true, true, false},
		{"reached despite refusals", quorum.Count{Done: 3, Taken: 1, Absent: 1}, 3, true, true, false},
		{"one short, reachable", quorum.Count{Done: 2, Taken: 1, Pending: 2}, 3, false, false, false},
		{"two refusals still reachable", quorum.Count{Taken: 1, Absent: 1, Pending: 3}, 3, false, false, false},
		{"three Taken", quorum.Count{Taken: 3, Pending: 2}, 3, false, true, true},
		{"Taken and Absent add up", quorum.Count{Done: 1, Taken: 1, Absent: 2, Pending: 1}, 3, false, true, true},
		{"three Absent", quorum.Count{Absent: 3, Failed: 2}, 3, false, true, true},
		{"out of reach by failures: unknown", quorum.Count{Failed: 3, Pending: 2}, 3, false, true, false},
		{"out of reach, mixed: unknown", quorum.Count{Done: 2, Taken: 2, Failed: 1}, 3, false, true, false},
		{"failures and refusals, one pending", quorum.Count{Done: 1, Taken: 1, Failed: 2, Pending: 1}, 3, false, true, false},
		{"all failed", quorum.Count{Failed: 5}, 3, false, true, false},
		{"need all, one Taken", quorum.Count{Done: 4, Taken: 1}, 5, false, true, true},
		{"need all, one pending", quorum.Count{Done: 4, Pending: 1}, 5, false, false, false},
		{"need all, one failed", quorum.Count{Done: 4, Failed: 1}, 5, false, true, false},
		{"need 1 of 1", quorum.Count{Done: 1}, 1, true, true, false},
		{"refused 1 of 1", quorum.Count{Absent: 1}, 1, false, true, true},
		{"pending 1 of 1", quorum.Count{Pending: 1}, 1, false, false, false},
		// No node can hold the key: decided, not reached, and refused
		// (not held, as opposed to unknown).
		{"no nodes", quorum.Count{}, quorum.Majority(0), false, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.reached, c.c.Reached(c.need), "Reached(%d)", c.need)
			assert.Equal(t, c.decided, c.c.Decided(c.need), "Decided(%d)", c.need)
			assert.Equal(t, c.refused, c.c.Refused(c.need), "Refused(%d)", c.need)
		})
	}
}

// TestCountInvariants checks, for every Count of up to 7 nodes and every
// need from 1 to n, how the three verdicts relate: reached and refused
// exclude each other and each implies decided, and Decided is exactly
// "reached, or Done cannot reach need".
func TestCountInvariants(t *testing.T) {
	for n := 1; n <= 7; n++ {
		for c := range counts(n) {
			for need := 1; need <= n; need++ {
				reached, decided, refused := c.Reached(need), c.Decided(need), c.Refused(need)
				if reached && refused {
					t.Fatalf("%+v need %d: reached and refused", c, need)
				}
				if (reached || refused) && !decided {
					t.Fatalf("%+v need %d: reached %v, refused %v, not decided", c, need, reached, refused)
				}
				if want := reached || c.Done+c.Pending < need; decided != want {
					t.Fatalf("%+v need %d: Decided = %v", c, need, decided)
				}
				if want := c.Taken+c.Absent > n-need; refused != want {
					t.Fatalf("%+v need %d: Refused = %v", c, need, refused)
				}
			}
		}
	}
}

// counts yields every Count whose five fields add up to n.
func counts(n int) func(yield func(quorum.Count) bool) {
	return func(yield func(quorum.Count) bool) {
		for d := 0; d <= n; d++ {
			for tk := 0; d+tk <= n; tk++ {
				for a := 0; d+tk+a <= n; a++ {
					for f := 0; d+tk+a+f <= n; f++ {
						c := quorum.Count{Done: d, Taken: tk, Absent: a, Failed: f, Pending: n - d - tk - a - f}
						if !yield(c) {
							return
						}
					}
				}
			}
		}
	}
}

// TestTally: how Tally and Answered classify a reply. An error makes a
// reply Failed whatever its Result says; a reply with neither a status
// nor an error has not been answered and counts as Pending.
func TestTally(t *testing.T) {
	errBoom := errors.New("boom")
	replies := []quorum.Reply{
		{Node: 0},
		{Node: 1, Result: done},
		{Node: 2, Result: taken},
		{Node: 3, Result: absent},
		{Node: 4, Err: errBoom},
		{Node: 5, Result: done, Err: errBoom},
		{Node: 6, Result: done, Latency: time.Second},
		{Node: 7, Latency: time.Second},
	}
	answered := []bool{false, true, true, true, true, true, true, false}
	for i, rep := range replies {
		assert.Equal(t, answered[i], rep.Answered(), "%+v", rep)
	}
	assert.Equal(t, quorum.Count{Done: 2, Taken: 1, Absent: 1, Failed: 2, Pending: 2}, quorum.Tally(replies))
	assert.Equal(t, quorum.Count{}, quorum.Tally(nil))
}

// behaviour is what one fake node does in a round.
type behaviour uint8

const (
	answerDone    behaviour = iota // answers Done at once
	answerRefused                  // answers at once that the key is not ours: see refusal
	answerError                    // fails at once
	answerSlow                     // blocks until released, then answers Done
)

func (b behaviour) String() string { return [...]string{"ok", "refused", "fail", "slow"}[b] }

// refusal is what node i answers when it refuses: Taken on even nodes,
// Absent on odd ones, so that patterns count both.
func refusal(i int) node.Result {
	if i%2 == 0 {
		return taken
	}
	return absent
}

// decode turns mask, read as n base-4 digits, into one behaviour per node.
func decode(mask, n int) []behaviour {
	bs := make([]behaviour, n)
	for i := range bs {
		bs[i] = behaviour(mask % 4)
		mask /= 4
	}
	return bs
}

// TestExhaustive runs one round for every assignment of {ok, refused,
// fail, slow} to N = 1..7 nodes (4^N patterns each) with need =
// Majority(N).
func TestExhaustive(t *testing.T) {
	const chunk = 2048 // patterns per parallel subtest
	for n := 1; n <= 7; n++ {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			errs := nodeErrors(n)
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
						p, ok := runPattern(t, errs, decode(mask, n), probe)
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

// TestLargeClusters samples patterns for clusters larger than the
// exhaustive test covers, even and odd.
func TestLargeClusters(t *testing.T) {
	for _, n := range []int{8, 9, 11} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			t.Parallel()
			errs := nodeErrors(n)
			// About 600 masks at an odd stride, so the low digits vary
			// too; mask 0 (all ok) and the last (all slow) included.
			total := 1 << (2 * n)
			masks := []int{0, total - 1}
			for mask := 1; mask < total; mask += total/600 | 1 {
				masks = append(masks, mask)
			}
			for i, mask := range masks {
				if _, ok := runPattern(t, errs, decode(mask, n), i%50 == 0); !ok {
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
		errs[i] = fmt.Errorf("node %d: boom", i)
	}
	return errs
}

// probeDelay is how long a dependent Wait must stay blocked before the
// slow nodes are released.
const probeDelay = 2 * time.Millisecond

// runPattern runs one round for bs and checks it. It reports whether it
// probed that Wait blocks (0 or 1) and whether every check passed. errs
// (node i's error) is shared by every pattern of one N.
func runPattern(t *testing.T, errs []error, bs []behaviour, probe bool) (probed int, ok bool) {
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

	// want is node i's reply once its call has returned, Latency aside.
	want := func(i int) quorum.Reply {
		switch bs[i] {
		case answerRefused:
			return quorum.Reply{Node: i, Result: refusal(i)}
		case answerError:
			return quorum.Reply{Node: i, Err: errs[i]}
		default:
			return quorum.Reply{Node: i, Result: done}
		}
	}

	// Not start(): a cleanup per pattern would pile up by the thousand.
	var calls sync.WaitGroup
	calls.Add(n)
	defer calls.Wait()
	release := newGate()
	defer release.open() // runs before calls.Wait, even when a check fails

	r := new(quorum.Round)
	r.Start(clock.Real{}, n, quorum.CallFunc(func(i int) (node.Result, error) {
		defer calls.Done()
		switch bs[i] {
		case answerDone:
			return done, nil
		case answerRefused:
			return refusal(i), nil
		case answerError:
			// A status returned with an error must be ignored.
			return node.Result{Status: node.Status(i % 4)}, errs[i]
		default:
			<-release.wait()
			return done, nil
		}
	}))

	msg := func() string { return fmt.Sprintf("pattern %v (need %d)", bs, need) }
	var c quorum.Count
	switch {
	case dependent && probe:
		probed = 1
		counts := waitAsync(r, nil, need)
		if !notYet(t, counts, probeDelay, msg()+": Wait before the slow nodes were released") {
			return probed, false
		}
		release.open()
		c = recv(t, counts, msg()+": Wait after the slow nodes were released")
	case dependent:
		release.open()
		c = r.Wait(nil, need)
	default:
		// Wait runs here, not in a goroutine (too costly for 21844
		// rounds under -race). Should it wait for the slow nodes, the
		// watchdog releases them after failTimeout and the checks below
		// see slow replies among those Wait received.
		watchdog := time.AfterFunc(failTimeout, release.open)
		c = r.Wait(nil, need)
		watchdog.Stop()
	}
	release.open()

	replies := slices.Clone(r.Replies)
	calls.Wait() // every call has returned; the replies Wait left stay unread

	// Plain comparisons: testify on every field of 21844 rounds costs
	// seconds under -race. Problems are reported once, per pattern.
	var problems []string
	check := func(cond bool, format string, args ...any) {
		if !cond {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(slices.Equal(replies, r.Replies), "Replies changed after Wait returned")

	// Outcome and where Wait stopped.
	wantReached := nOK >= need || dependent // released slow nodes answer Done
	check(c.Reached(need) == wantReached, "Reached = %v, want %v", c.Reached(need), wantReached)
	check(c.Decided(need), "Wait returned undecided")
	if wantReached {
		check(c.Done == need, "Wait stops at the need-th Done: Done = %d", c.Done)
		check(!c.Refused(need), "Refused although reached")
	} else {
		notOurs := c.Taken + c.Absent + c.Failed
		check(notOurs == n-need+1, "Wait stops once need is out of reach: Taken+Absent+Failed = %d, want %d", notOurs, n-need+1)
		// Stopped by refusals alone, or with a failure among them.
		check(c.Refused(need) == (c.Failed == 0), "Refused = %v with %d failed", c.Refused(need), c.Failed)
	}

	// Replies Wait received, and the Count they must add up to.
	check(c == quorum.Tally(replies), "Count %+v, Tally(Replies) = %+v", c, quorum.Tally(replies))
	var got quorum.Count
	for i, rep := range replies {
		if !rep.Answered() {
			check(rep == quorum.Reply{Node: i}, "unanswered Replies[%d] = %+v", i, rep)
			got.Pending++
			continue
		}
		check(dependent || bs[i] != answerSlow, "Wait received slow node %d that was never released", i)
		wantRep := want(i)
		wantRep.Latency = rep.Latency
		check(rep == wantRep, "Replies[%d] = %+v, want %+v", i, rep, wantRep)
		check(rep.Latency >= 0, "Replies[%d].Latency = %v", i, rep.Latency)
		switch {
		case bs[i] == answerError:
			got.Failed++
		case bs[i] != answerRefused:
			got.Done++
		case refusal(i) == taken:
			got.Taken++
		default:
			got.Absent++
		}
	}
	check(got == c, "Count %+v, Replies add up to %+v", c, got)
	check(dependent || c.Pending >= nSlow, "Pending = %d < %d slow nodes", c.Pending, nSlow)

	if len(problems) == 0 {
		return probed, true
	}
	return probed, assert.Empty(t, problems, "%s: count %+v", msg(), c)
}

// TestErrorDropsResult: a call that returns an error has its Result
// dropped, whatever status came with it, and counts as Failed.
func TestErrorDropsResult(t *testing.T) {
	errBoom := errors.New("boom")
	statuses := []node.Status{node.Unknown, node.Done, node.Taken, node.Absent}
	r := start(t, clock.Real{}, len(statuses), func(i int) (node.Result, error) {
		return node.Result{Status: statuses[i]}, errBoom
	})
	// need 1: no failure decides it until the last.
	c := recv(t, waitAsync(r, nil, 1), "Wait")
	assert.Equal(t, quorum.Count{Failed: len(statuses)}, c)
	for i, rep := range r.Replies {
		assert.Equal(t, quorum.Reply{Node: i, Err: errBoom, Latency: rep.Latency}, rep, "status %v", statuses[i])
		assert.True(t, rep.Answered(), "node %d", i)
	}
}

// TestNoStatus: a call that returns neither a status nor an error gets an
// error of the package's own, so it counts as Failed rather than Pending
// (Wait would otherwise wait for it for ever).
func TestNoStatus(t *testing.T) {
	const n = 3
	r := start(t, clock.Real{}, n, func(i int) (node.Result, error) {
		return node.Result{}, nil
	})
	c := recv(t, waitAsync(r, nil, 1), "Wait")
	assert.Equal(t, quorum.Count{Failed: n}, c)
	first := r.Replies[0].Err
	require.Error(t, first)
	for i, rep := range r.Replies {
		assert.True(t, rep.Answered(), "node %d", i)
		assert.Equal(t, node.Result{}, rep.Result, "node %d", i)
		assert.Same(t, first, rep.Err, "node %d: one sentinel error", i)
	}

	t.Run("among answers", func(t *testing.T) {
		// 5 nodes, need 3: two Done and one without a status; the
		// fourth Done, released last, decides.
		release := newGate()
		defer release.open()
		r := start(t, clock.Real{}, 5, func(i int) (node.Result, error) {
			switch i {
			case 0, 1:
				return done, nil
			case 2:
				return node.Result{}, nil
			case 3:
				<-release.wait()
				return done, nil
			default:
				<-release.wait()
				return taken, nil
			}
		})
		counts := waitAsync(r, nil, 3)
		notYet(t, counts, 10*time.Millisecond, "Wait with 2 Done, 1 failed and 2 pending")
		release.open()
		c := recv(t, counts, "Wait")
		assert.True(t, c.Reached(3), "%+v", c)
		assert.Equal(t, 1, c.Failed, "%+v", c)
		assert.Equal(t, first, r.Replies[2].Err)
		assert.Equal(t, node.Result{}, r.Replies[2].Result)
	})
}

// TestDecidedEarly: three of five nodes answer Done at once, two hang
// until their deadline, a timer on the round's clock that the test moves.
// Wait is decided without them; their replies wait in the round until a
// later Wait receives them.
func TestDecidedEarly(t *testing.T) {
	const timeout = 200 * time.Millisecond
	clk := clock.NewFake(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	release := newGate() // for clean-up only, should a check fail
	defer release.open()

	r := start(t, clk, 5, func(i int) (node.Result, error) {
		if i < 3 {
			return done, nil
		}
		tm := clk.NewTimer(timeout)
		defer tm.Stop()
		select {
		case <-tm.C():
		case <-release.wait():
		}
		return node.Result{}, context.DeadlineExceeded
	})

	// The hanging calls cannot return before the clock moves.
	c := recv(t, waitAsync(r, nil, quorum.Majority(5)), "Wait")
	assert.Equal(t, quorum.Count{Done: 3, Pending: 2}, c)
	assert.True(t, c.Reached(3))
	assert.Zero(t, r.Elapsed(), "Wait must not wait for the hanging nodes")
	for i := range 3 {
		assert.Equal(t, quorum.Reply{Node: i, Result: done}, r.Replies[i], "node %d", i)
	}
	for i := 3; i < 5; i++ {
		assert.Equal(t, quorum.Reply{Node: i}, r.Replies[i], "node %d: unanswered, only Node set", i)
		assert.False(t, r.Replies[i].Answered(), "node %d", i)
	}

	eventually(t, func() bool { return clk.Waiters() == 2 }, "the hanging calls to wait on the clock")
	clk.Advance(timeout)

	// Wait writes Replies; until it runs again, the late replies are
	// not there, and a Wait whose outcome is decided reads none.
	assert.Equal(t, c, r.Wait(nil, 3), "Wait again, already decided")
	for i := 3; i < 5; i++ {
		assert.False(t, r.Replies[i].Answered(), "node %d before a Wait that needs it", i)
	}
	// need 4 is reachable until both hanging nodes have failed.
	c = recv(t, waitAsync(r, nil, 4), "Wait for the late replies")
	assert.Equal(t, quorum.Count{Done: 3, Failed: 2}, c)
	for i := 3; i < 5; i++ {
		assert.Equal(t, quorum.Reply{Node: i, Err: context.DeadlineExceeded, Latency: timeout}, r.Replies[i],
			"node %d: failed at its deadline", i)
	}
}

// TestStop: Wait gives up when stop closes, even with no reply at all,
// and may be called again to keep counting.
func TestStop(t *testing.T) {
	t.Run("nothing answered", func(t *testing.T) {
		release := newGate()
		defer release.open()
		r := start(t, clock.Real{}, 3, func(int) (node.Result, error) {
			<-release.wait()
			return done, nil
		})

		stop := make(chan struct{})
		counts := waitAsync(r, stop, 2)
		notYet(t, counts, 10*time.Millisecond, "Wait with stop open and no reply")
		close(stop)
		c := recv(t, counts, "Wait after stop closed")
		assert.Equal(t, quorum.Count{Pending: 3}, c)
		assert.False(t, c.Reached(2))
		assert.False(t, c.Decided(2))
		for i, rep := range r.Replies {
			assert.Equal(t, quorum.Reply{Node: i}, rep, "node %d", i)
		}

		release.open()
		c = recv(t, waitAsync(r, nil, 3), "Wait again, stop nil")
		assert.Equal(t, quorum.Count{Done: 3}, c)
		for i, rep := range r.Replies {
			assert.Equal(t, done, rep.Result, "node %d after the last Wait", i)
		}
	})

	t.Run("already closed", func(t *testing.T) {
		release := newGate()
		defer release.open()
		r := start(t, clock.Real{}, 5, func(int) (node.Result, error) {
			<-release.wait()
			return done, nil
		})
		stop := make(chan struct{})
		close(stop)
		c := recv(t, waitAsync(r, stop, 3), "Wait")
		assert.Equal(t, quorum.Count{Pending: 5}, c)

		release.open()
		c = recv(t, waitAsync(r, nil, 5), "Wait again")
		assert.Equal(t, quorum.Count{Done: 5}, c, "every reply is still there for a later Wait")
	})

	t.Run("caller context", func(t *testing.T) {
		// The documented use: stop = ctx.Done() of the caller, whose
		// calls are bounded by that same ctx (the caller's job now).
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := start(t, clock.Real{}, 3, func(int) (node.Result, error) {
			<-ctx.Done()
			return node.Result{}, ctx.Err()
		})
		counts := waitAsync(r, ctx.Done(), 2)
		cancel()
		c := recv(t, counts, "Wait")
		assert.False(t, c.Reached(2), "%+v", c)
		assert.Zero(t, c.Done, "%+v", c)
		assert.Equal(t, 3, c.Pending+c.Failed, "%+v", c)
		for i, rep := range r.Replies {
			if rep.Answered() {
				assert.ErrorIs(t, rep.Err, context.Canceled, "node %d", i)
			}
		}
	})
}

// TestLatencyUsesInjectedClock: node i moves a fake clock by i×10ms, one
// node after the other, so every Latency and Elapsed is exact.
func TestLatencyUsesInjectedClock(t *testing.T) {
	const n = 5
	begin := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := newSteppedClock(begin, n)
	abort := newGate() // for clean-up only, should a check fail
	defer abort.open()

	r := start(t, clk, n, func(i int) (node.Result, error) {
		if i > 0 {
			// Wait until node i-1's Latency has been measured.
			select {
			case <-clk.sinces[i-1]:
			case <-abort.wait():
				return node.Result{}, errors.New("aborted")
			}
		}
		clk.Advance(time.Duration(i) * 10 * time.Millisecond)
		return done, nil
	})
	assert.Equal(t, begin, r.Started())

	c := recv(t, waitAsync(r, nil, quorum.Majority(n)), "Wait")
	assert.Equal(t, quorum.Count{Done: 3, Pending: 2}, c)
	c = recv(t, waitAsync(r, nil, n), "Wait for the rest")
	assert.Equal(t, quorum.Count{Done: n}, c)

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

// TestNoNodes: an empty round is decided at once and never reached.
func TestNoNodes(t *testing.T) {
	r := start(t, clock.Real{}, 0, func(int) (node.Result, error) {
		t.Error("no node to call")
		return node.Result{}, nil
	})
	c := recv(t, waitAsync(r, nil, quorum.Majority(0)), "Wait")
	assert.Equal(t, quorum.Count{}, c)
	assert.False(t, c.Reached(quorum.Majority(0)))
	assert.True(t, c.Decided(quorum.Majority(0)))
	assert.Empty(t, r.Replies)
}

// TestSkip: a node whose skip returns an error gets it as its reply at
// once, without a call (and without a goroutine).
func TestSkip(t *testing.T) {
	skipped := errors.New("skipped")
	var called [5]atomic.Bool
	before := runtime.NumGoroutine()
	block := make(chan struct{})
	r := new(quorum.Round)
	r.Start(clock.Real{}, 5, skipCalls{
		skip: func(i int) error {
			if i >= 2 {
				return skipped
			}
			return nil
		},
		call: func(i int) (node.Result, error) {
			called[i].Store(true)
			<-block
			return node.Result{Status: node.Done}, nil
		},
	})
	assert.LessOrEqual(t, runtime.NumGoroutine()-before, 2, "a goroutine for a skipped node")
	c := r.Wait(nil, quorum.Majority(5))
	assert.Equal(t, quorum.Count{Failed: 3, Pending: 2}, c, "decided by the skipped nodes alone")
	for i := 2; i < 5; i++ {
		assert.ErrorIs(t, r.Replies[i].Err, skipped)
		assert.False(t, called[i].Load(), "node %d was called", i)
	}
	close(block)
	c = r.Wait(nil, 2) // both calls' replies
	assert.Equal(t, 2, c.Done)
}

// skipCalls is a quorum.Caller and quorum.Skipper made of two functions.
type skipCalls struct {
	skip func(i int) error
	call func(i int) (node.Result, error)
}

func (s skipCalls) Skip(i int) error                { return s.skip(i) }
func (s skipCalls) Call(i int) (node.Result, error) { return s.call(i) }

// TestWaitAnswered: WaitAnswered returns once that many calls have
// returned, though the outcome is not decided (two Done and one Taken of
// five, need 3: the two hanging nodes could still make it); Wait goes on
// from there to the decision.
func TestWaitAnswered(t *testing.T) {
	release := newGate()
	defer release.open()
	r := start(t, clock.NewFake(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)), 5, func(i int) (node.Result, error) {
		switch {
		case i < 2:
			return done, nil
		case i == 2:
			return node.Result{Status: node.Taken}, nil
		}
		<-release.wait()
		return node.Result{Status: node.Taken}, nil
	})
	c := r.WaitAnswered(nil, 3, 3)
	assert.Equal(t, quorum.Count{Done: 2, Taken: 1, Pending: 2}, c)
	assert.False(t, c.Decided(3))
	release.open()
	assert.Equal(t, quorum.Count{Done: 2, Taken: 3}, recv(t, waitAsync(r, nil, 3), "Wait for the rest"))
}

// keptCalls is a quorum.Keeper (and Skipper) that keeps each call's
// outcome in its own slice, as package redlock's rounds keep theirs in
// their steps.
type keptCalls struct {
	skip  func(i int) error
	call  func(i int) (node.Result, error)
	res   []node.Result
	err   []error
	reads []atomic.Int32 // Kept calls per node
}

func newKeptCalls(n int, skip func(int) error, call func(int) (node.Result, error)) *keptCalls {
	return &keptCalls{skip: skip, call: call, res: make([]node.Result, n), err: make([]error, n), reads: make([]atomic.Int32, n)}
}

func (k *keptCalls) Skip(i int) error {
	if err := k.skip(i); err != nil {
		k.err[i] = err
		return err
	}
	return nil
}

func (k *keptCalls) Call(i int) (node.Result, error) {
	k.res[i], k.err[i] = k.call(i)
	return k.res[i], k.err[i]
}

func (k *keptCalls) Kept(i int) (node.Result, error) {
	k.reads[i].Add(1)
	return k.res[i], k.err[i]
}

// TestKeeperRound: a Keeper's round keeps no Replies; Reply, Snapshot and
// Count read its outcomes as received (a node not received reads as the
// zero Reply and counts Pending, even once its call has returned), with
// the same classification as Replies (an error wipes the result; a call
// that returned no status fails) and the latency measured by the call's
// goroutine; a skipped node's reply is Skip's error; a late one comes in
// with Collect.
func TestKeeperRound(t *testing.T) {
	skipped := errors.New("skipped")
	broken := errors.New("broken")
	clk := clock.NewFake(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	late := newGate()
	defer late.open()
	var returned sync.WaitGroup
	returned.Add(4)
	k := newKeptCalls(5,
		func(i int) error {
			if i == 4 {
				return skipped
			}
			return nil
		},
		func(i int) (node.Result, error) {
			defer returned.Done()
			switch i {
			case 0, 1:
				return node.Result{Status: node.Done, Fence: int64(10 + i)}, nil
			case 2:
				return node.Result{Status: node.Done}, broken // a status with an error
			}
			<-late.wait()
			clk.Advance(7 * time.Millisecond)
			return node.Result{}, nil // neither a status nor an error
		})
	r := new(quorum.Round)
	r.Start(clk, 5, k)
	assert.Nil(t, r.Replies, "a Keeper's round stores no replies")
	c := r.WaitAnswered(nil, 3, 4)
	assert.Equal(t, quorum.Count{Done: 2, Failed: 2, Pending: 1}, c)
	assert.Equal(t, c, r.Count())
	assert.Equal(t, quorum.Reply{Node: 0, Result: node.Result{Status: node.Done, Fence: 10}}, r.Reply(0))
	assert.Equal(t, quorum.Reply{Node: 2, Err: broken}, r.Reply(2), "the status is dropped with the error")
	assert.Equal(t, quorum.Reply{Node: 4, Err: skipped}, r.Reply(4))
	assert.Equal(t, quorum.Reply{Node: 3}, r.Reply(3), "not returned: the zero Reply but for Node")

	late.open()
	returned.Wait()
	assert.Equal(t, quorum.Reply{Node: 3}, r.Reply(3), "returned, not received: still pending")
	assert.Zero(t, k.reads[3].Load(), "Kept read before the end was received")
	c = r.Collect()
	assert.Equal(t, quorum.Count{Done: 2, Failed: 3}, c)
	rep := r.Reply(3)
	assert.Error(t, rep.Err, "no status and no error: a failure")
	assert.Equal(t, node.Unknown, rep.Result.Status)
	assert.Equal(t, 7*time.Millisecond, rep.Latency, "measured when the call returned")
	snap := r.Snapshot(make([]quorum.Reply, 0, 5))
	require.Len(t, snap, 5)
	for i, rep := range snap {
		assert.Equal(t, r.Reply(i), rep)
	}
}
