package node

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strings"
)

// Sentinel kinds of node failure. A *Error wraps exactly one of them (or
// none, for errors it cannot classify), so errors.Is tells them apart.
var (
	// ErrTimeout: the node did not complete the call before its deadline.
	// The command may or may not have taken effect.
	ErrTimeout = errors.New("node did not answer in time")
	// ErrUnreachable: no connection could be made (refused, no route,
	// unknown host).
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
)

// KindOf names the kind of a node error, for metric labels and logs:
// "timeout", "unreachable", "auth", "tls", "protocol", "closed",
// "circuit_open", "other" for an error of no known kind, "" for nil.
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
// timeout unwraps to ErrTimeout only, not to context.DeadlineExceeded: the
// deadline that expired was the per-node one, and a caller testing its own
// context's end with errors.Is must not be misled by a slow node.
func (e *Error) Unwrap() []error {
	switch e.Kind {
	case nil:
		return []error{e.Err}
	case ErrTimeout:
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Classify picks the kind of an error that a Redis client returned,
// from what every Go client shares: context and net timeouts, dial
// errors, crypto/tls errors, and the server's refusals of credentials
// (WRONGPASS, NOAUTH, NOPERM). An error that already wraps one of this
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
		errors.As(err, &ne) && ne.Timeout():
		return ErrTimeout
	case errors.As(err, &op) && op.Op == "dial":
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
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "NOPERM"),
		strings.Contains(msg, "invalid username-password"), strings.HasPrefix(msg, "ERR AUTH"):
		return ErrAuth
	}
	return nil
}
