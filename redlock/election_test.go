package redlock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// TestElectionNeedsNodesThatKeepAnAnnouncement: nodes that are not
// node.Announcers (the fakes) cannot hold an election: ErrInvalid before
// anything is sent, as for fencing on nodes that cannot fence; so is an
// empty name.
func TestElectionNeedsNodesThatKeepAnAnnouncement(t *testing.T) {
	fakes, _, c := setup(t, 3)
	_, err := c.Election("")
	require.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = c.Election("e")
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), "node[0]")
	assert.Equal(t, 3, holders(fakes, "e", ""), "the key is free everywhere")
}
