package redlock_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/node"
)

// handoffNode is a fakeNode that offers node.Handoffer as the scripts do
// on a server (node/scripts/queue.lua): a queue of waiting owners per
// queue key (node.Key.Waiters) with tickets and leases (on the fake
// clock), transfers within one owner, and reservations ("~" + owner) for
// the head of the queue among those with no key reserved, or grants
// (node.Key.Grant) to the head of a key's own queue that asked for one.
type handoffNode struct {
	*fakeNode
	hmu     sync.Mutex                   // taken before fakeNode.mu
	waiters map[string]map[string]waiter // queue -> owner -> place
	tickets map[string]int64             // queue -> last ticket given out
	requeue []node.Key                   // the rollbacks that asked to queue their client again (node.Key.Requeue), as sent
}

type waiter struct {
	ticket   int64
	until    time.Time
	reserved time.Time     // a key of the queue is reserved for it until then
	grant    string        // the grant its last waiting attempt asked for ("": none)
	gttl     time.Duration // and for how long
	gtok     string        // and that attempt's token
}

func asHandoff(fs []*fakeNode) []node.Node {
	out := make([]node.Node, len(fs))
	for i, f := range fs {
		out[i] = &handoffNode{fakeNode: f, waiters: map[string]map[string]waiter{}, tickets: map[string]int64{}}
	}
	return out
}

// head drops lapsed waiters of queue key and returns the head among
// those other than skip with no key reserved ("" if none) and its lease
// end. Under hmu.
func (n *handoffNode) head(key, skip string) (string, time.Time) {
	now := n.clk.Now()
	var (
		h  string
		hw waiter
	)
	for owner, w := range n.waiters[key] {
		switch {
		case !now.Before(w.until):
			delete(n.waiters[key], owner)
		case owner == skip, now.Before(w.reserved):
		case h == "" || w.ticket < hw.ticket || (w.ticket == hw.ticket && owner < h):
			h, hw = owner, w
		}
	}
	if len(n.waiters[key]) == 0 {
		delete(n.waiters, key)
		delete(n.tickets, key)
	}
	return h, hw.until
}

// handOn frees key, held by the caller: reserved for the head of its
// queue q other than skip and announced to it, or deleted and, unless
// quiet, announced to all. Under hmu and mu.
func (n *handoffNode) handOn(key, q, skip string, quiet bool) {
	channel, msg := key, ""
	if h, until := n.head(q, skip); h != "" {
		w := n.waiters[q][h]
		channel, msg = node.ReservedKey(key, h), h // only h's client hears it
		if w.grant != "" && q == node.WaitersKey(key) {
			n.keys[key] = entry{token: w.grant, until: n.clk.Now().Add(w.gttl)}
			delete(n.waiters[q], h)
			msg = node.GrantMessage(w.grant, w.gtok)
		} else {
			n.keys[key] = entry{token: "~" + h, until: until}
			w.reserved = until
			n.waiters[q][h] = w
		}
	} else {
		delete(n.keys, key)
		if quiet {
			return
		}
	}
	if n.announce != nil {
		n.announce(channel, msg)
	}
}

func (n *handoffNode) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	if !holderTTL || k.Owner == "" {
		return n.fakeNode.Acquire(ctx, k, ttl, holderTTL)
	}
	if err := n.hook(ctx, "acquire"); err != nil {
		return node.Result{}, err
	}
	n.hmu.Lock()
	defer n.hmu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clk.Now()
	q := k.Waiters()
	e, held := n.get(k.Name)
	if held && e.token == k.Token {
		n.keys[k.Name] = entry{token: k.Token, until: now.Add(ttl)}
		delete(n.waiters[q], k.Owner)
		return node.Result{Status: node.Done}, nil
	}
	ticket := k.Ticket
	w, ok := n.waiters[q][k.Owner]
	if !ok || !now.Before(w.until) {
		w = waiter{}
	}
	if ticket == 0 {
		ticket = w.ticket
	}
	if ticket == 0 {
		n.tickets[q]++
		ticket = n.tickets[q]
	}
	n.tickets[q] = max(n.tickets[q], ticket)
	if n.waiters[q] == nil {
		n.waiters[q] = map[string]waiter{}
	}
	nw := waiter{ticket: ticket, until: now.Add(node.WaiterLease), reserved: w.reserved}
	if !now.Before(w.reserved) {
		nw.grant, nw.gttl, nw.gtok = k.Grant, node.GrantTTL(ttl), k.Token
	}
	n.waiters[q][k.Owner] = nw
	h, until := n.head(q, "")
	if (held && (e.token == "~"+k.Owner || k.Grant != "" && e.token == k.Grant)) || (!held && h == k.Owner) {
		n.keys[k.Name] = entry{token: k.Token, until: now.Add(ttl)}
		delete(n.waiters[q], k.Owner)
		return node.Result{Status: node.Done}, nil
	}
	if !held {
		return node.Result{Status: node.Taken, TTL: until.Sub(now), Ticket: ticket}, nil
	}
	return node.Result{Status: node.Taken, TTL: e.until.Sub(now), Ticket: ticket}, nil
}

func (n *handoffNode) Release(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	if k.Requeue {
		n.hmu.Lock()
		n.requeue = append(n.requeue, *k)
		n.hmu.Unlock()
	}
	if !announce && k.Queue == "" {
		return n.fakeNode.Release(ctx, k, announce)
	}
	defer n.returned("release")
	if err := n.hook(ctx, "release"); err != nil {
		return node.Result{}, err
	}
	n.hmu.Lock()
	defer n.hmu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.get(k.Name)
	n.forgetGrant(k)
	switch {
	case !ok:
		return node.Result{Status: node.Absent}, nil
	case e.token != k.Token:
		return node.Result{Status: node.Taken}, nil
	}
	skip := "" // release.lua: a lock's own queue hands on to another client
	if k.Queue == "" {
		skip = k.Owner
	}
	n.handOn(k.Name, k.Waiters(), skip, !announce)
	return node.Result{Status: node.Done}, nil
}

func (n *handoffNode) Transfer(ctx context.Context, from, to *node.Key, ttl time.Duration) (node.Result, error) {
	if err := n.hook(ctx, "transfer"); err != nil {
		return node.Result{}, err
	}
	n.hmu.Lock()
	defer n.hmu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	e, held := n.get(from.Name)
	n.forgetGrant(from)
	switch {
	case held && e.token == to.Token:
		return node.Result{Status: node.Done}, nil
	case held && e.token != from.Token:
		return node.Result{Status: node.Taken}, nil
	}
	q := from.Waiters()
	if h, _ := n.head(q, from.Owner); h != "" {
		if held {
			n.handOn(from.Name, q, from.Owner, false)
		}
		return node.Result{Status: node.Absent}, nil
	}
	delete(n.waiters[q], from.Owner)
	n.keys[from.Name] = entry{token: to.Token, until: n.clk.Now().Add(ttl)}
	return node.Result{Status: node.Done}, nil
}

func (n *handoffNode) Leave(ctx context.Context, k *node.Key) error {
	if err := n.hook(ctx, "leave"); err != nil {
		return err
	}
	n.hmu.Lock()
	defer n.hmu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if k.Grant == node.LeaveAll {
		// leave.lua: the client leaves for good; a key reserved for it
		// or granted to any of its calls goes on.
		delete(n.waiters[k.Waiters()], k.Owner)
		if e, ok := n.get(k.Name); ok && (e.token == "~"+k.Owner || strings.HasPrefix(e.token, "~"+k.Owner+":")) {
			n.handOn(k.Name, k.Waiters(), k.Owner, false)
		}
		return nil
	}
	// leave.lua: a Leave with a grant names its call; an entry that asks
	// for another grant is the client's next call's.
	if w, ok := n.waiters[k.Waiters()][k.Owner]; ok && k.Grant != "" && w.grant != "" && w.grant != k.Grant {
		if e, ok := n.get(k.Name); ok && e.token == k.Grant {
			n.handOn(k.Name, k.Waiters(), "", false)
		}
		return nil
	}
	delete(n.waiters[k.Waiters()], k.Owner)
	if e, ok := n.get(k.Name); ok && (e.token == "~"+k.Owner || k.Grant != "" && e.token == k.Grant) {
		n.handOn(k.Name, k.Waiters(), k.Owner, false)
	}
	return nil
}

// forgetGrant drops k.Owner's registration where it asks for k.Token as
// its grant: the lock held by that grant is done with the node, granted
// here or not (release.lua, transfer.lua). Under hmu and mu.
func (n *handoffNode) forgetGrant(k *node.Key) {
	q := k.Waiters()
	if w, ok := n.waiters[q][k.Owner]; ok && w.grant != "" && w.grant == k.Token {
		delete(n.waiters[q], k.Owner)
	}
}

// waiting returns the owners queued for key in its own queue
// (node.WaitersKey), leases ended or not.
func (n *handoffNode) waiting(key string) int {
	n.hmu.Lock()
	defer n.hmu.Unlock()
	return len(n.waiters[node.WaitersKey(key)])
}

// queued returns the owners queued in queue key q (node.Key.Queue),
// leases ended or not.
func (n *handoffNode) queued(q string) int {
	n.hmu.Lock()
	defer n.hmu.Unlock()
	return len(n.waiters[q])
}

// requeued returns the rollbacks sent to n that asked to queue their
// client again.
func (n *handoffNode) requeued() []node.Key {
	n.hmu.Lock()
	defer n.hmu.Unlock()
	return slices.Clone(n.requeue)
}
