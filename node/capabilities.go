package node

// The optional capabilities a lock client looks for in a Node (Watcher,
// LateAnswerer, Inspector, Handoffer, Sharer, Fencer), and the names of
// the keys and channels they use beside the lock key.

import (
	"context"
	"time"
)

// Watcher is a Node that can tell a waiter when a key is released there
// (pub/sub on ReleaseChannel). It is optional: a client works with nodes
// that do not offer it, and waits by polling on them.
type Watcher interface {
	// Watch starts watching key's releases on the node (ReleaseChannel):
	// after each one whose message wakes owner (Wakes: one that names
	// owner or no one; owner "": every one) it sends on released without
	// blocking (a full channel means a wake-up is already pending). It
	// never blocks on the network: the subscription is made in the
	// background. A waiter that the key may be reserved or granted for
	// also watches ReservedKey(key, owner), for its tag and for its
	// GrantMessage.
	Watch(key, owner string, released chan<- struct{}) Watch
}

// Watch is one watcher of one key on one node.
type Watch interface {
	// Ready is closed once the node has confirmed the subscription:
	// releases from then on are seen. It stays open while the node
	// cannot be subscribed to.
	Ready() <-chan struct{}
	// Stop ends the watch; nothing is sent on its channel afterwards.
	// It may be called more than once.
	Stop()
}

// LateAnswerer is a Node that tells when a reply last came in after its
// call had given up (the node timeout passed first): such a node is slow,
// not down, and a client's circuit breaker does not count its timeouts
// while late replies keep coming. It is optional.
type LateAnswerer interface {
	// LastLate returns when the last late reply came in, on this
	// process's monotonic clock (compare with time.Since), and its round
	// trip from the start of its call; the zero Time if none has.
	LastLate() (at time.Time, rtt time.Duration)
}

// Mover is a Node whose master can change while it runs: a lock's copy
// on a Redis Cluster (FollowSlot) follows its slot to the master that
// serves it after a resharding or a failover. It is optional; a client
// uses it to see two copies land on one master.
type Mover interface {
	// OnMove sets fn (nil: none), called after each move with the new
	// master's address, on the goroutine of the call or topology read
	// that saw the move. fn must not block.
	OnMove(fn func(addr string))
}

// Info is what Inspect reports about one key on one node.
type Info struct {
	// Token is the value stored under the key, "" when the key is absent.
	Token string
	// TTL is the key's remaining time to live as the node sees it; 0 when
	// the key is absent, negative (-1 ms) when the key has no expiry.
	TTL time.Duration
	// Readers counts the live shared holds when the key is held shared
	// (Token is SharedValue; see Sharer), 0 otherwise.
	Readers int
}

// Inspector is a Node that can report a key's holder, for status displays
// and tests. The lock algorithm never calls it.
type Inspector interface {
	// Inspect reports the key's token and remaining TTL in one atomic
	// read, within ctx's deadline.
	Inspect(ctx context.Context, key string) (Info, error)
}

// AnnounceKey is the key beside lock key where the key's holder keeps
// what it announced (see Announcer): key + ":leader". Its
// ReleaseChannel announces every change, with an empty message.
func AnnounceKey(key string) string { return key + ":leader" }

// Announced is what a node holds of a lock key and of what its holder
// announced (Announcer.InspectAnnounce).
type Announced struct {
	Token string        // the lock key's token; "" when the key is absent
	TTL   time.Duration // the key's remaining TTL; 0 when absent, negative without expiry
	Text  string        // what the holder of Token announced; "" when nothing of Token's is there
}

// Announcer is a Node that keeps, beside a lock key, what the key's
// holder announced: the leader's value and term of package redlock's
// Election. It is optional; an election needs a majority of nodes that
// offer it.
type Announcer interface {
	// Announce keeps text in AnnounceKey(k.Name) for ttl where the key
	// holds k.Token: Done. Taken where it holds another token, Absent
	// where none: nothing changed. A record is read only beside its
	// own token (InspectAnnounce), so one that a holder announced late,
	// after it lost the key, never passes for the next holder's.
	Announce(ctx context.Context, k *Key, text string, ttl time.Duration) (Result, error)
	// ConfirmAnnounce is Fencer.ConfirmFence and Announce in one atomic
	// step: where the key holds k.Token, its counter is raised to at
	// least fence and text kept for ttl (Done); Taken or Absent
	// elsewhere, and nothing changed. A campaign's confirm round sends
	// it, so that a majority holds the leader's record when its term
	// begins, at no round and no command more than a fenced Lock.
	ConfirmAnnounce(ctx context.Context, k *Key, fence int64, counterTTL time.Duration, text string, ttl time.Duration) (Result, error)
	// InspectAnnounce reads the key's token and TTL and its holder's
	// record in one atomic step, within ctx's deadline.
	InspectAnnounce(ctx context.Context, key string) (Announced, error)
}

// WaitersKey is the key under which a node keeps the queue of clients
// waiting for lock key: key + ":waiters", a hash of Key.Owner tags with
// their tickets and lease ends (node/scripts/queue.lua). It lives beside
// the lock key, so an ACL key pattern that covers one covers the other,
// and goes with the last waiter.
func WaitersKey(key string) string { return key + ":waiters" }

// WaiterLease is how long a waiter's place in a key's queue lasts on a
// node after the Acquire that made or renewed it; a waiter renews it with
// each attempt, and one that stops (its process died) stops blocking the
// others when it ends.
const WaiterLease = 2 * time.Second

// Handoffer is a Node that keeps a queue of the clients waiting for a key
// and hands a lock on without letting it go free in between: to the next
// holder of the same client in one command (Transfer), or, when a client
// waits, to the client at the head of the queue (Release with announce
// reserves the key for it).
// It is optional: a client hands over only when every node is one.
//
// The queue: an Acquire with holderTTL (a waiting attempt) of a Key with
// an Owner that does not take the key queues the owner under WaitersKey
// for WaiterLease, with a ticket: Key.Ticket when set, else the next one
// on this node (Result.Ticket tells which). The head of the queue is the
// live waiter with the lowest ticket. While anyone is queued, a free key
// is taken only by the head's waiting attempt, and Release with announce
// sets the key to a reservation for the head (no token: no one holds the
// lock) for what is left of its lease and announces it on the head's own
// channel, ReleaseChannel(ReservedKey(key, head));
// only the head's waiting attempt takes a key reserved for it. Where no
// one is queued, Release deletes the key and publishes nothing, with
// announce too: a client's waiter queues with each waiting attempt, and
// makes one as soon as its watch is ready, so no waiter that could miss
// the release is listening; a waiting Acquire that cannot queue (a
// user without TIME) marks WaitersKey with its ticket counter alone, for
// WaiterLease, which makes the next release announce the delete. A
// queue with no head to hand on to (only
// the releaser's own client, or waiters that may all take the key, as
// readers) gets the delete announced on ReleaseChannel(key); so does a
// release by an ACL user that may not read the queue, whose waiters
// cannot queue either. A head
// whose waiting Acquire asked for a grant (Key.Grant, own queues only)
// is given the key instead: Release with announce sets the key to the
// grant for GrantTTL of that Acquire's TTL, drops the head from the
// queue and
// announces it on the same channel with GrantMessage(grant, token of the
// last Acquire that registered the head there); the head's next waiting
// Acquire takes a key that holds its grant as one reserved for it. In a
// key's own queue a release passes over the releaser's client
// (Key.Owner): its next holder takes the key by Transfer. A rollback
// (Release without announce) that finds anyone queued hands the key on
// in the same way, announced on the head's channel only, but to whoever
// heads the queue, the releaser's client included (its waiting attempt
// is its next): a waiter would otherwise wait for a free key that no
// release announces. A rollback of a waiting Acquire that set the key
// (Key.Requeue; a key's own queue or a semaphore's line) first queues the owner again with
// Key.Ticket (and Key.Grant, for WaiterLease), as the nodes that refused
// that Acquire hold it, and where
// the owner is then the head deletes the key quietly: a node whose key
// is free while another client holds a majority keeps its queue, and
// its order, instead of being taken and rolled back by every waiter. An
// Unlock (Release with announce), or a Transfer that yields to another
// client, that finds the key absent where anyone is queued in its own
// queue hands it on as if it held it: the
// node had fallen out of the majority that holds the lock (its key
// expired, or a grant skipped it), and its waiters would otherwise wait
// there for a key that is free; a free key may be taken by anyone, so
// handing it to the head is as safe as the head's SET NX. A Release or
// Transfer of a lock held by a grant that finds the key not its own
// drops the owner's registration that asks for that grant. A plain
// Acquire (no holderTTL) ignores the queue: it takes a free key, never a
// reserved one. A node that cannot keep the queue (an ACL user without
// TIME or the hash commands) still acquires, in no order; its transfers
// then always release.
//
// Keys may share one queue (Key.Queue: a semaphore's slots, one line of
// waiters for any slot). A reservation is then recorded on the head's
// entry, and each release reserves its key for the head that has none
// yet; a head with a key reserved renews its place without losing it.
// A rollback of such a key is handed on as in a key's own queue, and
// Transfer of such a key transfers within
// the client even when another client is queued: the client bounds those
// chains, and its release then reserves the key for the head. The
// scripts tell such a queue by its name: any other than
// WaitersKey(Name), so a driver passes Key.Waiters() and nothing more.
type Handoffer interface {
	// Transfer sets the key to to.Token with TTL ttl where it holds
	// from.Token, or nothing, or to.Token already (the same command run
	// twice): Done. Where it holds another token: Taken, nothing
	// changed. Where a client other than from.Owner is queued (or the
	// queue cannot be read), it releases from.Token as Release with
	// announce would (reserving the key for the head) and answers
	// Absent, so that handing over within one client never locks other
	// clients out (unless from.Queue is set, see above); where the key
	// is absent there, it hands it to that head all the same, as an
	// Unlock does. Where to.Token has a tombstone (TombKey): Taken,
	// nothing changed. from and to have the same Name, Owner and Queue.
	Transfer(ctx context.Context, from, to *Key, ttl time.Duration) (Result, error)
	// Leave takes k.Owner out of k.Name's queue, and passes a
	// reservation for it, or a key that holds k.Grant, on to the next
	// head, as it does a key of its own queue that is absent where
	// others wait (the rollback of its last attempt may have deleted it
	// quietly, see Key.Requeue): a waiter that gives up leaves nothing
	// behind. A Leave with k.Grant names its call: where k.Owner's
	// entry asks for another grant (the client's next call registered
	// before a late Leave came), the entry and a key reserved for
	// k.Owner stay; only a key that holds k.Grant is handed on. A Leave
	// with Grant LeaveAll is a client's last (see LeaveAll).
	Leave(ctx context.Context, k *Key) error
}

// SharedValue is the value of a lock key while readers hold it shared
// (see Sharer); while one reader alone holds it, SharedValue + ":" + its
// token. No token equals either, so an exclusive acquire, extend or
// release never takes, lengthens or deletes them.
const SharedValue = "!readers"

// ReadersReserved is the value of a lock key that a release handed to
// the readers at the head of its queue (see Handoffer and Sharer): the
// readers queued before the first writer take it together, and no
// writer's acquire, plain SET NX included, takes it; it lasts what is
// left of the head reader's lease, and a Leave of that reader hands it
// on to the next head.
const ReadersReserved = "~r"

// ReadersKey is the key of the readers of lock key: key + ":readers", a
// hash of each reader's token and the end of its hold in the node's time.
func ReadersKey(key string) string { return key + ":readers" }

// Sharer is a Node that can hold a key shared: any number of readers at
// once, and none while a writer (an exclusive holder, Acquire) holds it.
// It is optional; a client asked for a shared lock requires it of every
// node. While readers hold the key, its value is SharedValue and it lives
// as long as the longest-lived of them; ReadersKey(key) lists them. A
// reader alone is held in the value (SharedValue + ":" + its token, the
// key's expiry its hold's), with no ReadersKey: the common case costs a
// SET and no clock read.
type Sharer interface {
	// AcquireShared adds k.Token to the key's readers for ttl: Done,
	// also when it was a reader already (the same command run twice).
	// Taken, with the wait in Result.TTL, when a writer holds the key,
	// it is reserved for one, or a live writer is queued for it before
	// the reader (see Handoffer): a waiting writer stops new readers.
	// With wait, a reader that is not let in queues as k.Owner (which
	// must start with "r": the queue tells readers by it; the redlock
	// client names each reader call, "r" + client tag + ":" + call, and a
	// LeaveAll of "r" + client tag takes out all of them) with
	// k.Ticket, as a waiting Acquire does, and gets its ticket in
	// Result.Ticket; the readers queued before the first writer go in
	// together when the key is free, and a writer queued after them
	// waits for them. Without wait, Result.TTL may be 0 (unknown), as
	// Acquire's without holderTTL: a first try may be a plain SET that
	// takes a free key for a reader alone, and then, like a writer's
	// plain SET, it does not look at the queue: a live writer queued for
	// a free key (a holder's or the head's time ran out; a release
	// reserves the key for the head, ReadersReserved for readers) does
	// not stop it.
	AcquireShared(ctx context.Context, k *Key, ttl time.Duration, wait bool) (Result, error)
	// ExtendShared makes k.Token's hold last at least ttl more, never
	// shortening it: Done, Taken (a writer holds the key) or Absent.
	ExtendShared(ctx context.Context, k *Key, ttl time.Duration) (Result, error)
	// ReleaseShared ends k.Token's hold: Done, Taken or Absent. The last
	// reader out frees the key as Release does, with announce: reserved
	// for the head of its queue or deleted, and announced. With k.Tomb
	// it leaves TombKey(k.Name, k.Token), as Release does, and no
	// AcquireShared by a script adds that token while it lives (a first
	// try's plain SET cannot look, as a writer's cannot).
	ReleaseShared(ctx context.Context, k *Key, announce bool) (Result, error)
}

// FenceKey is the key of the fence counter of lock key: key + ":fence".
// It lives beside the lock key (so an ACL key pattern that covers one
// covers the other) and outlives it (see Fencer).
func FenceKey(key string) string { return key + ":fence" }

// Fencer is a Node that can hand out fencing tokens: numbers that grow
// from one grant of a key to the next. It is optional; a client asked for
// fenced locks requires it of every node.
//
// The counter of a key, FenceKey(key), is seeded from the node's clock:
// an acquire sets it to max(counter + 1, the node's time in microseconds
// since the Unix epoch). A node that lost the counter (a restart without
// persistence, the counter's own expiry) therefore starts again above
// every value it handed out before, unless its clock stepped back by more
// than the time the counter was gone. The counter lives counterTTL after
// its last write, so that users with many lock names do not collect
// counters forever.
type Fencer interface {
	// AcquireFenced is Acquire that, when it sets the key, also raises
	// the key's counter as above in the same atomic step and returns
	// the new value in Result.Fence. On a Handoffer, one with k.Owner
	// set is a waiting attempt: it queues (k.Owner, k.Ticket) and takes
	// the key as a waiting Acquire does (free and the head of the
	// queue, reserved for it, or holding the grant it asks for), so
	// that fenced waiters are served in turn; the driver sends the owner
	// as is, and the caller sets it only on a waiting attempt. Refused,
	// such an attempt reports the key's counter in Result.Fence (0:
	// none), which the waiter's next proposal exceeds (Key.GrantFence).
	// With k.Grant and k.GrantFence set, it asks for a fenced grant: a
	// release that hands the key on to it sets the key to k.Grant only
	// where the counter exists and is below k.GrantFence, raising the
	// counter to k.GrantFence (and keeping k.GrantRecord beside the key,
	// as ConfirmAnnounce would), and reserves the key for it elsewhere.
	// Without a proposal (k.GrantFence 0) the grant names the call (a
	// Leave by call, see Handoffer) and is never given. Build the
	// script's arguments with Argv.AcquireFenced. One without
	// an owner does not queue, and leaves nothing on the node where it
	// is refused.
	AcquireFenced(ctx context.Context, k *Key, ttl, counterTTL time.Duration) (Result, error)
	// ConfirmFence raises the key's counter to at least fence while the
	// key still holds k.Token: Done, or Taken (another token) or Absent,
	// in which case nothing changed.
	ConfirmFence(ctx context.Context, k *Key, fence int64, counterTTL time.Duration) (Result, error)
}
