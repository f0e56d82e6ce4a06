package node

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// subscriber is a Redis node's one pub/sub connection, shared by every
// watch on that node, with a reference count per channel: a channel is
// subscribed while it has watches. It connects on the first Watch and
// reconnects, with backoff, until the node is closed; after a reconnect
// it subscribes again to every channel. Messages published while it was
// down are lost, which is why a waiter never relies on them alone.
type subscriber struct {
	dial    func(context.Context) (redis.Conn, error)
	timeout time.Duration // of a dial
	idle    time.Duration // how long a read waits before a PING

	mu      sync.Mutex // guards everything below, and writes to conn
	conn    redis.Conn // nil while disconnected
	subs    map[string]*channel
	started bool
	closed  bool
	done    chan struct{} // closed when the loop has ended
}

// channel is one subscribed channel and its watches.
type channel struct {
	confirmed bool // the node confirmed the SUBSCRIBE on the current connection
	watches   map[*watch]struct{}
}

// watch is a Watch on one channel.
type watch struct {
	s        *subscriber
	name     string
	owner    string          // wakes for releases that name it or no one; "": for all
	ready    chan struct{}   // closed once confirmed
	released chan<- struct{} // the watcher's; sent to without blocking
	stopped  bool            // guarded by s.mu
}

func (w *watch) Ready() <-chan struct{} { return w.ready }

// Stop removes the watch, and unsubscribes its channel when it was the
// last one.
func (w *watch) Stop() {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	ch := s.subs[w.name]
	delete(ch.watches, w)
	if len(ch.watches) == 0 {
		delete(s.subs, w.name)
		s.send("UNSUBSCRIBE", w.name)
	}
}

func newSubscriber(dial func(context.Context) (redis.Conn, error), timeout time.Duration) *subscriber {
	return &subscriber{dial: dial, timeout: timeout, idle: 5 * time.Second, subs: map[string]*channel{}, done: make(chan struct{})}
}

// Watch watches key's release channel.
func (r *Redis) Watch(key, owner string, released chan<- struct{}) Watch {
	s := r.sub
	name := ReleaseChannel(key)
	w := &watch{s: s, name: name, owner: owner, ready: make(chan struct{}), released: released}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		w.stopped = true
		return w // never ready: the waiter polls
	}
	if !s.started {
		s.started = true
		go s.loop()
	}
	ch := s.subs[name]
	if ch == nil {
		ch = &channel{watches: map[*watch]struct{}{}}
		s.subs[name] = ch
		s.send("SUBSCRIBE", name)
	}
	ch.watches[w] = struct{}{}
	if ch.confirmed {
		close(w.ready)
	}
	return w
}

// send writes a command on the connection if there is one; the caller
// holds s.mu. A failed write is left to the reader to notice.
func (s *subscriber) send(cmd string, args ...any) {
	if s.conn == nil {
		return
	}
	if s.conn.Send(cmd, args...) == nil {
		_ = s.conn.Flush()
	}
}

// close ends the loop and waits for it.
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	started := s.started
	if s.conn != nil {
		s.conn.Close() // ends the reader's Receive
	}
	s.mu.Unlock()
	if started {
		<-s.done
	}
}

// loop connects, subscribes to every channel with watches, and reads
// until the connection fails; then it backs off and starts over, until
// the subscriber is closed.
func (s *subscriber) loop() {
	defer close(s.done)
	backoff := 10 * time.Millisecond
	for {
		if s.isClosed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		c, err := s.dial(ctx)
		cancel()
		if err == nil {
			if s.attach(c) {
				backoff = 10 * time.Millisecond
				s.read(c)
			}
			s.detach(c)
		}
		if !s.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (s *subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// sleep waits d, or less if the subscriber is closed meanwhile (then it
// reports false). It polls: a closed subscriber ends within 10 ms.
func (s *subscriber) sleep(d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); {
		if s.isClosed() {
			return false
		}
		time.Sleep(min(10*time.Millisecond, time.Until(end)))
	}
	return !s.isClosed()
}

// attach makes c the connection and subscribes to every channel.
func (s *subscriber) attach(c redis.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conn = c
	if len(s.subs) > 0 {
		names := make([]any, 0, len(s.subs))
		for name := range s.subs {
			names = append(names, name)
		}
		s.send("SUBSCRIBE", names...)
	}
	return true
}

// detach drops c; no channel is confirmed until the next connection
// confirms it.
func (s *subscriber) detach(c redis.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == c {
		s.conn = nil
	}
	for _, ch := range s.subs {
		ch.confirmed = false
	}
	c.Close()
}

// read handles messages until c fails. A read that waits idle for long
// sends a PING; a second one in a row means the node is gone (a dead
// subscriber is noticed within twice idle; waiters poll meanwhile).
func (s *subscriber) read(c redis.Conn) {
	psc := redis.PubSubConn{Conn: c}
	pinged := false
	for {
		switch v := psc.ReceiveWithTimeout(s.idle).(type) {
		case redis.Message:
			pinged = false
			s.notify(v.Channel, string(v.Data))
		case redis.Subscription:
			pinged = false
			if v.Kind == "subscribe" {
				s.confirm(v.Channel)
			}
		case redis.Pong:
			pinged = false
		case error:
			var ne net.Error
			if pinged || !errors.As(v, &ne) || !ne.Timeout() {
				return
			}
			pinged = true
			s.mu.Lock()
			s.send("PING")
			s.mu.Unlock()
		}
	}
}

// confirm marks name subscribed and its watches ready.
func (s *subscriber) confirm(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.subs[name]
	if ch == nil || ch.confirmed {
		return
	}
	ch.confirmed = true
	for w := range ch.watches {
		select {
		case <-w.ready:
		default:
			close(w.ready)
		}
	}
}

// notify wakes name's watches for a release that names to ("": no one,
// every watch wakes).
func (s *subscriber) notify(name, to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.subs[name]; ch != nil {
		for w := range ch.watches {
			if to != "" && w.owner != "" && w.owner != to {
				continue // the key is reserved for another waiter
			}
			select {
			case w.released <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
}
