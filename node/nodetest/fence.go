package nodetest

// node.Fencer: fenced acquires, and their place in the queue.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
)

func testFence(t *testing.T, f Factory) {
	e := start(t, f)
	fe, ok := e.n.(node.Fencer)
	if !ok {
		t.Skip("the node is not a node.Fencer")
	}
	k := node.Key{Name: "lk:fence", Token: "tok-1"}
	fk := node.FenceKey(k.Name)
	now := serverMicros(t, e)
	res := e.resultOf(fe.AcquireFenced(e.ctx, &k, time.Minute, time.Hour))(node.Done, "fenced acquire")
	assert.GreaterOrEqual(t, res.Fence, now, "the counter starts at the server's time in µs")
	assert.Equal(t, fmt.Sprint(res.Fence), e.get(fk), "the counter holds the fence")
	assert.InDelta(t, time.Hour, e.pttl(fk), float64(time.Minute), "the counter lives its own TTL")
	assert.InDelta(t, time.Minute, e.pttl(k.Name), float64(5*time.Second), "the key lives the lock's TTL")

	again := e.resultOf(fe.AcquireFenced(e.ctx, &k, time.Minute, time.Hour))(node.Done, "a repeated fenced acquire")
	assert.Equal(t, res.Fence, again.Fence, "a repeated acquire answers the same fence")
	taken := e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, time.Minute, time.Hour))(node.Taken, "fenced acquire of a held key")
	assert.Greater(t, taken.TTL, time.Duration(0))
	assert.Zero(t, taken.Fence)

	e.resultOf(fe.ConfirmFence(e.ctx, &k, res.Fence+1000, time.Hour))(node.Done, "confirm a higher fence")
	assert.Equal(t, fmt.Sprint(res.Fence+1000), e.get(fk), "a confirm raises the counter")
	e.resultOf(fe.ConfirmFence(e.ctx, &k, res.Fence, time.Hour))(node.Done, "confirm a lower fence")
	assert.Equal(t, fmt.Sprint(res.Fence+1000), e.get(fk), "a confirm never lowers the counter")
	e.resultOf(fe.ConfirmFence(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, res.Fence+5000, time.Hour))(node.Taken, "confirm with another token")
	assert.Equal(t, fmt.Sprint(res.Fence+1000), e.get(fk), "a confirm with another token changes nothing")

	e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "release")
	e.resultOf(fe.ConfirmFence(e.ctx, &k, res.Fence+5000, time.Hour))(node.Absent, "confirm of a released key")
	next := e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: k.Name, Token: "tok-3"}, time.Minute, time.Hour))(node.Done, "the next fenced acquire")
	assert.Greater(t, next.Fence, res.Fence+1000, "fences grow from one grant to the next")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: k.Name, Token: "tok-3"}, false))(node.Done, "release")

	// A fenced acquire without an owner does not queue, and a refused
	// one leaves nothing behind (it used to mark the queue key for a
	// lease, which outlived the calls that made it).
	if _, queues := e.n.(node.Handoffer); queues {
		holder := node.Key{Name: k.Name, Token: "tok-4"}
		e.resultOf(fe.AcquireFenced(e.ctx, &holder, time.Minute, time.Hour))(node.Done, "a fenced holder")
		e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: k.Name, Token: "tok-5"}, time.Minute, time.Hour))(node.Taken, "a fenced attempt that does not queue")
		assert.Equal(t, int64(0), e.do("EXISTS", node.WaitersKey(k.Name)), "leaves no mark on the queue key")
		e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "the holder's Unlock")
	}
	e.do("DEL", fk, node.WaitersKey(k.Name))
}

// testQueue checks the waiter queue of node.Handoffer: tickets in order,
// reservations for the head, leases, Leave.
// testFencedQueue: a waiting fenced acquire (k.Owner set) queues as a
// waiting Acquire does, in ticket order with plain waiters; a release
// reserves the key for it in its turn, and its fenced acquire takes the
// reservation and raises the counter; while it heads the queue, a
// plain waiter does not take the free key, nor does a fenced acquire
// that does not queue take a reserved one.
func testFencedQueue(t *testing.T, f Factory) {
	e, _ := startHandoffer(t, f)
	fe, ok := e.n.(node.Fencer)
	if !ok {
		t.Skip("the node is not a node.Fencer")
	}
	name := "lk:fqueue"
	wk := node.WaitersKey(name)
	t.Cleanup(func() { e.do("DEL", name, wk, node.FenceKey(name)) })
	key := func(tok, owner string, ticket int64) *node.Key {
		return &node.Key{Name: name, Token: tok, Owner: owner, Ticket: ticket}
	}
	holder := key("tok-a", "a", 0)
	e.resultOf(e.n.Acquire(e.ctx, holder, time.Minute, false))(node.Done, "a takes the key")
	fw := e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f1", "f", 0), time.Minute, time.Hour))(node.Taken, "fenced f waits")
	require.Positive(t, fw.Ticket, "a waiting fenced acquire is queued")
	assert.InDelta(t, time.Minute, fw.TTL, float64(5*time.Second), "a held key: the holder's TTL")
	b := e.resultOf(e.n.Acquire(e.ctx, key("tok-b1", "b", 0), time.Minute, true))(node.Taken, "b waits").Ticket
	assert.Greater(t, b, fw.Ticket, "b came after f")
	e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f2", "f", fw.Ticket), time.Minute, time.Hour))(node.Taken, "f renews its place")

	toF := e.subscribe(t, node.ReservedKey(name, "f"))
	e.resultOf(e.n.Release(e.ctx, holder, true))(node.Done, "a releases")
	assert.Equal(t, "~f", e.get(name), "reserved for f, the head")
	require.NotNil(t, receive(t, toF, 5*time.Second), "named on f's channel")
	e.resultOf(fe.AcquireFenced(e.ctx, key("tok-x", "", 0), time.Minute, time.Hour))(node.Taken, "a fenced acquire that does not queue does not take a reserved key")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-b2", "b", b), time.Minute, true))(node.Taken, "b waits behind f")
	res := e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f3", "f", fw.Ticket), time.Minute, time.Hour))(node.Done, "f takes the key reserved for it")
	assert.Positive(t, res.Fence, "and gets a fence")
	assert.Equal(t, fmt.Sprint(res.Fence), e.get(node.FenceKey(name)), "the counter holds the fence")
	assert.Equal(t, "tok-f3", e.get(name))
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "f"), "f has left the queue")
	again := e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f3", "f", fw.Ticket), time.Minute, time.Hour))(node.Done, "the same command run twice")
	assert.Equal(t, res.Fence, again.Fence)

	// Free key, b queued: a waiting fenced acquire that came after b
	// does not take it; b does.
	e.resultOf(e.n.Release(e.ctx, key("tok-f3", "f", 0), false))(node.Done, "f's rollback reserves the key for b")
	assert.Equal(t, "~b", e.get(name))
	e.resultOf(e.n.Acquire(e.ctx, key("tok-b3", "b", b), time.Minute, true))(node.Done, "b takes it")
	e.resultOf(e.n.Release(e.ctx, key("tok-b3", "b", 0), true))(node.Done, "b releases, no one queued")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "the key is free")
	e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f4", "f", 0), time.Minute, time.Hour))(node.Done, "a lone fenced waiter takes a free key")
	e.resultOf(e.n.Release(e.ctx, key("tok-f4", "f", 0), true))(node.Done, "release")
}
