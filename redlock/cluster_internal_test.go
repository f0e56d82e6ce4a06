package redlock

import (
	"errors"
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
	at := func(port int) Copy { return Copy{Master: node.Endpoint{Host: "h", Port: port}} }
	p := placement{copies: []Copy{at(1), at(2), at(1), at(3), at(2)}}
	assert.Equal(t, []sharing{{copies: []int{0, 2}, master: "h:1"}, {copies: []int{1, 4}, master: "h:2"}}, p.shared())
	assert.Empty(t, placement{copies: []Copy{at(1), at(2), at(3)}}.shared())
}
