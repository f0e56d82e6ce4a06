package node

import "time"

// Argv builds the ARGV of each script (see Scripts, which lists them in
// the same order), so that every driver sends the same arguments: one
// place per script for the queue's rules (who registers, when a grant is
// asked for, a rollback's requeue, a tombstone). Each method appends to
// dst and returns it, so that a driver that sends KEYS and ARGV in one
// list (redigo: hash, number of keys, KEYS, ARGV) appends after them.
//
// The zero Argv boxes every value afresh and asks for grants. Tokens
// come from Key.Boxed, which NewKey boxed once.
type Argv struct {
	// MS boxes a duration as its milliseconds (nil: d.Milliseconds()). A
	// driver whose client boxes every argument in an interface (redigo;
	// an int64 above 255 allocates there) hands out the value it boxed
	// for the last TTL it saw: a client mostly uses one.
	MS func(d time.Duration) any
	// Tag boxes a client's tag, Key.Owner (nil: as it is), for the same
	// reason: a client sends the same one on every call. It is asked
	// only for a client's own tag (a lock's and a semaphore's calls),
	// never for a reader call's, which is new for every call and would
	// push the client's tag out of a one-entry cache.
	Tag func(tag string) any
	// NoGrants asks for no grant (Key.Grant), in an attempt or a
	// rollback's requeue: for a driver whose client may send a script a
	// second time after a timeout (go-redis with MaxRetries). A first
	// copy that ran after the grant was given would take the key the
	// caller already counts as granted to it.
	NoGrants bool
}

func (a Argv) ms(d time.Duration) any {
	if a.MS == nil {
		return d.Milliseconds()
	}
	return a.MS(d)
}

func (a Argv) tag(s string) any {
	if a.Tag == nil {
		return s
	}
	return a.Tag(s)
}

// grant is the grant a waiting attempt of k asks for: none where the
// driver asks for none.
func (a Argv) grant(k *Key) string {
	if a.NoGrants {
		return ""
	}
	return k.Grant
}

// The boxed values of release.lua's ARGV[2] and of WaiterLease.
var (
	announceYes, announceNo any = "1", "0"
	waiterLeaseMS           any = WaiterLease.Milliseconds()
)

func announceFlag(announce bool) any {
	if announce {
		return announceYes
	}
	return announceNo
}

// Acquire is acquire.lua's ARGV. Only a waiting attempt (wait) registers
// k.Owner and asks for its grant; others send "" as the owner.
func (a Argv) Acquire(dst []any, k *Key, ttl time.Duration, wait bool) []any {
	_, token := k.Boxed()
	owner := any("")
	if wait {
		owner = a.tag(k.Owner)
	}
	dst = append(dst, token, a.ms(ttl), owner, waiterLeaseMS, k.Ticket)
	if g := a.grant(k); wait && g != "" {
		dst = append(dst, g, GrantTTL(ttl).Milliseconds())
	}
	return dst
}

// Extend is extend.lua's ARGV, and extend_shared.lua's.
func (a Argv) Extend(dst []any, k *Key, ttl time.Duration) []any {
	_, token := k.Boxed()
	return append(dst, token, a.ms(ttl))
}

// Release is release.lua's ARGV: an Unlock (announce) or a rollback,
// whose ticket queues the client again where k.Requeue asks it to, and
// a tombstone where k.Tomb is set.
func (a Argv) Release(dst []any, k *Key, announce bool) []any {
	_, token := k.Boxed()
	dst = append(dst, token, announceFlag(announce), a.tag(k.Owner))
	switch {
	case k.Requeue && !announce && k.Ticket > 0:
		dst = append(dst, k.Ticket, waiterLeaseMS, a.grant(k))
	case k.Tomb > 0:
		dst = append(dst, 0, 0, "") // no requeue: the tombstone comes next
	}
	return a.tomb(dst, k)
}

// tomb appends k's tombstone in milliseconds, at least 1, where it has
// one (see TombKey).
func (a Argv) tomb(dst []any, k *Key) []any {
	if k.Tomb > 0 {
		dst = append(dst, max(k.Tomb.Milliseconds(), 1))
	}
	return dst
}

// AcquireFenced is acquire_fenced.lua's ARGV (see Fencer.AcquireFenced).
// A waiting attempt's grant (k.Owner and k.Grant set) goes with its
// proposal, k.GrantFence (0: none, which no node grants), and its
// record.
func (a Argv) AcquireFenced(dst []any, k *Key, ttl, counterTTL time.Duration) []any {
	_, token := k.Boxed()
	owner := any("")
	if k.Owner != "" {
		owner = a.tag(k.Owner)
	}
	dst = append(dst, token, a.ms(ttl), counterTTL.Milliseconds(), waiterLeaseMS, owner, k.Ticket)
	if g := a.grant(k); k.Owner != "" && g != "" {
		dst = append(dst, g, GrantTTL(ttl).Milliseconds(), k.GrantFence, k.GrantRecord, ttl.Milliseconds())
	}
	return dst
}

// ConfirmFence is confirm_fence.lua's ARGV; with text, also the record
// and its TTL (ConfirmAnnounce, whose KEYS add AnnounceKey).
func (a Argv) ConfirmFence(dst []any, k *Key, fence int64, counterTTL time.Duration, text string, ttl time.Duration) []any {
	_, token := k.Boxed()
	dst = append(dst, token, fence, counterTTL.Milliseconds())
	if text != "" {
		dst = append(dst, text, max(ttl.Milliseconds(), 1))
	}
	return dst
}

// Transfer is transfer.lua's ARGV: from's lock handed to to's token.
func (a Argv) Transfer(dst []any, from, to *Key, ttl time.Duration) []any {
	_, fromToken := from.Boxed()
	_, toToken := to.Boxed()
	return append(dst, fromToken, toToken, a.ms(ttl), a.tag(from.Owner))
}

// Leave is leave.lua's ARGV: k.Owner's place (a reader call's, too),
// and the grant it had asked for (or LeaveAll).
func (a Argv) Leave(dst []any, k *Key) []any {
	return append(dst, k.Owner, k.Grant)
}

// AcquireShared is acquire_shared.lua's ARGV; as Acquire, only a
// waiting attempt registers (under its reader call's tag), and a reader
// asks for no grant.
func (a Argv) AcquireShared(dst []any, k *Key, ttl time.Duration, wait bool) []any {
	_, token := k.Boxed()
	owner := any("")
	if wait {
		owner = k.Owner
	}
	return append(dst, token, a.ms(ttl), owner, waiterLeaseMS, k.Ticket)
}

// ReleaseShared is release_shared.lua's ARGV.
func (a Argv) ReleaseShared(dst []any, k *Key, announce bool) []any {
	_, token := k.Boxed()
	return a.tomb(append(dst, token, announceFlag(announce)), k)
}

// Announce is announce.lua's ARGV.
func (a Argv) Announce(dst []any, k *Key, text string, ttl time.Duration) []any {
	_, token := k.Boxed()
	return append(dst, token, text, max(ttl.Milliseconds(), 1))
}
