// Package quorum fans one command out to every node in parallel and counts
// the replies until the outcome is decided. It is the arithmetic of the
// Redlock algorithm apart from any Redis client: package redlock builds
// on it, and it can be read and tested on its own (with a clock.Fake).
//
// The outcome is decided when need nodes answered Done, or when so many
// answered otherwise (or failed) that need is out of reach. need is counted
// against the configured nodes, never against those that happen to answer,
// so a partition that hides nodes can only make a quorum harder to reach.
//
// A Round runs one call per node, each in a goroutine of its own, through
// a Caller: an interface, so that the caller's per-round state is one
// struct (it can embed the Round) and no closure is made per round. The
// package starts calls and counts; it does not bound them. Each call must
// return on its own (the caller gives it a deadline). Calls still running
// when Wait returns go on in their goroutines; their replies are kept in
// the Round's channel for Collect, and whoever must act on them (a
// rollback) learns of them there or elsewhere.
package quorum

import (
	"errors"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
)

// Majority returns the smallest majority of n nodes: n/2 + 1.
func Majority(n int) int { return n/2 + 1 }

// Reply is one node's answer within a Round.
type Reply struct {
	Node    int         // index of the node
	Result  node.Result // Status Unknown when the call failed or has not returned
	Err     error       // the call's error; nil on an answer
	Latency time.Duration
}

// Answered reports whether the node replied (with or without an error).
func (r Reply) Answered() bool { return r.Result.Status != node.Unknown || r.Err != nil }

// errNoStatus replaces the nil error of a call that returned no status (or
// one this package does not know), so that every reply is either an
// answer or a failure.
var errNoStatus = errors.New("node returned neither a status nor an error")

// Count is the tally of a round's replies by kind. It is the one place a
// reply is classified.
type Count struct {
	Done    int // the command took effect
	Taken   int // the key holds another token
	Absent  int // the key does not exist
	Failed  int // the call returned an error: outcome unknown
	Pending int // the call had not returned
}

// Tally counts replies; those not answered count as Pending.
func Tally(replies []Reply) Count {
	var c Count
	for _, r := range replies {
		c.add(r)
	}
	return c
}

func (c *Count) add(r Reply) {
	switch {
	case r.Err != nil:
		c.Failed++
	case r.Result.Status == node.Done:
		c.Done++
	case r.Result.Status == node.Taken:
		c.Taken++
	case r.Result.Status == node.Absent:
		c.Absent++
	default:
		c.Pending++
	}
}

// Reached reports whether need nodes answered Done.
func (c Count) Reached(need int) bool { return c.Done >= need }

// Decided reports whether the outcome is known: need reached, or out of
// reach even if every pending call answers Done.
func (c Count) Decided(need int) bool { return c.Done >= need || c.Done+c.Pending < need }

// Refused reports whether so many nodes answered that the key is not ours
// (Taken or Absent) that need is out of reach whatever the failed and
// pending ones would say: the lock is not held, as opposed to unknown.
func (c Count) Refused(need int) bool {
	n := c.Done + c.Taken + c.Absent + c.Failed + c.Pending
	return c.Taken+c.Absent > n-need
}

// Caller makes the calls of a round, one per node.
type Caller interface {
	// Call makes node i's call. It runs in a goroutine of its own and
	// must return by itself, within the deadline the caller gave it.
	Call(i int) (node.Result, error)
}

// Skipper is a Caller that can refuse a node before its call starts.
// Start asks Skip for each node in turn, in Start's goroutine; a non-nil
// error is that node's reply at once, with no goroutine and no call.
type Skipper interface {
	Skip(i int) error
}

// Keeper is a Caller that keeps each call's outcome itself (in per-node
// state it has anyway), where the round's owner can read it once the call
// has returned. A Keeper's Round stores no copy of the replies: a call's
// goroutine hands the owner only the node's index and latency, and the
// owner reads a reply with Reply or Snapshot, built from Kept. (A Round
// of another Caller keeps its replies in Replies.)
type Keeper interface {
	Caller
	// Kept returns what node i's Call returned, or the error its Skip
	// returned. The round's owner calls it only after that call has
	// returned, so Kept may read what Call wrote without a lock.
	Kept(i int) (node.Result, error)
}

// CallFunc adapts a function to Caller.
type CallFunc func(i int) (node.Result, error)

// Call calls f.
func (f CallFunc) Call(i int) (node.Result, error) { return f(i) }

// Round is one command fanned out to every node. The zero Round is ready
// for Start, so a caller can embed it in a struct of its own and pay for
// one allocation instead of two. Start and Wait must be called from one
// goroutine, the round's owner.
type Round struct {
	// Replies holds, by node index, the replies Wait received; a node
	// that had not answered when Wait returned has the zero Reply but for
	// Node. Written only by Start (for skipped nodes), Wait and Collect.
	// nil in a Keeper's round: Reply and Snapshot read its replies.
	Replies []Reply

	ch    chan arrival // every call's end; room for all, so no call blocks
	start time.Time
	clk   clock.Clock
	calls Keeper          // the Caller, or a keeper around one that is not a Keeper
	lat   []time.Duration // a Keeper's round: node i's latency once its end was received, -1 before
}

// arrival is the end of node i's call, sent from its goroutine to the
// round's owner, who reads the outcome from the Keeper.
type arrival struct {
	node    int
	latency time.Duration // 0 for a node Skip refused
}

// Start runs c.Call for nodes 0..n-1 in parallel, one goroutine each (a
// worker that may have run earlier calls, see spawn), and returns at
// once. If c is also a Skipper, a node it skips gets its error
// as the reply and no goroutine. A Round is started once.
func (r *Round) Start(clk clock.Clock, n int, c Caller) {
	r.ch, r.start, r.clk = make(chan arrival, n), clk.Now(), clk
	if k, ok := c.(Keeper); ok {
		r.calls, r.lat = k, make([]time.Duration, n)
		for i := range r.lat {
			r.lat[i] = -1
		}
	} else {
		r.calls, r.Replies = &keeper{Caller: c, got: make([]kept, n)}, make([]Reply, n)
		for i := range r.Replies {
			r.Replies[i].Node = i
		}
	}
	skip, _ := c.(Skipper)
	for i := range n {
		if skip != nil {
			if err := skip.Skip(i); err != nil {
				if k, ok := r.calls.(*keeper); ok {
					k.got[i].err = err
				}
				r.ch <- arrival{node: i}
				continue
			}
		}
		spawn(r, i)
	}
}

func (r *Round) run(i int) {
	r.calls.Call(i)
	r.ch <- arrival{node: i, latency: r.clk.Since(r.start)}
}

// keeper keeps the outcomes of a Caller that is not a Keeper.
type keeper struct {
	Caller
	got []kept // node i's, written by its goroutine before its arrival is sent
}

type kept struct {
	res node.Result
	err error
}

func (k *keeper) Call(i int) (node.Result, error) {
	res, err := k.Caller.Call(i)
	k.got[i] = kept{res, err}
	return res, err
}

func (k *keeper) Kept(i int) (node.Result, error) { return k.got[i].res, k.got[i].err }

// reply is node i's Reply for what its call returned: an error is the
// reply's, with no result; a call that returned neither a known status
// nor an error fails with errNoStatus.
func reply(i int, res node.Result, err error, latency time.Duration) Reply {
	switch {
	case err != nil:
		res = node.Result{}
	case res.Status == node.Unknown || res.Status > node.Absent:
		res, err = node.Result{}, errNoStatus
	}
	return Reply{Node: i, Result: res, Err: err, Latency: latency}
}

// receive records an arrival; only the owner calls it.
func (r *Round) receive(a arrival) Reply {
	if r.Replies == nil {
		r.lat[a.node] = a.latency
		return r.Reply(a.node)
	}
	res, err := r.calls.Kept(a.node)
	r.Replies[a.node] = reply(a.node, res, err, a.latency)
	return r.Replies[a.node]
}

// Reply returns node i's reply as the owner has received it (see
// Replies): the zero Reply but for Node if it has not.
func (r *Round) Reply(i int) Reply {
	if r.Replies != nil {
		return r.Replies[i]
	}
	if r.lat[i] < 0 {
		return Reply{Node: i}
	}
	res, err := r.calls.Kept(i)
	return reply(i, res, err, r.lat[i])
}

// Snapshot returns every node's Reply as the owner has received it, in
// dst if it has room.
func (r *Round) Snapshot(dst []Reply) []Reply {
	dst = dst[:0]
	for i := range r.size() {
		dst = append(dst, r.Reply(i))
	}
	return dst
}

// Count returns the tally of the replies received so far.
func (r *Round) Count() Count {
	var c Count
	for i := range r.size() {
		c.add(r.Reply(i))
	}
	return c
}

func (r *Round) size() int {
	if r.Replies != nil {
		return len(r.Replies)
	}
	return len(r.lat)
}

// Elapsed returns the time since the fan-out began.
func (r *Round) Elapsed() time.Duration { return r.clk.Since(r.start) }

// Started returns the time the fan-out began.
func (r *Round) Started() time.Time { return r.start }

// Collect takes the replies that have arrived since Wait returned,
// without waiting, and returns the count.
func (r *Round) Collect() Count {
	for {
		select {
		case a := <-r.ch:
			r.receive(a)
		default:
			return r.Count()
		}
	}
}

// Wait receives replies until the outcome is decided for need (see
// Count.Decided) or stop is closed (pass ctx.Done(); nil never stops), and
// returns the count so far. Calls still running go on; Wait may be called
// again to keep counting.
func (r *Round) Wait(stop <-chan struct{}, need int) Count {
	return r.WaitAnswered(stop, need, r.size()+1)
}

// WaitAnswered is Wait that also returns once answered calls have
// returned (answered or failed), decided or not: a caller that would
// give up on the slowest nodes learns when the others are in.
func (r *Round) WaitAnswered(stop <-chan struct{}, need, answered int) Count {
	c := r.Count()
	for c.Pending > 0 && !c.Decided(need) && r.size()-c.Pending < answered {
		select {
		case a := <-r.ch:
			c.Pending--
			c.add(r.receive(a))
		case <-stop:
			return c
		}
	}
	return c
}
