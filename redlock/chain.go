package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

// chain is the one path every command on a lock takes: acquire, extend,
// release and rollback. It keeps, for each node, the lock's last command
// there, and applies the rule that makes a lock's commands reach each node
// in the order they were issued:
//
// A command on a node waits until the lock's previous command on that node
// has returned. A release sent while the SET is still in flight could be
// overtaken by it and leave the key behind for a TTL; a short extend
// overtaken by a later long one could make the node count for the long one
// while its key dies early. A release right after the acquire is the
// exception: it goes at once, and again after the acquire has returned
// unless its first answer (Done: the key held the token) shows it was not
// overtaken (see early). The wait ends with the round's deadline (one
// node timeout after the round began); a command still waiting then is not
// sent at all, so commands queued behind a silent node never form a chain
// that outlives a node timeout. A command sent after waiting for more than
// half of its round gets a full node timeout of its own, so that a release
// that follows a late reply has time to land. (A command whose call timed
// out may still reach the node later; extend.lua never shortens a key, so
// a stale extend is harmless.)
//
// On the common path every previous command has returned by the time the
// next is issued, and a round costs its goroutines, its steps, the
// quorum's replies and channel, and a share of a deadline (deadlines); a
// channel to wait on is made only when a command finds its
// predecessor still running (a slow node).
//
// A chain belongs to one lock. Its commands are issued one at a time: by
// the attempt that made it, then by whoever holds the Lock's op slot.
type chain struct {
	c      *Client
	k      *node.Key // the lock's own (Lock.k)
	shared bool      // a read hold: commands go to node.Sharer
	// tailAcquire: the last round was the acquire (see round.ahead);
	// owned by the issuer.
	tailAcquire bool
	timeout     time.Duration // the node timeout: the round's deadline, and that of a node call unless its node is slow
	maxTimeout  time.Duration // the longest a slow node's call may take (see rto.go)
	tail        []step        // the last round's command on each node; nil before the first; owned by the issuer
	expires     time.Time     // on the client's clock, when every key an acquire or extend sent may have set is gone; owned by the issuer

	mu sync.Mutex // guards the done and wake fields of every step of the chain
}

// step is one command on one node.
type step struct {
	res node.Result // written before done is set
	err error       // written before done is set
	gen uint64      // the node breaker's generation the call was let through in
	// via: a command the breaker skipped before the lock's previous
	// command on the node had returned takes that command's reached
	// flag once it has (see chain.wasReached); nil otherwise.
	via  *step
	sent bool // this or an earlier command of the lock was sent to the node
	// reached: this or an earlier command of the lock may have reached
	// the node (it answered, or failed other than by a refused dial or
	// not being sent), so a key of the lock may be there. Written by the
	// call before done is set.
	reached bool
	// late: this or an earlier command of the lock on the node may
	// still run there (it timed out after it was sent, see runsLate, or
	// had not returned when this one ended). A release after such a step
	// leaves a tombstone and is watched (see watchRelease): not only the
	// previous command may set the key late, an acquire two steps back
	// may (an extend and its reseed between them answered meanwhile).
	// Written by the call before done is set.
	late bool

	done bool          // guarded by chain.mu: the command returned, or was not sent
	wake chan struct{} // guarded by chain.mu: made by a command that waits for this one, closed at done
}

// round is one command sent through a chain: the quorum round that counts
// its replies, and what its calls share.
type round struct {
	quorum.Round
	ch         *chain
	cmd        command
	prev, next []step // the chain's steps before and after this round
	// ctx is the context the round was sent with, never cancelled (its
	// base), with the round's deadline, shared with the rounds begun
	// with it (see deadlines).
	ctx          roundCtx
	left         atomic.Int32 // calls not yet returned or skipped
	afterAcquire bool         // prev is the acquire's (see ahead)
	expires      time.Time    // the chain's expires when the round was sent
}

// send issues cmd to every node through the chain and returns the round.
// The caller has begun an operation on the client (see Client.begin); the
// round counts itself in the client's bg until its last call returns, so
// that Close waits for it. Calls outlive ctx's cancellation, keeping its
// values: their replies decide what must be cleaned up.
func (ch *chain) send(ctx context.Context, cmd command) *round {
	n := len(ch.c.nodes)
	r := &round{ch: ch, cmd: cmd, prev: ch.tail, afterAcquire: ch.tailAcquire, next: make([]step, n)}
	ch.tail, ch.tailAcquire = r.next, cmd.op == "acquire"
	if cmd.op == "acquire" || cmd.op == "extend" || cmd.op == "reseed" || cmd.op == "transfer" {
		// A key set now lives ttl from when the node runs the command:
		// two node timeouts from now at the latest, unless it is late.
		// (A call may wait up to a node timeout for the lock's previous
		// command there, then get one of its own.)
		ch.expires = later(ch.expires, ch.c.clk.Now().Add(cmd.ttl+2*ch.maxTimeout))
	}
	r.expires = ch.expires
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	// One deadline for the round: it bounds every call whose predecessor
	// had returned, and every wait for one that had not.
	r.ctx = roundCtx{base: ctx, d: ch.c.rounds.after(ch.timeout)}
	r.left.Store(int32(n))
	ch.c.life.bg.Add(1)
	r.Start(ch.c.clk, n, r)
	return r
}

// Skip asks node i's breaker whether the call may go (quorum.Skipper). A
// node whose breaker is open gets no call: its step fails at once. A
// release is the exception where an earlier command of this lock was sent
// to the node (it may have left a key): the lock's own acquire may be the
// breaker's probe, still in flight.
func (r *round) Skip(i int) error {
	c, s := r.ch.c, &r.next[i]
	if r.prev != nil {
		s.sent = r.prev[i].sent
	}
	ok, gen := c.allow(i)
	if ok || (r.cmd.op == "release" && s.sent) {
		s.gen, s.sent = gen, true
		return nil
	}
	err := &node.Error{Addr: c.nodes[i].Addr(), Op: r.cmd.op, Kind: node.ErrCircuitOpen}
	// A key of the lock may be there as far as the earlier commands got:
	// the previous one's flag says, once it has returned (wasReached);
	// until then an earlier command that was sent may have.
	s.reached = s.sent
	if r.prev != nil {
		s.via = &r.prev[i]
		s.late = r.ch.lateBefore(&r.prev[i])
	}
	r.ch.finish(s, node.Result{}, err)
	c.callDone(i, r.cmd.op, 0, err)
	r.end()
	return err
}

// Call runs node i's command (quorum.Caller), once the lock's previous
// command there has returned (see late). It runs at the bottom of a new
// goroutine, above the node's driver: what is rare stays out of its frame.
func (r *round) Call(i int) (node.Result, error) {
	c := r.ch.c
	var start time.Time // for the NodeCall hook only
	if c.cfg.hooks.NodeCall != nil {
		start = c.clk.Now()
	}
	var prev *step
	if r.prev != nil {
		prev = &r.prev[i]
	}
	var (
		res  node.Result
		err  error
		took time.Duration // measured for the adaptive timeouts only
	)
	var passes bool
	var rb *chain
	var rs *step
	if r.cmd.behind != nil {
		rb, rs = r.rollingOn(i)
	}
	switch {
	case r.cmd.fromTail != nil && !r.cmd.from.ch.landed(&r.cmd.fromTail[i]):
		res, err = r.follow(i, &r.cmd.from.ch, &r.cmd.fromTail[i])
	case rs != nil:
		res, err = r.follow(i, rb, rs)
	case prev != nil && r.ahead() && !r.ch.landed(prev):
		res, err = r.early(i, prev)
	case prev != nil && !r.ch.landed(prev):
		res, passes, err = r.late(i, prev)
		if passes {
			return r.passed(i, prev)
		}
	case r.passes(i, prev):
		return r.passed(i, prev)
	case c.health.rtts == nil:
		res, err = r.do(&r.ctx, i, prev)
	default:
		res, took, err = r.timed(i, prev)
	}
	r.next[i].reached = r.ch.reached(prev, err)
	r.next[i].late = runsLate(err) || r.ch.lateBefore(prev)
	r.ch.finish(&r.next[i], res, err)
	c.record(i, r.next[i].gen, err)
	if c.health.rtts != nil {
		c.adapt(i, took, err)
	}
	switch {
	case r.cmd.op == "release" && err != nil:
		r.retryRelease(i, err)
	case r.cmd.op == "release" && prev != nil:
		// Whatever it found, our token included: after a command
		// that may still run (step.late), a second SET of the token
		// may come (an acquire and the reseed after it).
		r.watchRelease(i, prev, res.Status == node.Done)
	case r.cmd.op == "transfer" && err == nil:
		r.watchFrom(i)
	}
	if c.cfg.hooks.NodeCall != nil {
		c.callDone(i, r.cmd.op, c.clk.Since(start), err)
	}
	r.end()
	return res, err
}

// Kept returns node i's outcome as its step holds it (quorum.Keeper):
// Call and Skip write it (finish) before the call's end reaches the
// round's owner.
func (r *round) Kept(i int) (node.Result, error) { return r.next[i].res, r.next[i].err }

// passed ends node i's step of a command that passes (see passes): the
// previous answer stands, nothing is sent, and the breaker's permission
// is handed back unused.
func (r *round) passed(i int, prev *step) (node.Result, error) {
	res, err := node.Result{Status: prev.res.Status}, prev.err
	switch {
	case r.cmd.freed != nil && r.cmd.freed[i]:
		res, err = node.Result{Status: node.Done}, nil
	case r.cmd.op == "release":
		res = prev.res
	}
	r.next[i].reached = r.ch.reached(prev, err)
	r.next[i].late = runsLate(err) || r.ch.lateBefore(prev)
	r.ch.finish(&r.next[i], res, err)
	r.ch.c.unused(i, r.next[i].gen)
	r.end()
	return res, err
}

// end counts a call out; the last one ends the round's count in the
// client's bg.
func (r *round) end() {
	if r.left.Add(-1) == 0 {
		r.ch.c.life.bg.Done()
	}
}

// late is Call's command on node i when the lock's previous command there
// has not returned yet: it waits for it until the round's deadline, and
// is not sent if it is still running then.
func (r *round) late(i int, prev *step) (res node.Result, passes bool, err error) {
	ctx, cancel := r.callCtx(i)
	if cancel != nil {
		defer cancel()
	}
	if !r.ch.await(prev, ctx.Done()) {
		return node.Result{}, false, &node.Error{Addr: r.ch.c.nodes[i].Addr(), Op: r.cmd.op, Kind: node.ErrTimeout, Err: errPrevPending}
	}
	if r.passes(i, prev) {
		return node.Result{}, true, nil
	}
	// Usually the previous command was the tail of an acquire that
	// returned at the majority, and it landed moments later; only when
	// the wait used up half the round does this command get a deadline of
	// its own.
	if d, _ := ctx.Deadline(); time.Until(d) < r.timeout(i)/2 {
		var cancel2 context.CancelFunc
		ctx, cancel2 = context.WithTimeout(r.ctx.base, r.timeout(i))
		defer cancel2()
	}
	res, err = r.do(ctx, i, prev)
	return res, false, err
}

// ahead reports whether the round's command goes to a node before the
// lock's previous command there has returned: a release (of an Unlock or
// a rollback) right after the acquire, which no transfer followed. Its
// answer says whether it overtook the acquire (see early): release.lua
// and release_shared.lua answer Done only where they found the token,
// which only the acquire can have set. (After a reseed still on its way
// a Done says nothing: the reseed may set the key again.)
func (r *round) ahead() bool {
	return r.cmd.op == "release" && r.afterAcquire && r.cmd.freed == nil
}

// early is Call's release on node i when the lock's previous command
// there (the acquire's SET, still on its way) has not returned: the
// release is sent at once, as if it had. Done (the key held the token)
// is final: the SET had run. Anything else may mean the release overtook
// the SET, which would then set the key after the release found nothing
// there, so the release goes again once the SET has returned, as late
// sends it (or not at all where the SET proved the key is not ours; the
// first answer stands then). The common straggler of an acquire that
// returned at the majority answers moments later; a release that waited
// for it cost the cycle a wake-up and a round trip after it.
func (r *round) early(i int, prev *step) (node.Result, error) {
	ctx, cancel := r.callCtx(i)
	res, err := r.do(ctx, i, nil) // (prev has not returned: do must not read it)
	if cancel != nil {
		cancel()
	}
	switch {
	case err == nil && res.Status == node.Done:
		return res, nil
	case err == nil:
		again, passes, err := r.late(i, prev)
		if passes {
			// The acquire proved the key is not ours: the first answer
			// stands, and Call counts the one call made.
			return res, nil
		}
		return again, err
	}
	// The release failed: whether a key of the lock is left there (see
	// reached) depends on the previous command, whose call ends within
	// its own deadline.
	r.ch.await(prev, nil)
	return res, err
}

// rollingOn returns the release on node i of the latest failed attempt
// in cmd.behind that set the key there and whose release has not
// returned, and its chain (nil: none).
func (r *round) rollingOn(i int) (*chain, *step) {
	for k := len(r.cmd.behind) - 1; k >= 0; k-- {
		if s := r.cmd.behind[k].rollingOn(i); s != nil {
			return r.cmd.behind[k].ch, s
		}
	}
	return nil, nil
}

// follow is Call's command on node i when a command of another lock's
// chain, s in from, must return before it runs: a transfer follows the
// handed-over lock's last command there, and a waiting call's acquire
// the release of its failed attempt's key (command.behind). As late,
// with that command in the other chain.
func (r *round) follow(i int, from *chain, s *step) (node.Result, error) {
	ctx, cancel := r.callCtx(i)
	if cancel != nil {
		defer cancel()
	}
	if !from.await(s, ctx.Done()) {
		return node.Result{}, &node.Error{Addr: r.ch.c.nodes[i].Addr(), Op: r.cmd.op, Kind: node.ErrTimeout, Err: errPrevPending}
	}
	if d, _ := ctx.Deadline(); time.Until(d) < r.timeout(i)/2 {
		var cancel2 context.CancelFunc
		ctx, cancel2 = context.WithTimeout(r.ctx.base, r.timeout(i))
		defer cancel2()
	}
	return r.do(ctx, i, nil)
}

// timed is do for node i with the node's own timeout (see rto.go), and
// how long the call took.
func (r *round) timed(i int, prev *step) (node.Result, time.Duration, error) {
	ctx, cancel := r.callCtx(i)
	t0 := time.Now()
	res, err := r.do(ctx, i, prev)
	took := time.Since(t0)
	if cancel != nil {
		cancel()
	}
	return res, took, err
}

// reached is a step's reached flag after its call ended with err; prev
// is the lock's previous step on the node (nil for the first). A call
// may have reached the node unless its dial was refused; one that was not
// sent because prev had not returned leaves prev out, and prev may reach
// it (its flag cannot be read before it is done).
func (ch *chain) reached(prev *step, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, errPrevPending):
		return true
	}
	return ch.wasReached(prev) || !node.Refused(err)
}

// wasReached reads the reached flag of s, a step that has returned (nil:
// none): that of the command it stands for when the breaker skipped it
// (s.via), once that one has returned too.
func (ch *chain) wasReached(s *step) bool {
	for s != nil && s.via != nil && ch.landed(s.via) {
		s = s.via
	}
	return s != nil && s.reached
}

// lateBefore reports whether a command of the lock up to s (nil: none)
// may still run on its node: s, or one before it, timed out after it was
// sent, or s has not returned yet.
func (ch *chain) lateBefore(s *step) bool {
	return s != nil && (!ch.landed(s) || s.late)
}

// errPrevPending fails a node's call that was never sent: the node had
// not answered the lock's previous command by the end of this round.
var errPrevPending = errors.New("the previous command for this lock had not returned; not sent")

// finish records step s's outcome and wakes whoever waits for it.
func (ch *chain) finish(s *step, res node.Result, err error) {
	ch.mu.Lock()
	s.res, s.err, s.done = res, err, true
	if s.wake != nil {
		close(s.wake)
	}
	ch.mu.Unlock()
}

// landed reports whether step s is done, without waiting.
func (ch *chain) landed(s *step) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return s.done
}

// await waits until step s is done, and reports whether it is; it gives
// up when stop is closed (nil never stops).
func (ch *chain) await(s *step, stop <-chan struct{}) bool {
	ch.mu.Lock()
	if s.done {
		ch.mu.Unlock()
		return true
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	wake := s.wake
	ch.mu.Unlock()
	select {
	case <-wake:
		return true
	case <-stop:
		return false
	}
}

// wait blocks until the commands last issued to the nodes in which return.
func (ch *chain) wait(which []int) {
	for _, i := range which {
		ch.await(&ch.tail[i], nil)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
