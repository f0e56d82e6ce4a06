package redlock

import (
	"context"
	"sync"
	"time"
)

// deadlines hands out the rounds' deadlines. Rounds that begin close
// together share one, so that a round costs no context, timer or channel
// of its own: a round's deadline is its start plus its timeout, cut down
// to a multiple of a grain (a millisecond, or a sixteenth of a shorter
// timeout). Cut down, never up: a round's calls end a little earlier
// than one node timeout after it began, never later, so every bound
// argued from "one node timeout" (chain.expires, the late sends) holds as
// it did with a deadline of its own. Under load the rounds of a
// millisecond share one; a lone round pays for one, as before.
type deadlines struct {
	mu   sync.Mutex
	last *deadline // the latest handed out; a round whose deadline cuts down to its at shares it
}

// deadline is one shared deadline: done is closed at at, by a timer.
type deadline struct {
	at   time.Time
	done chan struct{}
}

// after returns the deadline of a round that begins now and has timeout.
func (ds *deadlines) after(timeout time.Duration) *deadline {
	grain := min(time.Millisecond, timeout/16)
	at := time.Now().Add(timeout)
	if grain > 0 {
		at = at.Add(-time.Duration(at.UnixNano() % int64(grain)))
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.last; d != nil && d.at.UnixNano() == at.UnixNano() {
		return d
	}
	d := &deadline{at: at, done: make(chan struct{})}
	time.AfterFunc(time.Until(at), d.expire)
	ds.last = d
	return d
}

func (d *deadline) expire() { close(d.done) }

// roundCtx is a round's context: the values of the context the round was
// sent with, and its shared deadline. It lives in the round, so the round
// allocates no context.
type roundCtx struct {
	base context.Context // never cancelled (see chain.send)
	d    *deadline
}

func (x *roundCtx) Deadline() (time.Time, bool) { return x.d.at, true }
func (x *roundCtx) Done() <-chan struct{}       { return x.d.done }
func (x *roundCtx) Value(key any) any           { return x.base.Value(key) }

func (x *roundCtx) Err() error {
	select {
	case <-x.d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
