package node

import (
	"errors"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shardReply reads shard pub/sub replies as PubSubConn reads the classic
// ones; anything else is a protocol error, and an error stays one.
func TestShardReply(t *testing.T) {
	b := func(s string) []byte { return []byte(s) }
	assert.Equal(t, redis.Message{Channel: "{t}k:released", Data: b("~a:b")},
		shardReply([]any{b("smessage"), b("{t}k:released"), b("~a:b")}, nil))
	assert.Equal(t, redis.Subscription{Kind: "subscribe", Channel: "{t}k:released", Count: 1},
		shardReply([]any{b("ssubscribe"), b("{t}k:released"), int64(1)}, nil))
	assert.Equal(t, redis.Subscription{Kind: "unsubscribe", Channel: "{t}k:released", Count: 0},
		shardReply([]any{b("sunsubscribe"), b("{t}k:released"), int64(0)}, nil))
	assert.Equal(t, redis.Pong{Data: ""}, shardReply([]any{b("pong"), b("")}, nil))
	for _, r := range []any{[]any{b("message"), b("c"), b("m")}, "OK", []any{b("smessage")}} {
		err, ok := shardReply(r, nil).(error)
		require.True(t, ok, "%v", r)
		assert.ErrorIs(t, err, ErrProtocol)
	}
	boom := errors.New("boom")
	assert.Equal(t, boom, shardReply(nil, boom))
}

// Sharded turns every publish into a pcall of SPUBLISH and changes the
// hash of exactly the scripts that publish.
func TestShardedScripts(t *testing.T) {
	classic, sharded := LuaScripts(), LuaScripts().Sharded()
	assert.NotContains(t, sharded.Release.Src, `"PUBLISH"`)
	assert.Contains(t, sharded.Release.Src, `redis.pcall("SPUBLISH"`)
	assert.NotContains(t, sharded.Announce.Src, `redis.call("SPUBLISH"`)
	assert.NotEqual(t, classic.Release.Hash, sharded.Release.Hash)
	assert.Equal(t, classic.Extend, sharded.Extend, "extend publishes nothing")
	assert.Equal(t, classic.Release.Keys, sharded.Release.Keys)
}
