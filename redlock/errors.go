package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

var (
	// ErrNotAcquired: no majority was obtained — the key is held
	// elsewhere, too many nodes failed, or the validity window was used up
	// before the quorum was counted. Nothing of the attempt is left held.
	ErrNotAcquired = errors.New("redlock: lock not acquired")

	// ErrNotHeld: Extend or Unlock found that the lock no longer holds: it
	// expired (its validity ran out), was released, or a majority of nodes
	// hold another token or no key. Work done under it since Until() was
	// not protected.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrLost: a lock kept by KeepAlive or Do could no longer be proven
	// held: an extend found it held by another token or gone, its
	// validity ran out without a successful extend, or MaxHold was
	// reached. The job context's cause wraps it with the reason. Work
	// done after that was not protected by the lock.
	ErrLost = errors.New("redlock: lock lost")
	// ErrInvalid: an argument or option was rejected before any network
	// traffic.
	ErrInvalid = errors.New("redlock: invalid argument")

	// ErrClosed: the client was used after Close.
	ErrClosed = errors.New("redlock: client closed")

	// ErrNilLock is returned by the methods of a nil *Lock. It wraps
	// ErrNotHeld.
	ErrNilLock = wrap("redlock: nil *Lock", ErrNotHeld)
)

// wrap returns an error that reads what, then each of errs without its
// own "redlock: " (the package is named once), and wraps them all:
// wrap("redlock: unlock", ErrNotHeld) reads "redlock: unlock: lock not
// held".
func wrap(what string, errs ...error) error {
	var b strings.Builder
	b.WriteString(what)
	for _, err := range errs {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(err.Error(), "redlock: "))
	}
	return &wrapped{msg: b.String(), errs: errs}
}

type wrapped struct {
	msg  string
	errs []error
}

func (e *wrapped) Error() string   { return e.msg }
func (e *wrapped) Unwrap() []error { return e.errs }

// NodeError is one node's failure within a quorum call.
type NodeError struct {
	Node int    // index of the node in the configured list
	Addr string // the node's address
	Err  error  // usually a *node.Error
}

// Error formats as "node[INDEX] CAUSE".
func (e *NodeError) Error() string {
	return "node[" + strconv.Itoa(e.Node) + "] " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *NodeError) Unwrap() error { return e.Err }

// Reply is one node's part in a quorum call, as a QuorumError reports it.
type Reply struct {
	Node    int           // index of the node in the configured list
	Addr    string        // the node's address
	Status  node.Status   // Unknown when the call failed or had not returned
	Err     error         // the call's error; nil on an answer
	Latency time.Duration // from the fan-out to the reply; 0 if none came
}

// Answered reports whether the node replied (with or without an error)
// before the outcome was decided.
func (r Reply) Answered() bool { return r.Status != node.Unknown || r.Err != nil }

// QuorumError reports a quorum call (acquire, extend, unlock) that did not
// reach its quorum, with every node's outcome. errors.Is matches its
// sentinel (ErrNotAcquired or ErrNotHeld, when the outcome is known), the
// context's error when the caller's context ended, and every node error.
type QuorumError struct {
	Op      string  // "acquire", "extend" or "unlock"
	Key     string  // the lock key, prefix included
	Need    int     // the quorum
	Replies []Reply // one per configured node, by index
	// Validity is what was left of the validity window when the outcome
	// was decided (acquire, extend); <= 0 means time ran out.
	Validity time.Duration
	// Attempts is how many attempts Lock made (1 for TryLock and for
	// extend and unlock).
	Attempts int
	sentinel error
	count    quorum.Count
	ctxErr   error // ctx.Err() of a caller's context that ended, else nil
	cause    error // context.Cause of it, when that differs from ctxErr
	nodes    *multierror.Error
}

// notStarted is the error of an operation that sent nothing because ctx
// had already ended.
func notStarted(op, key string, c *Client, ctx context.Context, sentinel error) *QuorumError {
	replies := make([]quorum.Reply, len(c.nodes))
	for i := range replies {
		replies[i].Node = i
	}
	return newQuorumError(op, key, c, replies, sentinel, ctx)
}

// newQuorumError describes a round of client c from its replies; ctx is
// the caller's context, whose end (if it ended) the error carries.
func newQuorumError(op, key string, c *Client, replies []quorum.Reply, sentinel error, ctx context.Context) *QuorumError {
	e := &QuorumError{Op: op, Key: key, Need: c.quorum, Replies: make([]Reply, len(replies)), Attempts: 1,
		sentinel: sentinel, count: quorum.Tally(replies)}
	e.setContext(ctx)
	for i, rep := range replies {
		addr := c.nodes[rep.Node].Addr()
		e.Replies[i] = Reply{Node: rep.Node, Addr: addr, Status: rep.Result.Status, Err: rep.Err, Latency: rep.Latency}
		if rep.Err != nil {
			e.nodes = multierror.Append(e.nodes, &NodeError{Node: rep.Node, Addr: addr, Err: rep.Err})
		}
	}
	if e.nodes != nil {
		e.nodes.ErrorFormat = joinSemicolon
	}
	return e
}

// setContext records that ctx ended, if it did: both ctx.Err() and, when
// it says more, context.Cause(ctx), so that errors.Is finds
// context.Canceled or DeadlineExceeded even under a custom cause.
func (e *QuorumError) setContext(ctx context.Context) {
	e.ctxErr, e.cause = ctx.Err(), nil
	if e.ctxErr == nil {
		return
	}
	if c := context.Cause(ctx); c != e.ctxErr {
		e.cause = c
	}
}

func joinSemicolon(errs []error) string {
	s := make([]string, len(errs))
	for i, err := range errs {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

// Count returns how many nodes ended with status st (node.Unknown counts
// both failures and nodes that had not answered).
func (e *QuorumError) Count(st node.Status) int {
	switch st {
	case node.Done:
		return e.count.Done
	case node.Taken:
		return e.count.Taken
	case node.Absent:
		return e.count.Absent
	}
	return e.count.Failed + e.count.Pending
}

// Failed returns the indexes of the nodes that answered with an error.
func (e *QuorumError) Failed() []int {
	var out []int
	for _, r := range e.Replies {
		if r.Err != nil {
			out = append(out, r.Node)
		}
	}
	return out
}

// Error summarises the outcome, e.g.
// `redlock: acquire "job": lock not acquired: 2 done, 1 taken, 2 failed, 0 no reply (need 3 of 5): node[3] ...`.
func (e *QuorumError) Error() string {
	var b strings.Builder
	b.WriteString("redlock: ")
	b.WriteString(e.Op)
	b.WriteString(" ")
	b.WriteString(strconv.Quote(e.Key))
	b.WriteString(": ")
	switch refused := e.refused(); {
	case e.sentinel != nil:
		b.WriteString(strings.TrimPrefix(e.sentinel.Error(), "redlock: "))
	case len(e.Replies)-refused < e.Need:
		// Not unknown: those nodes refused the command, and no retry
		// makes a quorum without them.
		fmt.Fprintf(&b, "refused for good by %d nodes", refused)
	default:
		b.WriteString("outcome unknown")
	}
	n := e.count
	fmt.Fprintf(&b, ": %d done, %d taken, %d absent, %d failed, %d no reply (need %d of %d)",
		n.Done, n.Taken, n.Absent, n.Failed, n.Pending, e.Need, len(e.Replies))
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	if e.Op != "unlock" && n.Reached(e.Need) && e.Validity <= 0 {
		b.WriteString("; validity used up")
	}
	if e.ctxErr != nil {
		b.WriteString(": ")
		b.WriteString(e.ctxErr.Error())
	}
	if e.cause != nil {
		b.WriteString(" (")
		b.WriteString(e.cause.Error())
		b.WriteString(")")
	}
	if e.nodes != nil {
		b.WriteString(": ")
		b.WriteString(e.nodes.Error())
	}
	return b.String()
}

// refused counts the nodes that refused for good (node.Permanent).
func (e *QuorumError) refused() int {
	n := 0
	for _, r := range e.Replies {
		if node.Permanent(r.Err) {
			n++
		}
	}
	return n
}

// Unwrap returns the sentinel, the context's error and cause and the node
// errors, so errors.Is(err, ErrNotAcquired), errors.Is(err,
// context.Canceled) and errors.Is(err, node.ErrTimeout) all work.
func (e *QuorumError) Unwrap() []error {
	out := make([]error, 0, 4)
	if e.sentinel != nil {
		out = append(out, e.sentinel)
	}
	if e.ctxErr != nil {
		out = append(out, e.ctxErr)
	}
	if e.cause != nil {
		out = append(out, e.cause)
	}
	if e.nodes != nil {
		out = append(out, e.nodes)
	}
	return out
}
