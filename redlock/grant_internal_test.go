package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
)

// addrNode is a node that is never called: granted sends nothing itself.
type addrNode struct {
	node.Node
	addr string
}

func (n addrNode) Addr() string { return n.addr }

// TestGrantedOnAClosingClientCountsTheGrantTTL: a grant counted while the
// client closes makes a lock valid for node.GrantTTL from the last
// attempt, as the keys on the nodes are; with no extend to follow (a
// closed client sends nothing), not for the whole TTL.
func TestGrantedOnAClosingClientCountsTheGrantTTL(t *testing.T) {
	nodes := []node.Node{addrNode{addr: "a:1"}, addrNode{addr: "b:1"}, addrNode{addr: "c:1"}}
	c, err := New(nodes, WithTTL(10*time.Second))
	require.NoError(t, err)
	cfg, err := c.lockConfig("k", nil)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	from := c.clk.Now()
	l := c.granted("k", &cfg, asks{ticket: 1, grant: node.GrantValue(c.caps.tag, "id")}, from)
	require.NotNil(t, l)
	assert.Equal(t, clock.Until(from, node.GrantTTL(10*time.Second), cfg.driftFactor), l.Until(), "valid for the grant TTL")
	assert.ErrorIs(t, l.Extend(context.Background(), 10*time.Second), ErrClosed)
}
