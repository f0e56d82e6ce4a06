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
// after a node's restart without persistence.

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
	s.cur.Store(&current{n: New(at, opts), addr: at.Addr()})
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
	last   time.Time // the last topology read began
	old    []*Redis  // masters moved away from, closed at Close
	closed bool
	wg     sync.WaitGroup // topology reads under way
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
// already or is there.
func (f *follower) moveTo(from *Redis, addr string) {
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.s.cur.Load()
	if f.closed || cur.n != from && from != nil || cur.addr == addr {
		return
	}
	ep := f.base
	if host != "" {
		ep.Host = host
	}
	ep.Port = p
	f.old = append(f.old, cur.n)
	f.s.cur.Store(&current{n: New(ep, f.opts), addr: ep.Addr()})
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
		for _, m := range ms {
			for _, r := range m.Slots {
				if f.slot >= r.First && f.slot <= r.Last {
					f.moveTo(nil, m.Endpoint.Addr())
					return
				}
			}
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
	f.mu.Unlock()
	f.wg.Wait()
	var errs []error
	for _, n := range old {
		errs = append(errs, n.Close())
	}
	errs = append(errs, f.s.cur.Load().n.Close())
	return errors.Join(errs...)
}
