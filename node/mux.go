package node

import (
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
//   - One reader goroutine, running while replies are due, reads them in
//     order and hands each to its caller, so a burst of replies costs one
//     read, not one per caller.
//   - A caller waits for its reply within its context. One that gives up
//     leaves its place: the reader reads its reply and drops it (noting
//     it as late, see LastLate).
//   - The reader reads with the node's Timeout: a connection on which
//     replies are due and none has come for that long is closed, with
//     every caller still waiting (a node that stopped answering), and
//     that also ends a write the node stopped reading. The next call
//     dials a new connection.
//
// Compared with a pool, a call takes no connection, and the socket
// deadlines are set per write and per reply read rather than twice per
// call: a command costs its share of a write and of a read.
type mux struct {
	r  *Redis
	nc net.Conn   // for writes and the idle check
	rc redis.Conn // over nc: parses replies (Receive only)

	broken atomic.Bool // err is set

	mu      sync.Mutex
	wbuf    []byte     // commands not written yet
	spare   []byte     // the buffer being written, for reuse
	writing bool       // a caller is writing wbuf
	queue   []*muxCall // callers whose replies are due, in the order sent, from head
	head    int
	reading bool      // the reader goroutine runs
	err     error     // why the connection broke; nil while usable
	used    time.Time // when the last command was appended
}

// muxCall is one command's place in a mux's queue.
type muxCall struct {
	ch    chan struct{} // capacity 1: the reply (or err) is in
	reply any
	err   error
	sent  time.Time
	gone  bool // guarded by mux.mu: the caller gave up; the reply is dropped
}

var muxCalls = sync.Pool{New: func() any { return &muxCall{ch: make(chan struct{}, 1)} }}

// errStale breaks a connection the idle check found closed by the node.
var errStale = errors.New("connection closed by the node while idle")

// errNotSent wraps why a command was not sent: its connection had broken
// (or the idle check broke it) before. The call tries once more on a new
// connection.
var errNotSent = errors.New("not sent: the connection had broken")

// errUnasked is a reply that no command was waiting for.
var errUnasked = errors.New("a reply with no command waiting for it")

// do sends cmd with args and waits for its reply, within ctx; now is
// the call's start (the caller has read the clock).
func (m *mux) do(ctx context.Context, now time.Time, cmd string, args []any) (any, error) {
	c := muxCalls.Get().(*muxCall)
	m.mu.Lock()
	if m.err == nil && m.head == len(m.queue) && m.r.idleCheck > 0 && now.Sub(m.used) >= m.r.idleCheck && closedByPeer(m.nc) {
		m.fail(errStale)
	}
	if m.err != nil {
		err := m.err
		m.mu.Unlock()
		muxCalls.Put(c)
		return nil, fmt.Errorf("%w: %w", errNotSent, err)
	}
	m.wbuf = appendCommand(m.wbuf, cmd, args)
	c.sent, m.used = now, now
	m.queue = append(m.queue, c)
	if !m.reading {
		m.reading = true
		go m.read()
	}
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
			m.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	reply, err := c.reply, c.err
	c.reply, c.err = nil, nil
	muxCalls.Put(c)
	return reply, err
}

// flush writes wbuf until nothing more was appended meanwhile; m.mu is
// held on entry and on return, not during a write. Each write gets the
// node's Timeout (so does the dial's AUTH and SELECT, whose deadline
// would otherwise stay). A caller whose context ends (done) while others
// keep appending hands the rest to a goroutine, so that writing for
// others never holds it past its deadline.
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
		err := m.nc.SetWriteDeadline(time.Now().Add(m.r.timeout))
		if err == nil {
			_, err = m.nc.Write(buf)
		}
		m.mu.Lock()
		m.spare = buf[:0]
		if err != nil {
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

// read hands replies to their callers, in order, until none is due.
func (m *mux) read() {
	for {
		reply, err := redis.ReceiveWithTimeout(m.rc, m.r.timeout)
		m.mu.Lock()
		if _, answer := err.(redis.Error); err != nil && !answer {
			m.fail(err)
			m.reading = false
			m.mu.Unlock()
			return
		}
		if m.head == len(m.queue) {
			m.fail(errUnasked)
			m.reading = false
			m.mu.Unlock()
			return
		}
		c := m.queue[m.head]
		m.queue[m.head] = nil
		m.head++
		if c.gone {
			now := time.Now()
			m.r.lastLate.Store(&late{at: now, rtt: now.Sub(c.sent)})
		} else {
			c.reply, c.err = reply, err
			c.ch <- struct{}{}
		}
		if m.head == len(m.queue) {
			m.queue, m.head = m.queue[:0], 0
			m.reading = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
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
	// seconds, with m.mu held. The reader's Receive ends on its error.
	nc := m.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	nc.Close()
	for i := m.head; i < len(m.queue); i++ {
		if c := m.queue[i]; !c.gone {
			c.err = err
			c.ch <- struct{}{}
		}
		m.queue[i] = nil
	}
	m.queue, m.head = nil, 0
}

// closedByPeer reports whether an idle connection's socket shows that
// the node closed it (see Redis.checkIdle). Bytes no command asked for
// count as that too, also under TLS, where they may instead be a late
// session ticket: replacing a usable connection costs a dial, sending on
// a closed one would cost the call.
func closedByPeer(nc net.Conn) bool {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	s, known := peek(nc)
	return known && s != sockQuiet
}

// close breaks the connection for Close.
func (m *mux) close() {
	m.mu.Lock()
	m.fail(ErrClosed)
	m.mu.Unlock()
}

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

// muxDialing is a dial of a node's multiplexed connection in progress,
// shared by the calls that wait for it.
type muxDialing struct {
	done chan struct{} // closed when m or err is set
	m    *mux
	err  error
}

// callMux is call over the node's multiplexed connection (see
// Options.Pooled). A command not sent because its connection had broken
// (the idle check found it closed by the node, as after a restart) is
// sent once more on a new one, as the pool's check would have done; a
// script the node does not know is sent again as EVAL.
func (r *Redis) callMux(ctx context.Context, start time.Time, op string, s *script, cmd string, args []any) (any, error) {
	for again := false; ; again = true {
		m, err := r.muxFor(ctx)
		if err != nil {
			return nil, r.fail(op, err)
		}
		reply, err := m.do(ctx, start, cmd, args)
		if errors.Is(err, errNotSent) && !again {
			continue
		}
		if s != nil && noScript(err) {
			src := make([]any, len(args))
			copy(src, args)
			src[0] = s.src
			reply, err = m.do(ctx, start, "EVAL", src)
		}
		return reply, r.fail(op, err)
	}
}

// muxFor returns the node's multiplexed connection, dialling one if there
// is none or it broke. The dial runs in a goroutine of its own under the
// node's Timeout, shared by every call that needs it meanwhile; a call
// waits for it within ctx.
func (r *Redis) muxFor(ctx context.Context) (*mux, error) {
	if m := r.mux.Load(); m != nil && !m.broken.Load() {
		return m, nil
	}
	if r.closed.Load() {
		return nil, ErrClosed
	}
	r.muxMu.Lock()
	if m := r.mux.Load(); m != nil && !m.broken.Load() {
		r.muxMu.Unlock()
		return m, nil
	}
	d := r.muxDial
	if d == nil {
		d = &muxDialing{done: make(chan struct{})}
		r.muxDial = d
		go r.dialMux(d)
	}
	r.muxMu.Unlock()
	select {
	case <-d.done:
		return d.m, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dialMux makes a multiplexed connection for d.
func (r *Redis) dialMux(d *muxDialing) {
	ctx, cancel := context.WithTimeout(r.life, r.timeout)
	rc, nc, err := r.muxConn(ctx)
	cancel()
	r.muxMu.Lock()
	if err == nil {
		d.m = &mux{r: r, nc: nc, rc: rc, used: time.Now()}
		if r.closed.Load() {
			d.m.close() // Close ran during the dial: its calls fail ErrClosed
		}
		r.mux.Store(d.m)
	} else {
		d.err = err
	}
	r.muxDial = nil
	r.muxMu.Unlock()
	close(d.done)
}
