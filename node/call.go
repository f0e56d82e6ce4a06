package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// How a Redis node sends one command: on the shared connection or a
// pooled one, within the call's deadline, by EVALSHA with EVAL on
// NOSCRIPT; and how its failures are classified.

// evalKeys runs s, a script of nkeys keys, by EVALSHA, and by EVAL (which
// also loads it) after NOSCRIPT (a restart, SCRIPT FLUSH): args holds the
// keys, then the script's arguments.
func (r *Redis) evalKeys(ctx context.Context, op string, s *script, nkeys int, args ...any) (any, error) {
	cmd := make([]any, 0, 2+len(args))
	cmd = append(cmd, s.hash, nkeys)
	cmd = append(cmd, args...)
	return r.call(ctx, op, s, "EVALSHA", cmd)
}

// do runs one command within ctx's deadline (or the node timeout, if
// sooner). The deadline covers waiting for a pooled connection, dialling,
// writing and reading, so a node that never answers costs no more.
func (r *Redis) do(ctx context.Context, op, cmd string, args ...any) (any, error) {
	return r.call(ctx, op, nil, cmd, args)
}

// call is do, plus, when s is not nil (cmd is then EVALSHA of s), the
// EVAL fallback after NOSCRIPT: on the same connection, within the same
// deadline.
//
// It runs at the bottom of a goroutine that a client starts for every
// call, under redigo's own frames: the common path is kept to small
// frames (what is rare is in callTimeout and failed), so that the
// goroutine fits the stack it starts with instead of copying it to a
// larger one on every call.
func (r *Redis) call(ctx context.Context, op string, s *script, cmd string, args []any) (any, error) {
	if r.closed.Load() {
		return nil, r.fail(op, ErrClosed)
	}
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok || deadline.Sub(start) > r.timeout {
		return r.callTimeout(ctx, op, s, cmd, args)
	}
	if !deadline.After(start) {
		return nil, r.fail(op, context.DeadlineExceeded)
	}
	var reply any
	var err error
	if r.muxConn != nil {
		reply, err = r.callMux(ctx, start, op, s, cmd, args)
	} else {
		reply, err = r.callPool(ctx, start, deadline, op, s, cmd, args)
	}
	if err != nil && r.ask != nil {
		return r.asked(ctx, op, s, cmd, args, err)
	}
	return reply, err
}

// asked follows an ASK reply, the answer of a cluster master whose slot
// is being moved to another master and which does not hold the
// command's keys: the command goes once more, within the same deadline,
// to the master the reply names, after ASKING. Any other error stands.
func (r *Redis) asked(ctx context.Context, op string, s *script, cmd string, args []any, err error) (any, error) {
	addr := askedTo(err)
	if addr == "" {
		return nil, err
	}
	to := r.ask(addr)
	if to == nil {
		return nil, err
	}
	return to.call(ctx, op, s, cmd, args)
}

// askedTo returns the address an ASK reply in err names ("" for none):
// "ASK <slot> <host>:<port>". Any slot: a copy's commands name keys of
// its own slot only.
func askedTo(err error) string {
	var re redis.Error
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "ASK ") {
		return ""
	}
	if fs := strings.Fields(string(re)); len(fs) == 3 {
		return fs[2]
	}
	return ""
}

// callPool is call on a pooled connection. redigo keeps no argument list
// beyond a call, but the compiler cannot know that of an interface
// method: handing it args would move every caller's argument list to
// the heap, also on the shared connection's path, which only reads it.
// So the pooled path, which is not the default, pays for a copy.
func (r *Redis) callPool(ctx context.Context, start, deadline time.Time, op string, s *script, cmd string, args []any) (any, error) {
	conn, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, r.getFailed(op, err)
	}
	left := time.Until(deadline)
	if left <= 0 {
		conn.Close()
		return nil, r.fail(op, context.DeadlineExceeded)
	}
	heap := slices.Clone(args)
	if r.asking {
		// Its reply is read, and an error in it returned, by the Do.
		_ = conn.Send("ASKING")
	}
	reply, err := redis.DoWithTimeout(conn, left, cmd, heap...)
	if err != nil {
		return r.failed(conn, op, s, heap, start, deadline, err)
	}
	conn.Close()
	if s != nil {
		r.ran()
	}
	return reply, nil
}

// ran records that a script ran on the node (see Acquire).
func (r *Redis) ran() {
	if !r.scripted.Load() {
		r.scripted.Store(true)
	}
}

// getFailed is the error of a call that got no connection: ErrTimeout
// with ErrPoolWait when the deadline passed while every pooled connection
// was in use.
func (r *Redis) getFailed(op string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && r.pool.ActiveCount() >= r.pool.MaxActive {
		return Fail(r.addr, op, ErrTimeout, ErrPoolWait)
	}
	return r.fail(op, err)
}

// callTimeout is call for a context without a deadline, or with one
// later than the node's Timeout: the node's Timeout bounds it.
func (r *Redis) callTimeout(ctx context.Context, op string, s *script, cmd string, args []any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.call(ctx, op, s, cmd, args)
}

// failed finishes a call whose command on conn returned err: it resends a
// script the node did not know as EVAL, leaves a reply that is late to be
// read in the background, and otherwise gives conn back and fails.
func (r *Redis) failed(conn redis.Conn, op string, s *script, args []any, start, deadline time.Time, err error) (any, error) {
	if s != nil && noScript(err) {
		// EVAL on the connection that answered NOSCRIPT, not on one taken
		// from the pool again: with other calls queued for the pool (as
		// after timed-out replies cost it connections) that second wait
		// could outlast the deadline, and the EVAL — of a release, say —
		// would never be sent.
		left := time.Until(deadline)
		if left <= 0 {
			conn.Close()
			return nil, r.fail(op, context.DeadlineExceeded)
		}
		src := make([]any, len(args))
		copy(src, args)
		src[0] = s.src
		if r.asking {
			_ = conn.Send("ASKING")
		}
		var reply any
		if reply, err = redis.DoWithTimeout(conn, left, "EVAL", src...); err == nil {
			conn.Close()
			r.ran()
			return reply, nil
		}
	}
	if isLate(err) {
		// The reply had not begun to arrive by the deadline (see
		// lateConn): read it in the background, for as long again as
		// the call had, and give the connection back then. Only a reply
		// later still, or one that stopped half-way, costs the
		// connection.
		go r.drainLate(conn, start, deadline.Sub(start))
		return nil, r.fail(op, context.DeadlineExceeded)
	}
	conn.Close()
	return nil, r.fail(op, err)
}

// drainLate reads and drops the late reply on c, waiting at most wait,
// then gives c back to the pool (which drops it if the read failed).
// Until then c counts against MaxActive, which bounds these goroutines.
// A reply that comes (an error reply too) is recorded for LastLate, with
// its round trip from the call's start.
func (r *Redis) drainLate(c redis.Conn, start time.Time, wait time.Duration) {
	_, err := redis.ReceiveWithTimeout(c, wait)
	if _, answer := err.(redis.Error); err == nil || answer {
		now := time.Now()
		r.lastLate.Store(&late{at: now, rtt: now.Sub(start)})
	}
	c.Close()
}

// LastLate returns when a reply last came in after its call had given up,
// and its round trip (see LateAnswerer); the zero Time if none has.
func (r *Redis) LastLate() (time.Time, time.Duration) {
	if l := r.lastLate.Load(); l != nil {
		return l.at, l.rtt
	}
	return time.Time{}, 0
}

// noScript reports whether err is a node's NOSCRIPT reply (EVALSHA of a
// script it has not cached).
func noScript(err error) bool {
	e, ok := err.(redis.Error)
	return ok && strings.HasPrefix(string(e), "NOSCRIPT")
}

// fail wraps err in an *Error of its kind; nil stays nil.
func (r *Redis) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	return Fail(r.addr, op, redigoKind(err), err)
}

// redigoKind is the kind of the errors only redigo makes, or nil.
func redigoKind(err error) error {
	msg := err.Error()
	switch {
	case msg == "redigo: get on closed pool":
		// Close raced a call past its closed check.
		return ErrClosed
	case strings.HasPrefix(msg, "redigo: ") && !strings.Contains(msg, "connection pool"):
		// redigo's protocolError is unexported; its messages all start so.
		return ErrProtocol
	}
	return nil
}
