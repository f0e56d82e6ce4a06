package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

// Reading an election: who leads, as a majority of nodes says, and
// every change of it.

// Leader returns who leads the election: the token and the announcement
// beside it that a majority of nodes hold alike. It returns ErrNoLeader
// when a majority holds no key of the election, and otherwise an error
// (a *QuorumError) when it cannot tell: too many nodes failed, or they
// disagree (a Proclaim or a handover in progress that did not settle in
// three reads). It never reports a leader that a majority does not hold.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	var err error
	for try := range 3 {
		if try > 0 {
			t := e.c.clk.NewTimer(5 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return Leader{}, err
			case <-t.C():
			}
		}
		var ldr Leader
		var settled bool
		ldr, _, settled, err = e.read(ctx)
		if settled {
			return ldr, err
		}
	}
	return Leader{}, err
}

// read makes one read of every node (node.Announcer.InspectAnnounce)
// and returns the leader a majority agrees on, or ErrNoLeader, with
// settled; otherwise settled is false and err says why. left is, for a
// leader, the least TTL among the nodes that agree on it: its keys there
// expire no sooner.
func (e *Election) read(ctx context.Context) (ldr Leader, left time.Duration, settled bool, err error) {
	c := e.c
	if !c.begin() {
		return Leader{}, 0, true, ErrClosed
	}
	defer c.life.bg.Done()
	rctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	r := &leaderRead{c: c, key: e.key, ctx: rctx, got: make([]node.Announced, len(c.nodes))}
	r.Start(c.clk, len(c.nodes), r)
	n := len(c.nodes)
	for {
		if ldr, left, ok := r.agree(); ok {
			if ldr == (Leader{}) {
				return Leader{}, 0, true, ErrNoLeader
			}
			return ldr, left, true, nil
		}
		t := quorum.Tally(r.Replies)
		if t.Pending == 0 || rctx.Err() != nil {
			break
		}
		// One more reply: need is Done+Pending, which no reply decides
		// before it comes (quorum.Count.Decided).
		r.WaitAnswered(rctx.Done(), t.Done+t.Pending, n-t.Pending+1)
	}
	qe := newQuorumError("leader", e.key, c, r.Replies, nil, ctx)
	return Leader{}, 0, ctx.Err() != nil, qe
}

// leaderRead is one read of an election's key on every node.
type leaderRead struct {
	quorum.Round
	c   *Client
	key string
	ctx context.Context
	got []node.Announced // by node, written by its call before its reply is sent
}

// Call reads node i (quorum.Caller): Done when a key is there, Absent
// when none.
func (r *leaderRead) Call(i int) (node.Result, error) {
	a, err := r.c.nodes[i].(node.Announcer).InspectAnnounce(r.ctx, r.key)
	if err != nil {
		return node.Result{}, err
	}
	r.got[i] = a
	if a.Token == "" {
		return node.Result{Status: node.Absent}, nil
	}
	return node.Result{Status: node.Done}, nil
}

// agree returns the leader that a majority of the replies received so
// far hold alike (one token, one announcement), or the zero Leader when
// a majority holds no key; ok is false when neither is known yet.
func (r *leaderRead) agree() (ldr Leader, left time.Duration, ok bool) {
	need := r.c.quorum
	absent := 0
	type vote struct {
		n    int
		left time.Duration
	}
	votes := map[node.Announced]vote{}
	for i, rep := range r.Replies {
		if rep.Err != nil || rep.Result.Status == node.Unknown {
			continue
		}
		a := r.got[i]
		if a.Token == "" {
			absent++
			continue
		}
		if _, ok := parseRecord(a.Text); !ok {
			continue // held, nothing announced (yet, or any more)
		}
		k := node.Announced{Token: a.Token, Text: a.Text}
		v := votes[k]
		if v.n == 0 || a.TTL < v.left {
			v.left = a.TTL
		}
		v.n++
		votes[k] = v
		if v.n >= need {
			ldr, _ := parseRecord(a.Text)
			return ldr, v.left, true
		}
	}
	if absent >= need {
		return Leader{}, 0, true
	}
	return Leader{}, 0, false
}

// Observe reports the election's leader: the current one at once, then
// every change (the zero Leader: nobody leads, or a majority cannot
// tell), until ctx ends, when the channel is closed. A reader that falls
// behind gets the latest. It is woken by the announcements' notifications
// (node.Watcher), and reads again when the leader's keys would expire
// and at least every pollEvery, so it reports a lost leader no later
// than its keys on a majority expire.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	go e.observe(ctx, out)
	return out
}

// pollEvery bounds how long Observe goes without reading the nodes.
const pollEvery = time.Second

func (e *Election) observe(ctx context.Context, out chan Leader) {
	defer close(out)
	c := e.c
	wake := make(chan struct{}, 1)
	var watches []node.Watch
	for _, nd := range c.nodes {
		if w, ok := nd.(node.Watcher); ok {
			watches = append(watches, w.Watch(node.AnnounceKey(e.key), "", wake))
		}
	}
	defer func() {
		for _, w := range watches {
			w.Stop()
		}
	}()
	// Subscribed first, then read: a change after the read wakes it.
	ready := c.clk.NewTimer(e.timeout)
	for _, w := range watches {
		select {
		case <-w.Ready():
		case <-ready.C():
		case <-ctx.Done():
		}
	}
	ready.Stop()
	var last Leader
	first := true
	for ctx.Err() == nil {
		ldr, left, _, err := e.read(ctx)
		if errors.Is(err, ErrClosed) {
			return
		}
		if ctx.Err() != nil {
			return
		}
		if first || ldr != last {
			select { // the latest replaces what the reader has not taken
			case <-out:
			default:
			}
			out <- ldr
			last, first = ldr, false
		}
		d := pollEvery
		if ldr != (Leader{}) && left > 0 {
			d = min(d, left+time.Millisecond)
		}
		t := c.clk.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-c.life.done:
			t.Stop()
			return
		case <-wake:
		case <-t.C():
		}
		t.Stop()
	}
}
