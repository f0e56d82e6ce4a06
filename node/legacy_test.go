package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
)

// TestAcquireBeforeRedis7: a node that refuses SET's GET option together
// with NX (Redis 6.2 and older answer "ERR syntax error") gets the acquire
// script instead, in the same call, and only the script from then on.
// The server is a fake that speaks just enough RESP: it refuses SET and
// answers EVALSHA as acquire.lua would on a free key.
func TestAcquireBeforeRedis7(t *testing.T) {
	n, commands := fakeRedis(t, func(args []string) string {
		switch strings.ToUpper(args[0]) {
		case "SET":
			return "-ERR syntax error\r\n"
		case "EVALSHA":
			return "+OK\r\n"
		}
		return "-ERR unknown command\r\n"
	})
	ctx := context.Background()
	for i := range 3 {
		k := node.NewKey("k", fmt.Sprint("tok-", i))
		res, err := n.Acquire(ctx, &k, time.Minute, false)
		require.NoError(t, err, "acquire %d", i)
		assert.Equal(t, node.Done, res.Status, "acquire %d", i)
	}
	// The first acquire on the connection is the script (none has run
	// there yet, see Acquire).
	assert.Equal(t, []string{"EVALSHA", "SET", "EVALSHA", "EVALSHA"}, commands(), "one SET refused, then scripts only")
}

// fakeRedis serves just enough RESP on a local address for a node to
// talk to, and returns a node dialed to it (closed when t ends): each
// command gets reply(args), one command at a time. commands returns the
// names of the commands run since its last call.
func fakeRedis(t *testing.T, reply func(args []string) string) (n *node.Redis, commands func() []string) {
	var mu sync.Mutex
	var seen []string
	addr := redistest.Serve(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			args, err := readCommand(r)
			if err != nil {
				return
			}
			mu.Lock()
			seen = append(seen, strings.ToUpper(args[0]))
			out := reply(args)
			mu.Unlock()
			if _, err := c.Write([]byte(out)); err != nil {
				return
			}
		}
	})
	n, err := node.Dial("redis://"+addr, node.Options{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n, func() []string {
		mu.Lock()
		defer mu.Unlock()
		got := seen
		seen = nil
		return got
	}
}

// readCommand reads one RESP array of bulk strings, as clients send
// commands.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, fmt.Errorf("not a bulk string: %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// TestReaderAloneTakesAFreeKeyByAPlainSet: a reader's first try on a free
// key is one SET (NX GET), no script; one that finds readers there runs
// the script in the same call, and the next readers of that key go
// straight to the script, so that a key readers share costs each reader
// one round trip. The server is a fake that keeps SET NX's values and
// answers every script OK.
func TestReaderAloneTakesAFreeKeyByAPlainSet(t *testing.T) {
	values := map[string]string{} // fakeRedis calls reply one at a time
	n, commands := fakeRedis(t, func(args []string) string {
		switch strings.ToUpper(args[0]) {
		case "SET":
			if v, ok := values[args[1]]; ok {
				return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
			}
			values[args[1]] = args[2]
			return "$-1\r\n"
		case "EVALSHA":
			return "+OK\r\n"
		}
		return "-ERR unknown command\r\n"
	})
	ctx := context.Background()
	// A script first: until one has run on the connection, acquires are
	// scripts (see Acquire).
	k0 := node.NewKey("k0", "tok-0")
	_, err := n.Release(ctx, &k0, false)
	require.Error(t, err, "the fake's OK is no release reply")
	for _, c := range []struct {
		what, key, tok string
		want           []string
	}{
		{"a reader alone", "k", "tok-1", []string{"SET"}},
		{"a second reader", "k", "tok-2", []string{"SET", "EVALSHA"}},
		{"a third, the key known shared", "k", "tok-3", []string{"EVALSHA"}},
		{"a reader alone on another key", "k4", "tok-4", []string{"SET"}},
	} {
		commands()
		k := node.NewKey(c.key, c.tok)
		res, err := n.AcquireShared(ctx, &k, time.Minute, false)
		require.NoError(t, err, c.what)
		assert.Equal(t, node.Done, res.Status, c.what)
		assert.Equal(t, c.want, commands(), c.what)
	}
	commands() // a barrier: the handler is done with values
	assert.Equal(t, node.SharedValue+":tok-1", values["k"], "the value of a reader alone")
}
