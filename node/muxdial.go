package node

// The dial of a node's multiplexed connection (mux.go), and the calls
// that go over it.

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"net"
	"time"
)

// muxSocket is the socket under a mux's reply parser. Once the dial's
// AUTH and SELECT are done (muxed), the parser's changes to the read
// deadline are ignored: the mux keeps it (see mux.read), and redigo
// would clear it before every read.
type muxSocket struct {
	net.Conn
	muxed bool // set before the mux's reader starts
}

// SetReadDeadline sets the read deadline until the dial is done.
func (s *muxSocket) SetReadDeadline(t time.Time) error {
	if s.muxed {
		return nil
	}
	return s.Conn.SetReadDeadline(t)
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
		if ns, ok := err.(notSent); ok {
			if !again {
				continue
			}
			err = ns.err // as a call that sent it would have seen it
		}
		if s != nil && noScript(err) {
			src := make([]any, len(args))
			copy(src, args)
			src[0] = s.src
			reply, err = m.do(ctx, start, "EVAL", src)
		}
		if s != nil && err == nil {
			r.ran()
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
		_, isTLS := nc.(*tls.Conn)
		d.m = &mux{r: r, nc: nc, rc: rc, tls: isTLS, nonce: checkPrefix + rand.Text()}
		if r.closed.Load() {
			d.m.close() // Close ran during the dial: its calls fail ErrClosed
		} else {
			go d.m.read()
		}
		r.mux.Store(d.m)
	} else {
		d.err = err
	}
	r.muxDial = nil
	r.muxMu.Unlock()
	close(d.done)
}
