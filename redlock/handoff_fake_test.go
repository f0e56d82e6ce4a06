package redlock_test

import (
	"context"
	"sync"
	"time"

	"github.com/quorumlock/redlock/node"
)

// handoffNode is a fakeNode that offers node.Handoffer, as transfer.lua
// and acquire.lua's waiter registration do on a server (leases on the
// fake clock).
type handoffNode struct {
	*fakeNode
	hmu     sync.Mutex
	waiters map[string]map[string]time.Time // key -> owner -> lease end
}

func asHandoff(fs []*fakeNode) []node.Node {
	out := make([]node.Node, len(fs))
	for i, f := range fs {
		out[i] = &handoffNode{fakeNode: f, waiters: map[string]map[string]time.Time{}}
	}
	return out
}

func (n *handoffNode) Acquire(ctx context.Context, k node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	res, err := n.fakeNode.Acquire(ctx, k, ttl, holderTTL)
	if err != nil || !holderTTL || k.Owner == "" {
		return res, err
	}
	n.hmu.Lock()
	defer n.hmu.Unlock()
	switch res.Status {
	case node.Taken:
		if n.waiters[k.Name] == nil {
			n.waiters[k.Name] = map[string]time.Time{}
		}
		n.waiters[k.Name][k.Owner] = n.clk.Now().Add(node.WaiterLease)
	case node.Done:
		delete(n.waiters[k.Name], k.Owner)
	}
	return res, nil
}

func (n *handoffNode) Transfer(ctx context.Context, from, to node.Key, ttl time.Duration) (node.Result, error) {
	if err := n.hook(ctx, "transfer"); err != nil {
		return node.Result{}, err
	}
	n.hmu.Lock()
	defer n.hmu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	e, held := n.get(from.Name)
	switch {
	case held && e.token == to.Token:
		return node.Result{Status: node.Done}, nil
	case held && e.token != from.Token:
		return node.Result{Status: node.Taken}, nil
	}
	now := n.clk.Now()
	others := 0
	for owner, until := range n.waiters[from.Name] {
		switch {
		case !now.Before(until):
			delete(n.waiters[from.Name], owner)
		case owner != from.Owner:
			others++
		}
	}
	if others > 0 {
		if held {
			delete(n.keys, from.Name)
			if n.announce != nil {
				n.announce(from.Name)
			}
		}
		return node.Result{Status: node.Absent}, nil
	}
	delete(n.waiters[from.Name], from.Owner)
	n.keys[from.Name] = entry{token: to.Token, until: now.Add(ttl)}
	return node.Result{Status: node.Done}, nil
}

func (n *handoffNode) Leave(ctx context.Context, k node.Key) error {
	if err := n.hook(ctx, "leave"); err != nil {
		return err
	}
	n.hmu.Lock()
	defer n.hmu.Unlock()
	delete(n.waiters[k.Name], k.Owner)
	return nil
}

// waiting returns the owners registered as waiting for key, leases
// ended or not.
func (n *handoffNode) waiting(key string) int {
	n.hmu.Lock()
	defer n.hmu.Unlock()
	return len(n.waiters[key])
}
