package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/quorumlock/redlock/node"
)

// TestDefaultNodeTimeout: TTL/200 within [20ms, 250ms], and always below
// the TTL.
func TestDefaultNodeTimeout(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		10 * time.Second:       50 * time.Millisecond,
		2 * time.Second:        20 * time.Millisecond,
		time.Second:            20 * time.Millisecond,
		100 * time.Second:      250 * time.Millisecond,
		40 * time.Millisecond:  10 * time.Millisecond,
		100 * time.Millisecond: 20 * time.Millisecond,
	} {
		got := defaultNodeTimeout(ttl)
		assert.Equal(t, want, got, "TTL %v", ttl)
		assert.Less(t, got, ttl)
	}
}

// lateNode is a node whose late replies came in at a set time.
type lateNode struct {
	node.Node
	last time.Time
}

func (n *lateNode) Addr() string        { return "late:1" }
func (n *lateNode) LastLate() time.Time { return n.last }

// TestSlowButAnsweringNodeIsNotDown: timeouts of a node whose late replies
// keep coming never open its breaker; once they stop, timeouts count.
func TestSlowButAnsweringNodeIsNotDown(t *testing.T) {
	n := &lateNode{last: time.Now()}
	c, err := New([]node.Node{n}, WithNodeTimeout(50*time.Millisecond), WithBreaker(Breaker{Failures: 2, Span: -1}))
	assert.NoError(t, err)
	defer c.Close()
	timeout := &node.Error{Addr: "late:1", Op: "acquire", Kind: node.ErrTimeout}
	for range 5 {
		_, gen := c.allow(0)
		c.record(0, gen, timeout)
	}
	assert.Equal(t, BreakerClosed, c.breakers[0].state, "slow but answering")

	n.last = time.Now().Add(-time.Second) // the late replies stopped
	for range 2 {
		_, gen := c.allow(0)
		c.record(0, gen, timeout)
	}
	assert.Equal(t, BreakerOpen, c.breakers[0].state, "silent: down")
}
