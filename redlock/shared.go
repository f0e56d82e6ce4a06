package redlock

import (
	"context"
	"fmt"

	"github.com/quorumlock/redlock/node"
)

// RLock takes key shared, as one of its readers: any number of RLock
// holders at once, none while a Lock holds the key. It waits as Lock
// does (retries, release notifications, WithMaxWait, ctx) until it holds
// the key. Waiting readers and writers queue on the nodes together and
// take turns in the order they came: a writer waiting in Lock stops the
// readers that come after it (those already in keep their holds), so a
// stream of readers cannot starve it, and the readers queued before it
// go in first, so a stream of writers cannot starve them; the readers
// between two writers go in together. A writer that gives up, and
// TryLock, which never waits, stop no one.
//
// The Lock returned is a read hold: Unlock, Extend, KeepAlive, TTL,
// Until, Token and Key mean what they mean for a Lock; the last reader's
// Unlock hands the key to a waiting writer. Fencing orders writers: a
// read hold has no fence (Fence is 0, also on a client that fences by
// default), and WithFencing passed to RLock is ErrInvalid. Every node
// must be a node.Sharer (the redigo and go-redis nodes are); otherwise
// ErrInvalid.
//
// Safety: a reader holds the key on a node while the key there holds
// the marker node.SharedValue and the reader's hold has not ended, or,
// for a reader alone, the marker and its token; a writer while the key
// holds its token. A key holds one value, so a
// node counts for a reader or for a writer, never both, and any two
// majorities share a node: a reader's majority and a writer's majority
// never hold at the same time (within the validity, as for Lock).
func (c *Client) RLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.sharedConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return c.lock(ctx, c.cfg.prefix+key, &cfg, false)
}

// TryRLock makes exactly one attempt to take key shared (see RLock): it
// returns a read hold, or an error wrapping ErrNotAcquired (a
// *QuorumError) when a writer holds or awaits the key on too many nodes.
// A writer that awaits a key that is free (a holder's time ran out) does
// not stop it on a node whose driver tries a plain SET first (the redigo
// node; see node.Sharer).
func (c *Client) TryRLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.sharedConfig(key, opts)
	if err != nil {
		return nil, err
	}
	cfg.retry = NoRetry()
	return c.lock(ctx, c.cfg.prefix+key, &cfg, true)
}

// sharedConfig is lockConfig for a read hold.
func (c *Client) sharedConfig(key string, opts []Option) (config, error) {
	cfg, err := c.lockConfig(key, opts)
	if err != nil {
		return cfg, err
	}
	if cfg.fenced && !c.cfg.fenced {
		return cfg, fmt.Errorf("%w: fencing is for exclusive locks, not RLock", ErrInvalid)
	}
	cfg.fenced = false // a client's default: a read hold is never fenced
	for i, nd := range c.nodes {
		if _, ok := nd.(node.Sharer); !ok {
			return cfg, fmt.Errorf("%w: a shared lock asked for, and node[%d] (%s) cannot hold one", ErrInvalid, i, nd.Addr())
		}
	}
	cfg.shared = true
	return cfg, nil
}

// readerTag is the prefix of the tags under which the waiting readers
// of the client tagged tag queue on the nodes: apart from its writers,
// so that a reader and a writer of one client each have a place, and
// marked as readers (client tags are hex). Close's sweep takes every
// reader of the client out by it (node.LeaveAll).
func readerTag(tag string) string { return "r" + tag }

// readerCall names a waiting RLock call on the nodes: its client's
// reader tag and ":" and a random part. Each reader call waits in a
// place of its own: under one tag for the client, a reader call that
// came after a writer took the ticket of one of its client that came
// before (queue.lua's queue_join gives a known tag its ticket), and
// went in ahead of the writer; a client that kept one read call waiting
// kept a writer out for as long as it went on (the torture histories'
// starved writers). And the first of them to go in took the place of
// the others out with its own.
func (c *Client) readerCall() string { return c.caps.rtag + ":" + newToken()[:12] }

// Shared reports whether l is a read hold (RLock, TryRLock).
func (l *Lock) Shared() bool { return l != nil && l.mode.shared }
