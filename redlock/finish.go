package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// a node that stays down costs one release call per backoff interval
// (the queue's head, a probe), not one goroutine per lock. The interval
// doubles from finishFirst up to the node's timeout, no further. Once
// the node answers, or while its timeouts come with late replies (slow,
// not down: Client.answersLate), the rest of the queue goes at once, up to
// finishBatch releases side by side (each its own call, on the node's
// shared connection one pipelined write): its releases are done within
// about two of its timeouts (the try under way, the wait, the next
// try), not a TTL, and not one round trip per queued lock after that
// (a torture trace: a node slowed to 30–60 ms a call by a loaded
// machine took 260 ms to reach the fifth release in its queue). Its
// breaker does not hold it back (see Client.repaired): while the node
// is down the worker sends one call at a time, so it costs one call per
// node timeout while releases are owed to it, and the first one it
// answers closes its breaker. A
// release leaves the queue when the node
// answers it (done, or the key is not ours: absent or another token),
// refuses it for good (node.Permanent), or the key's TTL has ended it
// anyway. Close lets the queues run for closeGrace more, then reports
// what is left (ErrAbandoned); those keys expire by their TTL.
const (
	finishFirst = 20 * time.Millisecond // first wait before a retry (the next: finishAgain)
	watchMax    = 2 * time.Second       // longest wait between tries of a watched release
	finishCap   = 4096                  // releases queued per node; beyond, dropped to the TTL
	finishBatch = 32                    // releases of a node's queue sent side by side once the node answers
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
	// A watched release (see watchRelease): when it is next sent, and
	// the wait after that (real time).
	next  time.Time
	every time.Duration
}

// finisher is one node's queue of releases to finish.
type finisher struct {
	mu sync.Mutex
	q  []release
	// watched: releases that found nothing after a command of their
	// lock that may still run (see watchRelease), each sent again on a
	// schedule of its own, after q's releases, and not reported at Close.
	watched []release
	running bool // a goroutine works q and watched
	dropped int  // releases not queued because q was full
	// abandoned counts, per key, the releases given up at Close; gaveUp
	// lists those keys in the order they were first given up.
	abandoned map[string]int
	gaveUp    []string
}

// finishLater queues r on node i and starts the node's worker if none
// runs. It is called from a node call counted in c.life.bg, so Close, which
// waits for bg before it waits for the workers, never misses one.
func (c *Client) finishLater(i int, r release) {
	c.enqueue(i, r, false)
}

// enqueue adds r to node i's queue, or to its watched releases, and
// starts the node's worker if none runs.
func (c *Client) enqueue(i int, r release, watch bool) {
	f := &c.fin.per[i]
	f.mu.Lock()
	switch {
	case watch && len(f.watched) < finishCap:
		r.after, r.every = nil, finishFirst
		r.next = time.Now().Add(r.every)
		f.watched = append(f.watched, r)
	case watch: // best effort: the key expires by its TTL
	case len(f.q) < finishCap:
		f.q = append(f.q, r)
	default:
		f.dropped++
	}
	start := !f.running && len(f.q)+len(f.watched) > 0
	f.running = f.running || start
	f.mu.Unlock()
	if start {
		c.fin.wg.Add(1)
		go c.finishReleases(i)
	}
}

// finishReleases works node i's queue and watched releases until both
// are empty, or until closeGrace after Close.
func (c *Client) finishReleases(i int) {
	defer c.fin.wg.Done()
	f := &c.fin.per[i]
	wait := finishFirst
	n := 1                // queued releases to send at the next try: the head alone until the node answers
	var closing time.Time // set when Close is seen
	done := c.life.done
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
			f.lastTries()
		}
		t.Stop()
		rs, watched, due, more := f.next(c.clk.Now(), closing, n)
		switch {
		case !more:
			return
		case !due.IsZero():
			wait = max(time.Until(due), time.Millisecond) // only watched releases, none due yet
		case watched:
			wait = c.finishWatched(i, f, rs[0], closing)
		default:
			wait, n = c.finishQueued(i, f, rs, wait)
		}
	}
}

// lastTries makes every watched release of f due at once: Close gives
// each one last try.
func (f *finisher) lastTries() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for j := range f.watched {
		f.watched[j].next = time.Time{}
	}
}

// next drops f's releases whose key has expired by now (on the client's
// clock), and all of them once Close's grace (closing) has ended, those
// of q counted as abandoned. It returns the releases to send: up to n
// of q from its head (a copy), else the first watched release that is
// due (watched). due, when set, is when the first watched release comes
// due, none being due now. With more false nothing is left, and the
// worker ends.
func (f *finisher) next(now, closing time.Time, n int) (rs []release, watched bool, due time.Time, more bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.q = liveOnly(f.q, now)
	f.watched = liveOnly(f.watched, now)
	if len(f.q)+len(f.watched) > 0 && !closing.IsZero() && !time.Now().Before(closing) {
		for _, r := range f.q {
			if f.abandoned == nil {
				f.abandoned = make(map[string]int)
			}
			if f.abandoned[r.k.Name] == 0 {
				f.gaveUp = append(f.gaveUp, r.k.Name)
			}
			f.abandoned[r.k.Name]++
		}
		f.q, f.watched = nil, nil
	}
	switch {
	case len(f.q) > 0:
		return slices.Clone(f.q[:min(n, len(f.q))]), false, time.Time{}, true
	case len(f.watched) == 0:
		f.running = false
		return nil, false, time.Time{}, false
	}
	rt := time.Now() // watched releases are paced on real time
	for _, w := range f.watched {
		if !w.next.After(rt) {
			return []release{w}, true, time.Time{}, true
		}
		if due.IsZero() || w.next.Before(due) {
			due = w.next
		}
	}
	return nil, false, due, true
}

// finishQueued sends rs, releases from the head of f's queue (see
// finisher.next), to node i side by side, but those that must wait,
// and returns the wait before the worker's next look and how many to
// send then: none and finishBatch when every one sent was answered
// (on to the rest at once), finishFirst and finishBatch when some were
// not but the node answers (one was answered, or it is slow, not down),
// the retry wait (finishAgain) and 1, a probe, otherwise or when none
// could go yet.
func (c *Client) finishQueued(i int, f *finisher, rs []release, wait time.Duration) (time.Duration, int) {
	// A release whose lock's previous command there (a SET on its way)
	// has not returned waits: now it could overtake that command, find
	// nothing, and leave the SET's key for a TTL.
	rs = slices.DeleteFunc(rs, func(r release) bool { return r.after != nil && !r.ch.landed(r.after) })
	if len(rs) == 0 {
		return c.finishAgain(i, wait), 1
	}
	errs := make([]error, len(rs))
	send := func(j int) {
		// Sent whether the node's breaker is open or not (see
		// Client.repaired): the node may be back before its cooldown
		// ends, and the key would stay until then. A retry may be the
		// probe; an answer past an open breaker closes it.
		ok, gen := c.allow(i)
		_, took, err := c.sendRelease(i, rs[j], false)
		c.repaired(i, ok, gen, err)
		c.callDone(i, "release", took, err)
		errs[j] = err
	}
	if len(rs) == 1 {
		send(0)
	} else {
		var wg sync.WaitGroup
		for j := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				send(j)
			}()
		}
		wg.Wait()
	}
	// answers: the node answered one of rs, or timed one out while its
	// late replies keep coming (Client.answersLate): it is slow, not
	// down, and the rest go side by side again soon; probing it one
	// release per timeout would leave the fifth in its queue there for
	// five of them (a torture trace: a loaded machine's node timed out
	// its probes, 345 ms after the faults stopped). Failures of every
	// other kind back off as a node that is down does: an error reply
	// (loading, busy) is no reason to send it more.
	failed, answers := false, false
	for j, r := range rs {
		if err := errs[j]; err != nil && !node.Permanent(err) {
			failed = true
			answers = answers || c.answersLate(i, err)
			continue
		}
		answers = true
		// Answered, or refused for good (the NodeCall hook has
		// reported it; no log here: a logger may call Close, which
		// waits for this goroutine): it leaves the queue.
		f.drop(r)
		if errs[j] == nil && r.after != nil && r.after.late {
			// The lock's previous command there (returned, see
			// above), or one before it, timed out and may yet set
			// the key: whatever this release found (our token too: a
			// second command of it may still come), it is watched.
			c.enqueue(i, r, true)
		}
	}
	switch {
	case !failed:
		return 0, finishBatch
	case answers:
		return finishFirst, finishBatch
	}
	return c.finishAgain(i, wait), 1
}

// drop takes release r out of f's queue (its first entry for the same
// key of the same lock).
func (f *finisher) drop(r release) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := slices.IndexFunc(f.q, func(q release) bool { return q.k == r.k && q.ch == r.ch }); j >= 0 {
		f.q = slices.Delete(f.q, j, j+1)
	}
}

// finishWatched sends watched release r to node i (see watchRelease)
// and schedules its next try, or ends it; the worker looks again at
// once.
func (c *Client) finishWatched(i int, f *finisher, r release, closing time.Time) time.Duration {
	ok, gen := c.allow(i)
	res, took, err := c.sendRelease(i, r, true)
	c.repaired(i, ok, gen, err)
	c.callDone(i, "release", took, err)
	failed := err != nil && !node.Permanent(err)
	c.rewatch(i, f, r, closing.IsZero() && (err == nil && res.Status != node.Done || failed), failed)
	return 0 // the next due one, or the next wait, at once
}

// sendRelease sends release r to node i, within the node's timeout, and
// returns its answer and how long it took. A watched release, or one
// after a command that may still run (r.after has returned, see
// finishOne), leaves a tombstone, whether it finds the token or not.
func (c *Client) sendRelease(i int, r release, watched bool) (res node.Result, took time.Duration, err error) {
	start := c.clk.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(i))
	defer cancel()
	k := r.k
	if watched || r.after != nil && r.after.late {
		k.Tomb = c.tomb(i, r.until)
	}
	if r.ch.shared {
		res, err = c.nodes[i].(node.Sharer).ReleaseShared(ctx, &k, r.announce)
	} else {
		res, err = c.nodes[i].Release(ctx, &k, r.announce)
	}
	return res, c.clk.Since(start), err
}

// finishAgain is node i's wait before its next retry after wait: twice
// as long, from finishFirst up to the node's timeout.
func (c *Client) finishAgain(i int, wait time.Duration) time.Duration {
	return max(finishFirst, min(2*wait, c.nodeTimeout(i)))
}

// rewatch ends watched release r on node i's finisher f, or, with
// again, schedules its next try: after a try that found nothing of the
// lock, the wait doubles up to watchMax (the watch is for a late SET
// that may come any time); after one that failed (the node did not
// answer), it is retried as a failed release is, at most the node's
// timeout later (finishAgain), so that a watch whose key a late
// command has set is done within about two timeouts of the node
// answering again (a torture trace: the tries timed out while the
// faults lasted, the wait had doubled meanwhile, and the key stayed past
// the release oracle's bound once they stopped).
func (c *Client) rewatch(i int, f *finisher, r release, again, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := slices.IndexFunc(f.watched, func(w release) bool { return w.k == r.k })
	switch {
	case j < 0:
	case again:
		w := &f.watched[j]
		if failed {
			w.every = c.finishAgain(i, w.every)
		} else {
			w.every = min(2*w.every, watchMax)
		}
		w.next = time.Now().Add(w.every)
	default:
		f.watched = slices.Delete(f.watched, j, j+1)
	}
}

// liveOnly drops from rs, in place, the releases whose key has expired
// by now.
func liveOnly(rs []release, now time.Time) []release {
	live := rs[:0]
	for _, r := range rs {
		if now.Before(r.until) {
			live = append(live, r)
		}
	}
	clear(rs[len(live):])
	return live
}

// closeGrace is how long Close lets unfinished releases go on.
func (c *Client) closeGrace() time.Duration {
	return max(4*c.cfg.timeout(), 100*time.Millisecond)
}

// abandoned returns Close's report of the releases left unfinished, nil
// when none were: how many, and each node and key they were for once,
// with its count when above one (releases of many locks of one key are
// one line, not one each).
func (c *Client) abandoned() error {
	var keys []string
	total, dropped := 0, 0
	for i := range c.fin.per {
		f := &c.fin.per[i]
		f.mu.Lock()
		for _, k := range f.gaveUp {
			n := f.abandoned[k]
			total += n
			line := fmt.Sprintf("%q on node[%d] %s", k, i, c.nodes[i].Addr())
			if n > 1 {
				line += fmt.Sprintf(" (%d releases)", n)
			}
			keys = append(keys, line)
		}
		dropped += f.dropped
		f.mu.Unlock()
	}
	if total == 0 && dropped == 0 {
		return nil
	}
	msg := fmt.Sprintf("%d unfinished (keys expire by their TTL)", total)
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

// watchRelease watches node i's release after prev, the lock's previous
// command there, where prev or a command before it timed out (step.late):
// that command (a SET, say) may not have run yet, and would then set the
// key after the release. found says the release found the lock's token:
// then an earlier command is still to come only if one timed out before
// it (an acquire, then its reseed). A node can hold a command for longer than any wait for its
// reply (a paused or starved server, a reply later than the node's
// background read of it, a command in the socket of a pooled connection
// that a release on another connection overtook), so the release is
// sent again, its wait doubling from 20 ms to 2 s, after the node's other
// queued releases, while it finds no token of the lock, until the key
// that command could set would have expired (r.expires: its TTL and two
// node timeouts from when it was sent; a command held longer than that
// leaves its key for a TTL). Every try leaves or renews a tombstone (see
// Client.tomb), which stops a late script at once;
// the tries are for a late plain SET NX, which cannot read one: another
// token there does not end the watch, since the SET lands once that key
// is gone (its holder's Unlock), and it costs the key at most one wait
// between tries. It ends when it finds the token (Done: it removed the
// late key). Close gives it one last try if its grace allows, and does
// not report it. Not watched: a release whose previous command was not
// sent (skipped by the breaker, or waiting for its own predecessor).
func (r *round) watchRelease(i int, prev *step, found bool) {
	late := r.ch.lateBefore(prev)
	if found {
		// Our token was there: a previous command still on its way
		// (a release sent ahead of it, see early) has run, the key
		// holds what it set; only one that timed out before it, or
		// it timing out, leaves another SET to come.
		late = r.ch.landed(prev) && prev.late
	}
	if !late || !r.ch.c.clk.Now().Before(r.expires) {
		return
	}
	r.ch.c.enqueue(i, release{k: *r.ch.k, announce: r.cmd.announce, until: r.expires, ch: r.ch}, true)
}

// watchFrom watches, on node i, the release of the lock a transfer round
// handed over, where the transfer answered (Done: it replaced that
// lock's key by the successor's; Absent: released it, or handed it to the
// head of the queue; Taken: found another token) after a command of
// that lock that may still run there (step.late): no release of that
// lock follows on the node once the handoff succeeds (see passes,
// command.freed, Lock.releaseRest), and the late command would set its
// token once the key is free, for a TTL, with no one left to release it
// (a late acquire, or transfer to it, of a lock that was then handed on
// within the client). As watchRelease, until that lock's keys would
// have expired. (A handoff that fails releases that lock where it found
// another token, and watches that release too: the rare late case pays
// for a second watch.)
func (r *round) watchFrom(i int) {
	from := r.cmd.from
	if !from.ch.lateBefore(&r.cmd.fromTail[i]) || !r.ch.c.clk.Now().Before(from.ch.expires) {
		return
	}
	r.ch.c.enqueue(i, release{k: from.k, announce: true, until: from.ch.expires, ch: &from.ch}, true)
}
