package node

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file holds what every driver shares, so that a Node over another
// Redis client (the goredis module, or one of your own) runs the same
// scripts and reads their replies the same way as Redis does. The rules
// a driver must follow are in the package comment of node/nodetest,
// whose Run checks them against a real server.

// Script is one of the Lua scripts a lock node runs.
type Script struct {
	// Src is the Lua source, for EVAL.
	Src string
	// Hash is its SHA1 in lower-case hex, for EVALSHA.
	Hash string
	// Keys is how many of the script's arguments are keys (KEYS[]);
	// the rest are ARGV[].
	Keys int
}

// Scripts are the scripts of a lock node. The contract of each is the
// header of its file in node/scripts (KEYS, ARGV and reply, in order),
// summed up here; an ARGV marked optional may be left out at the end
// (clients before it sent fewer). Keys is checked against the headers
// by the package's tests; Argv builds each script's ARGV, the same for
// every driver, and the Parse functions below read the replies.
type Scripts struct {
	// Acquire (acquire.lua): KEYS key, Key.Waiters(); ARGV token, ttl
	// ms, owner ("": do not queue), WaiterLease ms, ticket, grant
	// (optional; "": a reservation), GrantTTL ms (optional). Reply:
	// ParseAcquire.
	Acquire Script
	// Extend (extend.lua): KEYS key; ARGV token, ttl ms. Reply:
	// ParseStatus.
	Extend Script
	// Release (release.lua): KEYS key, Key.Waiters(), AnnounceKey(key)
	// (optional, Key.Record); ARGV token, "1" to
	// hand on and announce or "0"; optional: owner, a rollback's ticket
	// (Key.Requeue), its WaiterLease ms, the grant it asked for, a
	// tombstone's ms (Key.Tomb). Reply: ParseStatus.
	Release Script
	// Inspect (inspect.lua): KEYS key, ReadersKey(key). Reply:
	// ParseInspect.
	Inspect Script
	// AcquireFenced (acquire_fenced.lua): KEYS key, FenceKey(key),
	// Key.Waiters(); ARGV token, ttl ms, counter TTL ms, WaiterLease ms,
	// owner ("": an attempt that does not queue), ticket; optional, a
	// fenced grant: grant, GrantTTL ms, the proposed fence
	// (Key.GrantFence), the record (Key.GrantRecord) and its TTL ms
	// (see Argv.AcquireFenced). Reply: ParseAcquire.
	AcquireFenced Script
	// ConfirmFence (confirm_fence.lua): KEYS key, FenceKey(key),
	// AnnounceKey(key) (optional); ARGV token, fence, counter TTL ms,
	// record text and its TTL ms (optional, with the third key). Reply:
	// ParseStatus.
	ConfirmFence Script
	// Transfer (transfer.lua): KEYS key, Key.Waiters(); ARGV holder's
	// token, successor's token, ttl ms, owner. Reply: ParseStatus.
	Transfer Script
	// Leave (leave.lua): KEYS key, Key.Waiters(); ARGV owner, grant
	// (optional; LeaveAll: for good). Reply: 1.
	Leave Script
	// AcquireShared (acquire_shared.lua): KEYS key, WaitersKey(key),
	// ReadersKey(key); ARGV token, ttl ms, owner ("": do not queue),
	// WaiterLease ms, ticket. Reply: ParseAcquire.
	AcquireShared Script
	// ExtendShared (extend_shared.lua): KEYS key, ReadersKey(key); ARGV
	// token, ttl ms. Reply: ParseStatus.
	ExtendShared Script
	// ReleaseShared (release_shared.lua): KEYS key, WaitersKey(key),
	// ReadersKey(key); ARGV token, "1" to hand on and announce or "0",
	// tombstone ms (optional, see Key.Tomb). Reply: ParseStatus.
	ReleaseShared Script
	// Announce (announce.lua): KEYS key, AnnounceKey(key); ARGV token,
	// text, ttl ms. Reply: ParseStatus.
	Announce Script
	// InspectAnnounce (inspect_announce.lua): KEYS key, AnnounceKey(key).
	// Reply: ParseAnnounced.
	InspectAnnounce Script
}

// LuaScripts returns the scripts a lock node runs. Run them by EVALSHA
// with Hash and, on a NOSCRIPT reply (a restarted node, SCRIPT FLUSH),
// by EVAL with Src within the same call's deadline.
func LuaScripts() Scripts { return luaScripts }

var luaScripts = Scripts{
	Acquire:       newLua(acquireLua, 2, queueLua),
	Extend:        newLua(extendLua, 1),
	Release:       newLua(releaseLua, 3, queueLua),
	Inspect:       newLua(inspectLua, 2),
	AcquireFenced: newLua(acquireFencedLua, 3, queueLua),
	ConfirmFence:  newLua(confirmFenceLua, 3),
	Transfer:      newLua(transferLua, 2, queueLua),
	Leave:         newLua(leaveLua, 2, queueLua),
	AcquireShared: newLua(acquireSharedLua, 3, queueLua, sharedLua),
	ExtendShared:  newLua(extendSharedLua, 2, queueLua, sharedLua),
	ReleaseShared: newLua(releaseSharedLua, 3, queueLua, sharedLua),

	Announce:        newLua(announceLua, 2),
	InspectAnnounce: newLua(inspectAnnounceLua, 2),
}

// Sharded returns the scripts with every announcement published as a
// shard message (SPUBLISH, Redis 7 and later) instead of PUBLISH, which
// a Redis Cluster sends to every node: for a lock's copy on a cluster,
// whose keys, and so whose channels, share one slot, and whose watches
// subscribe with SSUBSCRIBE on the slot's master. Same contracts, other
// hashes; every publish is a redis.pcall, so that a master without
// SPUBLISH loses the wake-up and not the command.
func (s Scripts) Sharded() Scripts {
	for _, sc := range []*Script{&s.Acquire, &s.Extend, &s.Release, &s.Inspect, &s.AcquireFenced, &s.ConfirmFence,
		&s.Transfer, &s.Leave, &s.AcquireShared, &s.ExtendShared, &s.ReleaseShared, &s.Announce, &s.InspectAnnounce} {
		// pcall throughout: a master without SPUBLISH (a rolling
		// upgrade) or an ACL without it loses the wake-up, as the
		// classic scripts' pcall("PUBLISH") does, never the script.
		src := strings.ReplaceAll(sc.Src, `redis.call("PUBLISH"`, `redis.pcall("PUBLISH"`)
		if src = strings.ReplaceAll(src, `"PUBLISH"`, `"SPUBLISH"`); src != sc.Src {
			h := sha1.Sum([]byte(src))
			sc.Src, sc.Hash = src, hex.EncodeToString(h[:])
		}
	}
	return s
}

// libraryLine is where a script wants its libraries (queue.lua,
// shared.lua): a script runs its whole text on every call, and each of
// their function definitions costs a closure, so a script answers its
// common case above this line and pays for them only below it.
const libraryLine = "--[[libraries]]\n"

// newLua assembles a script: libs spliced in at its libraryLine, or
// prepended when it has none.
func newLua(main string, keys int, libs ...string) Script {
	src := main
	if len(libs) > 0 {
		lib := strings.Join(libs, "")
		if head, rest, ok := strings.Cut(main, libraryLine); ok {
			src = head + lib + rest
		} else {
			src = lib + main
		}
	}
	h := sha1.Sum([]byte(src))
	return Script{Src: src, Hash: hex.EncodeToString(h[:]), Keys: keys}
}

// Replies are passed to the Parse functions as a Redis client returns
// them: a status or bulk string as string or []byte, an integer as
// int64, an array as []any, a nil bulk string as nil.

// ParseAcquire reads the reply of Acquire or AcquireFenced: "OK" (or, of
// AcquireFenced, ["OK", fence]) is Done; an integer is Taken, with the
// holder's PTTL in Result.TTL; [wait, ticket] is Taken, with wait in
// Result.TTL and the waiter's ticket in Result.Ticket; [wait, ticket,
// counter] (AcquireFenced's waiting attempt) adds the key's fence
// counter in Result.Fence.
func ParseAcquire(reply any) (Result, error) {
	switch v := reply.(type) {
	case int64:
		return Result{Status: Taken, TTL: holderTTL(v)}, nil
	case []any:
		if len(v) != 2 && len(v) != 3 {
			break
		}
		if wait, ok := v[0].(int64); ok {
			ticket, ok := asInt(v[1])
			if !ok || ticket < 0 {
				break
			}
			var fence int64
			if len(v) == 3 {
				if fence, ok = asInt(v[2]); !ok || fence < 0 {
					break
				}
			}
			return Result{Status: Taken, TTL: holderTTL(wait), Ticket: ticket, Fence: fence}, nil
		}
		if len(v) != 2 {
			break
		}
		if asString(v[0]) == "OK" {
			if fence, ok := asInt(v[1]); ok && fence > 0 {
				return Result{Status: Done, Fence: fence}, nil
			}
		}
	default:
		if asString(reply) == "OK" {
			return Result{Status: Done}, nil
		}
	}
	return Result{}, unexpected(reply)
}

// ParseSet reads the reply of SET k.Name k.Token NX PX ttl GET, the plain
// acquire (Redis 7.0 and later): nil (the key was free and is now set) or
// the caller's own token (the same command run twice) is Done; another
// value is Taken, with Result.TTL 0 (unknown).
func ParseSet(reply any, token string) (Result, error) {
	switch v := reply.(type) {
	case nil:
		return Result{Status: Done}, nil
	case string:
		if v == token {
			return Result{Status: Done}, nil
		}
		return Result{Status: Taken}, nil
	case []byte:
		if string(v) == token {
			return Result{Status: Done}, nil
		}
		return Result{Status: Taken}, nil
	}
	return Result{}, unexpected(reply)
}

// ParseStatus reads the reply of Extend, Release or ConfirmFence: 1 is
// Done, 0 Taken, -1 Absent.
func ParseStatus(reply any) (Result, error) {
	switch reply {
	case int64(1):
		return Result{Status: Done}, nil
	case int64(0):
		return Result{Status: Taken}, nil
	case int64(-1):
		return Result{Status: Absent}, nil
	}
	return Result{}, unexpected(reply)
}

// ParseInspect reads the reply of Inspect.
func ParseInspect(reply any) (Info, error) {
	v, ok := reply.([]any)
	if !ok || len(v) != 3 {
		return Info{}, unexpected(reply)
	}
	pttl, ok := asInt(v[1])
	if !ok {
		return Info{}, unexpected(reply)
	}
	if pttl == -2 {
		return Info{}, nil
	}
	readers, ok := asInt(v[2])
	if !ok {
		return Info{}, unexpected(reply)
	}
	return Info{Token: asString(v[0]), TTL: time.Duration(pttl) * time.Millisecond, Readers: int(readers)}, nil
}

// ParseAnnounced reads the reply of InspectAnnounce.
func ParseAnnounced(reply any) (Announced, error) {
	v, ok := reply.([]any)
	if !ok || len(v) != 3 {
		return Announced{}, unexpected(reply)
	}
	pttl, ok := asInt(v[1])
	if !ok {
		return Announced{}, unexpected(reply)
	}
	if pttl == -2 {
		return Announced{}, nil
	}
	return Announced{Token: asString(v[0]), TTL: time.Duration(pttl) * time.Millisecond, Text: asString(v[2])}, nil
}

// holderTTL converts a PTTL reply to Result.TTL: 0 when unknown (no
// expiry), at least 1 ms otherwise.
func holderTTL(pttl int64) time.Duration {
	switch {
	case pttl < 0:
		return 0
	case pttl == 0:
		return time.Millisecond
	}
	return time.Duration(pttl) * time.Millisecond
}

func asString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case string, []byte:
		i, err := strconv.ParseInt(asString(n), 10, 64)
		return i, err == nil
	}
	return 0, false
}

// unexpected is the error of a reply no script returns: an *Error of kind
// ErrProtocol that Fail completes with the node's address and the op.
func unexpected(reply any) error {
	return &Error{Kind: ErrProtocol, Err: fmt.Errorf("unexpected reply %v", reply)}
}

// Fail wraps err, from op on the node at addr, in an *Error of the kind
// Classify gives it, unless it is one already. kind, when not nil, is
// used instead: a driver passes the kinds that only its client's errors
// reveal (a pool timeout, a closed client) and nil for the rest. Fail
// keeps an *Error it is given, filling in its Addr and Op when empty (as
// in the errors of the Parse functions). It cuts off the arguments that a
// server repeats in an error reply (an unknown command's), so that no
// token reaches an error text or a log.
func Fail(addr, op string, kind, err error) error {
	if ne, ok := err.(*Error); ok {
		if ne.Addr != "" {
			return ne
		}
		e := *ne
		e.Addr, e.Op = addr, op
		return &e
	}
	if kind == nil {
		kind = Classify(err)
	}
	if kind == err {
		err = nil
	} else {
		err = redact(err)
	}
	return &Error{Addr: addr, Op: op, Kind: kind, Err: err}
}
