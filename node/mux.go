package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// mux is the one connection over which a node sends every command
// (pub/sub apart), unless Options.Pooled. Redis answers a connection's
// commands in the order they came, so no command needs a connection of
// its own:
//
//   - A caller appends its command to the write buffer. If no caller is
//     writing, it writes the buffer, and again while others appended
//     during its write (a group commit): commands issued together go out
//     in one write, and the node reads them in one.
//   - One reader goroutine, for the connection's life, reads replies in
//     order and hands each to its caller, so a burst of replies costs one
//     read, not one per caller. Idle, it waits on the socket with no
//     deadline, so it sees a node that closes the connection (a restart,
//     a timeout, CLIENT KILL) or sends what no command asked for as soon
//     as it runs: the connection is dropped, and the next call dials
//     another. (Only a call that comes in the microseconds between the
//     bytes' arrival and the reader's turn is put on the old one, and
//     fails.)
//   - A caller waits for its reply within its context. One that gives up
//     leaves its place: the reader reads its reply and drops it (noting
//     it as late, see LastLate).
//   - A reply is matched to its command by order alone, so a command
//     lost on the way with the connection left open (a proxy or
//     middlebox that dropped bytes and kept the flow) would shift every
//     later reply onto the command before it, for good: each caller
//     would get another's reply, or none, and the replies that keep
//     coming would keep the watchdog from ever closing the connection.
//     So a caller that gives up puts a check behind its command: PING
//     with a token of the connection's own (see check). Until the
//     check's reply comes, replies to the commands sent before it are
//     held back; the check's own token in its place proves the replies
//     in step, and they are handed out; anything else in its place, or
//     its token in another's, breaks the connection, with every caller
//     still waiting. A lost command then costs one connection, and the
//     common late reply (a slow node) one PING.
//   - While replies are due the socket's read deadline is the node's
//     Timeout after the last reply (or after the first command sent to
//     an idle connection): a connection on which replies are due and
//     none has come for that long is closed, with every caller still
//     waiting (a node that stopped answering), and that also ends a write
//     the node stopped reading. The next call dials a new connection.
//
// Compared with a pool, a call takes no connection and no goroutine, and
// the socket deadline is set when a connection turns busy and when it
// turns idle rather than twice per call: a command costs its share of a
// write and of a read.
type mux struct {
	r   *Redis
	nc  net.Conn   // for writes and deadlines
	rc  redis.Conn // over nc: parses replies (Receive only; it sets no deadline)
	tls bool       // nc is TLS: the deadlines bound writes too (see setDeadline)

	broken atomic.Bool // err is set

	mu      sync.Mutex
	wbuf    []byte     // commands not written yet
	spare   []byte     // the buffer being written, for reuse
	writing bool       // a caller is writing wbuf
	queue   []*muxCall // callers whose replies are due, in the order sent, from head
	head    int
	err     error // why the connection broke; nil while usable
	// checks counts the checks in queue (see check); held has the
	// callers whose replies came while one was due, in order, their
	// replies held back until the next check's proves them in step.
	checks int
	held   []*muxCall
	seq    uint64 // checks sent on the connection, for their tokens
	nonce  string // the connection's own part of a check's token
}

// muxCall is one command's place in a mux's queue.
type muxCall struct {
	ch    chan struct{} // capacity 1: the reply (or err) is in
	reply any
	err   error
	sent  time.Time
	gone  bool   // guarded by mux.mu: the caller gave up; the reply is dropped
	check []byte // a check's token (see mux.check); nil for a caller's command
}

var muxCalls = sync.Pool{New: func() any { return &muxCall{ch: make(chan struct{}, 1)} }}

// notSent is the error of a command not sent because its connection had
// broken before (the node closed it while idle, say); err says why. The
// call tries once more on a new connection.
type notSent struct{ err error }

func (e notSent) Error() string { return "not sent: " + e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// errUnasked breaks a connection on which a reply came that no command
// was waiting for.
var errUnasked = errors.New("a reply with no command waiting for it")

// errOutOfStep breaks a connection whose replies a check found out of
// step with its commands (see mux): a command was lost on the way.
var errOutOfStep = errors.New("replies out of step with the commands: a command was lost on the way")

// do sends cmd with args and waits for its reply, within ctx; now is
// the call's start (the caller has read the clock).
func (m *mux) do(ctx context.Context, now time.Time, cmd string, args []any) (any, error) {
	c := muxCalls.Get().(*muxCall)
	m.mu.Lock()
	if m.err == nil && m.head == len(m.queue) {
		// The connection turns busy: the watchdog starts (see read),
		// from now: the call may have waited for a dial. A socket the
		// reader found closed (the node closed it while idle) and has
		// not said so yet fails here, before a command is put on it.
		if err := m.rc.Err(); err != nil {
			m.fail(err)
		} else if err := m.setDeadline(time.Now().Add(m.r.timeout)); err != nil {
			m.fail(err)
		}
	}
	if m.err != nil {
		err := m.err
		m.mu.Unlock()
		muxCalls.Put(c)
		return nil, notSent{err}
	}
	m.wbuf = appendCommand(m.wbuf, cmd, args)
	c.sent = now
	m.queue = append(m.queue, c)
	if !m.writing {
		m.flush(ctx.Done())
	}
	m.mu.Unlock()
	select {
	case <-c.ch:
	case <-ctx.Done():
		m.mu.Lock()
		select {
		case <-c.ch:
			m.mu.Unlock()
		default:
			c.gone = true // the reader drops the reply; c is not reused
			m.check()
			m.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	reply, err := c.reply, c.err
	c.reply, c.err = nil, nil
	muxCalls.Put(c)
	return reply, err
}

// check puts a check behind the commands sent, for a caller that gave
// up on its reply (see mux), unless the last command sent is one; m.mu is
// held. Its write goes on in a goroutine if no caller is writing.
func (m *mux) check() {
	if m.err != nil || (m.checks > 0 && m.queue[len(m.queue)-1].check != nil) {
		return
	}
	m.seq++
	token := strconv.AppendUint(append([]byte(m.nonce), ':'), m.seq, 10)
	m.wbuf = appendCommand(m.wbuf, "PING", []any{token})
	m.queue = append(m.queue, &muxCall{check: token, sent: time.Now()})
	m.checks++
	if !m.writing {
		m.writing = true // before the goroutine starts: one writer at a time
		go m.flushRest()
	}
}

// flush writes wbuf until nothing more was appended meanwhile; m.mu is
// held on entry and on return, not during a write. A write has no
// deadline of its own: what it writes is due replies, so the reader's
// watchdog closes a connection the node stopped reading. A caller whose
// context ends (done) while others keep appending hands the rest to a
// goroutine, so that writing for others never holds it past its
// deadline.
func (m *mux) flush(done <-chan struct{}) {
	m.writing = true
	for len(m.wbuf) > 0 && m.err == nil {
		select {
		case <-done:
			go m.flushRest()
			return // still writing
		default:
		}
		buf := m.wbuf
		m.wbuf = m.spare[:0]
		m.mu.Unlock()
		_, err := m.nc.Write(buf)
		m.mu.Lock()
		m.spare = buf[:0]
		if err != nil {
			if rerr := m.rc.Err(); rerr != nil {
				// The reader found the connection broken and closed it
				// under this write (a node that answered something no
				// command asked for, or closed it): its error says why.
				err = rerr
			}
			m.fail(err)
		}
	}
	m.writing = false
}

// flushRest is flush for a caller that gave up writing.
func (m *mux) flushRest() {
	m.mu.Lock()
	m.flush(nil)
	m.mu.Unlock()
}

// read hands replies to their callers, in order, until the connection
// breaks. It keeps the socket's read deadline: none while no reply is
// due, the node's Timeout after each reply while more are (do sets it
// when the connection turns busy). Both under m.mu, so that a deadline
// is never set for a state that has passed.
func (m *mux) read() {
	for {
		reply, err := m.rc.Receive()
		m.mu.Lock()
		if _, answer := err.(redis.Error); err != nil && !answer {
			m.fail(err)
			m.mu.Unlock()
			return
		}
		if m.head == len(m.queue) {
			if err == nil {
				// (An error reply the node sent first, such as "max
				// number of clients reached", stays itself.)
				err = fmt.Errorf("%w: %.64q", errUnasked, fmt.Sprint(reply))
			}
			m.fail(err)
			m.mu.Unlock()
			return
		}
		c := m.queue[m.head]
		if m.checks > 0 && !m.inStep(c, reply) {
			m.fail(errOutOfStep)
			m.mu.Unlock()
			return
		}
		m.queue[m.head] = nil
		m.head++
		switch {
		case c.check != nil:
			// In step up to here: the replies held back, all read
			// before this one, are theirs.
			m.checks--
			for i, h := range m.held {
				if !h.gone {
					h.ch <- struct{}{}
				}
				m.held[i] = nil
			}
			m.held = m.held[:0]
		case c.gone:
			now := time.Now()
			m.r.lastLate.Store(&late{at: now, rtt: now.Sub(c.sent)})
		case m.checks > 0:
			c.reply, c.err = reply, err
			m.held = append(m.held, c)
		default:
			c.reply, c.err = reply, err
			c.ch <- struct{}{}
		}
		if m.head == len(m.queue) {
			m.queue, m.head = m.queue[:0], 0
			m.setDeadline(time.Time{})
		} else {
			m.setDeadline(time.Now().Add(m.r.timeout))
		}
		m.mu.Unlock()
	}
}

// inStep reports whether reply, read while checks are due, can be c's:
// a check's own token in a check's place, and no check's token in a
// command's place. m.mu is held.
func (m *mux) inStep(c *muxCall, reply any) bool {
	b, _ := reply.([]byte)
	if c.check != nil {
		return bytes.Equal(b, c.check)
	}
	return b == nil || !bytes.HasPrefix(b, []byte(m.nonce))
}

// setDeadline sets the watchdog (see read). Over TLS it bounds writes
// too: a TLS write blocked on a node that stopped reading holds the
// connection's write lock, which a read that must answer the node (an
// alert, a key update) then waits for, past its own deadline.
func (m *mux) setDeadline(t time.Time) error {
	if m.tls {
		return m.nc.SetDeadline(t)
	}
	return m.nc.SetReadDeadline(t)
}

// fail breaks the connection with err, with m.mu held: it is closed, and
// every caller still waiting gets err.
func (m *mux) fail(err error) {
	if m.err != nil {
		return
	}
	m.err = err
	m.broken.Store(true)
	// The socket, not the TLS layer over it: closing that would first
	// send an alert, which a node that stopped reading can make wait
	// seconds, with m.mu held. The reader's Receive ends on its error
	// (its own, when it is the one failing).
	nc := m.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	nc.Close()
	for _, c := range m.held {
		if !c.gone {
			c.reply, c.err = nil, err
			c.ch <- struct{}{}
		}
	}
	for i := m.head; i < len(m.queue); i++ {
		if c := m.queue[i]; !c.gone && c.check == nil {
			c.err = err
			c.ch <- struct{}{}
		}
		m.queue[i] = nil
	}
	m.queue, m.head, m.held, m.checks = nil, 0, nil, 0
}

// close breaks the connection for Close.
func (m *mux) close() {
	m.mu.Lock()
	m.fail(ErrClosed)
	m.mu.Unlock()
}

// checkPrefix starts every check's token: a check's PING names the
// library, the connection's random part and the check's number.
const checkPrefix = "redlock-mux-check:"

// appendCommand appends cmd and args to b as a RESP array of bulk
// strings, formatting arguments as redigo does for the types the node
// sends.
func appendCommand(b []byte, cmd string, args []any) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)+1), 10)
	b = append(b, '\r', '\n')
	b = appendBulk(b, cmd)
	var num [20]byte
	for _, a := range args {
		switch v := a.(type) {
		case string:
			b = appendBulk(b, v)
		case []byte:
			b = appendBulk(b, v)
		case int:
			b = appendBulk(b, strconv.AppendInt(num[:0], int64(v), 10))
		case int64:
			b = appendBulk(b, strconv.AppendInt(num[:0], v, 10))
		case float64:
			b = appendBulk(b, strconv.AppendFloat(num[:0], v, 'g', -1, 64))
		case bool:
			if v {
				b = appendBulk(b, "1")
			} else {
				b = appendBulk(b, "0")
			}
		case nil:
			b = appendBulk(b, "")
		default:
			b = appendBulk(b, fmt.Sprint(v))
		}
	}
	return b
}

// appendBulk appends s to b as a RESP bulk string.
func appendBulk[T string | []byte](b []byte, s T) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}
