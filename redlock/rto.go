package redlock

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/node"
)

// Without WithNodeTimeout, each node's calls are bounded by a timeout
// that follows its measured round trips, as TCP's retransmission timeout
// does (RFC 6298): the smoothed round trip plus four mean deviations (at
// least half the default node timeout), doubled after each timeout whose
// reply came in late (the node is slow, not down: node.LateAnswerer),
// never below the default node timeout
// (which survives a loaded host's scheduling delays) nor above a
// twentieth of the TTL (at most 1s; see config.maxTimeout). A healthy
// node's timeout is the default; a slow one's grows to fit it; a silent
// one's does not grow (no late replies), so its calls keep failing fast
// and its breaker opens. A call whose node timeout is above the round's
// gets a deadline of its own: only calls to slow nodes pay for one.

// rtt is one node's round-trip estimate. Its fields are updated without
// a lock: concurrent samples may lose one another, which an estimate can
// afford.
type rtt struct {
	srtt    atomic.Int64 // smoothed round trip, ns; 0 before the first sample
	rttvar  atomic.Int64 // mean deviation, ns
	backoff atomic.Int32 // doublings since the last sample
	seen    atomic.Int64 // the node's last late reply already sampled (UnixNano); 0 none
}

// lateSample samples the round trip of the node's last late reply, once:
// a reply that came after its deadline is a true round trip (it answers
// its own command), and the one measurement that can raise the estimate
// of a node that never answers in time, however rarely it is called.
func (e *rtt) lateSample(la node.LateAnswerer) {
	at, d := la.LastLate()
	if at.IsZero() {
		return
	}
	if n := at.UnixNano(); n > e.seen.Load() {
		e.seen.Store(n)
		e.sample(d)
	}
}

// sample adds a round trip measured on a call answered in time.
func (e *rtt) sample(r time.Duration) {
	s := e.srtt.Load()
	if s == 0 {
		e.srtt.Store(max(int64(r), 1))
		e.rttvar.Store(int64(r) / 2)
	} else {
		d := s - int64(r)
		if d < 0 {
			d = -d
		}
		e.rttvar.Store((3*e.rttvar.Load() + d) / 4)
		e.srtt.Store((7*s + int64(r)) / 8)
	}
	if e.backoff.Load() != 0 {
		e.backoff.Store(0)
	}
}

// late doubles the timeout after a call that timed out while the node's
// replies still come in, late.
func (e *rtt) late() {
	if b := e.backoff.Load(); b < 6 {
		e.backoff.Store(b + 1)
	}
}

// timeout is the smoothed round trip plus a margin of four mean
// deviations, but of at least lo/2 (RFC 6298's clock granularity G, here
// the scheduling delays of a loaded host: a steady slow node's deviation
// is near zero, and a margin of a few milliseconds timed out one call in
// six to a node 70ms away under make test), at least lo, doubled for
// each late timeout since the last sample, at most hi. A node faster
// than lo/2 gets lo exactly, so its calls share the round's deadline.
func (e *rtt) timeout(lo, hi time.Duration) time.Duration {
	d := time.Duration(e.srtt.Load()) + max(time.Duration(4*e.rttvar.Load()), lo/2)
	return min(max(d, lo)<<e.backoff.Load(), hi)
}

// callCtx returns the context for node i's call in round r: the round's,
// or, when the node's own timeout is longer (a slow node), one with that
// deadline; cancel is nil for the round's.
func (r *round) callCtx(i int) (ctx context.Context, cancel context.CancelFunc) {
	if d := r.timeout(i); d > r.ch.timeout {
		return context.WithTimeout(r.ctx.base, d)
	}
	return &r.ctx, nil
}

// timeout is node i's timeout in round r: the round's, or the node's own
// when that is longer.
func (r *round) timeout(i int) time.Duration {
	c := r.ch.c
	if c.health.rtts == nil {
		return r.ch.timeout
	}
	if la := c.health.lates[i]; la != nil {
		c.health.rtts[i].lateSample(la)
	}
	return c.health.rtts[i].timeout(r.ch.timeout, r.ch.maxTimeout)
}

// adapt feeds node i's estimate with a call that took took (0: not
// measured) and ended with err.
func (c *Client) adapt(i int, took time.Duration, err error) {
	e := &c.health.rtts[i]
	switch {
	case err == nil:
		if took > 0 {
			e.sample(took)
		}
	case c.answersLate(i, err):
		e.late()
	}
}

// nodeTimeout is node i's timeout now, for calls outside a lock's rounds.
func (c *Client) nodeTimeout(i int) time.Duration {
	if c.health.rtts == nil {
		return c.cfg.timeout()
	}
	return c.health.rtts[i].timeout(c.cfg.timeout(), c.cfg.maxTimeout())
}

// spread is how long after one node announces a release the others of a
// majority can be expected to announce it too: the quorum-th shortest of
// the nodes' round-trip timeouts (srtt + 4 deviations, without the
// default's floor), as a release's fan-out reaches the nodes within about
// a round trip of one another. 0 before there are estimates, or with a
// fixed node timeout (no estimates): then a waiter tries at the first
// announcement.
func (c *Client) spread() time.Duration {
	if c.health.rtts == nil {
		return 0
	}
	var d [16]time.Duration
	ds := d[:0]
	for i := range c.health.rtts {
		e := &c.health.rtts[i]
		if s := e.srtt.Load(); s > 0 {
			ds = append(ds, time.Duration(s+4*e.rttvar.Load()))
		}
	}
	if len(ds) < c.quorum {
		return 0
	}
	slices.Sort(ds)
	return ds[c.quorum-1]
}
