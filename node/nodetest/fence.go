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
	assert.Equal(t, res.Fence, taken.Fence, "a refusal reports the counter, which a waiter's proposal exceeds")

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

// testFencedGrant: a waiting fenced acquire that proposes a fence
// (node.Key.GrantFence) with its grant is granted the key by a release
// only where the counter is below the proposal: the key is set to the
// grant, the counter raised to the proposal, the record it sent kept
// beside the key, and the grant announced on its channel. Where the
// counter has reached the proposal (or is gone) the key is reserved for
// it instead, and its fenced acquire takes the reservation, or the grant
// it finds, raising the counter. A proposal without a grant asks for
// none; a refusal reports the counter.
func testFencedGrant(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	fe, ok := e.n.(node.Fencer)
	if !ok {
		t.Skip("the node is not a node.Fencer")
	}
	name := "lk:fgrant"
	wk, fk, rk := node.WaitersKey(name), node.FenceKey(name), node.AnnounceKey(name)
	t.Cleanup(func() { e.do("DEL", name, wk, fk, rk) })
	holder := &node.Key{Name: name, Token: "tok-a", Owner: "a"}
	held := e.resultOf(fe.AcquireFenced(e.ctx, holder, time.Minute, time.Hour))(node.Done, "a takes the key, fenced")
	g := node.GrantValue("f", "call1")
	ask := func(tok string, fence int64) *node.Key {
		return &node.Key{Name: name, Token: tok, Owner: "f", Grant: g, GrantFence: fence, GrantRecord: "rec"}
	}
	w := e.resultOf(fe.AcquireFenced(e.ctx, ask("tok-f1", held.Fence+1), time.Minute, time.Hour))(node.Taken, "f waits, proposing the next fence")
	assert.Equal(t, held.Fence, w.Fence, "the refusal reports the counter")
	toF := e.subscribe(t, node.ReservedKey(name, "f"))
	e.resultOf(e.n.Release(e.ctx, holder, true))(node.Done, "a releases")
	if e.get(name) == "~f" {
		// A node may send no grant (the go-redis node over a client
		// that resends commands): then it reserves, as for any waiter.
		e.do("DEL", name, wk, fk, rk)
		t.Skip("the node asks for no grants: it reserved the key")
	}
	assert.Equal(t, g, e.get(name), "granted to f")
	assert.Equal(t, fmt.Sprint(held.Fence+1), e.get(fk), "the counter raised to the proposal with the grant")
	assert.Equal(t, g+"\nrec", e.get(rk), "the record kept beside the key, under the grant")
	assert.InDelta(t, time.Minute, e.pttl(rk), float64(5*time.Second), "for the lock's TTL")
	assert.InDelta(t, node.GrantTTL(time.Minute), e.pttl(name), float64(time.Second), "the grant lasts node.GrantTTL")
	if msg := receive(t, toF, 5*time.Second); assert.NotNil(t, msg) {
		assert.Equal(t, node.GrantMessage(g, "tok-f1"), string(msg[2].([]byte)), "announced naming the registering attempt")
	}
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "f"), "f has left the queue")

	// The counter has reached b's proposal: the key is reserved for b,
	// whose fenced acquire takes it and raises the counter.
	gb := node.GrantValue("b", "call1")
	b := &node.Key{Name: name, Token: "tok-b1", Owner: "b", Grant: gb, GrantFence: held.Fence + 1}
	e.resultOf(fe.AcquireFenced(e.ctx, b, time.Minute, time.Hour))(node.Taken, "b waits with a stale proposal")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: g, Owner: "f", Record: true}, true))(node.Done, "f releases its grant and its record")
	assert.Equal(t, "~b", e.get(name), "reserved, not granted: the counter is not below the proposal")
	assert.Equal(t, fmt.Sprint(held.Fence+1), e.get(fk), "the counter unchanged")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "f's record went with its key")
	took := e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: name, Token: "tok-b2", Owner: "b", Grant: gb}, time.Minute, time.Hour))(node.Done, "b takes the reservation")
	assert.Greater(t, took.Fence, held.Fence+1)

	// A grant given before the waiter's next attempt came is taken by
	// it, the counter raised as for a free key.
	c := &node.Key{Name: name, Token: "tok-c1", Owner: "c", Grant: node.GrantValue("c", "x"), GrantFence: took.Fence + 1}
	e.resultOf(fe.AcquireFenced(e.ctx, c, time.Minute, time.Hour))(node.Taken, "c waits")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: "tok-b2", Owner: "b"}, true))(node.Done, "b releases")
	assert.Equal(t, c.Grant, e.get(name), "granted to c")
	assert.Equal(t, fmt.Sprint(took.Fence+1), e.get(fk))
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "no record asked for, none kept")
	c2 := *c
	c2.Token = "tok-c2"
	res := e.resultOf(fe.AcquireFenced(e.ctx, &c2, time.Minute, time.Hour))(node.Done, "c's next attempt takes its grant")
	assert.Greater(t, res.Fence, took.Fence+1, "and raises the counter")
	assert.Equal(t, "tok-c2", e.get(name))

	// A grant's record goes with it where the grant goes without a
	// release: taken by its waiter's next attempt, handed on by its
	// Leave.
	g2 := node.GrantValue("c", "y")
	e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: name, Token: "tok-c3", Owner: "c", Grant: g2, GrantFence: res.Fence + 1, GrantRecord: "r2"}, time.Minute, time.Hour))(node.Taken, "c's next call waits behind itself")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: "tok-c2", Owner: "c"}, false))(node.Done, "c's rollback hands on to its own next call")
	require.Equal(t, g2, e.get(name), "granted")
	require.Equal(t, g2+"\nr2", e.get(rk))
	e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: name, Token: "tok-c4", Owner: "c", Grant: g2}, time.Minute, time.Hour))(node.Done, "taken by the attempt")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "the grant's record went with it")
	g3 := node.GrantValue("c", "z")
	e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: name, Token: "tok-c5", Owner: "c", Grant: g3, GrantFence: res.Fence + 1<<40, GrantRecord: "r3"}, time.Minute, time.Hour))(node.Taken, "again")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: "tok-c4", Owner: "c"}, false))(node.Done, "granted again")
	require.Equal(t, g3+"\nr3", e.get(rk))
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "c", Grant: g3}), "the call gives up")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "its record went with the grant")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "no one else queued: the key is free")
	c2 = node.Key{Name: name, Token: "tok-c6"}
	e.resultOf(fe.AcquireFenced(e.ctx, &c2, time.Minute, time.Hour))(node.Done, "taken again")

	// Reserved for a client (its proposal passed here) whose call holds
	// by grants elsewhere: that call's Unlock hands the reservation on
	// to the next head, since no call of the client is queued here.
	gw := node.GrantValue("w", "x")
	e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: name, Token: "tok-w1", Owner: "w", Grant: gw, GrantFence: 1}, time.Minute, time.Hour))(node.Taken, "w waits, its proposal passed")
	e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: name, Token: "tok-x1", Owner: "x"}, time.Minute, time.Hour))(node.Taken, "x waits behind w")
	e.resultOf(e.n.Release(e.ctx, &c2, true))(node.Done, "c releases")
	require.Equal(t, "~w", e.get(name), "reserved for w")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: gw, Owner: "w"}, true))(node.Taken, "w's Unlock of its granted lock")
	assert.Equal(t, "~x", e.get(name), "handed on to x")
	e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: name, Token: "tok-x2", Owner: "x"}, time.Minute, time.Hour))(node.Done, "x takes it")
	c2 = node.Key{Name: name, Token: "tok-x2"}

	// A grant without a proposal is not asked for (it would raise no
	// counter), nor is one where the counter is gone.
	d := &node.Key{Name: name, Token: "tok-d1", Owner: "d", Grant: node.GrantValue("d", "x")}
	e.resultOf(fe.AcquireFenced(e.ctx, d, time.Minute, time.Hour))(node.Taken, "d waits without a proposal")
	e.resultOf(e.n.Release(e.ctx, &c2, true))(node.Done, "c releases")
	assert.Equal(t, "~d", e.get(name), "reserved for d")
	e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: name, Token: "tok-d2", Owner: "d"}, time.Minute, time.Hour))(node.Done, "d takes it")
	hk := &node.Key{Name: name, Token: "tok-h", Owner: "h", Grant: node.GrantValue("h", "x"), GrantFence: 1 << 60}
	e.resultOf(fe.AcquireFenced(e.ctx, hk, time.Minute, time.Hour))(node.Taken, "h proposes")
	e.do("DEL", fk)
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: "tok-d2", Owner: "d"}, true))(node.Done, "d releases")
	assert.Equal(t, "~h", e.get(name), "no counter: reserved, not granted")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: "~h", Owner: "h"}, false))(node.Done, "cleanup")
	e.do("DEL", name, wk, fk, rk)
}
