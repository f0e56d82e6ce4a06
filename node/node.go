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
	"strings"
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

// Result is a node's answer to one lock command. It is a struct, not a
// bare Status, so that a command can report more (a fencing value, the
// holder's remaining TTL) without changing the Node interface.
type Result struct {
	// Status is the outcome; Unknown exactly when the call returned an
	// error.
	Status Status
	// TTL is, for an Acquire answered Taken, how long the holder's key
	// has left on this node, when the node tells (0 when it does not, or
	// the key has no expiry). A waiter uses it to wake when the holder's
	// keys expire instead of polling.
	TTL time.Duration
	// Fence is, for a fenced acquire (Fencer.AcquireFenced) answered
	// Done, the key's fence counter after the acquire raised it; for a
	// waiting one answered Taken, the counter as it stands (0: none);
	// 0 otherwise.
	Fence int64
	// Ticket is, for a queued Acquire answered Taken, the waiter's
	// place in the key's queue on this node (see Handoffer); 0 when the
	// node keeps no queue.
	Ticket int64
}

// Key names one lock as the nodes see it: the Redis key and the random
// token that proves ownership. Make one with NewKey, which boxes both
// once for drivers whose clients take []any arguments, so that a lock's
// calls to N nodes do not box them again for every call; a Key written
// as a literal works the same, boxing on each call.
type Key struct {
	Name  string // the Redis key
	Token string // the random value stored under it
	// Owner tags the client that made the key, the same for all its
	// locks ("" for none): an Acquire asked for the holder's TTL that
	// finds the key taken registers the owner as waiting (see
	// Handoffer), so that a holder hands the lock on within its own
	// client only while no other client waits.
	Owner string
	// Ticket is a queued waiter's place in the key's queue, the same on
	// every node: the largest Result.Ticket its earlier attempts were
	// given (0 before the first). See Handoffer.
	Ticket int64
	// Queue is the key of the queue Owner waits in and that a release
	// hands the key on from; "" for WaitersKey(Name). Keys that share a
	// queue (a semaphore's slots) form one line of waiters: each release
	// reserves its key for the head that has no key reserved yet. Set it
	// with InQueue.
	Queue string
	// Grant ("": none) is what a waiting Acquire asks a release that
	// hands the key on to Owner to set the key to, for GrantTTL of the
	// Acquire's TTL, instead of reserving it: the waiter then holds the
	// key on that node with Grant as its token, told by an announcement
	// on ReservedKey(Name, Owner) whose message is GrantMessage. Only a
	// key's own queue (Queue "") grants; a Leave with Grant hands on a
	// key granted to it. Make it with GrantValue.
	Grant string
	// GrantFence (0: none) makes Grant a fenced grant, for a waiting
	// Fencer.AcquireFenced: the fence the waiter proposes, above every
	// counter its last refusals reported. A release grants the key
	// only where the key's counter exists and is below it, raising the
	// counter to it in the same step, so that the nodes that grant all
	// agree on the fence; elsewhere it reserves the key. A fenced
	// waiter's Grant without a proposal only names its call: no node
	// grants it. Its rollback's requeue asks for no grant: release.lua
	// would register one without a fence.
	GrantFence int64
	// GrantRecord is, with GrantFence, the record a fenced grant keeps
	// beside the key (AnnounceKey: an election's leader, see
	// Announcer), for the lock's TTL; "": none.
	GrantRecord string
	// Requeue marks the rollback of a waiting Acquire: a Release without
	// announce that frees the key queues Owner again with Ticket, asking
	// for Grant for WaiterLease (see Handoffer; a caller whose GrantTTL
	// is shorter sends no Grant). A key's own queue and a semaphore's
	// line (Queue) alike.
	Requeue bool
	// Tomb (0: none) asks a Release (or ReleaseShared) to leave a
	// tombstone of Token, TombKey(Name, Token), for Tomb, whether it
	// finds Token under the key or not: a command of the caller on the node that may set the
	// key to Token (an Acquire, a re-seed, or a Transfer to it) timed
	// out after it was sent and may still run there, after this release,
	// and no release would follow it. See TombKey for what a tombstone
	// stops.
	Tomb time.Duration
	// Record marks a key that keeps a record beside it (AnnounceKey(Name):
	// an election's, see Announcer): a Release removes the record with
	// the key, where it is Token's, so that it never outlives the key.
	Record bool

	name, token any // Name and Token boxed by NewKey; nil in a literal
	waiters     any // WaitersKey(Name) boxed by NewKey; nil in a literal
	alone       any // SharedValue + ":" + Token boxed by NewSharedKey; nil otherwise
	readers     any // ReadersKey(Name) boxed by NewSharedKey; nil otherwise
}

// Prefixed returns k with prefix before every key name it gives a node
// (Name, and Queue where set), which every name a script derives from
// them then carries too: a lock's copy on a Redis Cluster keeps its keys
// under the hash tag of its slot, prefix "{tag}" (FollowSlot's copies,
// and the go-redis module's). The names NewKey boxed are of the
// unprefixed names and are dropped (a driver that boxes boxes the new
// ones); the token stays as boxed.
func (k *Key) Prefixed(prefix string) Key {
	kc := *k
	kc.Name = prefix + k.Name
	if kc.Queue != "" {
		kc.Queue = prefix + kc.Queue
	}
	kc.name, kc.waiters, kc.readers = nil, nil, nil
	return kc
}

// NewSharedKey returns the Key of name and token for a reader (Sharer):
// NewKey, plus the values a reader's commands send to every node, made
// once.
func NewSharedKey(name, token string) Key {
	k := NewKey(name, token)
	k.alone, k.readers = SharedValue+":"+token, ReadersKey(name)
	return k
}

// aloneValue returns the value of the key held by k's reader alone
// (SharedValue + ":" + Token), as a string and boxed.
func (k *Key) aloneValue() (string, any) {
	if k.alone == nil {
		v := SharedValue + ":" + k.Token
		return v, v
	}
	return k.alone.(string), k.alone
}

// boxedReaders returns ReadersKey(k.Name) as an interface value.
func (k *Key) boxedReaders() any {
	if k.readers == nil {
		return ReadersKey(k.Name)
	}
	return k.readers
}

// NewKey returns the Key of name and token.
func NewKey(name, token string) Key {
	return Key{Name: name, Token: token, name: name, token: token, waiters: WaitersKey(name)}
}

// InQueue returns k waiting in, and handing on from, the queue under
// the key queue instead of WaitersKey(k.Name) (see Key.Queue).
func (k Key) InQueue(queue string) Key {
	k.Queue, k.waiters = queue, queue
	return k
}

// Waiters returns the key of k's queue: Queue, or WaitersKey(Name).
func (k *Key) Waiters() string {
	if k.Queue != "" {
		return k.Queue
	}
	return WaitersKey(k.Name)
}

// boxedWaiters returns k.Waiters() as an interface value: the one
// NewKey or InQueue made (a lock's every release sends it to every
// node), or a new one for a Key written as a literal.
func (k *Key) boxedWaiters() any {
	if k.waiters == nil {
		return k.Waiters()
	}
	return k.waiters
}

// Boxed returns Name and Token as interface values: those NewKey made, or
// new ones for a Key written as a literal.
func (k *Key) Boxed() (name, token any) {
	switch {
	case k.name != nil:
		return k.name, k.token
	case k.token != nil: // a copy under other names (FollowSlot's)
		return k.Name, k.token
	}
	return k.Name, k.Token
}

// Node is one independent Redis master seen as a lock store: the minimum
// the Redlock algorithm calls. Other capabilities are optional interfaces
// (Inspector, io.Closer), checked with a type assertion.
//
// Every method is safe for concurrent use and returns within the deadline
// of ctx (plus scheduling noise): implementations must bound connection
// set-up, writing and reading by it. A *Key argument is read only: a method
// must not change it, nor keep it once it returns (it is passed by
// pointer because a client calls a node from a goroutine per call, and a
// Key copied into every frame on the way would outgrow the stack the
// goroutine starts with). On error the Result's Status is
// Unknown and the caller cannot know whether the command took effect.
// Errors should wrap one of this package's kinds (ErrTimeout,
// ErrUnreachable, ErrAuth, ErrTLS, ErrProtocol, ErrClosed) so that a
// client can tell a node that is down from one that refuses, and must
// never contain a password.
type Node interface {
	// Addr identifies the node, normally host:port. Two Nodes with the
	// same Addr are the same master and must not both be in one client.
	// It never contains credentials.
	Addr() string

	// Acquire runs SET k.Name k.Token NX PX ttl: Done if the key was
	// set, Taken if it already existed. A key that already holds k.Token
	// is answered Done and left as it is: a token is fresh for every
	// attempt, so that is the same command run twice (a driver's client
	// retried it after a lost reply), and the first run set the TTL.
	// A script never sets the key to a token that has a tombstone
	// (TombKey): it answers Taken (where the key is free, with a wait
	// of a waiter's lease at most).
	//
	// holderTTL asks a Taken answer to report the holder's remaining TTL
	// in Result.TTL, which may cost the node more (a script instead of a
	// plain SET): a caller that will wait for the key asks, one that will
	// not (a first attempt, TryLock) does not. Without it Result.TTL may
	// be 0 (unknown).
	Acquire(ctx context.Context, k *Key, ttl time.Duration, holderTTL bool) (Result, error)

	// Extend makes the key live at least ttl more if it still holds
	// k.Token, never shortening it: Done, Taken (another token) or
	// Absent. Never shortening keeps a late, stale extend harmless.
	Extend(ctx context.Context, k *Key, ttl time.Duration) (Result, error)

	// Release deletes the key if it still holds k.Token: Done, Taken or
	// Absent. With k.Tomb it leaves TombKey(k.Name, k.Token) for k.Tomb
	// (see TombKey). With announce, a delete is published on
	// ReleaseChannel(k.Name) in the same step, so that waiters wake at
	// once (a failed publish must not fail the release). A client
	// announces an Unlock, not the rollback of a failed attempt: waking
	// every waiter for keys that never held a majority would have
	// competing clients wake each other in a loop. A Handoffer's
	// announced release reserves the key for the head of its queue
	// instead of deleting it, where anyone is queued, and publishes
	// nothing where no one is (see Handoffer).
	Release(ctx context.Context, k *Key, announce bool) (Result, error)
}

// TombKey is the key of the tombstone of token for lock key: key +
// ":dead:" + token, left by a Release (or ReleaseShared) with Key.Tomb.
// While it lives, no Acquire by a script (one with holderTTL; every
// Acquire of a driver that sends no plain SET), no Transfer and no
// AcquireShared by a script sets key to token or adds token to its
// readers: the command that would is a late run of
// an attempt already rolled back, and the key it set would hold a token
// nobody releases, blocking the lock for a TTL. A plain SET NX (Acquire
// without holderTTL, on a driver that sends one) cannot look: the
// client covers that case by sending its release again (see
// redlock's watched releases). It lives beside the lock key, so an ACL
// key pattern that covers one covers the other, and expires by itself.
//
// A tombstone is for a command that runs late: nothing in TCP or Redis
// bounds how late. A timed-out command is already in the socket when
// the client gives up (closing the connection does not take it back),
// and a paused or starved server runs it whenever it reads it. The
// caller chooses Tomb, and renews it while it cares (redlock: until the
// key that command could set would have expired, the TTL and two node
// timeouts after it was sent); a command that runs after the last
// tombstone has gone sets a key that blocks the lock for one TTL, as a
// holder that died would.
func TombKey(key, token string) string { return key + ":dead:" + token }

// ReleaseChannel is the pub/sub channel on which a release of key is
// announced: key + ":released", with an empty message, when the key was
// deleted. A release that hands the key on to a waiter (see Handoffer)
// is announced on ReleaseChannel(ReservedKey(key, owner)) instead, with
// the waiter's Owner tag as the message, so that only the client that
// waits there hears it (it watches ReservedKey(key, owner) besides key).
// A user's ACL must allow these channels (a channel pattern that matches
// the lock keys' own pattern, e.g. &lk:* for keys ~lk:*) for waiters to
// be woken; without it they poll.
func ReleaseChannel(key string) string { return key + ":released" }

// LeaveAll is the Key.Grant of a Leave that takes client k.Owner out of
// k.Name's queue for good, whichever of its calls its entry stands for:
// the entry goes, and a key reserved for k.Owner or granted to any call
// of k.Owner (a value GrantValue(k.Owner, ...)) is handed on to the next
// head. A client sends it when it closes, where no lock of its own holds
// the key by a grant: a registration that a command of a call made
// after that call's Leave (it ran late) then blocks no one until its
// lease ends, nor does a grant made to it.
const LeaveAll = "*"

// GrantValue returns the Key.Grant of a waiter of client owner: "~" +
// owner + ":" + id, id unique to the waiting call (a token), so that no
// attempt's token and no other waiter's grant equals it.
func GrantValue(owner, id string) string { return "~" + owner + ":" + id }

// GrantTTL is how long a node's grant lasts for a waiting Acquire with
// TTL ttl (Key.Grant): ttl, or WaiterLease if that is less, so that a
// grant to a waiter that has died blocks the key for a lease at most, as
// its place in the queue would have. A waiter that holds the lock by grants counts
// its validity for that long from its last attempt's start, and extends
// to its TTL if it still holds the lock half-way through that. Drivers send it with the grant (acquire.lua's ARGV[7]).
func GrantTTL(ttl time.Duration) time.Duration { return min(ttl, WaiterLease) }

// GrantMessage is the message that announces grant on the waiter's
// channel (ReservedKey): grant + ":" + token, the token of the waiting
// Acquire whose registration the node granted (the last one it ran), so
// that a waiter counts only the grants that came after its last attempt.
func GrantMessage(grant, token string) string { return grant + ":" + token }

// Wakes reports whether a release message msg wakes a watch for owner
// (see Watcher): a watch for no one wakes for every message, any other
// for the messages that name it, and for those that name no one unless
// it watches for a grant message (GrantMessage: owner begins with "~"),
// which only that message wakes.
func Wakes(owner, msg string) bool {
	switch {
	case owner == "", owner == msg:
		return true
	case msg == "":
		return !strings.HasPrefix(owner, "~")
	}
	return false
}

// ReservedKey is key + ":" + owner: not a key any node holds, but the
// name whose ReleaseChannel announces that key was reserved (the message
// is owner) or granted (a GrantMessage) to the waiter owner (see
// ReleaseChannel).
func ReservedKey(key, owner string) string { return key + ":" + owner }
