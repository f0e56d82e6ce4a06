// Package skew emulates Redis nodes whose clocks run at the wrong rate or
// jump, for the clock-drift experiments and tests.
//
// Debian's redis-server is linked with jemalloc and hangs under
// libfaketime, so a node's clock cannot be skewed directly here. What a
// node's clock does to a lock is decide when its key expires; that is what
// is emulated:
//
//   - A node whose clock runs at rate r (r > 1: fast) expires a key set
//     with TTL t after t/r of real time. Node wraps a node.Node and scales
//     every TTL it sends by 1/r.
//   - A forward jump of Δ on a node's clock makes every live key on it
//     expire Δ sooner. Jump shortens the TTL of every live key on a real
//     node by Δ (deleting those with less than Δ left).
//
// The client's own clock is skewed through the clock package instead.
package skew

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/node"
)

// Node is a node.Node whose clock runs at Rate times real time: every TTL
// sent to the inner node is divided by Rate. Rate 1 (or 0) is an honest
// clock; 1.05 runs 5% fast. It is only a node.Node, not a node.Handoffer
// (nor a Fencer or Sharer), so a client over skewed nodes neither queues
// nor takes grants: their TTL (node.GrantTTL) is set inside the driver,
// where it could not be scaled.
type Node struct {
	node.Node
	Rate float64
}

var _ node.Node = (*Node)(nil)

func (n *Node) scale(ttl time.Duration) time.Duration {
	if n.Rate <= 0 || n.Rate == 1 {
		return ttl
	}
	d := time.Duration(float64(ttl) / n.Rate)
	if d < time.Millisecond {
		d = time.Millisecond // PX 0 is an error in Redis
	}
	return d
}

// Acquire sets the key with the scaled TTL.
func (n *Node) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	return n.Node.Acquire(ctx, k, n.scale(ttl), holderTTL)
}

// Extend re-sets the key's TTL, scaled.
func (n *Node) Extend(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	return n.Node.Extend(ctx, k, n.scale(ttl))
}

// Jump emulates the clock of the node behind n jumping forward by d:
// every live key matching pattern expires d sooner than it would have. It
// returns how many keys it shortened and how many it deleted. n is an
// admin client, typically cluster.Cluster.Direct: the lock's own node
// interface has no way to list or re-time keys, and should not.
func Jump(ctx context.Context, n *cluster.Admin, pattern string, d time.Duration) (shortened, deleted int, err error) {
	keys, err := n.Keys(ctx, pattern)
	if err != nil {
		return 0, 0, err
	}
	for _, k := range keys {
		reply, err := n.Command(ctx, "PTTL", k)
		if err != nil {
			return shortened, deleted, err
		}
		pttl, ok := reply.(int64)
		if !ok {
			return shortened, deleted, fmt.Errorf("skew: PTTL %s: unexpected reply %v", k, reply)
		}
		if pttl < 0 { // gone (-2) or no expiry (-1): not a lock key
			continue
		}
		left := time.Duration(pttl)*time.Millisecond - d
		if left <= 0 {
			if _, err := n.Command(ctx, "DEL", k); err != nil {
				return shortened, deleted, err
			}
			deleted++
			continue
		}
		if _, err := n.Command(ctx, "PEXPIRE", k, left.Milliseconds()); err != nil {
			return shortened, deleted, err
		}
		shortened++
	}
	return shortened, deleted, nil
}

// Cut is a node.Node that one client cannot reach: every call fails at
// once with node.ErrUnreachable. It emulates a partition between that
// client and the node, while other clients still reach it.
type Cut struct {
	Address string
}

var _ node.Node = Cut{}

func (c Cut) fail(op string) error {
	return &node.Error{Addr: c.Address, Op: op, Kind: node.ErrUnreachable, Err: fmt.Errorf("partitioned from this client")}
}

// Addr returns the address of the node cut off.
func (c Cut) Addr() string { return c.Address }

// Acquire fails.
func (c Cut) Acquire(context.Context, *node.Key, time.Duration, bool) (node.Result, error) {
	return node.Result{}, c.fail("acquire")
}

// Extend fails.
func (c Cut) Extend(context.Context, *node.Key, time.Duration) (node.Result, error) {
	return node.Result{}, c.fail("extend")
}

// Release fails.
func (c Cut) Release(context.Context, *node.Key, bool) (node.Result, error) {
	return node.Result{}, c.fail("release")
}
