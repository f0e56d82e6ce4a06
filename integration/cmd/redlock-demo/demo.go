package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// violationError is demo's error when the checker saw two workers hold
// the lock at once.
type violationError struct{ overlaps, lost int }

func (e *violationError) Error() string {
	return fmt.Sprintf("mutual exclusion violated: %d overlapping lock windows, %d lost counter updates", e.overlaps, e.lost)
}

// demo runs the demonstration cfg describes and writes its live log and
// summary to out. It tears down everything it started before the summary,
// and also when ctx ends early (Ctrl-C): the workers stop, the summary of
// what ran is printed, and ctx's error is returned. Otherwise the error is
// a *violationError if mutual exclusion broke, an error if no lock was
// granted at all, or a failure to set up or tear down the nodes.
func demo(ctx context.Context, cfg demoConfig, out io.Writer) error {
	v := newView(out)
	e, err := prepare(ctx, cfg, v)
	if err != nil {
		return err
	}
	defer e.close() // for panics; the normal path closes before the summary
	r := &demoRun{cfg: cfg, env: e, v: v, stats: newStats(cfg.workers)}
	r.announce()
	elapsed := r.run(ctx)
	closeErr := e.close()
	if err := r.summarize(elapsed, ctx.Err() != nil, closeErr); err != nil {
		return err
	}
	if closeErr != nil {
		return fmt.Errorf("cleaning up: %w", closeErr)
	}
	return ctx.Err()
}

// demoRun is one run of the workers against an env.
type demoRun struct {
	cfg   demoConfig
	env   *env
	v     *view
	stats *stats
	chk   checker.Checker // lock windows, checked for overlaps
	ctr   checker.Counter // read-pause-write under the lock: lost updates
}

// announce prints what is about to happen.
func (r *demoRun) announce() {
	cfg := r.cfg
	r.v.note("%d workers, each with its own client, contend for lock %q for %v:", cfg.workers, r.env.key, cfg.duration)
	nodeTO := "the library's default"
	if cfg.nodeTO > 0 {
		nodeTO = cfg.nodeTO.String()
	}
	r.v.note("  Lock (TTL %v, node timeout %s, quorum %d of %d), %v of work on a shared counter, Unlock.", cfg.ttl, nodeTO, r.env.quorum(), len(r.env.urls), cfg.hold)
	switch {
	case cfg.kills():
		r.v.note("  Node %d will be killed at +%.3fs.", killNode+1, cfg.killAt.Seconds())
	case len(cfg.urls) > 0:
		r.v.note("  No node will be killed: the -urls nodes are not the demo's to kill.")
	case cfg.killAt == 0:
		r.v.note("  No node will be killed (-kill-at 0).")
	default:
		r.v.note("  No node will be killed: -kill-at %v is not within -duration %v.", cfg.killAt, cfg.duration)
	}
	if cfg.hold >= cfg.ttl {
		r.v.note("  Warning: -hold %v >= -ttl %v: the work outlives every lock; expect violations.", cfg.hold, cfg.ttl)
	}
	r.v.note("")
}

// run starts the workers, the killer and the status line, and returns when
// all of them are done: after cfg.duration, or sooner if ctx ends.
func (r *demoRun) run(ctx context.Context) time.Duration {
	t0 := r.v.start()
	ctx, cancel := context.WithDeadline(ctx, t0.Add(r.cfg.duration))
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range r.env.clients {
		wg.Go(func() { r.worker(ctx, i+1, c) })
	}
	wg.Go(func() { r.killer(ctx) })
	wg.Go(func() { r.statusLoop(ctx) })
	wg.Wait()
	return time.Since(t0)
}

// maxWait bounds one Lock call. Redlock has no queue: a worker that keeps
// losing the race waits with no limit but its context's, and a wait of
// two TTLs is worth a line in the log.
func (r *demoRun) maxWait() time.Duration { return max(2*r.cfg.ttl, time.Second) }

// worker takes the lock, does the work and unlocks, until ctx ends. w is
// 1-based.
func (r *demoRun) worker(ctx context.Context, w int, c *redlock.Client) {
	for ctx.Err() == nil {
		started := time.Now()
		lctx, cancel := context.WithTimeout(ctx, r.maxWait())
		l, err := c.Lock(lctx, r.env.key)
		waitedOut := lctx.Err() != nil
		cancel()
		if err != nil {
			if !r.lockFailed(ctx, w, started, waitedOut, err) {
				return
			}
			continue
		}
		r.critical(w, l, started)
		// Other work, without the lock. Without it the worker that just
		// unlocked would win the next round almost always: Redlock has
		// no queue, and the others are asleep in their backoff.
		sleep(ctx, rand.N(r.cfg.hold+1))
	}
}

// critical is the work under the lock, recorded for the checker.
func (r *demoRun) critical(w int, l *redlock.Lock, started time.Time) {
	got := time.Now()
	r.stats.granted(w, got, got.Sub(started))
	r.v.granted(w, l.TTL(), got.Sub(started))
	h := r.chk.Begin(w, l.Key(), l.Token(), got, l.Until())
	r.ctr.Increment(r.cfg.hold)
	done := time.Now()
	h.End(done)
	r.v.releasing(w, done.Sub(got))
	r.unlock(w, l, done.Sub(got))
}

// unlock releases l; it runs even when the demo is being interrupted, so
// the others need not wait for the TTL.
func (r *demoRun) unlock(w int, l *redlock.Lock, held time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ttl)
	defer cancel()
	err := l.Unlock(ctx)
	switch {
	case err == nil:
	case errors.Is(err, redlock.ErrNotHeld):
		r.v.event("worker %d: the lock had expired before Unlock: %s of work outran its validity", w, ms(held))
	default:
		r.v.event("worker %d: Unlock not confirmed by a majority (%s); the keys expire by their TTL", w, outcome(err))
	}
}

// lockFailed logs a failed Lock call worth seeing and reports whether the
// worker should go on. waitedOut is true when the call's own deadline
// (maxWait) ended it.
func (r *demoRun) lockFailed(ctx context.Context, w int, started time.Time, waitedOut bool, err error) bool {
	waited := seconds(time.Since(started))
	switch {
	case ctx.Err() != nil:
		return false // the demo is over, or interrupted: not a failure
	case errors.Is(err, redlock.ErrInvalid), errors.Is(err, redlock.ErrClosed):
		r.v.event("worker %d stops: %v", w, err)
		return false
	case waitedOut:
		r.v.event("worker %d gave up after waiting %s: %s", w, waited, outcome(err))
		return true
	}
	r.v.event("worker %d got no lock in %s: %s", w, waited, outcome(err))
	sleep(ctx, 100*time.Millisecond) // Lock gave up before its deadline: do not spin
	return true
}

// killer kills node 3 at cfg.killAt, if the demo is to kill a node.
func (r *demoRun) killer(ctx context.Context) {
	if !r.cfg.kills() || !sleep(ctx, r.cfg.killAt) {
		return
	}
	began := time.Now()
	kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	how, err := r.env.kill(kctx, killNode)
	if err != nil {
		r.v.event("could not kill node %d: %v", killNode+1, err)
		return
	}
	r.stats.killed(began)
	n := len(r.env.urls)
	r.v.event("KILLED node %d (%s, took %s): %d of %d nodes left, quorum %d still reachable",
		killNode+1, how, ms(time.Since(began)), n-1, n, r.env.quorum())
}

// statusLoop prints the status line every second until ctx ends.
func (r *demoRun) statusLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		up := r.env.probe(ctx)
		// The deadline may have passed without ctx noticing yet (its
		// timer runs late on a loaded machine): the probes then failed
		// for that reason, not because the nodes are down.
		if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
			return
		}
		r.v.status(r.stats.snapshot(), up)
	}
}

// sleep waits d, or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// outcome summarises a failed Lock or Unlock for the log: how the nodes
// answered the last attempt, and why those that failed did.
func outcome(err error) string {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return err.Error()
	}
	var parts []string
	if n := qe.Count(node.Done); n > 0 {
		parts = append(parts, fmt.Sprintf("%d yes", n))
	}
	if n := qe.Count(node.Taken); n > 0 {
		parts = append(parts, fmt.Sprintf("%d held by another worker", n))
	}
	if n := qe.Count(node.Absent); n > 0 {
		parts = append(parts, fmt.Sprintf("%d no key", n))
	}
	for _, i := range qe.Failed() {
		parts = append(parts, fmt.Sprintf("node %d %s", i+1, failure(qe.Replies[i].Err)))
	}
	if n := silent(qe); n > 0 {
		parts = append(parts, fmt.Sprintf("%d not answered yet", n))
	}
	s := fmt.Sprintf("last attempt: %s (need %d)", strings.Join(parts, ", "), qe.Need)
	if qe.Attempts > 1 {
		s += fmt.Sprintf(", %d attempts", qe.Attempts)
	}
	return s
}

// silent counts the nodes that had not answered when the attempt was
// decided.
func silent(qe *redlock.QuorumError) int {
	n := 0
	for _, rep := range qe.Replies {
		if !rep.Answered() {
			n++
		}
	}
	return n
}

// failure names the kind of a node error in a word or two.
func failure(err error) string {
	switch {
	case errors.Is(err, node.ErrUnreachable):
		return "unreachable"
	case errors.Is(err, node.ErrTimeout):
		return "timed out"
	case errors.Is(err, node.ErrClosed):
		return "closed"
	case errors.Is(err, node.ErrAuth):
		return "refused the credentials"
	case errors.Is(err, node.ErrProtocol):
		return "is not Redis"
	}
	return "failed (" + err.Error() + ")"
}
