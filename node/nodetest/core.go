package nodetest

// The core contract: acquire, extend, release, inspect, binary-safe
// keys and tokens, concurrent use, and Close.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
)

func testAcquire(t *testing.T, f Factory) {
	e := start(t, f)
	k := node.Key{Name: "lk:acquire", Token: "tok-1"}
	res := e.resultOf(e.n.Acquire(e.ctx, &k, 10*time.Second, false))(node.Done, "acquire of a free key")
	assert.Equal(t, node.Result{Status: node.Done}, res, "a plain acquire reports no TTL and no fence")
	assert.Equal(t, "tok-1", e.get(k.Name))
	assert.InDelta(t, 10*time.Second, e.pttl(k.Name), float64(time.Second), "the key lives the TTL")

	res = e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, time.Minute, false))(node.Taken, "acquire of a held key")
	assert.LessOrEqual(t, res.TTL, 10*time.Second, "a refused plain acquire reports the holder's TTL or 0")
	res = e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, time.Minute, true))(node.Taken, "acquire of a held key, asking for its TTL")
	assert.Greater(t, res.TTL, time.Duration(0), "a refused acquire asked for it reports the holder's TTL")
	assert.LessOrEqual(t, res.TTL, 10*time.Second)
	assert.Equal(t, "tok-1", e.get(k.Name), "a refused acquire changes nothing")

	// The same command twice, as a client that retries after a lost
	// reply sends it: Done, in both forms.
	for _, holderTTL := range []bool{false, true} {
		e.resultOf(e.n.Acquire(e.ctx, &k, 10*time.Second, holderTTL))(node.Done, fmt.Sprintf("a repeated acquire of one's own key (holderTTL %v)", holderTTL))
		assert.Equal(t, "tok-1", e.get(k.Name))
		assert.Greater(t, e.pttl(k.Name), time.Duration(0), "the key still expires")
	}

	e.do("SET", "lk:forever", "someone")
	res = e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: "lk:forever", Token: "tok"}, time.Second, true))(node.Taken, "acquire of a key without expiry")
	assert.Zero(t, res.TTL, "a holder without expiry: TTL unknown")
	e.do("DEL", k.Name, "lk:forever")
}

func testExtend(t *testing.T, f Factory) {
	e := start(t, f)
	k := node.Key{Name: "lk:extend", Token: "tok-1"}
	e.resultOf(e.n.Acquire(e.ctx, &k, 2*time.Second, false))(node.Done, "acquire")
	e.resultOf(e.n.Extend(e.ctx, &k, 30*time.Second))(node.Done, "extend of one's own key")
	assert.Greater(t, e.pttl(k.Name), 20*time.Second, "extend lengthens the TTL")
	e.resultOf(e.n.Extend(e.ctx, &k, time.Second))(node.Done, "a shorter extend")
	assert.Greater(t, e.pttl(k.Name), 20*time.Second, "an extend never shortens the key")

	e.resultOf(e.n.Extend(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, time.Hour))(node.Taken, "extend with another token")
	assert.Less(t, e.pttl(k.Name), 31*time.Second, "an extend with another token changes nothing")
	assert.Equal(t, "tok-1", e.get(k.Name))

	e.resultOf(e.n.Extend(e.ctx, &node.Key{Name: "lk:none", Token: "tok-1"}, time.Minute))(node.Absent, "extend of an absent key")
	assert.Equal(t, int64(0), e.do("EXISTS", "lk:none"), "an extend does not create a key")
	e.do("DEL", k.Name)
}

func testRelease(t *testing.T, f Factory) {
	e := start(t, f)
	k := node.Key{Name: "lk:release", Token: "tok-1"}
	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, true))(node.Taken, "release with another token")
	assert.Equal(t, "tok-1", e.get(k.Name), "a release with another token deletes nothing")

	// The announce flag reaches the script: a subscriber of the release
	// channel hears an announced release and not a silent one. A
	// Handoffer announces a delete only where a queue is there (see
	// node.Handoffer): here a registration of the releaser's own
	// client, which an announced release passes over and a silent one
	// (a rollback) hands the key on to, announced on its own channel.
	sub := redistest.Dial(t, "redis://"+e.addr)
	_, err := sub.Do(e.ctx, "SUBSCRIBE", node.ReleaseChannel(k.Name))
	require.NoError(t, err)
	h, queues := e.n.(node.Handoffer)
	k.Owner = "o"
	mine := node.Key{Name: k.Name, Token: "tok-3", Owner: "o"}
	if !queues {
		e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "a silent release")
		assert.Equal(t, int64(0), e.do("EXISTS", k.Name), "released")
	} else {
		e.resultOf(e.n.Acquire(e.ctx, &mine, time.Minute, true))(node.Taken, "a waiter of the holder's client")
		e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "a silent release")
		assert.Equal(t, "~o", e.get(k.Name), "handed on to the head, the holder's own client")
		assert.Nil(t, receive(t, sub, 300*time.Millisecond), "a silent release is not published on the release channel")
		require.NoError(t, h.Leave(e.ctx, &mine))
		require.NotNil(t, receive(t, sub, 5*time.Second), "the waiter leaves: the key is free, announced")
		e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire again")
		e.resultOf(e.n.Release(e.ctx, &k, true))(node.Done, "an announced release, no one queued")
		assert.Equal(t, int64(0), e.do("EXISTS", k.Name), "released")
		assert.Nil(t, receive(t, sub, 300*time.Millisecond), "a Handoffer announces nothing where no one is queued")
	}
	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire again")
	if queues {
		e.resultOf(e.n.Acquire(e.ctx, &mine, time.Minute, true))(node.Taken, "a waiter of the holder's client")
	}
	e.resultOf(e.n.Release(e.ctx, &k, true))(node.Done, "an announced release")
	msg := receive(t, sub, 5*time.Second)
	require.NotNil(t, msg, "an announced release is published")
	assert.Equal(t, node.ReleaseChannel(k.Name), string(msg[1].([]byte)), "published on the release channel")
	if queues {
		require.NoError(t, h.Leave(e.ctx, &mine))
		assert.Equal(t, int64(0), e.do("EXISTS", node.WaitersKey(k.Name)), "nothing left of the queue")
	}
	assert.Nil(t, receive(t, sub, 300*time.Millisecond), "only the announced release was published")

	e.resultOf(e.n.Release(e.ctx, &k, true))(node.Absent, "release of an absent key")
}

func testInspect(t *testing.T, f Factory) {
	e := start(t, f)
	in, ok := e.n.(node.Inspector)
	if !ok {
		t.Skip("the node is not a node.Inspector")
	}
	info, err := in.Inspect(e.ctx, "lk:inspect")
	require.NoError(t, err)
	assert.Equal(t, node.Info{}, info, "an absent key")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: "lk:inspect", Token: "tok-1"}, time.Minute, false))(node.Done, "acquire")
	info, err = in.Inspect(e.ctx, "lk:inspect")
	require.NoError(t, err)
	assert.Equal(t, "tok-1", info.Token)
	assert.InDelta(t, time.Minute, info.TTL, float64(5*time.Second))
	e.do("SET", "lk:forever", "x")
	info, err = in.Inspect(e.ctx, "lk:forever")
	require.NoError(t, err)
	assert.Equal(t, node.Info{Token: "x", TTL: -time.Millisecond}, info, "a key without expiry")
	e.do("DEL", "lk:inspect", "lk:forever")
}

func testBinarySafe(t *testing.T, f Factory) {
	e := start(t, f)
	for _, k := range []node.Key{
		{Name: "lk:with space\r\n*3", Token: "tok\x00en"},
		{Name: "lk:ключ-\xff\xfe", Token: "токен \"quoted\" 'x'"},
	} {
		e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, fmt.Sprintf("acquire %q", k.Name))
		assert.Equal(t, k.Token, e.get(k.Name), "the token is stored byte for byte")
		e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: k.Name, Token: k.Token + "x"}, time.Minute, false))(node.Taken, "another token")
		e.resultOf(e.n.Extend(e.ctx, &k, 2*time.Minute))(node.Done, "extend")
		e.resultOf(e.n.Release(e.ctx, &k, true))(node.Done, "release")
	}
}

func testConcurrent(t *testing.T, f Factory) {
	e := start(t, f)
	const n = 32
	var wg sync.WaitGroup
	results := make([]node.Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			results[i], errs[i] = e.n.Acquire(ctx, &node.Key{Name: "lk:race", Token: fmt.Sprint("tok-", i)}, time.Minute, false)
		}()
	}
	wg.Wait()
	winner := -1
	for i := range n {
		require.NoError(t, errs[i])
		if results[i].Status == node.Done {
			require.Equal(t, -1, winner, "two concurrent acquires were granted")
			winner = i
		} else {
			require.Equal(t, node.Taken, results[i].Status)
		}
	}
	require.NotEqual(t, -1, winner, "one concurrent acquire is granted")
	assert.Equal(t, fmt.Sprint("tok-", winner), e.get("lk:race"))
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: "lk:race", Token: fmt.Sprint("tok-", winner)}, false))(node.Done, "release")
}

func testClose(t *testing.T, f Factory) {
	e := start(t, f)
	c, ok := e.n.(io.Closer)
	if !ok {
		t.Skip("the node is not an io.Closer")
	}
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: "lk:close", Token: "tok"}, time.Minute, false))(node.Done, "acquire")
	require.NoError(t, c.Close())
	_, err := e.n.Release(e.ctx, &node.Key{Name: "lk:close", Token: "tok"}, false)
	require.ErrorIs(t, err, node.ErrClosed, "a call after Close")
	e.do("DEL", "lk:close")
}
