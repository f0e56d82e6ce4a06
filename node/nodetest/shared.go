package nodetest

// node.Sharer: read holds, alone and with queued writers.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
)

// testSharedQueue checks one queue under two keys (node.Key.Queue, a
// semaphore's slots): each release reserves its key for the head that
// has no key reserved yet, a waiter keeps its reservation as it renews
// its place through the other key, and each takes its own; a transfer
// within a client does not yield to the queue; a rollback hands the key
// on quietly where anyone is queued, and deletes it where no one is; a
// waiting attempt's rollback (Key.Requeue) queues its caller again;
// nothing is left.
func testSharedQueue(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	names := []string{"lk:sq:permit:0", "lk:sq:permit:1"}
	q := "lk:sq:permits:2:line"
	key := func(i int, tok, owner string, ticket int64) *node.Key {
		k := node.Key{Name: names[i], Token: tok, Owner: owner, Ticket: ticket}.InQueue(q)
		return &k
	}
	h0, h1 := key(0, "tok-h0", "h", 0), key(1, "tok-h1", "h", 0)
	e.resultOf(e.n.Acquire(e.ctx, h0, time.Minute, false))(node.Done, "h takes key 0")
	e.resultOf(e.n.Acquire(e.ctx, h1, time.Minute, false))(node.Done, "h takes key 1")
	b := e.resultOf(e.n.Acquire(e.ctx, key(0, "tok-b1", "b", 0), time.Minute, true))(node.Taken, "b waits at key 0").Ticket
	c := e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-c1", "c", 0), time.Minute, true))(node.Taken, "c waits at key 1").Ticket
	assert.Greater(t, c, b, "one line: c came after b")
	assert.Equal(t, int64(0), e.do("EXISTS", node.WaitersKey(names[0])), "no queue of a key's own")

	toB := e.subscribe(t, node.ReservedKey(names[1], "b"))
	toC := e.subscribe(t, node.ReservedKey(names[1], "c"))
	e.resultOf(e.n.Release(e.ctx, h0, true))(node.Done, "h releases key 0")
	assert.Equal(t, "~b", e.get(names[0]), "key 0 reserved for b, the head")
	// b renews its place through key 1, which h still holds: its
	// reservation of key 0 stays on record.
	e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-b2", "b", b), time.Minute, true))(node.Taken, "b renews at key 1")
	e.resultOf(e.n.Release(e.ctx, h1, true))(node.Done, "h releases key 1")
	assert.Equal(t, "~c", e.get(names[1]), "key 1 goes to c: b has key 0 reserved")
	require.NotNil(t, receive(t, toC, 5*time.Second), "announced to c")
	assert.Nil(t, receive(t, toB, 100*time.Millisecond), "not to b")
	res := e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-b3", "b", b), time.Minute, true))(node.Taken, "b does not take c's key")
	assert.Equal(t, b, res.Ticket, "and stays queued with its ticket")
	bk := key(0, "tok-b4", "b", b)
	ck := key(1, "tok-c2", "c", c)
	e.resultOf(e.n.Acquire(e.ctx, bk, time.Minute, true))(node.Done, "b takes key 0")
	e.resultOf(e.n.Acquire(e.ctx, ck, time.Minute, true))(node.Done, "c takes key 1")
	assert.Equal(t, int64(0), e.do("EXISTS", q), "nobody is left in the queue")

	d := e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-d1", "d", 0), time.Minute, true))(node.Taken, "d waits").Ticket
	// A transfer within c while d heads the line yields to d, as on a
	// lock's own queue: a client passing its slots from one call to the
	// next would keep the line waiting.
	ck2 := key(1, "tok-c3", "c", 0)
	toD := e.subscribe(t, node.ReservedKey(names[1], "d"))
	e.resultOf(h.Transfer(e.ctx, ck, ck2, time.Minute))(node.Absent, "c's transfer of key 1 while d waits in line")
	assert.Equal(t, "~d", e.get(names[1]), "reserves key 1 for d instead")
	require.NotNil(t, receive(t, toD, 5*time.Second), "and announces it to d")
	dk := key(1, "tok-d2", "d", d)
	e.resultOf(e.n.Acquire(e.ctx, dk, time.Minute, true))(node.Done, "d takes key 1")
	e.resultOf(e.n.Release(e.ctx, bk, false))(node.Done, "a rollback of key 0, nobody queued")
	assert.Equal(t, int64(0), e.do("EXISTS", names[0]), "deletes it")
	// A rollback while someone waits in line hands the key on to the head.
	ck3 := key(0, "tok-c4", "c", 0)
	e.resultOf(e.n.Acquire(e.ctx, ck3, time.Minute, false))(node.Done, "c takes key 0")
	g := e.resultOf(e.n.Acquire(e.ctx, key(0, "tok-g1", "g", 0), time.Minute, true))(node.Taken, "g waits").Ticket
	toG := e.subscribe(t, node.ReservedKey(names[0], "g"))
	e.resultOf(e.n.Release(e.ctx, ck3, false))(node.Done, "a rollback of key 0, g waiting")
	assert.Equal(t, "~g", e.get(names[0]), "handed on to g")
	require.NotNil(t, receive(t, toG, 5*time.Second), "and announced to g")
	gk := key(0, "tok-g2", "g", g)
	e.resultOf(e.n.Acquire(e.ctx, gk, time.Minute, true))(node.Done, "g takes key 0")
	e.resultOf(e.n.Release(e.ctx, gk, true))(node.Done, "g releases")
	e.resultOf(e.n.Release(e.ctx, dk, true))(node.Done, "d releases")

	// x, alone in line with key 0 reserved for it, does not take key 1
	// when it finds it free: it takes its own.
	e.resultOf(e.n.Acquire(e.ctx, h0, time.Minute, false))(node.Done, "h takes key 0 again")
	e.resultOf(e.n.Acquire(e.ctx, h1, time.Minute, false))(node.Done, "h takes key 1 again")
	x := e.resultOf(e.n.Acquire(e.ctx, key(0, "tok-x1", "x", 0), time.Minute, true))(node.Taken, "x waits").Ticket
	e.resultOf(e.n.Release(e.ctx, h0, true))(node.Done, "h releases key 0")
	assert.Equal(t, "~x", e.get(names[0]))
	e.resultOf(e.n.Release(e.ctx, h1, false))(node.Done, "a rollback of key 1, only x in line")
	assert.Equal(t, int64(0), e.do("EXISTS", names[1]), "x has a key reserved: key 1 is free")
	res = e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-x2", "x", x), time.Minute, true))(node.Taken, "x does not take key 1")
	assert.Equal(t, x, res.Ticket)
	xk := key(0, "tok-x3", "x", x)
	e.resultOf(e.n.Acquire(e.ctx, xk, time.Minute, true))(node.Done, "x takes key 0")
	e.resultOf(e.n.Release(e.ctx, xk, true))(node.Done, "x releases")

	// A waiting attempt that took a free key heading the line, then was
	// rolled back (node.Key.Requeue, with the ticket the refusing nodes
	// gave): the key is deleted quietly, the caller is in line again,
	// ahead of a later waiter, and the next release of a key of the
	// line is reserved for it. Without the requeue it would have left
	// the line here for good, and that release would go to the later one.
	e.resultOf(e.n.Acquire(e.ctx, h1, time.Minute, false))(node.Done, "h takes key 1 again")
	yk := key(0, "tok-y1", "y", 0)
	e.resultOf(e.n.Acquire(e.ctx, yk, time.Minute, true))(node.Done, "y takes the free key 0, heading an empty line")
	assert.Equal(t, int64(0), e.do("EXISTS", q), "and leaves the line")
	rb := *yk
	rb.Ticket, rb.Requeue = 9, true
	toY := e.subscribe(t, node.ReservedKey(names[0], "y"))
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Done, "y's attempt is rolled back")
	assert.Equal(t, int64(0), e.do("EXISTS", names[0]), "key 0 is free")
	assert.Nil(t, receive(t, toY, 100*time.Millisecond), "and y, the head, is not told")
	res = e.resultOf(e.n.Acquire(e.ctx, key(0, "tok-z1", "z", 0), time.Minute, true))(node.Taken, "z does not take key 0: y heads the line")
	assert.Equal(t, int64(10), res.Ticket, "z is queued after y's ticket")
	e.resultOf(e.n.Release(e.ctx, h1, true))(node.Done, "h releases key 1")
	assert.Equal(t, "~y", e.get(names[1]), "key 1 is reserved for y, not for z")
	yk = key(1, "tok-y2", "y", 9)
	e.resultOf(e.n.Acquire(e.ctx, yk, time.Minute, true))(node.Done, "y takes key 1")
	e.resultOf(e.n.Release(e.ctx, yk, true))(node.Done, "y releases")
	assert.Equal(t, "~z", e.get(names[1]), "key 1 goes to z")
	require.NoError(t, h.Leave(e.ctx, key(1, "", "z", 0)))
	for _, k := range append(names, q) {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s is gone", k)
	}
}

// testShared checks node.Sharer: readers together, never with a writer,
// a waiting writer stops new readers, the last reader out hands the key
// to the waiting writer, lapsed readers stop blocking, nothing is left.
func testShared(t *testing.T, f Factory) {
	e := start(t, f)
	sh, ok := e.n.(node.Sharer)
	if !ok {
		t.Skip("the node is not a node.Sharer")
	}
	name := "lk:shared"
	rk, wk := node.ReadersKey(name), node.WaitersKey(name)
	key := func(tok, owner string) *node.Key { return &node.Key{Name: name, Token: tok, Owner: owner} }
	r1, r2, w := key("tok-r1", "a"), key("tok-r2", "b"), key("tok-w", "c")

	// Readers together; a writer's plain acquire, extend and release
	// touch nothing.
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "r1 reads")
	e.resultOf(sh.AcquireShared(e.ctx, r2, 2*time.Minute, false))(node.Done, "r2 reads too")
	e.resultOf(sh.AcquireShared(e.ctx, r2, 2*time.Minute, false))(node.Done, "the same command twice")
	assert.Equal(t, node.SharedValue, e.get(name))
	assert.InDelta(t, 2*time.Minute, e.pttl(name), float64(5*time.Second), "the marker lives as long as the last reader")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-w0", ""), time.Minute, false))(node.Taken, "a plain acquire")
	e.resultOf(e.n.Extend(e.ctx, key("tok-w0", ""), time.Hour))(node.Taken, "a writer's extend")
	e.resultOf(e.n.Release(e.ctx, key("tok-w0", ""), true))(node.Taken, "a writer's release")
	assert.Equal(t, node.SharedValue, e.get(name))
	if in, ok := e.n.(node.Inspector); ok {
		info, err := in.Inspect(e.ctx, name)
		require.NoError(t, err)
		assert.Equal(t, node.SharedValue, info.Token)
		assert.Equal(t, 2, info.Readers)
	}

	// A writer that waits (queued) keeps new readers out, not the ones
	// in; extend works for a reader in, never shortening.
	res := e.resultOf(e.n.Acquire(e.ctx, w, time.Minute, true))(node.Taken, "the writer waits")
	assert.InDelta(t, 2*time.Minute, res.TTL, float64(5*time.Second), "for the readers' marker")
	res = e.resultOf(sh.AcquireShared(e.ctx, key("tok-r3", "d"), time.Minute, false))(node.Taken, "a new reader behind a waiting writer")
	assert.Positive(t, res.TTL)
	e.resultOf(sh.ExtendShared(e.ctx, r1, 3*time.Minute))(node.Done, "r1 extends")
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second))
	e.resultOf(sh.ExtendShared(e.ctx, r1, time.Second))(node.Done, "a shorter extend")
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second), "is not a shorter hold")
	e.resultOf(sh.ExtendShared(e.ctx, key("tok-x", ""), time.Minute))(node.Absent, "a token that is no reader")

	// The last reader out hands the key to the waiting writer, by name.
	sub := e.subscribe(t, node.ReservedKey(name, "c"))
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Done, "r1 leaves")
	assert.Equal(t, node.SharedValue, e.get(name), "r2 still reads")
	assert.InDelta(t, 2*time.Minute, e.pttl(name), float64(5*time.Second), "the marker now lasts as long as r2")
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Absent, "r1 again")
	e.resultOf(sh.ReleaseShared(e.ctx, r2, true))(node.Done, "r2 leaves, the last")
	assert.Equal(t, "~c", e.get(name), "reserved for the waiting writer")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "no readers left")
	msg := receive(t, sub, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "c", string(msg[2].([]byte)), "the release names the writer")
	e.resultOf(e.n.Acquire(e.ctx, w, time.Minute, true))(node.Done, "the writer takes it")
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Taken, "no reader while a writer holds")
	e.resultOf(sh.ExtendShared(e.ctx, r1, time.Minute))(node.Taken, "nor extends")
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Taken, "nor releases")
	e.resultOf(e.n.Release(e.ctx, w, true))(node.Done, "the writer releases")
	assert.Equal(t, int64(0), e.do("EXISTS", name))

	// A reader whose hold lapses stops blocking a writer; a rollback of
	// the last reader frees the key quietly.
	e.resultOf(sh.AcquireShared(e.ctx, r1, 200*time.Millisecond, false))(node.Done, "r1 reads briefly")
	time.Sleep(300 * time.Millisecond)
	e.resultOf(e.n.Acquire(e.ctx, key("tok-w2", ""), time.Minute, false))(node.Done, "a writer once r1's hold has lapsed")
	e.resultOf(e.n.Release(e.ctx, key("tok-w2", ""), false))(node.Done, "")
	e.resultOf(sh.AcquireShared(e.ctx, r2, time.Minute, false))(node.Done, "r2 reads")
	e.resultOf(sh.ReleaseShared(e.ctx, r2, false))(node.Done, "r2's rollback")
	for _, k := range []string{name, rk, wk} {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s left behind", k)
	}
	// Where a writer waits, the rollback of the last reader hands the
	// key on to it as an Unlock would, announced to it alone.
	wq := key("tok-wq", "wq")
	toWq := e.subscribe(t, node.ReservedKey(name, "wq"))
	e.resultOf(sh.AcquireShared(e.ctx, r2, time.Minute, false))(node.Done, "r2 reads again")
	e.resultOf(e.n.Acquire(e.ctx, wq, time.Minute, true))(node.Taken, "a writer waits")
	e.resultOf(sh.ReleaseShared(e.ctx, r2, false))(node.Done, "r2's rollback")
	assert.Equal(t, "~wq", e.get(name), "reserved for the writer")
	require.NotNil(t, receive(t, toWq, 5*time.Second), "announced to it")
	e.resultOf(e.n.Acquire(e.ctx, wq, time.Minute, true))(node.Done, "the writer takes it")
	e.resultOf(e.n.Release(e.ctx, wq, false))(node.Done, "and rolls it back")
	for _, k := range []string{name, rk, wk} {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s left behind", k)
	}

	// Queued readers and writers take turns in the order they came: a
	// reader queued before a writer goes first, one queued after waits.
	w1, w2, w3 := key("tok-w1", "w1"), key("tok-w2", "w2"), key("tok-w3", "w3")
	rq := node.Key{Name: name, Token: "tok-rq", Owner: "rq"}
	e.resultOf(e.n.Acquire(e.ctx, w1, time.Minute, false))(node.Done, "w1 writes")
	t2 := e.resultOf(e.n.Acquire(e.ctx, w2, time.Minute, true))(node.Taken, "w2 waits").Ticket
	res = e.resultOf(sh.AcquireShared(e.ctx, &rq, time.Minute, true))(node.Taken, "rq waits")
	assert.Greater(t, res.Ticket, t2, "rq queued after w2")
	rq.Ticket = res.Ticket
	t3 := e.resultOf(e.n.Acquire(e.ctx, w3, time.Minute, true))(node.Taken, "w3 waits").Ticket
	assert.Greater(t, t3, rq.Ticket)
	toW2, all := e.subscribe(t, node.ReservedKey(name, "w2")), e.subscribe(t, name)
	e.resultOf(e.n.Release(e.ctx, w1, true))(node.Done, "w1 releases")
	assert.Equal(t, "~w2", e.get(name), "reserved for w2, queued first")
	e.resultOf(sh.AcquireShared(e.ctx, &rq, time.Minute, true))(node.Taken, "rq behind w2")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-w2b", Owner: "w2", Ticket: t2}, time.Minute, true))(node.Done, "w2 takes its turn")
	msg = receive(t, toW2, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "w2", string(msg[2].([]byte)))
	e.resultOf(e.n.Release(e.ctx, key("tok-w2b", "w2"), true))(node.Done, "w2 releases")
	assert.Equal(t, node.ReadersReserved, e.get(name), "the head is a reader: reserved for the readers")
	assert.LessOrEqual(t, e.pttl(name), node.WaiterLease, "for what is left of its lease")
	msg = receive(t, all, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "", string(msg[2].([]byte)), "announced to all")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-w9", ""), time.Minute, false))(node.Taken, "a writer's first try does not take it")
	w3.Ticket = t3
	e.resultOf(e.n.Acquire(e.ctx, w3, time.Minute, true))(node.Taken, "w3 waits for the reader queued before it")
	e.resultOf(sh.AcquireShared(e.ctx, &rq, time.Minute, true))(node.Done, "rq goes in")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "rq"), "rq left the queue")
	e.resultOf(sh.AcquireShared(e.ctx, key("tok-r9", ""), time.Minute, false))(node.Taken, "a reader that comes after w3")
	e.resultOf(sh.ReleaseShared(e.ctx, &rq, true))(node.Done, "rq leaves")
	assert.Equal(t, "~w3", e.get(name), "reserved for w3")
	e.resultOf(e.n.Acquire(e.ctx, w3, time.Minute, true))(node.Done, "w3 writes")
	e.resultOf(e.n.Release(e.ctx, w3, true))(node.Done, "w3 releases")
	for _, k := range []string{name, rk, wk} {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s left behind", k)
	}

	// A reader at the head that gives up hands the readers' reservation
	// on: to the writer queued after it.
	h, ok := e.n.(node.Handoffer)
	if !ok {
		return
	}
	rq = node.Key{Name: name, Token: "tok-rq2", Owner: "rq"}
	e.resultOf(e.n.Acquire(e.ctx, w1, time.Minute, false))(node.Done, "w1 writes")
	e.resultOf(sh.AcquireShared(e.ctx, &rq, time.Minute, true))(node.Taken, "rq waits")
	e.resultOf(e.n.Acquire(e.ctx, w2, time.Minute, true))(node.Taken, "w2 waits after it")
	e.resultOf(e.n.Release(e.ctx, w1, true))(node.Done, "w1 releases")
	assert.Equal(t, node.ReadersReserved, e.get(name), "reserved for the readers")
	require.NoError(t, h.Leave(e.ctx, &rq))
	assert.Equal(t, "~w2", e.get(name), "rq gives up: reserved for w2")
	e.resultOf(e.n.Acquire(e.ctx, w2, time.Minute, true))(node.Done, "w2 writes")
	e.resultOf(e.n.Release(e.ctx, w2, true))(node.Done, "w2 releases")
	for _, k := range []string{name, rk, wk} {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s left behind", k)
	}
}

// testSharedAlone checks node.Sharer for a reader alone on a key, which
// is held in the key's value (node.SharedValue + ":" + token) with no
// readers hash: it shuts writers out, extends, releases, hands the key to
// a waiting writer and rolls back as a reader among others does, and a
// second reader keeps its hold.
func testSharedAlone(t *testing.T, f Factory) {
	e := start(t, f)
	sh, ok := e.n.(node.Sharer)
	if !ok {
		t.Skip("the node is not a node.Sharer")
	}
	name := "lk:alone"
	rk, wk := node.ReadersKey(name), node.WaitersKey(name)
	key := func(tok, owner string) *node.Key { return &node.Key{Name: name, Token: tok, Owner: owner} }
	r1, r2, w, other := key("tok-r1", "ra"), key("tok-r2", "rb"), key("tok-w", "c"), key("tok-x", "")
	empty := func(what string) {
		t.Helper()
		for _, k := range []string{name, rk, wk} {
			assert.Equal(t, int64(0), e.do("EXISTS", k), "%s: %s left behind", what, k)
		}
	}

	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "r1 reads alone")
	assert.Equal(t, node.SharedValue+":tok-r1", e.get(name), "held in the value")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "no readers hash")
	assert.InDelta(t, time.Minute, e.pttl(name), float64(5*time.Second))
	e.resultOf(e.n.Acquire(e.ctx, key("tok-w0", ""), time.Minute, false))(node.Taken, "a writer's acquire")
	e.resultOf(e.n.Extend(e.ctx, key("tok-w0", ""), time.Hour))(node.Taken, "a writer's extend")
	e.resultOf(e.n.Release(e.ctx, key("tok-w0", ""), true))(node.Taken, "a writer's release")
	e.resultOf(sh.ExtendShared(e.ctx, r1, 3*time.Minute))(node.Done, "r1 extends")
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second))
	e.resultOf(sh.ExtendShared(e.ctx, r1, time.Second))(node.Done, "a shorter extend")
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second), "is not a shorter hold")
	e.resultOf(sh.ExtendShared(e.ctx, other, time.Minute))(node.Absent, "a token that is no reader extends nothing")
	e.resultOf(sh.ReleaseShared(e.ctx, other, true))(node.Absent, "nor releases")
	assert.Equal(t, node.SharedValue+":tok-r1", e.get(name))
	if in, ok := e.n.(node.Inspector); ok {
		info, err := in.Inspect(e.ctx, name)
		require.NoError(t, err)
		assert.Equal(t, node.SharedValue, info.Token, "inspect names a reader alone as readers")
		assert.Equal(t, 1, info.Readers)
	}

	// A second reader moves the first to the hash, its hold unchanged.
	e.resultOf(sh.AcquireShared(e.ctx, r2, time.Minute, false))(node.Done, "r2 reads too")
	assert.Equal(t, node.SharedValue, e.get(name))
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second), "r1's hold kept")
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Done, "r1 leaves")
	assert.InDelta(t, time.Minute, e.pttl(name), float64(5*time.Second), "the marker now lasts as long as r2")
	assert.LessOrEqual(t, e.pttl(rk), e.pttl(name)+time.Second, "the readers hash lives no longer than the marker")
	e.resultOf(sh.ReleaseShared(e.ctx, r2, true))(node.Done, "r2 leaves")
	empty("both left")

	// The same command twice; a rollback frees the key quietly.
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "r1 reads alone")
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "the same command twice")
	assert.Equal(t, node.SharedValue+":tok-r1", e.get(name), "still held alone, in the value")
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, true))(node.Done, "and once more, waiting")
	assert.Equal(t, node.SharedValue+":tok-r1", e.get(name), "still held alone, in the value")
	e.resultOf(sh.ReleaseShared(e.ctx, r1, false))(node.Done, "r1's rollback")
	empty("rolled back")

	// The reader alone hands the key to a waiting writer, by name.
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "r1 reads alone")
	res := e.resultOf(e.n.Acquire(e.ctx, w, time.Minute, true))(node.Taken, "the writer waits")
	assert.InDelta(t, time.Minute, res.TTL, float64(5*time.Second), "for r1's hold")
	e.resultOf(sh.AcquireShared(e.ctx, r2, time.Minute, false))(node.Taken, "a new reader behind the waiting writer")
	sub := e.subscribe(t, node.ReservedKey(name, "c"))
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Done, "r1 leaves")
	assert.Equal(t, "~c", e.get(name), "reserved for the waiting writer")
	msg := receive(t, sub, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "c", string(msg[2].([]byte)), "the release names the writer")
	e.resultOf(e.n.Acquire(e.ctx, w, time.Minute, true))(node.Done, "the writer takes it")
	e.resultOf(e.n.Release(e.ctx, w, true))(node.Done, "the writer releases")
	empty("handed on")
}

// serverMicros is the server's TIME in microseconds.
func serverMicros(t *testing.T, e *env) int64 {
	t.Helper()
	v, _ := e.do("TIME").([]any)
	require.Len(t, v, 2)
	var s, us int64
	_, err := fmt.Sscan(string(v[0].([]byte)), &s)
	require.NoError(t, err)
	_, err = fmt.Sscan(string(v[1].([]byte)), &us)
	require.NoError(t, err)
	return s*1_000_000 + us
}
