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
	var mu sync.Mutex
	var seen []string // the command names, in order
	addr := redistest.Serve(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			args, err := readCommand(r)
			if err != nil {
				return
			}
			mu.Lock()
			seen = append(seen, strings.ToUpper(args[0]))
			mu.Unlock()
			reply := "-ERR unknown command\r\n"
			switch strings.ToUpper(args[0]) {
			case "SET":
				reply = "-ERR syntax error\r\n"
			case "EVALSHA":
				reply = "+OK\r\n"
			}
			if _, err := c.Write([]byte(reply)); err != nil {
				return
			}
		}
	})
	n, err := node.Dial("redis://"+addr, node.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer n.Close()
	ctx := context.Background()
	for i := range 2 {
		res, err := n.Acquire(ctx, node.NewKey("k", fmt.Sprint("tok-", i)), time.Minute, false)
		require.NoError(t, err, "acquire %d", i)
		assert.Equal(t, node.Done, res.Status, "acquire %d", i)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"SET", "EVALSHA", "EVALSHA"}, seen, "one SET refused, then scripts only")
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
