package nodetest

// node.Handoffer: the waiter queue and handoffs within a client.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
)

// startHandoffer is start for a test of node.Handoffer; it skips the
// test for a node that is not one.
func startHandoffer(t *testing.T, f Factory) (*env, node.Handoffer) {
	t.Helper()
	e := start(t, f)
	h, ok := e.n.(node.Handoffer)
	if !ok {
		t.Skip("the node is not a node.Handoffer")
	}
	return e, h
}

// testHandoff: a waiting acquire registers its owner, a transfer within
// one client replaces the token in one step, and a waiter of another
// client turns the transfer into an announced release.
func testHandoff(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	k := node.Key{Name: "lk:handoff", Token: "tok-1", Owner: "client-a"}
	wk := node.WaitersKey(k.Name)
	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire")

	// A first (plain) attempt of another goroutine of client a registers
	// nothing; a waiting one does, for the lease.
	next := node.Key{Name: k.Name, Token: "tok-2", Owner: "client-a"}
	e.resultOf(e.n.Acquire(e.ctx, &next, time.Minute, false))(node.Taken, "a plain acquire of a held key")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "a plain attempt does not register")
	res := e.resultOf(e.n.Acquire(e.ctx, &next, time.Minute, true))(node.Taken, "a waiting acquire")
	assert.Positive(t, res.Ticket, "a waiting attempt gets a ticket")
	assert.Equal(t, int64(1), e.do("HEXISTS", wk, "client-a"), "a waiting attempt queues its owner")
	assert.InDelta(t, node.WaiterLease, e.pttl(wk), float64(time.Second), "for the lease")

	e.resultOf(h.Transfer(e.ctx, &k, &next, 30*time.Second))(node.Done, "a transfer within one client")
	assert.Equal(t, "tok-2", e.get(k.Name), "the successor holds the key")
	assert.InDelta(t, 30*time.Second, e.pttl(k.Name), float64(2*time.Second), "for the TTL given")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "the owner's registration is gone")
	e.resultOf(h.Transfer(e.ctx, &k, &next, 30*time.Second))(node.Done, "the same transfer again")
	e.resultOf(h.Transfer(e.ctx, &node.Key{Name: k.Name, Token: "tok-9", Owner: "client-a"}, &k, time.Minute))(node.Taken, "a transfer from a token that does not hold the key")
	assert.Equal(t, "tok-2", e.get(k.Name), "changes nothing")

	// A waiter of client b: the next transfer releases, reserving the
	// key for b, and names b.
	other := node.Key{Name: k.Name, Token: "tok-b", Owner: "client-b"}
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Taken, "client b waits")
	all := e.subscribe(t, k.Name)
	sub := e.subscribe(t, node.ReservedKey(k.Name, "client-b"))
	third := node.Key{Name: k.Name, Token: "tok-3", Owner: "client-a"}
	e.resultOf(h.Transfer(e.ctx, &next, &third, time.Minute))(node.Absent, "a transfer while another client waits")
	assert.Equal(t, "~client-b", e.get(k.Name), "the holder's key is reserved for b instead")
	msg := receive(t, sub, 5*time.Second)
	require.NotNil(t, msg, "and the release announced to b")
	assert.Equal(t, "client-b", string(msg[2].([]byte)), "naming b")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "and to no one else")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Done, "client b takes the lock")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "its place in the queue is gone")

	// A transfer to a free key acts as an acquire; Leave drops a
	// registration.
	e.resultOf(e.n.Release(e.ctx, &other, false))(node.Done, "release")
	e.resultOf(h.Transfer(e.ctx, &next, &third, time.Minute))(node.Done, "a transfer to a free key")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Taken, "client b waits again")
	require.NoError(t, h.Leave(e.ctx, &other))
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "Leave drops the registration")
	e.resultOf(e.n.Release(e.ctx, &third, false))(node.Done, "release")

	// A transfer that finds the key gone from this node (it expired here,
	// or the holder's majority did not include the node) while b waits
	// hands the key to b, as an Unlock's release would: the node rejoins
	// the next holder's majority instead of being taken and rolled back
	// by b's attempts.
	e.resultOf(e.n.Acquire(e.ctx, &third, time.Minute, false))(node.Done, "acquire")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Taken, "client b waits once more")
	e.do("DEL", k.Name)
	fourth := node.Key{Name: k.Name, Token: "tok-4", Owner: "client-a"}
	e.resultOf(h.Transfer(e.ctx, &third, &fourth, time.Minute))(node.Absent, "a transfer of a key gone from the node while another client waits")
	assert.Equal(t, "~client-b", e.get(k.Name), "reserves the key for b")
	msg = receive(t, sub, 5*time.Second)
	require.NotNil(t, msg, "and announces it to b")
	assert.Equal(t, "client-b", string(msg[2].([]byte)), "naming b")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Done, "client b takes the lock")
	e.resultOf(e.n.Release(e.ctx, &other, false))(node.Done, "release")

	// An ACL user without the hash commands still locks and waits (in no
	// order); its transfers release instead of handing over.
	e.do("ACL", "SETUSER", "nohash", "on", ">"+password+"-h", "~lk:*", "&lk:*", "+@all", "-@hash")
	t.Cleanup(func() { e.do("ACL", "DELUSER", "nohash") })
	limited := newNode(t, f, Server{Addr: e.addr, Username: "nohash", Password: password + "-h", Timeout: timeout})
	lh, ok := limited.(node.Handoffer)
	require.True(t, ok)
	e.resultOf(limited.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire without hash rights")
	res = e.resultOf(limited.Acquire(e.ctx, &other, time.Minute, true))(node.Taken, "a waiting acquire without hash rights")
	assert.Zero(t, res.Ticket, "is not queued")
	e.resultOf(lh.Transfer(e.ctx, &k, &next, time.Minute))(node.Absent, "a transfer that cannot read the queue releases")
	assert.Equal(t, int64(0), e.do("EXISTS", k.Name), "released")
	e.resultOf(limited.Acquire(e.ctx, &other, time.Minute, true))(node.Done, "a waiting acquire without hash rights takes a free key")
	e.resultOf(limited.Release(e.ctx, &other, true))(node.Done, "and releases it")
	require.NoError(t, lh.Leave(e.ctx, &other), "Leave without hash rights")
	assert.Equal(t, int64(0), e.do("EXISTS", k.Name), "released")
}

func testQueue(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	name := "lk:queue"
	wk := node.WaitersKey(name)
	key := func(tok, owner string, ticket int64) *node.Key {
		return &node.Key{Name: name, Token: tok, Owner: owner, Ticket: ticket}
	}
	holder := key("tok-a", "a", 0)
	e.resultOf(e.n.Acquire(e.ctx, holder, time.Minute, false))(node.Done, "a takes the key")

	// Tickets in the order the waiters came, kept across attempts.
	b := e.resultOf(e.n.Acquire(e.ctx, key("tok-b1", "b", 0), time.Minute, true))(node.Taken, "b waits").Ticket
	c := e.resultOf(e.n.Acquire(e.ctx, key("tok-c1", "c", 0), time.Minute, true))(node.Taken, "c waits").Ticket
	require.Positive(t, b)
	assert.Greater(t, c, b, "c came after b")
	assert.Equal(t, b, e.resultOf(e.n.Acquire(e.ctx, key("tok-b2", "b", 0), time.Minute, true))(node.Taken, "b again").Ticket, "b keeps its ticket")
	res := e.resultOf(e.n.Acquire(e.ctx, key("tok-b3", "b", b), time.Minute, true))(node.Taken, "b with its ticket")
	assert.Equal(t, b, res.Ticket)
	assert.InDelta(t, time.Minute, res.TTL, float64(5*time.Second), "a held key: the holder's TTL")

	// a's release reserves the key for b, the head, and names b; nobody
	// else takes it, a plain acquire neither.
	all := e.subscribe(t, name)
	toB := e.subscribe(t, node.ReservedKey(name, "b"))
	toC := e.subscribe(t, node.ReservedKey(name, "c"))
	e.resultOf(e.n.Release(e.ctx, holder, true))(node.Done, "a releases")
	assert.Equal(t, "~b", e.get(name), "reserved for b")
	assert.LessOrEqual(t, e.pttl(name), node.WaiterLease, "for what is left of b's lease")
	msg := receive(t, toB, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "b", string(msg[2].([]byte)), "the release names b, on b's channel")
	assert.Nil(t, receive(t, toC, 100*time.Millisecond), "c does not hear it")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "nor anyone else")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-c2", "c", c), time.Minute, true))(node.Taken, "c waits behind b")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-d", "", 0), time.Minute, false))(node.Taken, "a plain acquire does not take a reserved key")
	bk := key("tok-b4", "b", b)
	e.resultOf(e.n.Acquire(e.ctx, bk, time.Minute, true))(node.Done, "b takes the key reserved for it")
	assert.Equal(t, "tok-b4", e.get(name))
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "b"), "b has left the queue")

	// b's release reserves for c; c gives up: the key is free again,
	// announced to all, and nothing is left.
	e.resultOf(e.n.Release(e.ctx, bk, true))(node.Done, "b releases")
	assert.Equal(t, "~c", e.get(name), "reserved for c")
	require.NotNil(t, receive(t, toC, 5*time.Second), "announced to c")
	require.NoError(t, h.Leave(e.ctx, key("", "c", c)))
	assert.Equal(t, int64(0), e.do("EXISTS", name), "c's reservation is gone with it")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "and the queue")
	msg = receive(t, all, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "", string(msg[2].([]byte)), "the key is free for all")

	// A free key and a queue: only the head takes it; a ticket given by
	// the waiter raises the counter, so that later waiters come after it.
	e.resultOf(e.n.Acquire(e.ctx, holder, time.Minute, false))(node.Done, "a takes the key again")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-b5", "b", 100), time.Minute, true))(node.Taken, "b waits with ticket 100")
	c = e.resultOf(e.n.Acquire(e.ctx, key("tok-c3", "c", 0), time.Minute, true))(node.Taken, "c waits").Ticket
	assert.Equal(t, int64(101), c, "after b")
	// A rollback hands the key on as a release does, but to whoever
	// heads the queue, the caller's client too (its waiting attempt
	// is its next), and announces it on the head's channel only: an
	// attempt that lost the majority must not leave a free key that
	// its waiters hear nothing of.
	e.resultOf(e.n.Release(e.ctx, holder, false))(node.Done, "a rollback")
	assert.Equal(t, "~b", e.get(name), "reserved for b, the head")
	require.NotNil(t, receive(t, toB, 5*time.Second), "announced to b")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "and to no one else")
	res = e.resultOf(e.n.Acquire(e.ctx, key("tok-c4", "c", c), time.Minute, true))(node.Taken, "c is not the head")
	assert.InDelta(t, node.WaiterLease, res.TTL, float64(time.Second), "and waits for the head's lease at most")

	// A waiter whose lease ends is out of the queue: c, renewing, heads
	// it and takes the free key.
	time.Sleep(node.WaiterLease + 100*time.Millisecond)
	ck := key("tok-c5", "c", c)
	e.resultOf(e.n.Acquire(e.ctx, ck, time.Minute, true))(node.Done, "c heads the queue once b's lease is over")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "nothing is left of the queue")
	e.resultOf(e.n.Release(e.ctx, ck, true))(node.Done, "c releases")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "a release with no one queued deletes the key")

	// A node whose key is free while another client holds the majority:
	// a waiting attempt that heads its (empty) queue takes the key, and
	// its rollback (Requeue, the ticket the refusing nodes gave) queues
	// it again and deletes the key quietly, the caller being the head;
	// the next waiter is refused there and queued behind it, in the
	// nodes' order, instead of taking the key in its turn.
	bk = key("tok-b6", "b", 0)
	bk.Grant = node.GrantValue("b", "g9")
	e.resultOf(e.n.Acquire(e.ctx, bk, time.Minute, true))(node.Done, "b takes the free key, heading an empty queue")
	rb := *bk
	rb.Ticket, rb.Requeue = 7, true
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Done, "b's attempt is rolled back")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "the key is free")
	assert.Nil(t, receive(t, toB, 100*time.Millisecond), "and b, the head, is not told")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "nor anyone")
	res = e.resultOf(e.n.Acquire(e.ctx, key("tok-c6", "c", 0), time.Minute, true))(node.Taken, "c does not take it: b heads the queue")
	assert.Equal(t, int64(8), res.Ticket, "c is queued after b's ticket")
	// An Unlock that finds the key absent where waiters are queued hands
	// it on to the head all the same, announced on its channel: granted,
	// as b's requeued registration asks, naming the rolled-back attempt.
	e.resultOf(e.n.Release(e.ctx, key("tok-z", "z", 0), true))(node.Absent, "an Unlock where the key is absent")
	v := e.get(name)
	assert.LessOrEqual(t, e.pttl(name), node.WaiterLease, "for a lease at most")
	msg = receive(t, toB, 5*time.Second)
	require.NotNil(t, msg)
	if v == "~b" {
		// A node that asks for no grants (see testGrant) reserves.
		assert.Equal(t, "b", string(msg[2].([]byte)), "announced to b")
	} else {
		assert.Equal(t, rb.Grant, v, "the key is granted to b, the head")
		assert.Equal(t, node.GrantMessage(rb.Grant, "tok-b6"), string(msg[2].([]byte)), "announced to b")
	}
	bk = key("tok-b7", "b", 7)
	bk.Grant = rb.Grant
	e.resultOf(e.n.Acquire(e.ctx, bk, time.Minute, true))(node.Done, "b takes it")
	// A rollback whose caller is not the head (a waiter with a lower
	// ticket queued since its attempt) hands the key on to the head.
	e.resultOf(e.n.Acquire(e.ctx, key("tok-d1", "d", 5), time.Minute, true))(node.Taken, "d waits with ticket 5")
	toD := e.subscribe(t, node.ReservedKey(name, "d"))
	rb = *bk
	rb.Requeue, rb.Grant = true, ""
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Done, "b's attempt is rolled back")
	assert.Equal(t, "~d", e.get(name), "reserved for d, the head")
	require.NotNil(t, receive(t, toD, 5*time.Second), "announced to d")
	for _, w := range []string{"b", "c", "d"} {
		require.NoError(t, h.Leave(e.ctx, key("", w, 0)))
	}
	assert.Equal(t, int64(0), e.do("EXISTS", name), "nothing is left of the key")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "nor of the queue")
	require.NotNil(t, receive(t, all, 5*time.Second), "d's leave frees the key for all")
	e.resultOf(e.n.Release(e.ctx, key("tok-z", "z", 0), true))(node.Absent, "an Unlock where the key is absent and no one waits")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: node.GrantValue("z", "g1"), Owner: "z"}, true))(node.Absent,
		"so does a lock held by a grant")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "and neither announces anything")

	// A waiter that gives up where the key is absent (its last
	// attempt's rollback deleted it quietly, heading the queue) hands it
	// on to the next head.
	e.resultOf(e.n.Acquire(e.ctx, holder, time.Minute, false))(node.Done, "a takes the key")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-b8", "b", 20), time.Minute, true))(node.Taken, "b waits")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-c8", "c", 21), time.Minute, true))(node.Taken, "c waits")
	e.do("DEL", name)
	require.NoError(t, h.Leave(e.ctx, key("", "b", 0)))
	assert.Equal(t, "~c", e.get(name), "b's leave hands the free key to c")
	require.NotNil(t, receive(t, toC, 5*time.Second), "announced to c")
	require.NoError(t, h.Leave(e.ctx, key("", "c", 0)))
	require.NotNil(t, receive(t, all, 5*time.Second), "c's leave frees the key for all")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "nothing is left of the key")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "nor of the queue")
}
