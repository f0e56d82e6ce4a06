package node

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A copy of a lock on one master of a Redis Cluster (FollowSlot) follows
// its slot when the slot changes hands: a MOVED reply names the slot's
// new master, and a master that stops answering (killed, cut off, in a
// failover) makes the copy ask the cluster who serves the slot now. The
// copy's calls then go to that master. A copy that moved holds none of
// the lock's keys there until the lock's next extend re-seeds them, as
// after a node's restart without persistence. While a slot is being
// moved, a command whose keys the old master no longer holds (an ASK
// reply) goes once to the new one, after ASKING (see Redis.asked).

// FollowSlot returns a lock's copy on one master of a Redis Cluster:
// every key it is given is kept under the hash tag "{tag}" (a tag whose
// slot the master at serves, see TagFor), so that each script's keys
// share one slot. It follows the slot when the slot changes hands: at
// once on a MOVED reply for its slot, and, after a call that failed to
// reach its master (unreachable, timed out, read-only), by asking the
// other masters in known who serves the slot now (in the background, at
// most once every refreshEvery). Every master is made by New(endpoint,
// opts), with at's credentials, TLS and database; Close closes them all.
func FollowSlot(at Endpoint, tag string, known []Endpoint, opts Options) Node {
	f := &follower{base: at, known: known, opts: opts, slot: Slot("{" + tag + "}")}
	s := &slotted{pre: "{" + tag + "}", follow: f}
	f.s = s
	s.cur.Store(&current{n: f.master(at), addr: at.Addr()})
	return s
}

// refreshEvery is the least time between two topology reads of a copy.
const refreshEvery = 250 * time.Millisecond

// follower is a following copy's state.
type follower struct {
	s     *slotted
	base  Endpoint   // credentials, TLS and database of every master
	known []Endpoint // the masters at dial time: whom to ask
	opts  Options
	slot  int

	mu     sync.Mutex
	last   time.Time         // the last topology read began
	old    []*Redis          // masters moved away from, closed at Close
	asking map[string]*Redis // by address: the nodes ASK replies named (askAt), closed at Close
	closed bool
	moved  func(addr string) // OnMove's
	wg     sync.WaitGroup    // topology reads under way
}

// after looks at a call's error on n: a MOVED for the copy's slot moves
// it at once; a master that could not be reached makes it read the
// topology (in the background, at most once every refreshEvery).
func (f *follower) after(n *Redis, err error) {
	if err == nil {
		return
	}
	if addr := movedTo(err, f.slot); addr != "" {
		f.moveTo(n, addr)
	} else if errors.Is(err, ErrUnreachable) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrReadOnly) {
		f.refresh()
	}
}

// movedTo returns the address of a MOVED reply for slot in err ("" for
// none): "MOVED <slot> <host>:<port>".
func movedTo(err error, slot int) string {
	msg := err.Error()
	i := strings.Index(msg, "MOVED ")
	if i < 0 {
		return ""
	}
	fs := strings.Fields(msg[i+len("MOVED "):])
	if len(fs) < 2 || fs[0] != strconv.Itoa(slot) {
		return ""
	}
	return fs[1]
}

// moveTo makes addr the copy's master, unless the copy has moved from n
// already or is there, and then tells OnMove's function.
func (f *follower) moveTo(from *Redis, addr string) {
	ep, ok := f.endpoint(addr)
	if !ok {
		return
	}
	f.mu.Lock()
	cur := f.s.cur.Load()
	if f.closed || cur.n != from && from != nil || cur.addr == addr {
		f.mu.Unlock()
		return
	}
	f.old = append(f.old, cur.n)
	f.s.cur.Store(&current{n: f.master(ep), addr: ep.Addr()})
	moved := f.moved
	f.mu.Unlock()
	if moved != nil {
		moved(ep.Addr())
	}
}

// endpoint is the master at addr ("host:port", as MOVED and ASK name
// it), with the credentials, TLS and database of the others.
func (f *follower) endpoint(addr string) (Endpoint, bool) {
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		return Endpoint{}, false
	}
	ep := f.base
	if host != "" {
		ep.Host = host
	}
	ep.Port = p
	return ep, true
}

// master makes the copy's node on the master at ep: it follows ASK
// replies (askAt).
func (f *follower) master(ep Endpoint) *Redis {
	n := f.node(ep, f.opts)
	n.ask = f.askAt
	return n
}

// node is New(ep, opts), with shard channels where opts ask for them.
func (f *follower) node(ep Endpoint, opts Options) *Redis {
	n := New(ep, opts)
	if opts.ShardChannels {
		n.sc, n.sub.sharded = shardedScripts, true
	}
	return n
}

// askAt returns the node an ASK reply naming addr sends a command to: a
// node on pooled connections that sends ASKING before every command
// (ASKING holds for the next command on its connection only), made once
// per address; nil after Close or for an address that does not parse.
func (f *follower) askAt(addr string) *Redis {
	ep, ok := f.endpoint(addr)
	if !ok {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	if n := f.asking[addr]; n != nil {
		return n
	}
	opts := f.opts
	opts.Pooled = true
	n := f.node(ep, opts)
	n.asking = true
	if f.asking == nil {
		f.asking = map[string]*Redis{}
	}
	f.asking[addr] = n
	return n
}

// refresh reads the topology in the background, unless a read began
// within refreshEvery.
func (f *follower) refresh() {
	f.mu.Lock()
	if f.closed || time.Since(f.last) < refreshEvery {
		f.mu.Unlock()
		return
	}
	f.last = time.Now()
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		f.read()
	}()
}

// read asks the known masters, then the copy's current one, who serves
// the slot, and moves the copy there.
func (f *follower) read() {
	cur := f.s.cur.Load()
	ask := append([]Endpoint{}, f.known...)
	for _, ep := range ask {
		if ep.Addr() == cur.addr {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.withDefaults().Timeout)
		ms, err := ClusterMasters(ctx, ep, f.opts)
		cancel()
		if err != nil {
			continue
		}
		if m, ok := MasterOf(ms, f.slot); ok {
			f.moveTo(nil, m.Endpoint.Addr())
			return
		}
	}
}

// close closes every master the copy used, once the reads under way
// are done.
func (f *follower) close() error {
	f.mu.Lock()
	f.closed = true
	old := f.old
	f.old = nil
	for _, n := range f.asking {
		old = append(old, n)
	}
	f.asking = nil
	f.mu.Unlock()
	f.wg.Wait()
	var errs []error
	for _, n := range old {
		errs = append(errs, n.Close())
	}
	errs = append(errs, f.s.cur.Load().n.Close())
	return errors.Join(errs...)
}
