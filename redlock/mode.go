package redlock

import "github.com/quorumlock/redlock/node"

// mode is the kind of hold a call asks for: a writer's or a reader's,
// fenced or not, of a lock's key or of one of a semaphore's slots. It is
// part of the call's config. What a kind of hold may do (take turns,
// be handed on, be granted, be requeued) is asked here, by name, and
// nowhere else; what the nodes can do is asked apart (Client.caps). (A
// lock's chain sends node.Sharer's commands for a read hold: its
// chain.shared, a copy, picks them.)
type mode struct {
	shared bool   // a read hold (RLock): node.Sharer's commands, under a reader's tag (reader)
	fenced bool   // fencing tokens (WithFencing): node.Fencer's acquire, then a confirm round
	local  string // the client queue an Unlock hands the lock to: a semaphore's (Semaphore.local); "": the key's
	queue  string // the nodes' queue its waiters wait in (node.Key.Queue): a semaphore's (Semaphore.queue); "": the key's
	reader string // a waiting RLock call's tag on the nodes (Client.readerCall); "": not named yet
	// announce is a campaign's value (election.go): its fenced attempt
	// announces it with the confirm, beside the key; nil: not a campaign.
	announce *string
}

// takesTurns reports whether a waiting call waits its turn among the
// client's calls for the same key (its local queue, see Client.join):
// writers do; readers hold together and do not.
func (m mode) takesTurns() bool { return !m.shared }

// handsOn reports whether an Unlock may hand the lock straight to the
// client's next waiter (handoff.go): not a reader's (readers do not take
// turns), nor a fenced lock's (its fence must come from an acquire).
func (m mode) handsOn() bool { return !m.shared && !m.fenced }

// reservable reports whether the nodes may reserve a key for a waiting
// call of this kind by name, and announce it on node.ReservedKey: a
// writer's (a lock's or a semaphore's); readers are let in together.
func (m mode) reservable() bool { return !m.shared }

// ownLine reports whether the call's waiters queue in the key's own line
// on the nodes (node.WaitersKey): a lock's writers, fenced or not. Not a
// semaphore's line (node.Key.Queue), which serves several keys, nor
// readers, who queue under their own tag.
func (m mode) ownLine() bool { return !m.shared && m.queue == "" }

// requeues reports whether a rollback of a waiting attempt that set the
// key queues the call again there (node.Key.Requeue): a writer's, in a
// lock's own line or a semaphore's (an acquire that sets the key drops
// its caller from the line, and a call that stays queued on a minority
// is passed on the other nodes by every caller after it). Not readers,
// who queue under their own tag.
func (m mode) requeues() bool { return !m.shared }

// grants reports whether the nodes may grant the key to a waiting call
// by name (node.Key.Grant): a writer in the key's own line. A fenced
// one's grant carries the fence it proposes (see asks).
func (m mode) grants() bool { return m.ownLine() }

// confirms reports whether an acquire that reached a majority confirms
// its fence in a second round before it holds (Client.confirm).
func (m mode) confirms() bool { return m.fenced }

// owner returns the tag under which c's calls of this kind wait and hold
// on the nodes: the client's (its writers take turns, one waits on the
// nodes at a time), or a reader call's own (readers do not take turns:
// several calls of one client wait at once, each in its own place).
func (m mode) owner(c *Client) string {
	if m.shared {
		if m.reader == "" {
			return c.caps.rtag
		}
		return m.reader
	}
	return c.caps.tag
}

// asks is what a waiting attempt asks of the nodes' queue: its ticket,
// the grant it asks for, and for a fenced call the fence it proposes
// (node.Key.GrantFence; 0: none yet, and then no node grants it).
type asks struct {
	ticket int64
	grant  string
	fence  int64
}

// key is the node.Key of a call of this kind on key with token: its
// owner, and what it asks of its queue (p). A fenced call's grant is
// given only with a proposal (without one, it names the call), and a
// campaign's grant keeps its record with the proposed term.
func (m mode) key(c *Client, key, token string, p asks) node.Key {
	var k node.Key
	if m.shared {
		k = node.NewSharedKey(key, token) // and its readers' keys
	} else {
		k = node.NewKey(key, token)
	}
	k.Owner, k.Ticket, k.Grant = m.owner(c), p.ticket, p.grant
	if m.fenced && p.grant != "" && p.fence > 0 {
		if k.GrantFence = p.fence; m.announce != nil {
			k.GrantRecord = record(p.fence, *m.announce)
		}
	}
	k.Record = m.announce != nil // a campaign's release removes its record
	if m.queue != "" {
		k = k.InQueue(m.queue)
	}
	return k
}
