package redlock

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/quorumlock/redlock/node"
)

// placeCopies: every master up to five, one fewer when even; WithCopies
// odd, at least 3, at most the masters; fewer than 3 masters refused.
func TestPlaceCopies(t *testing.T) {
	for _, tc := range []struct{ masters, copies, want int }{
		{3, 0, 3}, {4, 0, 3}, {5, 0, 5}, {6, 0, 5}, {9, 0, 5},
		{5, 3, 3}, {9, 7, 7}, {3, 3, 3},
		{2, 0, -1}, {1, 0, -1}, {5, 4, -1}, {5, 1, -1}, {3, 5, -1}, {5, -3, -1},
	} {
		c := config{copies: tc.copies}
		got, err := c.placeCopies(tc.masters)
		if tc.want < 0 {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%d masters, copies %d: want ErrInvalid, got %d, %v", tc.masters, tc.copies, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%d masters, copies %d: want %d, got %d, %v", tc.masters, tc.copies, tc.want, got, err)
		}
	}
}

// shared groups the copies that sit on one master, in the order of
// their first copy, and leaves out masters with one copy.
func TestSharedGroupsCopiesByMaster(t *testing.T) {
	assert.Equal(t, []sharing{{copies: []int{0, 2}, master: "h:1"}, {copies: []int{1, 4}, master: "h:2"}},
		shared([]string{"h:1", "h:2", "h:1", "h:3", "h:2"}))
	assert.Empty(t, shared([]string{"h:1", "h:2", "h:3"}))
}

// movingNode is a copy whose master an atomic changes.
type movingNode struct {
	node.Node
	addr *atomic.Pointer[string]
}

func (n movingNode) Addr() string { return *n.addr.Load() }

// TestColocationReportsEachChange: the watcher logs and reports the
// copies that share a master whenever that number changes, and 0 once
// every copy has a master of its own again; a check that finds the same
// number reports nothing.
func TestColocationReportsEachChange(t *testing.T) {
	addrs := make([]*atomic.Pointer[string], 3)
	nodes := make([]node.Node, 3)
	for i := range addrs {
		addrs[i] = &atomic.Pointer[string]{}
		a := fmt.Sprintf("h:%d", i+1)
		addrs[i].Store(&a)
		nodes[i] = movingNode{addr: addrs[i]}
	}
	move := func(i int, a string) { addrs[i].Store(&a) }
	var got []int
	logs := &bytes.Buffer{}
	w := &colocation{nodes: nodes, log: slog.New(slog.NewTextHandler(logs, nil)), hook: func(n int) { got = append(got, n) }}

	w.check()
	assert.Empty(t, got, "distinct masters at dial: nothing to report")
	move(0, "h:2")
	w.check()
	w.check()
	move(2, "h:2")
	w.check()
	move(2, "h:3")
	move(0, "h:1")
	w.check()
	assert.Equal(t, []int{2, 3, 0}, got)
	assert.Equal(t, 2, strings.Count(logs.String(), "copies of every lock on one master"), logs.String())
	assert.Contains(t, logs.String(), "copies=\"[0 1 2]\" master=h:2")
	assert.Contains(t, logs.String(), "every copy on a master of its own again")
}
