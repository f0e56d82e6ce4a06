package node

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
)

// Sentinel kinds of node failure. A *Error wraps exactly one of them (or
// none, for errors it cannot classify), so errors.Is tells them apart.
var (
	// ErrTimeout: the node did not complete the call before its deadline,
	// or its reply cannot be told apart from another's (a command lost
	// on a shared connection, see Options.Pooled). The command may or
	// may not have taken effect.
	ErrTimeout = errors.New("node did not answer in time")
	// ErrUnreachable: no connection could be made (refused, no route,
	// unknown host), or the connection was reset or broken under the
	// call (ECONNRESET, ECONNABORTED, EPIPE: the node crashed, or a
	// middlebox dropped the flow). After a reset the command may have
	// taken effect; after a refused dial it was never sent (Refused
	// tells).
	ErrUnreachable = errors.New("node unreachable")
	// ErrAuth: the node refused the credentials (WRONGPASS, NOAUTH) or
	// what they allow (NOPERM: an ACL user without the command or key).
	// Retrying cannot help.
	ErrAuth = errors.New("node rejected the credentials")
	// ErrTLS: the TLS handshake was refused: the node's certificate is
	// not trusted or not for this host, or the node refused ours.
	// Retrying cannot help.
	ErrTLS = errors.New("TLS handshake refused")
	// ErrProtocol: the peer did not speak the Redis protocol (or, for
	// rediss://, TLS); the address is probably not a Redis server.
	ErrProtocol = errors.New("peer does not speak the Redis protocol")
	// ErrBadURL: a node URL could not be parsed. No connection was tried.
	ErrBadURL = errors.New("malformed node URL")
	// ErrClosed: the node was used after Close.
	ErrClosed = errors.New("node closed")
	// ErrCircuitOpen: the call was not sent: the client's circuit breaker
	// for this node is open after a run of failures (see
	// redlock.Breaker). The node counts as failed for that call.
	ErrCircuitOpen = errors.New("circuit breaker open: node skipped")

	// ErrPoolWait is the cause of an ErrTimeout that was spent waiting
	// for one of the node's pooled connections, all MaxActive of them in
	// use: the client has more calls in flight to the node than its pool
	// holds, which says the node is slow or the load high, not that it
	// is down. errors.Is finds it.
	ErrPoolWait = errors.New("waited for a pooled connection (all in use)")

	// ErrNoScripts: the node does not run the lock's Lua scripts: EVAL
	// or EVALSHA is renamed away or disabled, or a proxy in front of the
	// node refuses them. Release and extend cannot work there. Retrying
	// cannot help.
	ErrNoScripts = errors.New("node does not run scripts (EVAL/EVALSHA unknown or refused)")
	// ErrUnsupported: the node does not know another command the lock
	// needs (renamed away, or a server or proxy that lacks it). Retrying
	// cannot help.
	ErrUnsupported = errors.New("node does not support a command the lock needs")
	// ErrWrongType: the key holds a value of another type (a list, a
	// hash...): something else uses the lock's key name. Retrying cannot
	// help until that key is gone.
	ErrWrongType = errors.New("key holds a value of the wrong type")
	// ErrReadOnly: the node refuses writes: it is a replica (READONLY),
	// not a master, or a master whose persistence is failing (MISCONF).
	// Retrying cannot help until an operator acts.
	ErrReadOnly = errors.New("node refuses writes (a replica, or persistence failing)")
	// ErrOOM: the node is at maxmemory and its policy (noeviction)
	// refuses writes. Retrying does not help until memory is freed.
	ErrOOM = errors.New("node is out of memory (maxmemory with noeviction)")
)

// Permanent reports whether err is a failure that a retry cannot change
// soon: bad credentials or rights, an untrusted certificate, a peer that
// is not Redis, a closed node, a bad URL, or one of the refusals above
// (no scripts, an unsupported command, a key of the wrong type, a
// read-only node, out of memory). Timeouts, refused or reset
// connections, LOADING, BUSY, TRYAGAIN and unclassified errors are not
// permanent: the next attempt may succeed.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	for _, k := range permanent {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

var permanent = []error{ErrAuth, ErrTLS, ErrProtocol, ErrClosed, ErrBadURL,
	ErrNoScripts, ErrUnsupported, ErrWrongType, ErrReadOnly, ErrOOM}

// KindOf names the kind of a node error, for metric labels and logs:
// "timeout", "unreachable", "auth", "tls", "protocol", "closed",
// "circuit_open", "no_scripts", "unsupported", "wrong_type", "read_only",
// "oom", "other" for an error of no known kind, "" for nil.
func KindOf(err error) string {
	if err == nil {
		return ""
	}
	for _, k := range kindNames {
		if errors.Is(err, k.kind) {
			return k.name
		}
	}
	return "other"
}

// kindNames lists the kinds KindOf names, the breaker's first: a skipped
// call is reported as skipped, whatever its breaker saw before.
var kindNames = []struct {
	kind error
	name string
}{
	{ErrCircuitOpen, "circuit_open"}, {ErrTimeout, "timeout"}, {ErrUnreachable, "unreachable"},
	{ErrAuth, "auth"}, {ErrTLS, "tls"}, {ErrProtocol, "protocol"}, {ErrClosed, "closed"},
	{ErrNoScripts, "no_scripts"}, {ErrUnsupported, "unsupported"}, {ErrWrongType, "wrong_type"},
	{ErrReadOnly, "read_only"}, {ErrOOM, "oom"},
}

// Error is a failed call on one node. It never contains a password.
type Error struct {
	Addr string // the node's address (host:port)
	Op   string // acquire, extend, release, inspect, dial
	Kind error  // one of the sentinels above, or nil when unclassified
	Err  error  // the underlying error
}

// Error formats as "node ADDR: OP: KIND: cause".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("node ")
	b.WriteString(e.Addr)
	b.WriteString(": ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	if e.Kind != nil {
		b.WriteString(e.Kind.Error())
		if e.Err != nil && e.Err != e.Kind {
			b.WriteString(": ")
		}
	}
	if e.Err != nil && e.Err != e.Kind {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the kind and the cause, so errors.Is works on both. A
// timeout does not unwrap to its context's error (context.DeadlineExceeded):
// the deadline that expired was the per-node one, and a caller testing its
// own context's end with errors.Is must not be misled by a slow node.
func (e *Error) Unwrap() []error {
	switch {
	case e.Kind == nil:
		return []error{e.Err}
	case e.Kind == ErrTimeout && (e.Err == nil || errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, os.ErrDeadlineExceeded)):
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Classify picks the kind of an error that a Redis client returned,
// from what every Go client shares: context and net timeouts, dial
// errors, crypto/tls errors, and the server's error replies (see
// replyKind). An error that already wraps one of this
// package's kinds keeps it. It returns nil when it cannot tell; a driver
// checks its own client's errors (a closed client, a protocol error of
// its parser) first. See Fail.
func Classify(err error) error {
	var ne net.Error
	var op *net.OpError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout(), errors.Is(err, errOutOfStep):
		return ErrTimeout
	case errors.As(err, &op) && op.Op == "dial", broken(err):
		return ErrUnreachable
	case errors.As(err, new(*tls.CertificateVerificationError)), errors.As(err, new(tls.AlertError)):
		// crypto/tls wraps every verification failure (unknown authority,
		// wrong host, expired) in a CertificateVerificationError.
		return ErrTLS
	case errors.As(err, new(tls.RecordHeaderError)):
		return ErrProtocol
	}
	for _, k := range kindNames {
		if errors.Is(err, k.kind) {
			return k.kind
		}
	}
	return replyKind(err.Error())
}

// broken reports whether err is a connection reset or broken under a
// call.
func broken(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// Refused reports whether err is an ErrUnreachable whose command cannot
// have reached the node: no connection was made (not a reset or broken
// one, after which it may have).
func Refused(err error) bool {
	return errors.Is(err, ErrUnreachable) && !broken(err)
}

// replyKind is the kind of a server's error reply, from its text:
// WRONGPASS, NOAUTH, NOPERM and a script's "can't run this command" (an
// ACL without the command) are ErrAuth; an unknown EVAL or EVALSHA is
// ErrNoScripts, another unknown command ErrUnsupported; WRONGTYPE,
// READONLY, MISCONF and OOM their own kinds. LOADING, BUSY, TRYAGAIN and
// the rest are nil: retryable.
func replyKind(msg string) error {
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "NOPERM"),
		strings.Contains(msg, "invalid username-password"), strings.HasPrefix(msg, "ERR AUTH"),
		strings.Contains(msg, "can't run this command"), strings.Contains(msg, "has no permissions to run"):
		return ErrAuth
	case strings.HasPrefix(msg, "ERR unknown command"):
		lower := strings.ToLower(msg)
		// Redis 7 quotes the command in 'quotes', 6 in `backticks`.
		if strings.Contains(lower, "'eval") || strings.Contains(lower, "`eval") ||
			strings.Contains(lower, "'script") || strings.Contains(lower, "`script") {
			return ErrNoScripts
		}
		return ErrUnsupported
	case strings.HasPrefix(msg, "WRONGTYPE"), strings.Contains(msg, "WRONGTYPE Operation against a key"):
		return ErrWrongType
	case strings.HasPrefix(msg, "READONLY"), strings.Contains(msg, "READONLY You can't write"),
		strings.HasPrefix(msg, "MISCONF"), strings.Contains(msg, "MISCONF "):
		return ErrReadOnly
	case strings.HasPrefix(msg, "OOM"), strings.Contains(msg, "OOM command not allowed"):
		return ErrOOM
	}
	return nil
}

// argsEcho is how Redis starts the part of an error reply that repeats
// the command's arguments (an unknown command's), which would carry the
// lock's token into error texts and logs.
const argsEcho = ", with args beginning with:"

// redact returns err with the arguments a server echoed cut off, or err
// itself when it echoes none.
func redact(err error) error {
	msg := err.Error()
	i := strings.Index(msg, argsEcho)
	if i < 0 {
		return err
	}
	return errors.New(msg[:i] + " (arguments not shown)")
}
