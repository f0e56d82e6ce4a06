package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
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

// announcingNode is a fake that offers node.Announcer, as far as a
// campaign's announcement goes: Done where the key holds the token.
type announcingNode struct{ *fakeNode }

func (n announcingNode) Announce(ctx context.Context, k *node.Key, text string, ttl time.Duration) (node.Result, error) {
	if err := n.hook(ctx, "announce"); err != nil {
		return node.Result{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.get(k.Name)
	switch {
	case !ok:
		return node.Result{Status: node.Absent}, nil
	case e.token != k.Token:
		return node.Result{Status: node.Taken}, nil
	}
	return node.Result{Status: node.Done}, nil
}

// ConfirmAnnounce: the fake's confirm, as a campaign's confirm round
// sends it (the record is not kept: Leader is not read from fakes).
func (n announcingNode) ConfirmAnnounce(ctx context.Context, k *node.Key, fence int64, counterTTL time.Duration, _ string, _ time.Duration) (node.Result, error) {
	return n.ConfirmFence(ctx, k, fence, counterTTL)
}

func (n announcingNode) InspectAnnounce(ctx context.Context, key string) (node.Announced, error) {
	return node.Announced{}, n.hook(ctx, "inspect")
}

// TestCampaignAnnouncesWithItsConfirm: a campaign keeps its record with
// the confirm (node.Announcer.ConfirmAnnounce), one command per node as a
// fenced Lock's, no announcement besides. On a node whose acquire had not
// returned yet, the confirm waits for it; when the attempt fails
// (confirms refused on a majority), its rollback still releases that
// node after the straggler's acquire set the key there.
func TestCampaignAnnouncesWithItsConfirm(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(5, clk)
	nodes := make([]node.Node, len(fakes))
	for i, f := range fakes {
		nodes[i] = announcingNode{f}
	}
	c, err := redlock.New(nodes, redlock.WithClock(clk), redlock.WithNodeTimeout(2*time.Second), redlock.WithTTL(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	e, err := c.Election("e")
	require.NoError(t, err)

	ld, err := e.TryCampaign(context.Background(), "v")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n := 0
		for _, f := range fakes {
			n += f.count("confirm")
		}
		return n == 5
	}, 5*time.Second, time.Millisecond, "every node confirms")
	require.NoError(t, ld.Resign(context.Background()))
	for i, f := range fakes {
		assert.Equal(t, 0, f.count("announce"), "node %d: the record went with the confirm", i)
	}

	require.Eventually(t, func() bool { return holders(fakes, "e", "") == 5 }, 5*time.Second, time.Millisecond,
		"Resign released every node")

	// Another election: Resign returns at a majority, and its releases
	// may still be on their way elsewhere.
	e2, err := c.Election("e2")
	require.NoError(t, err)
	straggler := make(chan struct{})
	fakes[4].setBefore(gate("acquire", straggler))
	for _, f := range fakes[:3] {
		f.setBefore(failOn("confirm"))
	}
	_, err = e2.TryCampaign(context.Background(), "v")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Equal(t, 1, fakes[4].count("confirm"), "the confirm waits for the acquire")
	close(straggler) // the acquire sets the key on node 4 now
	require.Eventually(t, func() bool { return fakes[4].count("confirm") == 2 }, 5*time.Second, time.Millisecond,
		"the straggler's acquire returned, and the confirm followed it")
	require.Eventually(t, func() bool { return holders(fakes, "e2", "") == 5 }, 5*time.Second, time.Millisecond,
		"the rollback released node 4 after the straggler's acquire")
	for i, f := range fakes {
		assert.Equal(t, 0, f.count("announce"), "node %d: no announcement", i)
	}
}
