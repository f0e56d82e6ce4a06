// Package node talks to one Redis master on behalf of a Redlock client.
//
// A Node offers only the operations the lock algorithm needs: acquire
// (SET NX PX), extend and release (token-checking Lua scripts) and inspect.
// Every call takes a context whose deadline bounds the whole call: getting
// a connection, dialling, writing and reading. A node that accepts a
// connection and never answers costs at most that deadline.
//
// Redis is the implementation backed by github.com/gomodule/redigo; it is
// the only place in this module that imports a Redis client.
package node

import (
	"context"
	"time"
)

// Status is a node's answer to one lock operation.
type Status uint8

const (
	// Unknown means there is no answer: the call failed or has not
	// returned yet. A Node returns it together with a non-nil error.
	Unknown Status = iota
	// Done means the operation took effect: the key was set, extended or
	// deleted under the caller's token.
	Done
	// Taken means the key exists and holds another token; nothing changed.
	Taken
	// Absent means the key does not exist (expired, released or never
	// set); nothing changed. Acquire never returns it.
	Absent
)

// String returns the status in lower case, as used in errors and logs.
func (s Status) String() string {
	switch s {
	case Done:
		return "done"
	case Taken:
		return "taken"
	case Absent:
		return "absent"
	default:
		return "unknown"
	}
}

// Info is what Inspect reports about one key on one node.
type Info struct {
	// Token is the value stored under the key, "" when the key is absent.
	Token string
	// TTL is the key's remaining time to live as the node sees it; 0 when
	// the key is absent, negative (-1 ms) when the key has no expiry.
	TTL time.Duration
}

// Key is one lock as every node of a round sees it: the key, the token
// that owns it, and the TTL it is taken with. A client builds one per lock
// with NewKey and hands the same *Key to every node; nodes only read it.
// NewKey also boxes the command arguments once, so that a round over N
// nodes does not allocate them N times on the hot path.
type Key struct {
	Name  string        // the Redis key
	Token string        // the random value that proves ownership
	TTL   time.Duration // the TTL Acquire is normally called with

	// Prepared arguments, shared read-only by every call that uses them;
	// arrays, so that they live in the Key's own allocation. Empty in a
	// Key not made by NewKey (see prepared).
	set     [5]any // SET: name, token, "NX", "PX", TTL in ms
	release [4]any // EVALSHA: release hash, 1, name, token
}

// prepared reports whether NewKey filled the prepared arguments.
func (k *Key) prepared() bool { return k.set[0] != nil }

// NewKey returns the Key for name owned by token, taken with ttl.
func NewKey(name, token string, ttl time.Duration) *Key {
	k := &Key{Name: name, Token: token, TTL: ttl}
	var n, t any = name, token
	k.set = [5]any{n, t, "NX", "PX", ttl.Milliseconds()}
	k.release = [4]any{releaseScript.hash, 1, n, t}
	return k
}

// Node is one independent Redis master seen as a lock store.
//
// Every method is safe for concurrent use and returns within the deadline
// of ctx (plus scheduling noise): implementations must bound connection
// set-up, writing and reading by it. On error the Status is Unknown and the
// caller cannot know whether the command took effect.
type Node interface {
	// Addr identifies the node, normally host:port. Two Nodes with the
	// same Addr are the same master and must not both be in one client.
	// It never contains credentials.
	Addr() string

	// Acquire runs SET k.Name k.Token NX PX ttl: Done if the key was
	// set, Taken if it already existed. ttl is normally k.TTL.
	Acquire(ctx context.Context, k *Key, ttl time.Duration) (Status, error)

	// Extend makes the key live at least ttl more if it still holds
	// k.Token, never shortening it: Done, Taken (another token) or
	// Absent. Never shortening keeps a late, stale extend harmless.
	Extend(ctx context.Context, k *Key, ttl time.Duration) (Status, error)

	// Release deletes the key if it still holds k.Token: Done, Taken or
	// Absent.
	Release(ctx context.Context, k *Key) (Status, error)

	// Inspect reports the key's token and remaining TTL, for status
	// displays and tests.
	Inspect(ctx context.Context, key string) (Info, error)

	// Close releases the node's connections. Calls after Close fail.
	Close() error
}
