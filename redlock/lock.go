package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

// Lock is a lock held on a majority of nodes until Until(). Its methods
// are safe for concurrent use; those of a nil *Lock return ErrNilLock or
// zero values and never panic.
type Lock struct {
	c       *Client
	k       *node.Key // key, token and prepared arguments
	drift   float64
	timeout time.Duration

	// op serialises Extend and Unlock, which hold it while they wait on
	// the nodes (at most about one node timeout). prev, guarded by op, is
	// the last round that sent commands for this lock, the acquire at
	// first: a node's next command waits for its call there to return
	// (see errPrevPending).
	op   sync.Mutex
	prev *quorum.Round

	// mu guards until and released and is held only briefly, so that
	// TTL and Until never wait for the network.
	mu       sync.Mutex
	until    time.Time // end of validity, on the client's clock
	released bool      // Unlock was called
}

// Key returns the locked key, prefix included.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.k.Name
}

// Token returns the random value stored under the key on the nodes (32
// hex digits from crypto/rand). Use it for check-and-set against the
// nodes; it is not a fencing token (it does not increase).
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.k.Token
}

// Until returns the end of the validity window: the lock is exclusive
// before this instant and not after it. It is measured on the client's
// monotonic clock; compare it with time.Now() of this process only.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// TTL returns the validity left now, 0 once it has run out or after
// Unlock.
func (l *Lock) TTL() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left()
}

func (l *Lock) left() time.Duration {
	if l.released {
		return 0
	}
	return max(0, -l.c.clk.Since(l.until))
}

// Extend makes the lock's keys live at least ttl more on the nodes that
// still hold its token (a node never shortens a key: a late, stale extend
// must not undo a newer one). It succeeds only if a majority did so before
// the current validity ran out; Until then moves to the start of the call
// plus ttl minus drift, which leaves a validity of ttl minus the call's
// duration minus drift — also when ttl is shorter than what was left.
//
// Errors: ErrNotHeld when the lock had expired, was unlocked, or a
// majority no longer holds the token; ErrInvalid for a ttl that is not a
// positive whole number of milliseconds above the node timeout; ErrClosed
// after the client's Close; otherwise a *QuorumError without a sentinel
// (nodes failed or ctx ended), after which the lock still holds until
// Until() — which never moves later on failure, but moves earlier if the
// new ttl is shorter than what was left.
//
// Extend and Unlock on one Lock run one at a time (each waits on the nodes
// for about one node timeout at most); TTL and Until never wait for them.
// While Extend runs, Until is at most its start plus ttl minus drift.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return ErrNilLock
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if ttl <= l.timeout {
		return fmt.Errorf("%w: TTL %v must be above the node timeout %v", ErrInvalid, ttl, l.timeout)
	}
	if !l.begin() {
		return ErrClosed
	}
	defer l.end()
	c, k := l.c, l.k
	// Until follows the ttl asked for, also when it is shorter than what
	// was left (the nodes keep the longer TTL, which errs on the safe
	// side): it drops to what ttl promises at once, and stays there if
	// the extend fails. Keys that take ttl expire no sooner than the
	// bound, since the calls start after it is read.
	bound := clock.Until(c.clk.Now(), ttl, l.drift)
	l.mu.Lock()
	released, left, ended := l.released, l.left(), ctx.Err() != nil
	if !ended && left > 0 && bound.Before(l.until) {
		l.until = bound
	}
	l.mu.Unlock()
	switch {
	case released:
		return l.notHeld("extend", "already unlocked")
	case left <= 0:
		return l.notHeld("extend", "validity ran out")
	case ended:
		// Nothing is sent for a context that has already ended; the lock
		// holds as before.
		return notStarted("extend", k.Name, c, ctx, nil)
	}
	r := l.send(ctx, ttl)
	t := r.Wait(ctx.Done(), c.quorum)
	validity := clock.Validity(ttl, r.Elapsed(), l.drift)
	newUntil := clock.Until(r.Started(), ttl, l.drift)
	l.mu.Lock()
	inTime := l.left() > 0
	ok := t.Reached && inTime && validity > 0
	if ok {
		l.until = newUntil
	}
	l.mu.Unlock()
	if ok {
		return nil
	}
	qe := newQuorumError("extend", k.Name, c.quorum, r, nil, ctx)
	qe.Validity = validity
	if !inTime || t.Other-t.Failed > len(c.nodes)-c.quorum {
		qe.sentinel = ErrNotHeld
	}
	return qe
}

// Unlock deletes the key on every node where it still holds the lock's
// token. It returns nil when the lock was still valid when Unlock was
// called and a majority released it; ErrNotHeld (a *QuorumError, or a
// plain error if the validity had already run out) when the lock had
// expired, was already unlocked or was taken over — the caller's critical
// section outran the lock; ErrClosed after the client's Close; another
// *QuorumError when too many nodes failed to tell (the keys then expire by
// their TTL). After Unlock, TTL is 0 whatever the outcome.
func (l *Lock) Unlock(ctx context.Context) error {
	if l == nil {
		return ErrNilLock
	}
	if !l.begin() {
		return ErrClosed
	}
	defer l.end()
	c, k := l.c, l.k
	l.mu.Lock()
	released, expired := l.released, l.left() <= 0
	l.released = true // TTL is 0 from now on, whatever the nodes say
	l.mu.Unlock()
	if released {
		return l.notHeld("unlock", "already unlocked")
	}
	r := l.send(ctx, 0)
	t := r.Wait(ctx.Done(), c.quorum)
	switch {
	case expired:
		return l.notHeld("unlock", "validity ran out before unlock")
	case t.Reached:
		return nil
	}
	qe := newQuorumError("unlock", k.Name, c.quorum, r, nil, ctx)
	if t.Other-t.Failed > len(c.nodes)-c.quorum {
		qe.sentinel = ErrNotHeld
	}
	return qe
}

// begin starts an Extend or Unlock: it takes op and enters the client,
// and reports false (holding neither) once the client is closed. end
// undoes a successful begin.
func (l *Lock) begin() bool {
	l.op.Lock()
	if !l.c.enter() {
		l.op.Unlock()
		return false
	}
	return true
}

func (l *Lock) end() {
	l.c.exit()
	l.op.Unlock()
}

// send fans an extend to ttl (ttl > 0) or a release (ttl == 0) of the
// lock out to every node, each node's call sent after its call in the
// lock's previous round, and makes the new round the previous one. The
// caller holds op and has entered the client.
func (l *Lock) send(ctx context.Context, ttl time.Duration) *quorum.Round {
	c, k, prev := l.c, l.k, l.prev
	r := quorum.Start(context.WithoutCancel(ctx), c.clk, &c.bg, c.nodes, l.timeout,
		func(ctx context.Context, i int, n node.Node) (node.Status, error) {
			if _, err := prev.AwaitContext(ctx, i); err != nil {
				return node.Unknown, &node.Error{Addr: n.Addr(), Op: opName(ttl), Kind: node.ErrTimeout, Err: errPrevPending}
			}
			if ttl > 0 {
				return n.Extend(ctx, k, ttl)
			}
			return n.Release(ctx, k)
		})
	l.prev = r
	return r
}

// errPrevPending fails a node's call that was never sent: the node had
// not answered the lock's previous command by the end of this round.
//
// Each node applies a lock's commands in the order they were issued: a
// command waits until the node's call in the previous round returned. A
// release sent while the SET is in flight could be overtaken by it and
// leave the key behind for a TTL. The wait, like the call, ends with the
// round's deadline; a command still waiting then is not sent at all, so
// commands queued behind a silent node never form a chain that outlives
// a node timeout. (A command whose call timed out may still reach the
// node later; extend.lua never shortens a key, so a stale extend is
// harmless.)
var errPrevPending = errors.New("the previous command for this lock had not returned; not sent")

func opName(ttl time.Duration) string {
	if ttl > 0 {
		return "extend"
	}
	return "release"
}

func (l *Lock) notHeld(op, why string) error {
	return fmt.Errorf("redlock: %s %q: %s: %w", op, l.k.Name, why, ErrNotHeld)
}
