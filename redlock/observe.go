package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/redlock/node"
)

// Hooks receive what a client does, for metrics, traces and logs. Every
// field is optional, and a nil field costs nothing. Hooks are called
// synchronously from the client's own goroutines (a node call's, or the
// caller's): they must return quickly and must not call the client.
type Hooks struct {
	// Acquire is called once per TryLock or Lock call that got past
	// argument checks, when it returns.
	Acquire func(AcquireInfo)
	// Extend is called after each Extend that sent commands, KeepAlive's
	// included.
	Extend func(OpInfo)
	// Unlock is called after each Unlock that sent commands.
	Unlock func(OpInfo)
	// Lost is called when KeepAlive ends a job context because the lock
	// could no longer be proven held; cause wraps ErrLost.
	Lost func(key string, cause error)
	// NodeCall is called after each command on a node returns, and for
	// each command a node's open breaker skipped (Latency 0).
	NodeCall func(NodeCallInfo)
	// Breaker is called when a node's circuit breaker changes state.
	Breaker func(BreakerChange)
	// Colocated is called, on a DialCluster client, when the number of
	// copies that share their master with another copy changes (a
	// resharding or a failover moved a copy's slot onto another copy's
	// master), and at dial when that number is not 0; 0 when every copy
	// is on a master of its own again. While it is not 0, losing one
	// master loses that many copies of every lock (docs/CLUSTER.md).
	Colocated func(copies int)
}

// AcquireInfo describes one TryLock or Lock call.
type AcquireInfo struct {
	Key      string        // prefix included
	Wait     time.Duration // from the call to its return, backoffs included
	Attempts int           // attempts made (1 for TryLock)
	// Err is nil when the lock was granted, else the call's error (a
	// *QuorumError, ErrClosed, ...).
	Err error
}

// Outcome names the call's outcome, for metric labels: "granted",
// "not_acquired", "canceled" (the caller's context ended), "closed" or
// "error".
func (i AcquireInfo) Outcome() string {
	switch err := i.Err; {
	case err == nil:
		return "granted"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrNotAcquired):
		return "not_acquired"
	case errors.Is(err, ErrClosed):
		return "closed"
	}
	return "error"
}

// OpInfo describes one Extend or Unlock.
type OpInfo struct {
	Key      string
	Duration time.Duration // of the call
	// Held is, for Unlock, how long the lock had been held: from the
	// start of its acquisition to the Unlock.
	Held time.Duration
	Err  error // nil on success
}

// Outcome names the call's outcome, for metric labels: "ok", "not_held"
// (the lock was lost) or "failed" (outcome unknown).
func (i OpInfo) Outcome() string {
	switch {
	case i.Err == nil:
		return "ok"
	case errors.Is(i.Err, ErrNotHeld):
		return "not_held"
	}
	return "failed"
}

// NodeCallInfo describes one command on one node.
type NodeCallInfo struct {
	Node    int    // index in the configured list
	Addr    string // the node's address
	Op      string // "acquire", "confirm" (fenced locks), "extend", "reseed" (see Lock.Extend), "transfer" (a handoff, see Lock.Unlock), "leave" (a waiter giving up) or "release"
	Latency time.Duration
	Err     error // nil when the node answered (done, taken or absent)
}

// BreakerChange is a node's circuit breaker moving from one state to
// another.
type BreakerChange struct {
	Node     int
	Addr     string
	From, To BreakerState
}

// WithHooks sets the client's hooks. Default: none.
func WithHooks(h Hooks) Option { return clientOnly("WithHooks", func(c *config) { c.hooks = h }) }

// WithBreaker configures the per-node circuit breakers; see Breaker for
// the defaults. Breaker{Failures: -1} turns them off.
func WithBreaker(b Breaker) Option {
	return clientOnly("WithBreaker", func(c *config) { c.breaker = b })
}

// newNodeBreakers returns one breaker per node, or nil when cfg turns
// them off. nodeTimeout sets the default Span.
func newNodeBreakers(cfg Breaker, n int, nodeTimeout time.Duration) []*breaker {
	if cfg.Failures < 0 {
		return nil
	}
	if cfg.Span == 0 {
		cfg.Span = 2 * nodeTimeout
	}
	bs := make([]*breaker, n)
	for i := range bs {
		bs[i] = newBreaker(cfg)
	}
	return bs
}

// allow asks node i's breaker whether a call may go.
func (c *Client) allow(i int) (bool, uint64) {
	if c.health.breakers == nil {
		return true, 0
	}
	if ok, gen := c.health.breakers[i].quick(); ok {
		return true, gen
	}
	ok, gen, t := c.health.breakers[i].allow(c.clk.Now())
	c.breakerMoved(i, t)
	return ok, gen
}

// record tells node i's breaker how a call it let through ended.
func (c *Client) record(i int, gen uint64, err error) {
	if c.health.breakers == nil || (err == nil && c.health.breakers[i].quickDone(gen)) {
		return
	}
	if errors.Is(err, errPrevPending) {
		c.breakerMoved(i, c.health.breakers[i].unsent(c.clk.Now(), gen))
		return
	}
	c.breakerMoved(i, c.health.breakers[i].done(c.clk.Now(), gen, nodeDown(err) && !c.answersLate(i, err)))
}

// repaired tells node i's breaker how a background repair's call ended
// (a release being finished, an owed Leave). Such a call goes whatever
// the breaker says, at the repair's own pace: a key it has not removed
// blocks the lock once the node is back, for as long as the breaker
// stays open (its cooldown, 1 s doubling to 30 s), where the torture's
// release oracle allows a node timeout and a round trip. Where the
// breaker let it through (ok, gen from allow) it counts as any call;
// where the breaker was open, an answer is proof that the node is back
// and closes it, and a failure counts for nothing.
func (c *Client) repaired(i int, ok bool, gen uint64, err error) {
	switch {
	case ok:
		c.record(i, gen, err)
	case c.health.breakers != nil && !nodeDown(err):
		c.breakerMoved(i, c.health.breakers[i].answered())
	}
}

// unused tells node i's breaker that a call it let through was not made
// (the command passed: see round.passes).
func (c *Client) unused(i int, gen uint64) {
	if c.health.breakers != nil && !c.health.breakers[i].quickDone(gen) {
		c.breakerMoved(i, c.health.breakers[i].unsent(c.clk.Now(), gen))
	}
}

// breakerMoved logs a change of node i's breaker once, and calls the hook.
func (c *Client) breakerMoved(i int, t transition) {
	if t.from == t.to {
		return
	}
	addr := c.nodes[i].Addr()
	switch t.to {
	case BreakerOpen:
		c.log.Warn("redlock: node skipped: circuit breaker open", "node", i, "addr", addr, "from", t.from)
	case BreakerClosed:
		c.log.Info("redlock: node back: circuit breaker closed", "node", i, "addr", addr)
	}
	if h := c.cfg.hooks.Breaker; h != nil {
		h(BreakerChange{Node: i, Addr: addr, From: t.from, To: t.to})
	}
}

// callDone reports a node call to the NodeCall hook.
func (c *Client) callDone(i int, op string, latency time.Duration, err error) {
	if h := c.cfg.hooks.NodeCall; h != nil {
		h(NodeCallInfo{Node: i, Addr: c.nodes[i].Addr(), Op: op, Latency: latency, Err: err})
	}
}

// answersLate reports whether err is a timeout of node i while the node is
// slow but answering: a reply of an earlier call came in after its
// deadline within the last two of the node's timeouts (node.LateAnswerer). Such a
// timeout does not count against the node: a slow node is not down.
func (c *Client) answersLate(i int, err error) bool {
	la := c.health.lates[i]
	if la == nil || !errors.Is(err, node.ErrTimeout) || errors.Is(err, node.ErrPoolWait) {
		// A wait for a pooled connection is not excused: this client
		// sends the node more than its pool carries, and shedding the
		// node is what relieves it.
		return false
	}
	last, _ := la.LastLate()
	return !last.IsZero() && time.Since(last) <= 2*c.nodeTimeout(i)
}
