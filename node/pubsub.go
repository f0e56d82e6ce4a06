package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// subscriber is a Redis node's one pub/sub connection, shared by every
// watch on that node, with a reference count per channel: a channel is
// subscribed while it has watches, and lingers for a while after its last
// one stops (see linger). It connects on the first Watch and reconnects,
// with backoff, until the node is closed; after a reconnect it subscribes
// again to every channel that has watches. Messages published while it
// was down are lost, which is why a waiter never relies on them alone.
type subscriber struct {
	dial    func(context.Context) (redis.Conn, error)
	timeout time.Duration // of a dial
	idle    time.Duration // how long a read waits before a PING
	linger  time.Duration // how long a channel stays subscribed without watches

	// sharded: shard channels (SSUBSCRIBE, SUNSUBSCRIBE, smessage) of a
	// lock's copy on a Redis Cluster, whose scripts SPUBLISH (see
	// Options.ShardChannels); set before the first Watch.
	sharded bool

	mu        sync.Mutex // guards everything below, and writes to conn
	conn      redis.Conn // nil while disconnected
	subs      map[string]*channel
	lingering int       // channels in subs without watches
	swept     time.Time // the last sweep of lingering channels
	started   bool
	closed    bool
	done      chan struct{} // closed when the loop has ended
}

// A channel whose last watch stopped stays subscribed for linger, at most
// maxLingering of them per node: a client that waits for the same key
// again soon (one lock taken in turns by a few hosts, a semaphore's slots)
// then finds its watch ready at once, and sends no UNSUBSCRIBE and
// SUBSCRIBE per wait. A lingering channel costs the messages published on
// it, which no one reads.
const (
	linger       = 5 * time.Second
	maxLingering = 64
)

// channel is one subscribed channel and its watches.
type channel struct {
	confirmed bool // the node confirmed the SUBSCRIBE on the current connection
	watches   map[*watch]struct{}
	idleSince time.Time // when its last watch stopped; zero while it has watches
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

// Stop removes the watch; its channel lingers when it was the last one.
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
		now := time.Now()
		ch.idleSince = now
		s.lingering++
		s.sweep(now)
	}
}

// sweep unsubscribes the channels that lingered for linger, and more of
// them while there are more than maxLingering; it looks at most every
// linger/4 unless there are too many. The caller holds s.mu.
func (s *subscriber) sweep(now time.Time) {
	if s.lingering == 0 || (s.lingering <= maxLingering && now.Sub(s.swept) < s.linger/4) {
		return
	}
	s.swept = now
	for name, ch := range s.subs {
		if len(ch.watches) == 0 && (now.Sub(ch.idleSince) >= s.linger || s.lingering > maxLingering) {
			s.drop(name)
		}
	}
}

// drop unsubscribes a lingering channel. The caller holds s.mu.
func (s *subscriber) drop(name string) {
	delete(s.subs, name)
	s.lingering--
	s.send(s.cmd("UNSUBSCRIBE"), name)
}

// cmd is the subscriber's form of a pub/sub command: the shard form
// ("S" + cmd) when it is sharded.
func (s *subscriber) cmd(name string) string {
	if s.sharded {
		return "S" + name
	}
	return name
}

func newSubscriber(dial func(context.Context) (redis.Conn, error), timeout time.Duration) *subscriber {
	return &subscriber{dial: dial, timeout: timeout, idle: 5 * time.Second, linger: linger, subs: map[string]*channel{}, done: make(chan struct{})}
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
	switch {
	case ch == nil:
		ch = &channel{watches: map[*watch]struct{}{}}
		s.subs[name] = ch
		s.send(s.cmd("SUBSCRIBE"), name)
	case len(ch.watches) == 0:
		ch.idleSince = time.Time{} // lingering: watched again
		s.lingering--
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
	for name, ch := range s.subs {
		if len(ch.watches) == 0 {
			s.drop(name) // lingered while disconnected: nothing is sent
		}
	}
	s.conn = c
	if len(s.subs) > 0 && s.sharded {
		// One SSUBSCRIBE names channels of one slot only.
		for name := range s.subs {
			s.send("SSUBSCRIBE", name)
		}
	} else if len(s.subs) > 0 {
		names := make([]any, 0, len(s.subs))
		for name := range s.subs {
			names = append(names, name)
		}
		s.send("SUBSCRIBE", names...)
	}
	return true
}

// detach drops c, and the lingering channels with it; no channel is
// confirmed until the next connection confirms it.
func (s *subscriber) detach(c redis.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == c {
		s.conn = nil
	}
	for name, ch := range s.subs {
		if len(ch.watches) == 0 {
			s.drop(name) // nothing is sent: there is no connection
			continue
		}
		ch.confirmed = false
	}
	c.Close()
}

// read handles messages until c fails. A read that waits idle for long
// sends a PING; a second one in a row means the node is gone (a dead
// subscriber is noticed within twice idle; waiters poll meanwhile).
func (s *subscriber) read(c redis.Conn) {
	psc := redis.PubSubConn{Conn: c}
	receive := psc.ReceiveWithTimeout
	if s.sharded {
		receive = func(d time.Duration) any { return shardReply(redis.ReceiveWithTimeout(c, d)) }
	}
	pinged := false
	for {
		switch v := receive(s.idle).(type) {
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
			s.sweep(time.Now())
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
	if s.lingering > 0 {
		s.sweep(time.Now()) // messages on a lingering channel keep the reads from idling
	}
	if ch := s.subs[name]; ch != nil {
		for w := range ch.watches {
			if !Wakes(w.owner, to) {
				continue // the key is reserved or granted for another waiter
			}
			select {
			case w.released <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
}

// shardReply reads a reply on a connection subscribed to shard channels
// as redigo's PubSubConn reads the classic ones (it knows no smessage):
// a redis.Message, a redis.Subscription ("subscribe" for ssubscribe,
// "unsubscribe" for sunsubscribe, which the server also sends by itself
// when the channel's slot moves away: the watches then poll), a
// redis.Pong, or an error.
func shardReply(reply any, err error) any {
	if err != nil {
		return err
	}
	r, ok := reply.([]any)
	if !ok || len(r) < 2 {
		return fmt.Errorf("%w: shard pub/sub reply %T", ErrProtocol, reply)
	}
	kind, _ := redis.String(r[0], nil)
	switch {
	case kind == "smessage" && len(r) == 3:
		ch, _ := redis.String(r[1], nil)
		data, _ := redis.Bytes(r[2], nil)
		return redis.Message{Channel: ch, Data: data}
	case (kind == "ssubscribe" || kind == "sunsubscribe") && len(r) == 3:
		ch, _ := redis.String(r[1], nil)
		n, _ := redis.Int(r[2], nil)
		return redis.Subscription{Kind: strings.TrimPrefix(kind, "s"), Channel: ch, Count: n}
	case kind == "pong":
		data, _ := redis.String(r[1], nil)
		return redis.Pong{Data: data}
	}
	return fmt.Errorf("%w: shard pub/sub reply %q", ErrProtocol, kind)
}
