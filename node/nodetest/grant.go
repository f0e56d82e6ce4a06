package nodetest

// node.Handoffer: grants, Leaves by call and for good, and tombstones.

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
)

// testGrant checks direct grants (node.Key.Grant): a release hands the
// key to the head that asked for one by setting the key to its grant,
// for node.GrantTTL of the TTL it asked (the TTL, at most
// node.WaiterLease), and announces the grant on the head's channel;
// the head's next waiting attempt takes a key that holds its grant; a
// Leave hands on a key granted to the leaver, not one granted to another
// waiter of its client; a release or transfer by a grant drops the
// registration asking for it, granted or not; a release passes over its
// own client's place; a watch for a grant message wakes for it alone;
// semaphore slots reserve; nothing is left. A node that asks for no
// grants (it reserves) skips the test.
// testLeaveByCall: a Leave with a grant names its call. A late Leave
// of a client's call that gave up, which comes after the client's next
// call registered (asking for another grant), leaves that entry and a
// key reserved for the client alone; the next call's own Leave takes
// the entry out and hands the reservation on. A key granted to the
// leaving call goes on to the next head, the next call included.
func testLeaveByCall(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	name := "lk:leavecall"
	wk := node.WaitersKey(name)
	t.Cleanup(func() { e.do("DEL", name, wk) })
	holder := node.Key{Name: name, Token: "tok-a", Owner: "a"}
	e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "a takes the key")
	g1, g2 := node.GrantValue("b", "call1"), node.GrantValue("b", "call2")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-b1", Owner: "b", Grant: g1}, 30*time.Second, true))(node.Taken, "b's first call waits")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-b2", Owner: "b", Grant: g2}, 30*time.Second, true))(node.Taken, "b's next call registers")
	if entry, _ := e.do("HGET", wk, "b").([]byte); !strings.HasSuffix(string(entry), g2) {
		// A node that sends no grant (see testGrant) names no call.
		e.resultOf(e.n.Release(e.ctx, &holder, false))(node.Done, "a's rollback")
		require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b"}))
		t.Skip("the node asks for no grants: its waiters are known by tag")
	}
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: g1}), "the first call's late Leave")
	assert.Equal(t, int64(1), e.do("HEXISTS", wk, "b"), "the next call's entry stays")
	e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "a releases")
	assert.Equal(t, g2, e.get(name), "granted to the next call")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: g1}), "the first call's Leave, later still")
	assert.Equal(t, g2, e.get(name), "the next call's grant stays")

	// With a third client queued: the next call's own Leave hands its
	// grant on to c.
	c := node.Key{Name: name, Token: "tok-c", Owner: "c"}
	e.resultOf(e.n.Acquire(e.ctx, &c, time.Minute, true))(node.Taken, "c waits")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: g2}), "the next call gives up")
	assert.Equal(t, "~c", e.get(name), "its grant goes on to c")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "c"}))
	assert.Equal(t, int64(0), e.do("EXISTS", name), "c leaves: the key is free")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "and no one is queued")
}

// testLeaveAll: a Leave with node.LeaveAll (a client that closes) takes
// its entry out whatever grant it asks, and hands on a key granted to any
// call of the client or reserved for it; a key another client holds, or
// one of this client's attempt tokens, stays.
func testLeaveAll(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	name := "lk:leaveall"
	wk := node.WaitersKey(name)
	t.Cleanup(func() { e.do("DEL", name, wk) })
	all := func(owner string) *node.Key { return &node.Key{Name: name, Owner: owner, Grant: node.LeaveAll} }

	// A grant of an earlier call of b's, b registered again (a late
	// command of that call), c queued behind: the grant goes on to c.
	e.do("SET", name, node.GrantValue("b", "call1"), "PX", 60000)
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-b2", Owner: "b", Grant: node.GrantValue("b", "call2")}, 30*time.Second, true))(node.Taken, "b registered")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-c", Owner: "c"}, time.Minute, true))(node.Taken, "c waits")
	require.NoError(t, h.Leave(e.ctx, all("b")))
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "b"), "b's entry is gone")
	assert.Equal(t, "~c", e.get(name), "the grant of b's call went on to c")

	// A key reserved for c, c closing: freed (no one else waits).
	require.NoError(t, h.Leave(e.ctx, all("c")))
	assert.Equal(t, int64(0), e.do("EXISTS", name), "c's reservation is freed")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "no one is queued")

	// A key held by another client's token, or by the closing client's
	// attempt token, stays.
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-a", Owner: "a"}, time.Minute, false))(node.Done, "a holds")
	require.NoError(t, h.Leave(e.ctx, all("b")))
	assert.Equal(t, "tok-a", e.get(name), "a's key stays")
	e.do("SET", name, "tok-b3", "PX", 60000)
	require.NoError(t, h.Leave(e.ctx, all("b")))
	assert.Equal(t, "tok-b3", e.get(name), "an attempt token of b's stays: its release frees it")

	// A client's readers' tag ("r" + tag) takes out each of its reader
	// calls' entries ("r" + tag + ":" + call), and no one else's.
	s, ok := e.n.(node.Sharer)
	if !ok {
		return
	}
	t.Cleanup(func() { e.do("DEL", node.ReadersKey(name)) })
	for _, o := range []string{"rb:1", "rb:2", "rbc:1", "b"} {
		k := node.NewSharedKey(name, "tok-"+o)
		k.Owner = o
		if o == "b" {
			k = node.Key{Name: name, Token: "tok-b4", Owner: o}
			e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, true))(node.Taken, "b waits")
			continue
		}
		e.resultOf(s.AcquireShared(e.ctx, &k, time.Minute, true))(node.Taken, o+" waits")
	}
	require.NoError(t, h.Leave(e.ctx, all("rb")))
	for o, n := range map[string]int64{"rb:1": 0, "rb:2": 0, "rbc:1": 1, "b": 1} {
		assert.Equal(t, n, e.do("HEXISTS", wk, o), "entry %s", o)
	}
	assert.Equal(t, "tok-b3", e.get(name), "the key stays")
}

func testGrant(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	name := "lk:grant"
	wk := node.WaitersKey(name)
	holder := node.Key{Name: name, Token: "tok-a", Owner: "a"}
	e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "a takes the key")
	gb := node.GrantValue("b", "g1")
	b := node.Key{Name: name, Token: "tok-b1", Owner: "b", Grant: gb}
	tb := e.resultOf(e.n.Acquire(e.ctx, &b, 30*time.Second, true))(node.Taken, "b waits, asking for a grant").Ticket
	c := node.Key{Name: name, Token: "tok-c1", Owner: "c", Grant: node.GrantValue("c", "g2")}
	tc := e.resultOf(e.n.Acquire(e.ctx, &c, 30*time.Second, true))(node.Taken, "c waits behind b").Ticket

	toB := e.subscribe(t, node.ReservedKey(name, "b"))
	all := e.subscribe(t, name)
	e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "a releases")
	if e.get(name) == "~b" {
		// A node may send no grant (the go-redis node over a client
		// that resends commands): then it reserves, as for any waiter.
		e.do("DEL", name, wk)
		t.Skip("the node asks for no grants: it reserved the key")
	}
	assert.Equal(t, gb, e.get(name), "the key holds b's grant")
	assert.InDelta(t, node.GrantTTL(30*time.Second), e.pttl(name), float64(300*time.Millisecond), "for node.GrantTTL (2 s) of the 30 s TTL b asked for")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "b"), "b has left the queue")
	msg := receive(t, toB, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, node.GrantMessage(gb, "tok-b1"), string(msg[2].([]byte)), "the grant is announced to b, naming the attempt it registered with")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "and to no one else")

	// The grant is b's lock: it extends and releases it by the grant, and
	// its release hands the key on to c.
	gk := node.Key{Name: name, Token: gb, Owner: "b"}
	e.resultOf(e.n.Extend(e.ctx, &gk, time.Minute))(node.Done, "b extends by its grant")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-d", Owner: "d"}, time.Minute, false))(node.Taken, "a plain acquire does not take a granted key")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-c2", Owner: "c", Ticket: tc, Grant: c.Grant}, 1500*time.Millisecond, true))(node.Taken, "c still waits")
	e.resultOf(e.n.Release(e.ctx, &gk, true))(node.Done, "b releases by its grant")
	assert.Equal(t, c.Grant, e.get(name), "granted to c")
	assert.InDelta(t, 1500*time.Millisecond, e.pttl(name), float64(300*time.Millisecond), "for the 1.5 s TTL c asked for, node.GrantTTL of it")

	// c's next waiting attempt, which its grant's announcement did not
	// stop, takes the key with its own token.
	ck := node.Key{Name: name, Token: "tok-c3", Owner: "c", Ticket: tc, Grant: c.Grant}
	e.resultOf(e.n.Acquire(e.ctx, &ck, time.Minute, true))(node.Done, "c's attempt takes its granted key")
	assert.Equal(t, "tok-c3", e.get(name))

	// b waits again with a new grant; c's rollback-free release grants it.
	// b's Leave with another waiting call's grant leaves it alone; with
	// its own, the key goes on to the next head, or is freed.
	b2 := node.Key{Name: name, Token: "tok-b2", Owner: "b", Ticket: tb, Grant: node.GrantValue("b", "g3")}
	e.resultOf(e.n.Acquire(e.ctx, &b2, time.Minute, true))(node.Taken, "b waits again")
	e.resultOf(e.n.Release(e.ctx, &ck, true))(node.Done, "c releases")
	assert.Equal(t, b2.Grant, e.get(name), "granted to b's new call")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: gb}))
	assert.Equal(t, b2.Grant, e.get(name), "a Leave with another grant does not free it")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: b2.Grant}))
	assert.Equal(t, int64(0), e.do("EXISTS", name), "the leaver's grant is freed: no one else waits")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "nothing is left of the queue")

	// A lock held by a grant whose release (or transfer) finds the key
	// not granted here yet takes its registration out of the queue, so
	// that the node does not grant it once the lock is gone.
	other := node.Key{Name: name, Token: "tok-y", Owner: "y"}
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, false))(node.Done, "y takes the key")
	gz := node.GrantValue("z", "g7")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-z", Owner: "z", Grant: gz}, time.Minute, true))(node.Taken, "z waits")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: gz, Owner: "z"}, true))(node.Taken, "z's lock, granted elsewhere, releases here")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "z"), "z's registration is gone")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-z2", Owner: "z", Grant: gz}, time.Minute, true))(node.Taken, "z waits again")
	e.resultOf(h.Transfer(e.ctx, &node.Key{Name: name, Token: gz, Owner: "z"}, &node.Key{Name: name, Token: "tok-z3", Owner: "z"}, time.Minute))(node.Taken, "z's lock hands over within its client")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "z"), "z's registration is gone")
	e.resultOf(e.n.Release(e.ctx, &other, true))(node.Done, "y releases")
	assert.Equal(t, int64(0), e.do("EXISTS", name, wk), "granted to no one: nothing is left")
	// The same where the key is absent and another client waits.
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, false))(node.Done, "y takes the key again")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-w", Owner: "w"}, time.Minute, true))(node.Taken, "w waits")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-z4", Owner: "z", Grant: gz}, time.Minute, true))(node.Taken, "z waits")
	e.do("DEL", name) // y's key expires
	e.resultOf(h.Transfer(e.ctx, &node.Key{Name: name, Token: gz, Owner: "z"}, &node.Key{Name: name, Token: "tok-z5", Owner: "z"}, time.Minute))(node.Absent, "z's transfer yields to w")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "z"), "z's registration is gone")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "w"}))
	assert.Equal(t, int64(0), e.do("EXISTS", name, wk), "nothing is left")

	// A release hands the key on to a head of another client than the
	// releaser's: its own client's place (here x's, ahead of c) is for
	// its next holder to take in its turn, or a stale one.
	x := node.Key{Name: name, Token: "tok-x1", Owner: "x"}
	e.resultOf(e.n.Acquire(e.ctx, &x, time.Minute, false))(node.Done, "x takes the key")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-x2", Owner: "x", Grant: node.GrantValue("x", "g5")}, time.Minute, true))(node.Taken, "x queues too")
	c3 := node.Key{Name: name, Token: "tok-c4", Owner: "c", Grant: node.GrantValue("c", "g6")}
	e.resultOf(e.n.Acquire(e.ctx, &c3, time.Minute, true))(node.Taken, "c queues behind x")
	e.resultOf(e.n.Release(e.ctx, &x, true))(node.Done, "x releases")
	assert.Equal(t, c3.Grant, e.get(name), "granted to c, not to x's own place")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "x"}))
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: c3.Grant, Owner: "c"}, true))(node.Done, "c releases by its grant")
	assert.Equal(t, int64(0), e.do("EXISTS", name, wk), "nothing is left")

	// A watch for a grant message wakes for that message only: not for
	// an empty one (a lock named like the channel's key), not for another.
	if w, ok := e.n.(node.Watcher); ok {
		msg := node.GrantMessage(gb, "tok-b1")
		got := make(chan struct{}, 1)
		watch := w.Watch(node.ReservedKey(name, "b"), msg, got)
		select {
		case <-watch.Ready():
		case <-time.After(5 * time.Second):
			t.Fatal("the watch was not confirmed")
		}
		channel := node.ReleaseChannel(node.ReservedKey(name, "b"))
		for _, other := range []string{"", "b", msg + "x"} {
			e.do("PUBLISH", channel, other)
		}
		select {
		case <-got:
			t.Fatal("a grant watch woke for another message")
		case <-time.After(100 * time.Millisecond):
		}
		e.do("PUBLISH", channel, msg)
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			watch.Stop()
			t.Fatal("a grant watch did not wake for its message")
		}
		watch.Stop()
		e.do("PUBLISH", channel, msg)
		select {
		case <-got:
			t.Fatal("a message was sent after Stop")
		case <-time.After(200 * time.Millisecond): // and the node unsubscribes
		}
	}

	// A semaphore's slots (a shared queue) reserve, never grant.
	line := "lk:grant:line"
	s1 := node.Key{Name: "lk:grant:s1", Token: "tok-s", Owner: "a"}.InQueue(line)
	e.resultOf(e.n.Acquire(e.ctx, &s1, time.Minute, false))(node.Done, "a takes the slot")
	sb := node.Key{Name: s1.Name, Token: "tok-sb", Owner: "b", Grant: node.GrantValue("b", "g4")}.InQueue(line)
	e.resultOf(e.n.Acquire(e.ctx, &sb, time.Minute, true))(node.Taken, "b waits in the line")
	e.resultOf(e.n.Release(e.ctx, &s1, true))(node.Done, "a releases the slot")
	assert.Equal(t, "~b", e.get(s1.Name), "reserved, not granted")
	e.resultOf(e.n.Acquire(e.ctx, &sb, time.Minute, true))(node.Done, "b takes it")
	e.resultOf(e.n.Release(e.ctx, &sb, true))(node.Done, "b releases")
	assert.Equal(t, int64(0), e.do("EXISTS", s1.Name, line), "nothing is left")

	// An Unlock of a slot hands it on to a head of another client, as on
	// a lock's own queue: the releaser's own place in the line is for its
	// next holder (a handoff within the client), or a stale one that a
	// late waiting attempt made after the client left the line (a
	// torture trace, stop 52: the slot stayed reserved for a client with
	// no waiter for a lease).
	a2 := node.Key{Name: "lk:grant:s2", Token: "tok-a2", Owner: "a"}.InQueue(line)
	e.resultOf(e.n.Acquire(e.ctx, &a2, time.Minute, false))(node.Done, "a takes slot 2")
	aw := node.Key{Name: "lk:grant:s1", Token: "tok-aw", Owner: "a"}.InQueue(line)
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: "lk:grant:s1", Token: "tok-s0", Owner: "z"}, time.Minute, false))(node.Done, "z holds slot 1")
	e.resultOf(e.n.Acquire(e.ctx, &aw, time.Minute, true))(node.Taken, "a's late attempt queues a in the line")
	cw := node.Key{Name: a2.Name, Token: "tok-cw", Owner: "c"}.InQueue(line)
	e.resultOf(e.n.Acquire(e.ctx, &cw, time.Minute, true))(node.Taken, "c waits behind a")
	e.resultOf(e.n.Release(e.ctx, &a2, true))(node.Done, "a releases slot 2")
	assert.Equal(t, "~c", e.get(a2.Name), "reserved for c, not for a's own place")
	e.resultOf(e.n.Acquire(e.ctx, &cw, time.Minute, true))(node.Done, "c takes it")
	e.resultOf(e.n.Release(e.ctx, &cw, true))(node.Done, "c releases")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: a2.Name, Owner: "a", Queue: line}))
	e.do("DEL", "lk:grant:s1")
	assert.Equal(t, int64(0), e.do("EXISTS", a2.Name, "lk:grant:s1", line), "nothing is left")
}

// testTomb: a release with Key.Tomb that does not find its token leaves
// a tombstone (node.TombKey) for Tomb; while it lives, a waiting Acquire
// (a script) of that token takes neither a free key nor one reserved for
// its owner, and a Transfer to it sets nothing. A release without Tomb,
// or one that finds its token, leaves none.
func testTomb(t *testing.T, f Factory) {
	e := start(t, f)
	holder := node.Key{Name: "lk:tomb", Token: "holder", Owner: "a"}
	dead := node.Key{Name: holder.Name, Token: "dead", Owner: "w"}
	tomb := node.TombKey(dead.Name, dead.Token)
	e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "the holder")

	plain := node.Key{Name: holder.Name, Token: "plain"}
	e.resultOf(e.n.Release(e.ctx, &plain, false))(node.Taken, "a rollback without Tomb, another token there")
	assert.Equal(t, int64(0), e.do("EXISTS", node.TombKey(plain.Name, plain.Token)), "no Tomb, no tombstone")

	rb := dead
	rb.Tomb = 10 * time.Second
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Taken, "a rollback with Tomb, another token there")
	assert.Equal(t, "holder", e.get(holder.Name), "the holder's key stays")
	assert.Equal(t, int64(1), e.do("EXISTS", tomb), "a tombstone of the token")
	assert.InDelta(t, 10*time.Second, e.pttl(tomb), float64(time.Second), "it lives Tomb")

	// The holder's Unlock frees the key; the attempt rolled back above
	// runs now, late: as a waiting Acquire (a script) it sets nothing.
	e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "the holder's Unlock")
	res := e.resultOf(e.n.Acquire(e.ctx, &dead, time.Minute, true))(node.Taken, "a late waiting acquire of a token with a tombstone, the key free")
	assert.LessOrEqual(t, res.TTL, node.WaiterLease, "no holder: at most a waiter's lease")
	assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
	h, queues := e.n.(node.Handoffer)
	if queues {
		// Reserved for the late attempt's owner, as an Unlock hands it
		// on: still not taken, the reservation left for its live call.
		e.do("SET", dead.Name, "~"+dead.Owner, "PX", 60000)
		e.resultOf(e.n.Acquire(e.ctx, &dead, time.Minute, true))(node.Taken, "a late waiting acquire of a token with a tombstone, the key reserved for its owner")
		assert.Equal(t, "~"+dead.Owner, e.get(dead.Name), "the reservation stays")
		e.do("DEL", dead.Name)
		require.NoError(t, h.Leave(e.ctx, &dead))

		// A transfer to a token with a tombstone (the successor's
		// rollback overtook it) sets nothing, where the holder's
		// release has freed the key.
		e.resultOf(h.Transfer(e.ctx, &holder, &dead, time.Minute))(node.Taken, "a late transfer to a token with a tombstone, the key free")
		assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
		e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "the holder again")
		e.resultOf(h.Transfer(e.ctx, &holder, &dead, time.Minute))(node.Taken, "a late transfer to a token with a tombstone, the holder's key there")
		assert.Equal(t, "holder", e.get(holder.Name), "nothing changed")
		e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "the holder's Unlock")
	}

	if fe, ok := e.n.(node.Fencer); ok {
		// A late fenced acquire of a token with a tombstone sets
		// nothing either, waiting or not.
		e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: dead.Name, Token: dead.Token}, time.Minute, time.Hour))(node.Taken, "a late fenced acquire of a token with a tombstone, the key free")
		assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
		if queues {
			e.resultOf(fe.AcquireFenced(e.ctx, &dead, time.Minute, time.Hour))(node.Taken, "a late waiting fenced acquire of a token with a tombstone, the key free")
			assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
			require.NoError(t, h.Leave(e.ctx, &dead))
		}
		e.do("DEL", node.FenceKey(dead.Name))
	}

	// A release with Tomb that finds its token frees the key, and
	// leaves a tombstone all the same: another command of the token (a
	// re-seed after the acquire) may still be on its way.
	e.do("DEL", tomb)
	e.resultOf(e.n.Acquire(e.ctx, &dead, time.Minute, true))(node.Done, "the token without a tombstone")
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Done, "a release with Tomb that finds its token")
	assert.Equal(t, int64(1), e.do("EXISTS", tomb), "a tombstone")
	e.resultOf(e.n.Acquire(e.ctx, &dead, time.Minute, true))(node.Taken, "a late acquire of the token after it")
	assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
	if queues {
		require.NoError(t, h.Leave(e.ctx, &dead)) // it queued its owner
	}
	e.do("DEL", tomb)
	if queues {
		// The requeueing rollback carries Tomb too.
		rq := rb
		rq.Ticket, rq.Requeue = 7, true
		e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "the holder again")
		e.resultOf(e.n.Release(e.ctx, &rq, false))(node.Taken, "a requeueing rollback with Tomb, another token there")
		assert.Equal(t, int64(1), e.do("EXISTS", tomb), "a tombstone of the token")
		e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "the holder's Unlock")
		e.do("DEL", tomb, node.WaitersKey(dead.Name))
	}
	if sh, ok := e.n.(node.Sharer); ok {
		testTombShared(t, e, sh)
	}
}

// testTombShared: read holds as testTomb. A ReleaseShared with Key.Tomb
// leaves a tombstone, whether it finds its token or not; while it lives,
// a waiting AcquireShared (the script; a first try may be a plain SET,
// which cannot look) of that token adds it nowhere: not to a free key,
// not beside another reader.
func testTombShared(t *testing.T, e *env, sh node.Sharer) {
	late := node.Key{Name: "lk:tomb:r", Token: "dead-r", Owner: "rw"}
	rb := late
	rb.Tomb = 10 * time.Second
	tomb, wk := node.TombKey(late.Name, late.Token), node.WaitersKey(late.Name)
	e.resultOf(sh.ReleaseShared(e.ctx, &rb, false))(node.Absent, "a shared rollback with Tomb, nothing there")
	assert.Equal(t, int64(1), e.do("EXISTS", tomb), "a tombstone of the token")
	assert.InDelta(t, 10*time.Second, e.pttl(tomb), float64(time.Second), "it lives Tomb")

	e.resultOf(sh.AcquireShared(e.ctx, &late, time.Minute, true))(node.Taken, "a late shared acquire of a token with a tombstone, the key free")
	assert.Equal(t, int64(0), e.do("EXISTS", late.Name), "the key stays free")
	e.do("DEL", wk) // it queued its owner
	other := node.Key{Name: late.Name, Token: "other-r"}
	e.resultOf(sh.AcquireShared(e.ctx, &other, time.Minute, false))(node.Done, "another reader")
	e.resultOf(sh.AcquireShared(e.ctx, &late, time.Minute, true))(node.Taken, "a late shared acquire of a token with a tombstone, another reader in")
	e.do("DEL", wk)
	e.resultOf(sh.ReleaseShared(e.ctx, &other, true))(node.Done, "the other reader was alone: its release frees the key")
	assert.Equal(t, int64(0), e.do("EXISTS", late.Name, node.ReadersKey(late.Name)), "no hold of the late token was added")

	// Found: freed, and a tombstone all the same (a re-seed of the
	// token may still be on its way).
	e.do("DEL", tomb)
	e.resultOf(sh.AcquireShared(e.ctx, &late, time.Minute, true))(node.Done, "the token without a tombstone")
	e.resultOf(sh.ReleaseShared(e.ctx, &rb, false))(node.Done, "a shared release with Tomb that finds its token")
	assert.Equal(t, int64(1), e.do("EXISTS", tomb), "a tombstone")
	e.resultOf(sh.AcquireShared(e.ctx, &late, time.Minute, true))(node.Taken, "a late shared acquire after it")
	assert.Equal(t, int64(0), e.do("EXISTS", late.Name), "the key stays free")
	e.do("DEL", tomb, wk)
}
