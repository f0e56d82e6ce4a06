package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/node"
)

// A release (of an Unlock, or the rollback of a failed attempt) that
// failed on a node for a reason that may pass — a timeout, a reset
// connection, a previous command still unanswered — is finished in the
// background: otherwise the key would stay there until its TTL, and a
// majority of such nodes would block the lock for everyone for up to a
// TTL after an Unlock that returned.
//
// Each node has one queue of such releases and at most one goroutine
// working it, started when the queue fills and ending when it empties:
// a node that stays down costs one release call per backoff interval,
// not one goroutine per lock. A release leaves the queue when the node
// answers it (done, or the key is not ours: absent or another token),
// refuses it for good (node.Permanent), or the key's TTL has ended it
// anyway. Close lets the queues run for closeGrace more, calling nodes
// whose breaker is open too, then reports what is left (ErrAbandoned);
// those keys expire by their TTL.
const (
	finishFirst = 20 * time.Millisecond  // first wait before a retry
	finishMax   = 400 * time.Millisecond // longest wait between retries
	finishCap   = 4096                   // releases queued per node; beyond, dropped to the TTL
)

// ErrAbandoned is wrapped by Close's error when releases that failed on
// a node were still unfinished at the end of Close's grace: their keys
// stay on those nodes until their TTL ends.
var ErrAbandoned = errors.New("redlock: releases abandoned at Close")

// release is one release to finish on one node.
type release struct {
	k        node.Key
	announce bool
	until    time.Time // on the client's clock: the key has expired by then
	ch       *chain    // the lock's chain, and
	after    *step     // its command on the node that must return first (nil: none)
	// watch: the release answered that the key is absent after the
	// lock's previous command on the node had failed (see
	// watchRelease); it is sent again, as long as the key could still
	// be set, until it finds the token, and is not reported at Close.
	watch bool
}

// finisher is one node's queue of releases to finish.
type finisher struct {
	mu        sync.Mutex
	q         []release
	running   bool // a goroutine works q
	dropped   int  // releases not queued because q was full
	abandoned []string
}

// finishLater queues r on node i and starts the node's worker if none
// runs. It is called from a node call counted in c.bg, so Close, which
// waits for bg before it waits for the workers, never misses one.
func (c *Client) finishLater(i int, r release) {
	f := &c.finish[i]
	f.mu.Lock()
	if len(f.q) >= finishCap {
		f.dropped++
		f.mu.Unlock()
		return
	}
	f.q = append(f.q, r)
	start := !f.running
	f.running = true
	f.mu.Unlock()
	if start {
		c.finishing.Add(1)
		go c.finishReleases(i)
	}
}

// finishReleases works node i's queue until it is empty, or until
// closeGrace after Close.
func (c *Client) finishReleases(i int) {
	defer c.finishing.Done()
	f, nd := &c.finish[i], c.nodes[i]
	wait := finishFirst
	var closing time.Time // set when Close is seen
	done := c.done
	for {
		// Waits and the grace are on real time, not the client's clock:
		// they pace I/O, and a test's fake clock must not hold up Close.
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-done:
			done = nil // seen once; the grace starts
			closing = time.Now().Add(c.closeGrace())
			wait = finishFirst
		}
		t.Stop()
		now := c.clk.Now()
		f.mu.Lock()
		live := f.q[:0]
		for _, r := range f.q {
			if now.Before(r.until) {
				live = append(live, r)
			}
		}
		clear(f.q[len(live):])
		f.q = live
		if len(f.q) > 0 && !closing.IsZero() && !time.Now().Before(closing) {
			for _, r := range f.q {
				if !r.watch {
					f.abandoned = append(f.abandoned, fmt.Sprintf("%q on node[%d] %s", r.k.Name, i, nd.Addr()))
				}
			}
			f.q = nil
		}
		if len(f.q) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		r := f.q[0]
		f.mu.Unlock()
		if r.after != nil && !r.ch.landed(r.after) {
			// The lock's previous command there (a SET on its way) has
			// not returned: a release now could overtake it, find
			// nothing, and leave the SET's key for a TTL.
			wait = min(2*wait, finishMax)
			continue
		}

		// The node's breaker decides as for any call: no call while it
		// is open (the release waits for the node to come back), and a
		// retry may be the probe. Close's grace is the last chance,
		// though: then the release goes to a skipped node too (the node
		// may be back before its cooldown ends), bounded by the node
		// timeout and the grace, and its outcome is not counted.
		ok, gen := c.allow(i)
		if !ok && closing.IsZero() {
			wait = finishMax
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(i))
		var (
			res node.Result
			err error
		)
		if r.ch.shared {
			res, err = nd.(node.Sharer).ReleaseShared(ctx, &r.k, r.announce)
		} else {
			res, err = nd.Release(ctx, &r.k, r.announce)
		}
		cancel()
		if ok {
			c.record(i, gen, err)
		}
		c.callDone(i, "release", c.clk.Since(now), err)
		if err != nil && !node.Permanent(err) {
			wait = min(2*wait, finishMax)
			continue
		}
		if err == nil && res.Status == node.Absent && closing.IsZero() && (r.watch || r.after != nil && runsLate(r.after.err)) {
			// Nothing there, though the previous command there (which
			// has returned, see above) timed out and may yet set the
			// key: watched (see watchRelease), to the back of the queue,
			// to be tried again after the others until its TTL ends it.
			// (Not after Close: it has had its last try.)
			f.mu.Lock()
			if len(f.q) > 0 && f.q[0].k == r.k {
				w := f.q[0]
				w.watch, w.after = true, nil
				f.q = append(f.q[1:], w)
			}
			f.mu.Unlock()
			wait = max(finishFirst, min(2*wait, finishMax))
			continue
		}
		// A refusal for good ends it too; the NodeCall hook has reported
		// it. (No log here: a logger may call Close, which waits for this
		// goroutine.)
		f.mu.Lock()
		if len(f.q) > 0 && f.q[0].k == r.k {
			f.q = f.q[1:]
		}
		f.mu.Unlock()
		wait = 0 // the node answers: on to the next at once
	}
}

// closeGrace is how long Close lets unfinished releases go on.
func (c *Client) closeGrace() time.Duration {
	return max(4*c.cfg.timeout(), 100*time.Millisecond)
}

// abandoned returns Close's report of the releases left unfinished, nil
// when none were.
func (c *Client) abandoned() error {
	var keys []string
	dropped := 0
	for i := range c.finish {
		f := &c.finish[i]
		f.mu.Lock()
		keys = append(keys, f.abandoned...)
		dropped += f.dropped
		f.mu.Unlock()
	}
	if len(keys) == 0 && dropped == 0 {
		return nil
	}
	msg := fmt.Sprintf("%d unfinished (keys expire by their TTL)", len(keys))
	if len(keys) > 0 {
		const shown = 10
		msg += ": " + strings.Join(keys[:min(len(keys), shown)], ", ")
		if len(keys) > shown {
			msg += fmt.Sprintf(" and %d more", len(keys)-shown)
		}
	}
	if dropped > 0 {
		msg += fmt.Sprintf("; %d more never queued (queue full)", dropped)
	}
	return fmt.Errorf("%w: %s", ErrAbandoned, msg)
}

// retryRelease queues a release on node i that failed with err, when the
// failure may pass and a command of the lock may have reached the node
// (and left a key there): the release's own step tells (see reached);
// its predecessor may still be running and cannot be read.
func (r *round) retryRelease(i int, err error) {
	if node.Permanent(err) || !r.next[i].reached || !r.ch.c.clk.Now().Before(r.expires) {
		return
	}
	var after *step
	if r.prev != nil {
		after = &r.prev[i]
	}
	r.ch.c.finishLater(i, release{k: *r.ch.k, announce: r.cmd.announce, until: r.expires, ch: r.ch, after: after})
}

// runsLate reports whether a node call that failed with err may still
// run on the node: it timed out after it was sent. (A refused dial, an
// error reply or a reset connection ended it; a command never sent, as
// one that waited for a pooled connection, cannot run.)
func runsLate(err error) bool {
	return errors.Is(err, node.ErrTimeout) && !unsent(err) && !errors.Is(err, node.ErrPoolWait)
}

// watchRelease queues node i's release, which found the key absent after
// prev, the lock's previous command there, had failed: that command (a
// SET, say, that timed out on its way) may not have run yet, and would
// then set the key after the release. A node can hold a command for
// longer than any wait for its reply (a paused or starved server, a
// reply later than the node's background read of it), so the release is
// sent again, backing off, until it finds the token or the key could no
// longer be there (the command's TTL has passed).
func (r *round) watchRelease(i int, prev *step) {
	if !runsLate(prev.err) || !r.ch.c.clk.Now().Before(r.expires) {
		return
	}
	r.ch.c.finishLater(i, release{k: *r.ch.k, announce: r.cmd.announce, until: r.expires, ch: r.ch, watch: true})
}
