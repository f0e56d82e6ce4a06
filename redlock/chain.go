package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/quorum"
	"github.com/quorumlock/redlock/node"
)

// chain is the one path every command on a lock takes: acquire, extend,
// release and rollback. It keeps, for each node, the lock's last command
// there, and applies the rule that makes a lock's commands reach each node
// in the order they were issued:
//
// A command on a node waits until the lock's previous command on that node
// has returned. A release sent while the SET is still in flight could be
// overtaken by it and leave the key behind for a TTL; a short extend
// overtaken by a later long one could make the node count for the long one
// while its key dies early. The wait ends with the round's deadline (one
// node timeout after the round began); a command still waiting then is not
// sent at all, so commands queued behind a silent node never form a chain
// that outlives a node timeout. A command that is sent gets a full node
// timeout of its own, so a release that follows a late reply has time to
// land. (A command whose call timed out may still reach the node later;
// extend.lua never shortens a key, so a stale extend is harmless.)
//
// A chain belongs to one lock. Its commands are issued one at a time: by
// the attempt that made it, then by whoever holds the Lock's op slot.
type chain struct {
	c       *Client
	k       node.Key
	timeout time.Duration // the node timeout of every call
	tail    []step        // the last round's command on each node; nil before the first
	sent    []bool        // per node, whether any command of the lock was sent there
}

// step is one command on one node: its outcome, once done is closed.
type step struct {
	done chan struct{} // closed when the command returned, or was not sent
	res  node.Result   // written before done is closed
	err  error         // written before done is closed
	gen  uint64        // the node breaker's generation the call was let through in
}

// landed reports whether the command has returned, without waiting.
func (s *step) landed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// command is what a round does on one node, given the lock's previous
// command there (nil for the first).
type command func(ctx context.Context, n node.Node, k node.Key, prev *step) (node.Result, error)

func newChain(c *Client, k node.Key, timeout time.Duration) *chain {
	return &chain{c: c, k: k, timeout: timeout, sent: make([]bool, len(c.nodes))}
}

// send issues cmd to every node through the chain and returns the round.
// The caller has begun an operation on the client (see Client.begin), so
// Close waits for these calls. Calls outlive ctx's cancellation, keeping
// its values: their replies decide what must be cleaned up.
func (ch *chain) send(ctx context.Context, op string, cmd command) *quorum.Round {
	c, n := ch.c, len(ch.c.nodes)
	prev, next := ch.tail, make([]step, n)
	for i := range next {
		next[i].done = make(chan struct{})
	}
	ch.tail = next
	// One deadline for the round: it bounds every call whose predecessor
	// had returned, and every wait for one that had not.
	base := context.WithoutCancel(ctx)
	rctx, cancel := context.WithTimeout(base, ch.timeout)
	left := atomic.Int32{}
	left.Store(int32(n))
	// A node whose breaker is open gets no call: its step fails at once.
	// A release is the exception where an earlier command of this lock
	// was sent to the node (it may have left a key): the lock's own
	// acquire may be the breaker's probe, still in flight.
	skip := func(i int) error {
		ok, gen := c.allow(i)
		if ok || (op == "release" && ch.sent[i]) {
			next[i].gen = gen
			ch.sent[i] = true
			c.bg.Add(1)
			return nil
		}
		s := &next[i]
		s.err = &node.Error{Addr: c.nodes[i].Addr(), Op: op, Kind: node.ErrCircuitOpen}
		close(s.done)
		c.callDone(i, op, 0, s.err)
		if left.Add(-1) == 0 {
			cancel()
		}
		return s.err
	}
	return quorum.Start(c.clk, n, skip, func(i int) (node.Result, error) {
		defer c.bg.Done()
		var p *step
		if prev != nil {
			p = &prev[i]
		}
		s := &next[i]
		start := c.clk.Now()
		s.res, s.err = ch.run(rctx, base, op, c.nodes[i], p, cmd)
		close(s.done)
		c.record(i, s.gen, s.err)
		c.callDone(i, op, c.clk.Since(start), s.err)
		if left.Add(-1) == 0 {
			cancel()
		}
		return s.res, s.err
	})
}

// run sends cmd to n within rctx, the round's context, once prev (the
// lock's previous command on n) has returned. If prev had not returned
// yet, it waits for it until the round's deadline and then sends cmd with
// a node timeout of its own, derived from base.
func (ch *chain) run(rctx, base context.Context, op string, n node.Node, prev *step, cmd command) (node.Result, error) {
	if prev != nil && !prev.landed() {
		select {
		case <-prev.done:
		case <-rctx.Done():
			return node.Result{}, &node.Error{Addr: n.Addr(), Op: op, Kind: node.ErrTimeout, Err: errPrevPending}
		}
		ctx, cancel := context.WithTimeout(base, ch.timeout)
		defer cancel()
		return cmd(ctx, n, ch.k, prev)
	}
	return cmd(rctx, n, ch.k, prev)
}

// errPrevPending fails a node's call that was never sent: the node had
// not answered the lock's previous command by the end of this round.
var errPrevPending = errors.New("the previous command for this lock had not returned; not sent")

// wait blocks until the commands last issued to the nodes in which return.
func (ch *chain) wait(which []int) {
	for _, i := range which {
		<-ch.tail[i].done
	}
}

// acquire is SET NX PX ttl.
func acquire(ttl time.Duration) command {
	return func(ctx context.Context, n node.Node, k node.Key, _ *step) (node.Result, error) {
		return n.Acquire(ctx, k, ttl)
	}
}

// FenceCounterTTL is how long a key's fence counter lives on a node after
// its last grant or confirm (for a lock TTL longer than that, the lock's
// TTL). A counter that expires starts again from the node's clock (see
// node.Fencer), above every fence handed out before as long as the
// nodes' clocks agree to within this time; the TTL only keeps counters of
// lock names no longer used from piling up.
const FenceCounterTTL = 24 * time.Hour

func counterTTL(ttl time.Duration) time.Duration { return max(FenceCounterTTL, ttl) }

// acquireFenced is acquire that also raises the key's fence counter.
func acquireFenced(ttl time.Duration) command {
	return func(ctx context.Context, n node.Node, k node.Key, _ *step) (node.Result, error) {
		return n.(node.Fencer).AcquireFenced(ctx, k, ttl, counterTTL(ttl))
	}
}

// confirmFence raises the counter to fence on the nodes whose acquire
// answered Done; on the others nothing is sent and the acquire's answer
// stands, so that only confirmations count towards the majority.
func confirmFence(fence int64, ttl time.Duration) command {
	return func(ctx context.Context, n node.Node, k node.Key, prev *step) (node.Result, error) {
		if prev.err != nil || prev.res.Status != node.Done {
			return node.Result{Status: prev.res.Status}, prev.err
		}
		return n.(node.Fencer).ConfirmFence(ctx, k, fence, counterTTL(ttl))
	}
}

// extend is extend.lua with ttl.
func extend(ttl time.Duration) command {
	return func(ctx context.Context, n node.Node, k node.Key, _ *step) (node.Result, error) {
		return n.Extend(ctx, k, ttl)
	}
}

// release is a release, except on a node whose previous command proved
// that the key is not ours (Taken or Absent: a SET NX's nil reply, or a
// script that found another token or none); nothing is sent there and the
// previous answer stands. Unlock announces its release to waiters (see
// node.Node.Release); rollback, the same path otherwise, does not.
func release(announce bool) command {
	return func(ctx context.Context, n node.Node, k node.Key, prev *step) (node.Result, error) {
		if prev != nil && prev.err == nil && (prev.res.Status == node.Taken || prev.res.Status == node.Absent) {
			return prev.res, nil
		}
		return n.Release(ctx, k, announce)
	}
}
