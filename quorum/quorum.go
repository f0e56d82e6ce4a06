// Package quorum fans one lock operation out to every node in parallel and
// returns as soon as the outcome is decided.
//
// The outcome is decided when need nodes answered Done, or when so many
// answered otherwise (or failed) that need is out of reach. need is counted
// against the configured nodes, never against those that happen to answer,
// so a partition that hides nodes can only make a quorum harder to reach.
//
// Calls still running when Wait returns are not cancelled: each finishes in
// its own goroutine within the deadline of the context it was given, and its
// reply stays in the Round for Rest and Await, so that whoever must clean up
// after a late SET (a rollback, an unlock) sees it.
package quorum

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
)

// Majority returns the smallest majority of n nodes: n/2 + 1.
func Majority(n int) int { return n/2 + 1 }

// Reply is one node's answer within a Round.
type Reply struct {
	Node    int           // index of the node in the configured list
	Addr    string        // the node's Addr
	Status  node.Status   // Unknown when the call failed or has not returned
	Err     error         // the call's error; nil on an answer
	Latency time.Duration // from the fan-out to this reply
	// Late is true for a reply that arrived after Wait returned. Only Rest
	// sees late replies.
	Late bool
}

// Answered reports whether the node replied (with or without an error).
func (r Reply) Answered() bool { return r.Status != node.Unknown || r.Err != nil }

// Call runs one operation on node i. It must return within ctx's deadline.
type Call func(ctx context.Context, i int, n node.Node) (node.Status, error)

// Round is one call fanned out to every node. Wait, WaitAll and
// Rest must be called from one goroutine (the owner), Wait before Rest.
// Await may be called from any goroutine.
type Round struct {
	// Replies holds, by node index, the replies Wait received. A node that
	// had not answered when Wait returned has Status Unknown and Err nil.
	// Only the owner's calls write it.
	Replies []Reply

	// landed holds every reply as its call returns, for Await; mu guards
	// it, landedAt and waitCh. waitCh[i] is made by the first Await on a
	// node whose call has not returned, and closed when it returns: only
	// a wait costs a channel.
	mu       sync.Mutex
	landed   []Reply
	landedAt []bool
	waitCh   []chan struct{}

	ch      chan Reply
	got     int
	start   time.Time
	clk     clock.Clock
	wg      *sync.WaitGroup
	running atomic.Int32
	cancel  context.CancelFunc

	// Storage for Replies, landed, landedAt and waitCh when there are at
	// most inlineNodes nodes (the usual 3, 5 or 7), so that a round costs
	// one allocation for its state instead of four.
	inline   [2 * inlineNodes]Reply
	inlineAt [inlineNodes]bool
	inlineCh [inlineNodes]chan struct{}
}

// inlineNodes is how many nodes a Round holds without extra allocations.
const inlineNodes = 7

// Start calls call on every node in parallel, each in its own goroutine,
// and returns at once. Every call gets one context derived from ctx whose
// deadline is timeout after the fan-out (the per-node timeout); it is
// released when the last call returns. To let calls outlive a caller's
// cancellation, pass context.WithoutCancel(ctx).
//
// wg, if not nil, counts the goroutines Start and Rest run, so an owner can
// wait for every call to end (e.g. on Close).
func Start(ctx context.Context, clk clock.Clock, wg *sync.WaitGroup, nodes []node.Node, timeout time.Duration, call Call) *Round {
	n := len(nodes)
	r := &Round{
		ch:    make(chan Reply, n),
		start: clk.Now(),
		clk:   clk,
		wg:    wg,
	}
	// One backing array for both views of the replies, inside the Round
	// for the usual cluster sizes: fewer allocations on the hot path.
	buf, at, wch := r.inline[:], r.inlineAt[:], r.inlineCh[:]
	if n > inlineNodes {
		buf, at, wch = make([]Reply, 2*n), make([]bool, n), make([]chan struct{}, n)
	}
	r.Replies, r.landed, r.landedAt, r.waitCh = buf[:n:n], buf[n:2*n], at[:n], wch[:n]
	for i, n := range nodes {
		// Unanswered entries still name their node.
		r.Replies[i] = Reply{Node: i, Addr: n.Addr()}
	}
	ctx, r.cancel = context.WithTimeout(ctx, timeout)
	if len(nodes) == 0 {
		r.cancel()
	}
	r.running.Store(int32(len(nodes)))
	if wg != nil {
		wg.Add(len(nodes))
	}
	for i, n := range nodes {
		go r.run(ctx, i, n, call)
	}
	return r
}

// Elapsed returns the time since the fan-out began.
func (r *Round) Elapsed() time.Duration { return r.clk.Since(r.start) }

// Started returns the time the fan-out began.
func (r *Round) Started() time.Time { return r.start }

func (r *Round) run(ctx context.Context, i int, n node.Node, call Call) {
	if r.wg != nil {
		defer r.wg.Done()
	}
	st, err := call(ctx, i, n)
	if err != nil {
		st = node.Unknown
	}
	if r.running.Add(-1) == 0 {
		r.cancel()
	}
	rep := Reply{Node: i, Addr: n.Addr(), Status: st, Err: err, Latency: r.clk.Since(r.start)}
	r.mu.Lock()
	r.landed[i], r.landedAt[i] = rep, true
	if w := r.waitCh[i]; w != nil {
		close(w)
	}
	r.mu.Unlock()
	// ch has room for every node, so this never blocks.
	r.ch <- rep
}

// Await returns node i's reply, waiting for its call to return if it has
// not yet (each call is bounded by the round's timeout). It may be called
// from any goroutine, before or after Wait, and does not change Replies.
// Late is never set on what it returns.
func (r *Round) Await(i int) Reply {
	rep, _ := r.AwaitContext(context.Background(), i)
	return rep
}

// AwaitContext is Await that gives up when ctx ends, returning ctx's
// error. It may be called from any goroutine.
func (r *Round) AwaitContext(ctx context.Context, i int) (Reply, error) {
	r.mu.Lock()
	if r.landedAt[i] {
		rep := r.landed[i]
		r.mu.Unlock()
		return rep, nil
	}
	w := r.waitCh[i]
	if w == nil {
		w = make(chan struct{})
		r.waitCh[i] = w
	}
	r.mu.Unlock()
	select {
	case <-w:
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.landed[i], nil
}

// Landed reports whether node i's call has returned, without waiting.
func (r *Round) Landed(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.landedAt[i]
}

// Tally is the count of replies when Wait returned.
type Tally struct {
	Done    int // replies with Status Done
	Other   int // replies with any other status, errors included
	Failed  int // replies with an error (counted in Other too)
	Pending int // calls that had not returned
	// Reached is true when Done >= need.
	Reached bool
}

// Wait receives replies until need of them are Done, until need is out of
// reach, or until stop is closed (pass ctx.Done(); nil never stops). It
// returns at the first of these; calls still running go on. The tally
// counts every reply received so far, so Wait may be called again (with a
// new stop channel) to keep waiting.
func (r *Round) Wait(stop <-chan struct{}, need int) Tally {
	n := len(r.Replies)
	var t Tally
	t.Pending = n - r.got
	for _, rep := range r.Replies {
		t.count(rep)
	}
	for t.Pending > 0 && t.Done < need && t.Other <= n-need {
		select {
		case rep := <-r.ch:
			r.got++
			r.Replies[rep.Node] = rep
			t.Pending--
			t.count(rep)
		case <-stop:
			t.Reached = t.Done >= need
			return t
		}
	}
	t.Reached = t.Done >= need
	return t
}

// count adds a received reply to the tally; unanswered entries add nothing.
func (t *Tally) count(rep Reply) {
	switch {
	case rep.Status == node.Done:
		t.Done++
	case rep.Err != nil:
		t.Failed++
		t.Other++
	case rep.Status != node.Unknown:
		t.Other++
	}
}

// WaitAll receives every reply, however long the calls take (each is
// bounded by the round's timeout).
func (r *Round) WaitAll() {
	for ; r.got < len(r.Replies); r.got++ {
		rep := <-r.ch
		r.Replies[rep.Node] = rep
	}
}

// Rest hands every reply that Wait did not receive to fn, with Late set,
// as each arrives, from one background goroutine (counted in the Round's
// WaitGroup). It returns at once; the goroutine ends after the last call.
// Rest does nothing when every reply was already received.
func (r *Round) Rest(fn func(Reply)) {
	left := len(r.Replies) - r.got
	if left == 0 {
		return
	}
	r.got = len(r.Replies)
	if r.wg != nil {
		r.wg.Add(1)
	}
	go func() {
		if r.wg != nil {
			defer r.wg.Done()
		}
		for range left {
			rep := <-r.ch
			rep.Late = true
			fn(rep)
		}
	}()
}
