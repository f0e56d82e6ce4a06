package redlock

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

// attempt is one round of the algorithm: SET NX PX everywhere in parallel,
// count, check validity, roll back on failure. wait asks the nodes that
// refuse for the holder's TTL. It returns a Lock, or the failed attempt's
// outcome, or ErrClosed. A failed attempt's rollback has released the
// keys it set when it returns, unless the caller keeps a list of the
// failed attempts whose rollback is on its way (rolling, non-nil for a
// waiting Lock, RLock or Semaphore.Acquire call, which settles them when
// it ends without a lock): the outcome goes there, and the call's next
// attempt, which queues it, goes at once and follows those releases
// only on the nodes where they set the same key (command.behind).
// (A release held up by a slow node kept a call that had not queued yet
// off every node's queue for up to a node timeout, while callers that
// came later queued ahead of it: the torture histories' starved
// writers and semaphore waits, each with a failed attempt that set a
// key on one node.)
func (c *Client) attempt(ctx context.Context, key string, cfg *config, wait bool, p asks, token string, rolling *[]*outcome) (*Lock, *outcome, error) {
	if !c.begin() {
		return nil, nil, ErrClosed
	}
	var behind []*outcome
	if rolling != nil {
		behind = onKey(*rolling, key)
	}
	// A waiting call's plain attempt (its first: a Lock's, a
	// semaphore's) does not wait out slow nodes once one refused (see
	// await). A reader's first attempt, plain too, still waits its
	// round out: the starved waits that made the rule were a writer's
	// and a semaphore's (b0a20df).
	impatient := rolling != nil && !wait && !cfg.shared
	l, out := c.try(ctx, key, cfg, wait, impatient, p, token, behind)
	switch {
	case rolling == nil:
		out.settle()
	case out != nil:
		r := unsettled(*rolling) // a new slice: a round may still read the old one
		if out.rolls() {
			r = append(r, out)
		}
		*rolling = r
	}
	c.life.bg.Done()
	// Logged once the operation has ended: a logger may call Close.
	if out != nil && c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("redlock: attempt failed", "key", key, "validity", out.err.Validity, "err", out.err)
	}
	return l, out, nil
}

// outcome is a failed attempt as the wait loop reads it: the caller's
// error (err, the *QuorumError it returns should the call end there),
// and what the loop needs to go on, which the caller never sees.
type outcome struct {
	err     *QuorumError
	perm    []int8        // per node, a refusal no retry changes (see refusals)
	freeIn  time.Duration // when the holder's keys free a majority; 0 unknown
	ticket  int64         // waiting: the largest ticket a node queued the call with (see node.Handoffer)
	counter int64         // fenced: the largest fence counter a reply reported (node.Result.Fence)
	passed  int           // fenced, waiting: replies whose counter had reached the fence the attempt proposed (node.Key.GrantFence)
	queued  bool          // waiting: a majority queued the call
	split   bool          // waiting: nodes queued the call with different tickets
	started time.Time     // waiting: when the attempt's round began
	lost    bool          // waiting: a node's reply is unknown (failed, or still out)
	// The attempt's chain, and per node its rollback's release where the
	// attempt set the key (nil elsewhere; see undone, rollingOn, settle).
	ch   *chain
	undo []*step
	// trail is, per node, the rollback's release where the attempt's
	// acquire had not returned when the attempt was decided and may
	// have followed an earlier attempt's release there
	// (command.behind): it sets the key once that release lands, and
	// a call that ends waits for this release too (settle). Nil
	// elsewhere; a straggler that followed nothing is not waited for,
	// as a TryLock's is not.
	trail []*step
	sent  *inflight // waiting: the attempt's commands that may register the call (see Client.leaveWaiters)
}

// unsettled returns a new slice of the outcomes of os whose rollback has
// not released every key its attempt set yet (settle would wait). (New:
// the calls of a round still on their way read os, command.behind.)
func unsettled(os []*outcome) []*outcome {
	var out []*outcome
	for _, o := range os {
		if o.rolls() {
			out = append(out, o)
		}
	}
	return out
}

// rolls reports whether o's rollback has a release still on its way
// that settle waits for (none for an attempt without a chain).
func (o *outcome) rolls() bool {
	return pendingIn(o.ch, o.undo) || pendingIn(o.ch, o.trail)
}

// pendingIn reports whether a step of steps (nil entries aside) has not
// returned yet.
func pendingIn(ch *chain, steps []*step) bool {
	for _, s := range steps {
		if s != nil && !ch.landed(s) {
			return true
		}
	}
	return false
}

// followedOn reports whether an attempt of os may have set the key on
// node i, or may still (see outcome.trail): a later attempt's acquire
// there may have followed its release.
func followedOn(os []*outcome, i int) bool {
	for _, o := range os {
		if o.undo != nil && o.undo[i] != nil || o.trail != nil && o.trail[i] != nil {
			return true
		}
	}
	return false
}

// onKey returns the outcomes of os (each with a chain, see rolls) whose
// attempt was at key: os itself when all were, as a Lock call's are,
// else a new slice (a semaphore's slots).
func onKey(os []*outcome, key string) []*outcome {
	other := func(o *outcome) bool { return o.ch.k.Name != key }
	if !slices.ContainsFunc(os, other) {
		return os
	}
	return slices.DeleteFunc(slices.Clone(os), other)
}

// rollingOn returns the rollback's release on node i where the attempt
// set the key and the release has not returned yet (nil: none).
func (o *outcome) rollingOn(i int) *step {
	if o.undo == nil || o.undo[i] == nil || o.ch.landed(o.undo[i]) {
		return nil
	}
	return o.undo[i]
}

// settle waits until the rollback has released the keys the attempt set
// (see Client.rollback), and those it may still set where its acquire
// followed an earlier attempt's release (trail): a call that ends, or
// makes no more attempts, leaves no key of its attempts behind when it
// returns.
func (o *outcome) settle() {
	if o == nil {
		return
	}
	for _, steps := range [2][]*step{o.undo, o.trail} {
		for _, s := range steps {
			if s != nil {
				o.ch.await(s, nil)
			}
		}
	}
}

// failure is the outcome of an attempt that failed with qe alone.
func failure(qe *QuorumError) *outcome { return &outcome{err: qe} }

// undone reports whether a waiting attempt's rollback has freed every key
// the attempt set: its release has returned Done on each such node (the
// attempt's token is gone there; the script queued the client again too,
// see Client.rollback). Until then the call counts no grant (see
// Client.granted): a holder's release that comes to such a node while it
// still holds the attempt's token hands nothing on, and the requeue that
// follows would leave the client queued there behind a lock held by
// grants. A release that failed, and is retried without the requeue,
// keeps it false.
func (o *outcome) undone() bool {
	for _, s := range o.undo {
		if s != nil && !o.ch.stepSet(s) {
			return false
		}
	}
	return true
}

// try is attempt's work, within a begun operation.
func (c *Client) try(ctx context.Context, key string, cfg *config, wait, impatient bool, p asks, token string, behind []*outcome) (*Lock, *outcome) {
	if ctx.Err() != nil {
		// Nothing is sent for a context that has already ended.
		return nil, failure(notStarted("acquire", key, c, ctx, ErrNotAcquired))
	}
	if token == "" {
		// A fresh token per attempt (see waiter.prepare).
		token = newToken()
	}
	l := newLock(c, cfg.key(c, key, token, p), cfg)
	r := l.ch.send(ctx, command{op: "acquire", ttl: cfg.ttl, fenced: cfg.fenced, wait: wait, behind: behind})
	t := c.await(ctx, r, impatient)
	validity := clock.Validity(cfg.ttl, r.Elapsed(), cfg.driftFactor)
	if t.Reached(c.quorum) && validity > 0 && ctx.Err() == nil {
		if !cfg.confirms() {
			l.grant(r.Started(), 0)
			return l, nil
		}
		qe := c.confirm(ctx, l, r)
		if qe == nil {
			return l, nil
		}
		r.Collect() // acquires that answered since: wait for their release too
		l.ch.wait(c.rollback(ctx, l, r, 0))
		return nil, failure(qe)
	}
	return nil, c.refused(ctx, l, r, cfg, wait, p.ticket, validity)
}

// await waits for the outcome of an acquire's round r (quorum.Round.Wait).
// An impatient attempt, a waiting call's plain one, which does not queue
// the call where it is refused, does not wait out slow nodes once one
// refused: when a majority has answered and the outcome is still open,
// it waits as long again as that took (at least a millisecond), then
// counts as refused (c.refused rolls it back everywhere, late replies
// included), so that the call's next attempt, which queues it, goes. A
// plain attempt held up by lost replies for a node timeout kept its call
// off every queue meanwhile, while calls that came later queued ahead of
// it: the starved waits left in the torture histories of stop 56.
func (c *Client) await(ctx context.Context, r *round, impatient bool) quorum.Count {
	if !impatient {
		return r.Wait(ctx.Done(), c.quorum)
	}
	t := r.WaitAnswered(ctx.Done(), c.quorum, c.quorum)
	if t.Decided(c.quorum) || t.Taken == 0 || ctx.Err() != nil {
		return r.Wait(ctx.Done(), c.quorum)
	}
	grace := c.clk.NewTimer(max(time.Millisecond, r.Elapsed()))
	defer grace.Stop()
	stop, quit := make(chan struct{}), make(chan struct{})
	defer close(quit)
	go func() {
		defer close(stop)
		select {
		case <-grace.C():
		case <-ctx.Done():
		case <-quit:
		}
	}()
	return r.Wait(stop, c.quorum)
}

// refused ends an attempt whose round r did not take l: it rolls r back
// (queueing the client again where a waiting attempt set the key) and
// returns the outcome the wait loop reads: the error with r's replies
// and validity as the round measured it, the refusals, how long until
// the holder's keys expire, and for a waiting attempt its ticket and the
// commands that may still register the call.
func (c *Client) refused(ctx context.Context, l *Lock, r *round, cfg *config, wait bool, ticket int64, validity time.Duration) *outcome {
	key := l.k.Name
	reps := r.Snapshot(nil)
	requeue := int64(0)
	if wait && c.caps.handoff && cfg.requeues() {
		// Nodes where this waiting attempt set the key (it was free and
		// the client headed the queue there) queue the client again as
		// the refusing nodes did, with the largest ticket they gave,
		// also where only a minority queued it: otherwise a call that
		// splits the nodes (queued where the key is held, the key set
		// where it is free) stays queued on that minority at every
		// attempt, and callers that come later pass it on the others
		// (a torture trace, stop 54; and a semaphore's, whose line
		// serves every slot: stop 56). Those nodes had no one else
		// queued when the attempt set the key (its client headed the
		// queue there), so the ticket puts it ahead only of callers
		// that queued there after it. (The call keeps a ticket only
		// from a round that queued it on a majority, see
		// waiter.failed: it carries none to the other nodes.)
		given, _, _ := tickets(reps, c.quorum)
		requeue = max(ticket, given)
	}
	c.rollback(ctx, l, r, requeue)
	qe := newQuorumError("acquire", key, c, reps, ErrNotAcquired, ctx)
	qe.Validity = validity
	out := &outcome{err: qe, ch: &l.ch}
	// Replies that came in during the rollback tell more about when the
	// holder's keys expire; the error reports the round as decided.
	n := r.Collect()
	reps = r.Snapshot(reps)
	out.perm = refusals(reps)
	decided := c.clk.Now()
	if n.Pending > 0 && (wait || slices.Contains(out.perm, 1)) {
		// Wait for the other nodes' replies (one node timeout at most):
		// a refusal no retry changes tells whether the quorum is out of
		// reach; a waiting attempt sleeps until the holder's keys expire
		// on a majority, which the first replies may overstate (a node
		// still holding a competitor's key that is being rolled back,
		// or a waiter's reservation, reports a TTL of seconds), and the
		// release of such a key is not announced.
		for n.Pending > 0 && ctx.Err() == nil {
			n = r.Wait(ctx.Done(), n.Done+n.Pending)
		}
		reps = r.Snapshot(reps)
		out.perm = refusals(reps)
	}
	if out.freeIn = freeIn(reps, c.quorum); out.freeIn > 0 {
		// The TTLs count from the replies; the wait for the last ones
		// has used part of them.
		out.freeIn = max(time.Millisecond, out.freeIn-c.clk.Since(decided))
	}
	for i, rep := range reps {
		if rep.Err == nil && rep.Result.Status == node.Done {
			if out.undo == nil {
				out.undo = make([]*step, len(reps))
			}
			out.undo[i] = &l.ch.tail[i] // the rollback's release there
		} else if !rep.Answered() && followedOn(r.cmd.behind, i) {
			if out.trail == nil {
				out.trail = make([]*step, len(reps))
			}
			out.trail[i] = &l.ch.tail[i]
		}
	}
	out.counter, out.passed = counters(reps, l.k.GrantFence)
	if wait {
		out.ticket, out.queued, out.split = tickets(reps, c.quorum)
		out.started = r.Started()
		for _, rep := range reps {
			out.lost = out.lost || (rep.Err != nil || rep.Result.Status == node.Unknown) && !unsent(rep.Err)
		}
		out.sent = &inflight{ch: &l.ch, acq: r.next, rb: l.ch.tail, requeues: requeue != 0}
	}
	return out
}

// counters reads a fenced attempt's replies: the largest fence counter
// they report (refusals report the key's counter; where the attempt set
// the key, rolled back now, it raised the counter itself), and how many
// had reached the fence the attempt proposed (0: none proposed).
func counters(reps []quorum.Reply, proposed int64) (top int64, passed int) {
	for _, rep := range reps {
		if rep.Err == nil && rep.Result.Status != node.Unknown {
			top = max(top, rep.Result.Fence)
			if proposed > 0 && rep.Result.Fence >= proposed {
				passed++
			}
		}
	}
	return top, passed
}

// confirm is a fenced acquire's second round, after a majority granted in
// round r: the fence is the largest counter the granting nodes returned,
// and it is a grant only once a majority has raised its counter to the
// fence while still holding the token, within the validity. Then any later
// grant, whose majority shares a node with this one, reads a counter of at
// least the fence there (its SET NX succeeded after our key was gone) and
// gets a larger one. Without this round a later majority could miss the
// node that returned the maximum, and its fence would go backwards.
//
// On failure the caller rolls the attempt back.
func (c *Client) confirm(ctx context.Context, l *Lock, r *round) *QuorumError {
	var fence int64
	for i := range r.next {
		rep := r.Reply(i)
		if rep.Err == nil && rep.Result.Status == node.Done {
			fence = max(fence, rep.Result.Fence)
		}
	}
	cmd := command{op: "confirm", ttl: l.ttl, fence: fence}
	if l.mode.announce != nil {
		// A campaign's confirm keeps the leader's record too
		// (node.Announcer.ConfirmAnnounce): the term is the fence.
		cmd.text = record(fence, *l.mode.announce)
	}
	r2 := l.ch.send(ctx, cmd)
	t := r2.Wait(ctx.Done(), c.quorum)
	validity := clock.Validity(l.ttl, c.clk.Since(r.Started()), l.drift)
	if t.Reached(c.quorum) && validity > 0 && ctx.Err() == nil {
		l.grant(r.Started(), fence)
		return nil
	}
	qe := newQuorumError("confirm", l.k.Name, c, r2.Snapshot(nil), ErrNotAcquired, ctx)
	qe.Validity = validity
	return qe
}

// rollback releases a failed attempt's token through its chain: on every
// node but those that answered Taken, and on nodes still silent once their
// SET returns (a lost or late reply may hide a SET that took effect). It
// returns the nodes that answered Done, whose release the caller awaits
// (chain.wait) before it returns, so that a competitor is not kept
// waiting by a call that has ended; the others finish in the background
// (QuorumError.undone reads how they ended, in the chain's tail). A
// waiting call's next attempt does not wait for them (see
// Client.attempt).
// After a failed acquire round, a silent node's release goes at once,
// ahead of its reply (see round.ahead).
// requeue (0: none) is the ticket a waiting attempt's rollback queues the
// client with again where it frees the key (node.Key.Requeue).
func (c *Client) rollback(ctx context.Context, l *Lock, r *round, requeue int64) []int {
	var granted []int
	for i := range r.next {
		if r.Reply(i).Result.Status == node.Done {
			granted = append(granted, i)
		}
	}
	l.ch.send(ctx, command{op: "release", requeue: requeue, ttl: l.ttl, fenced: l.mode.fenced})
	return granted
}

// tickets reads a waiting attempt's replies: the largest ticket a node
// queued the caller with, whether at least need nodes queued it, and
// whether some node queued it with a smaller ticket (the nodes do not
// order it the same way yet).
func tickets(replies []quorum.Reply, need int) (ticket int64, queued, split bool) {
	for _, r := range replies {
		if r.Err == nil && r.Result.Ticket > 0 {
			split = split || (ticket > 0 && r.Result.Ticket != ticket)
			ticket = max(ticket, r.Result.Ticket)
			need--
		}
	}
	return ticket, need <= 0, split
}

// hopeless reports whether so many nodes refused for reasons a retry
// cannot change (node.Permanent: credentials or rights, no scripts, a key
// of the wrong type, a read-only or full node, TLS, not Redis) that the
// quorum is out of reach. perm is what each node's last reply said, over
// the attempts so far (see refusals): an attempt decided before a node's
// refusal came in still counts the refusal it made the attempt before.
func (c *Client) hopeless(perm []int8) bool {
	bad := 0
	for _, p := range perm {
		if p > 0 {
			bad++
		}
	}
	return len(c.nodes)-bad < c.quorum
}

// refusals says, per node, what its reply in replies was: 1 a refusal a
// retry cannot change, -1 any other reply, 0 none yet.
func refusals(replies []quorum.Reply) []int8 {
	out := make([]int8, len(replies))
	for i, r := range replies {
		switch {
		case node.Permanent(r.Err):
			out[i] = 1
		case r.Err != nil || r.Result.Status != node.Unknown:
			out[i] = -1
		}
	}
	return out
}

// mergeRefusals updates perm with an attempt's refusals: a node's newer
// reply replaces its older one; no reply keeps it.
func mergeRefusals(perm, attempt []int8) []int8 {
	if attempt == nil {
		return perm
	}
	if perm == nil {
		perm = make([]int8, len(attempt))
	}
	for i, v := range attempt {
		if v != 0 {
			perm[i] = v
		}
	}
	return perm
}
