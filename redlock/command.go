package redlock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/quorumlock/redlock/node"
)

// What a round does (command), and what it sends to one node: the node
// command for the round's operation (do, doRare), or none where an
// earlier answer stands for it (passes); and the tombstone that a
// release after a command that may run late leaves (tomb, runsLate).

// command is what a round does on every node.
type command struct {
	op       string        // "acquire", "confirm", "extend", "reseed", "transfer", "release" or "announce", for errors and hooks
	ttl      time.Duration // acquire, extend: the keys' TTL
	fence    int64         // confirm: the fence to raise the counters to
	fenced   bool          // acquire: raise the fence counter too (node.Fencer); release: a fenced call's requeue, which asks for no grant
	announce bool          // release: tell waiters (Unlock, not a rollback)
	wait     bool          // acquire: ask a Taken node for the holder's TTL
	from     *Lock         // transfer: the lock handed over, and
	fromTail []step        // its last command on each node, which the transfer follows
	freed    []bool        // release: nodes where a transfer already removed the key (nil: none)
	text     string        // announce, and a campaign's confirm: the record kept beside the key (node.Announcer)
	requeue  int64         // release: a waiting attempt's rollback, which queues the client again with this ticket (node.Key.Requeue), its grant if ttl's lasts a lease; 0: none
	behind   []*outcome    // acquire: the call's failed attempts whose rollback it follows where they set the key (see outcome.rollingOn)
}

// do sends the round's command to node i within ctx; prev is the lock's
// previous command there, returned (nil for the first, and for a
// release sent ahead of it, see early): a release after one that may
// still run, or one before it (step.late), leaves a tombstone (see
// Client.tomb). It runs near the bottom of every call's
// goroutine, under the driver's frames: the plain acquire and the
// release are called from here, the rest from doRare, so that the
// goroutine fits the stack it starts with (a stack copied to a larger
// one on every call cost the uncontended cycle a sixth of its CPU).
func (r *round) do(ctx context.Context, i int, prev *step) (node.Result, error) {
	if cmd := &r.cmd; !r.ch.shared {
		switch {
		case cmd.op == "acquire" && !cmd.fenced:
			return r.ch.c.nodes[i].Acquire(ctx, r.ch.k, cmd.ttl, cmd.wait)
		case cmd.op == "release" && cmd.requeue == 0 && (prev == nil || prev.err == nil && !prev.late):
			return r.ch.c.nodes[i].Release(ctx, r.ch.k, cmd.announce)
		}
	}
	return r.doRare(ctx, i, prev)
}

// doRare is do for every other command, and for read holds (see RLock):
// a read hold's acquire (and reseed), extend and release are
// node.Sharer's, and it has no confirm or transfer.
//
//go:noinline
func (r *round) doRare(ctx context.Context, i int, prev *step) (node.Result, error) {
	n, k, cmd := r.ch.c.nodes[i], r.ch.k, &r.cmd
	if r.ch.shared {
		s := n.(node.Sharer)
		switch cmd.op {
		case "acquire", "reseed":
			return s.AcquireShared(ctx, k, cmd.ttl, cmd.wait)
		case "extend":
			return s.ExtendShared(ctx, k, cmd.ttl)
		}
		rk := *k
		if prev != nil && prev.late {
			rk.Tomb = r.ch.c.tomb(i, r.expires)
		}
		return s.ReleaseShared(ctx, &rk, cmd.announce)
	}
	switch cmd.op {
	case "acquire": // fenced
		if !cmd.wait || !r.ch.c.caps.handoff {
			// Only a waiting attempt queues (node.Fencer), on nodes
			// that keep a queue.
			fk := *k
			fk.Owner, fk.Ticket = "", 0
			k = &fk
		}
		return n.(node.Fencer).AcquireFenced(ctx, k, cmd.ttl, counterTTL(cmd.ttl))
	case "confirm":
		if cmd.text != "" {
			return n.(node.Announcer).ConfirmAnnounce(ctx, k, cmd.fence, counterTTL(cmd.ttl), cmd.text, cmd.ttl)
		}
		return n.(node.Fencer).ConfirmFence(ctx, k, cmd.fence, counterTTL(cmd.ttl))
	case "extend":
		return n.Extend(ctx, k, cmd.ttl)
	case "reseed":
		return n.Acquire(ctx, k, cmd.ttl, false)
	case "release": // a waiting attempt's rollback, or one after a command that may run late
		rk := *k
		if prev != nil && prev.late {
			rk.Tomb = r.ch.c.tomb(i, r.expires)
		}
		if cmd.requeue == 0 {
			return n.Release(ctx, &rk, cmd.announce)
		}
		rk.Ticket, rk.Requeue = cmd.requeue, true
		if node.GrantTTL(cmd.ttl) < node.WaiterLease || cmd.fenced {
			// The registration's grant lasts a lease (see
			// node.Key.Requeue), longer than this TTL's: a
			// reservation. So for a fenced call: release.lua would
			// register its grant without a fence, a grant that
			// raises no counter.
			rk.Grant = ""
		}
		return n.Release(ctx, &rk, false)
	case "announce":
		return n.(node.Announcer).Announce(ctx, k, cmd.text, cmd.ttl)
	}
	return n.(node.Handoffer).Transfer(ctx, &cmd.from.k, k, cmd.ttl) // "transfer"
}

// passes reports whether the round's command on a node whose previous
// command (returned) is prev is not sent, the previous answer standing
// for it:
//   - confirm: only the nodes whose acquire answered Done confirm, so
//     that only confirmations count towards the majority;
//   - reseed: only the nodes that answered the extend "absent" get the
//     key again;
//   - release: nothing to release where the previous command proved the
//     key is not ours (Taken or Absent: a SET NX's refusal, or a script
//     that found another token or none), but for a lock held by grants,
//     which a node may grant later, or after a command that may still
//     run there (step.late); nor where a transfer of the lock already
//     removed its key (cmd.freed: answered Done).
//
// Such a node is not called: its breaker, timeout estimate and hooks
// hear nothing of it.
func (r *round) passes(i int, prev *step) bool {
	switch r.cmd.op {
	case "confirm":
		return prev.err != nil || prev.res.Status != node.Done
	case "reseed":
		return prev.err != nil || prev.res.Status != node.Absent
	case "release":
		if r.cmd.freed != nil && r.cmd.freed[i] {
			return true
		}
		if strings.HasPrefix(r.ch.k.Token, "~") {
			// A lock held by grants (node.GrantValue): a node that
			// found another holder, or none, may still grant it while
			// the call's registration there asks for it; the release
			// drops that registration (release.lua), so that no grant
			// comes to a lock that is gone.
			return false
		}
		// Not after a command that may still run (step.late): an
		// extend that found another holder, or none, proves nothing
		// of the acquire that timed out before it, which may set the
		// key later; the release is sent, leaves a tombstone, and is
		// watched (see watchRelease).
		return prev != nil && prev.err == nil && !prev.late && (prev.res.Status == node.Taken || prev.res.Status == node.Absent)
	}
	return false
}

// fenceCounterTTL is how long a key's fence counter lives on a node after
// its last grant or confirm (for a lock TTL longer than that, the lock's
// TTL). A counter that expires starts again from the node's clock (see
// node.Fencer), above every fence handed out before as long as the
// nodes' clocks agree to within this time; the TTL only keeps counters of
// lock names no longer used from piling up.
const fenceCounterTTL = 24 * time.Hour

func counterTTL(ttl time.Duration) time.Duration { return max(fenceCounterTTL, ttl) }

// tomb is the node.Key.Tomb of a release on node i after a command that
// may still run late there (runsLate), and whose key would have expired
// by until (a chain's expires: the TTL and two node timeouts after the
// command was sent). Such a release that finds no token of the lock is
// watched until then (see watchRelease), each try renewing the
// tombstone, so it lasts to the next try: the longest wait between
// tries and a node timeout for the try itself, and no longer than
// until. While the client lives, a late script finds one through the
// whole window; once its watch ends (until, Close, the process gone),
// the tombstone is gone within that much, and does not linger as a key
// per rolled-back attempt for a TTL.
func (c *Client) tomb(i int, until time.Time) time.Duration {
	return max(min(until.Sub(c.clk.Now()), watchMax+c.nodeTimeout(i)), time.Millisecond)
}

// runsLate reports whether a node call that failed with err may still
// run on the node: it timed out after it was sent. (A refused dial, an
// error reply or a reset connection ended it; a command never sent, as
// one that waited for a pooled connection, cannot run.)
func runsLate(err error) bool {
	return errors.Is(err, node.ErrTimeout) && !unsent(err) && !errors.Is(err, node.ErrPoolWait)
}
