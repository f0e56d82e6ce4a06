// Package redlock is a Redlock client: a lock taken by majority over N
// independent Redis masters, so that it keeps working while a minority of
// them is dead, hung or cut off.
//
// A Client fans SET key token NX PX ttl out to every node in parallel,
// decides as soon as a majority answered (or can no longer answer), and
// hands out a Lock only while its validity window — TTL minus the time the
// acquisition took minus an allowance for clock drift — is positive. Failed
// attempts are rolled back on every node, replies that arrive late
// included. Extend and Unlock go through Lua scripts that check the token.
//
// The guarantees, and where they end, are described in the README: a lock
// is exclusive only until Until(), measured on this process's monotonic
// clock, and only while node clocks run at about the same rate and nodes
// do not restart without their keys sooner than one TTL.
package redlock

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

// Client takes locks on a fixed set of independent Redis masters. It is
// safe for concurrent use; create one per process and share it.
type Client struct {
	// Set by New and never changed.
	nodes  []node.Node
	owned  bool // nodes were made by Dial and are closed by Close
	quorum int
	cfg    config
	log    *slog.Logger
	clk    clock.Clock
	// breakers has one circuit breaker per node, nil when turned off;
	// each guards itself.
	breakers []*breaker
	// noFence is the error of a fenced lock on these nodes: nil when
	// every node is a node.Fencer.
	noFence error
	// tag names this client on the nodes (node.Key.Owner): 16 random hex
	// digits; rtag names its readers (readerTag). handoff: every node is
	// a node.Handoffer, so Unlock can hand the lock to this client's next
	// waiter (see handoff.go).
	tag     string
	rtag    string
	handoff bool
	// rtts has one round-trip estimate per node, for the adaptive node
	// timeouts; nil when WithNodeTimeout fixes them (see rto.go). lates
	// has each node as a node.LateAnswerer (nil where it is not one), for
	// the estimates and the breaker (answersLate).
	rtts  []rtt
	lates []node.LateAnswerer

	// mu guards closed and the bg.Add that starts an operation (begin);
	// it is never held across I/O.
	mu     sync.Mutex
	closed bool
	// done is closed by Close, ending Lock's retry waits at once.
	done chan struct{}
	// bg counts operations in progress and every node call they started,
	// including those still running after their caller returned. An
	// operation's own count lets its rounds add theirs while Close waits.
	bg sync.WaitGroup
	// qmu guards queues: per key, the local FIFO of this client's Lock
	// calls waiting for it.
	qmu     sync.Mutex
	queues  map[string]*turnstile
	hot     map[string]time.Time     // guarded by qmu: when a Lock call on the key last had to wait (see hotFor)
	owed    []owedLeave              // guarded by qmu: Leaves sent again until their debt ends, and by Close (see owe)
	reowing bool                     // guarded by qmu: resend is running
	live    map[*node.Key]bool       // guarded by qmu: the registrations of waiting calls (see register)
	leaving map[string]chan struct{} // guarded by qmu: per queue, closed once the last call's Leaves have returned (see registerAfterLeaves)
	touched map[string]touched       // guarded by qmu: per queue, where a call of this client registered lately (see sweep)
	byGrant map[*Lock]bool           // guarded by qmu: locks taken by grants, until unlocked or expired (see sweep)
	// finish has one queue per node of releases that failed for a reason
	// that may pass, and finishing counts the goroutines working them
	// (see finishLater).
	finish    []finisher
	finishing sync.WaitGroup
	// closeOnce runs Close's work once; closeErr is its result.
	closeOnce sync.Once
	closeErr  error
}

// New returns a client over nodes, which must be independent masters (no
// replication between them) with distinct addresses. It does no network
// traffic. An even number of nodes is allowed but logged as a warning: it
// tolerates no more failures than one node fewer.
func New(nodes []node.Node, opts ...Option) (*Client, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	return newClient(nodes, cfg, false)
}

// Dial parses one URL per node (redis://[user[:password]@]host[:port][/db],
// or rediss:// for TLS) and returns a client over them. It does not
// connect: a node that is down now can join later. Errors wrap ErrInvalid
// or node.ErrBadURL and never contain a password.
func Dial(urls []string, opts ...Option) (*Client, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	eps := make([]node.Endpoint, len(urls))
	for i, u := range urls {
		ep, err := node.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("redlock: node[%d]: %w", i, err)
		}
		eps[i] = ep
	}
	// A node's own Timeout (default 1s) caps every call on it, so a node
	// timeout above it must raise it, or WithNodeTimeout(3*time.Second)
	// would quietly mean one second.
	nopts := cfg.nodeOptions
	if own := cmp.Or(nopts.Timeout, time.Second); cfg.maxTimeout() > own {
		nopts.Timeout = cfg.maxTimeout()
	}
	nodes := make([]node.Node, len(eps))
	for i, ep := range eps {
		nodes[i] = node.New(ep, nopts)
	}
	c, err := newClient(nodes, cfg, true)
	if err != nil {
		closeAll(nodes)
		return nil, err
	}
	return c, nil
}

func newClient(nodes []node.Node, cfg config, owned bool) (*Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	n := len(nodes)
	if n == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrInvalid)
	}
	seen := make(map[string]int, n)
	for i, nd := range nodes {
		if nd == nil {
			return nil, fmt.Errorf("%w: node[%d] is nil", ErrInvalid, i)
		}
		addr := strings.ToLower(nd.Addr())
		if addr == "" {
			return nil, fmt.Errorf("%w: node[%d] has no address", ErrInvalid, i)
		}
		if j, dup := seen[addr]; dup {
			return nil, fmt.Errorf("%w: node[%d] and node[%d] are both %s; Redlock needs independent masters", ErrInvalid, j, i, nd.Addr())
		}
		seen[addr] = i
	}
	noFence := noFencer(nodes)
	if cfg.fenced && noFence != nil {
		return nil, noFence
	}
	q := quorum.Majority(n)
	if cfg.quorum != 0 {
		if cfg.quorum < q || cfg.quorum > n {
			return nil, fmt.Errorf("%w: quorum %d must be in [%d, %d] for %d nodes", ErrInvalid, cfg.quorum, q, n, n)
		}
		q = cfg.quorum
	}
	c := &Client{nodes: nodes, owned: owned, quorum: q, cfg: cfg, log: cfg.logger, clk: cfg.clock, done: make(chan struct{}), queues: map[string]*turnstile{}, hot: map[string]time.Time{}, live: map[*node.Key]bool{}, leaving: map[string]chan struct{}{}, touched: map[string]touched{}, byGrant: map[*Lock]bool{},
		finish: make([]finisher, n), breakers: newNodeBreakers(cfg.breaker, n, cfg.timeout()), noFence: noFence}
	c.lates = make([]node.LateAnswerer, n)
	c.handoff = true
	for i, nd := range nodes {
		c.lates[i], _ = nd.(node.LateAnswerer)
		_, ok := nd.(node.Handoffer)
		c.handoff = c.handoff && ok
	}
	c.tag = newToken()[:16]
	c.rtag = readerTag(c.tag)
	if cfg.nodeTimeout == 0 {
		c.rtts = make([]rtt, n)
	}
	if n%2 == 0 {
		c.log.Warn("redlock: even number of nodes tolerates no more failures than one fewer", "nodes", n, "quorum", q)
	}
	return c, nil
}

// Quorum returns how many nodes must agree.
func (c *Client) Quorum() int { return c.quorum }

// Close ends Lock's retry waits at once, waits for operations in progress
// and for node calls still running in the background (each bounded by
// about two node timeouts, a leave of the queue by four: it waits for
// its call's attempts first; the adaptive timeouts may grow a slow
// node's to TTL/20), lets releases that failed on a node and are being retried
// go on for four node timeouts more (at least 100ms), takes the Lock
// calls it ended, and those that gave up lately where a command of theirs
// may still register them, out of the nodes' queues (handing on a key
// reserved or granted to them), and takes the client out for good of
// every queue it waited in during the last lease (about 2 s): a key
// reserved for it, or granted to a call of it, goes on, unless a lock it
// took by grants still holds that key. Where a command timed out lately
// it sends those Leaves again two node timeouts later. Then it closes the
// nodes if Dial made them. Releases still unfinished then are reported in
// an error wrapping ErrAbandoned; their keys expire by their TTL. Locks
// still held are not released: they expire. Lock, TryLock, Extend and
// Unlock called after Close fail with ErrClosed. Close may be called more
// than once, from any goroutine; every call returns once the client is
// closed, with the first call's result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.done)
		c.bg.Wait()
		if c.handoff {
			c.leaveOwed()
		}
		c.finishing.Wait()
		abandoned := c.abandoned()
		if abandoned != nil {
			c.log.Warn("redlock: close: releases left unfinished", "err", abandoned)
		}
		var closed error
		if c.owned {
			closed = closeAll(c.nodes)
		}
		c.closeErr = errors.Join(abandoned, closed)
	})
	return c.closeErr
}

// closeAll closes the nodes that can be closed.
func closeAll(nodes []node.Node) error {
	var errs []error
	for _, n := range nodes {
		if cl, ok := n.(io.Closer); ok {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}

// begin starts an operation that may send node calls, counted in bg so
// that Close waits for it; it reports false once the client is closed.
// Every true must be matched by c.bg.Done().
func (c *Client) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.bg.Add(1)
	return true
}

// TryLock makes exactly one attempt to take key. It returns a Lock, or an
// error wrapping ErrNotAcquired (a *QuorumError) when no majority was had
// within the validity window, or ErrInvalid for bad input.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	cfg.retry = NoRetry()
	return c.lock(ctx, c.cfg.prefix+key, &cfg, true)
}

// Lock takes key, retrying with the client's RetryStrategy until it holds
// the lock, the strategy gives up, WithMaxWait's limit passes, or ctx
// ends; with the defaults (no attempt limit, no wait limit) only ctx
// bounds the wait, also while the nodes do not answer. Refusals no retry
// changes (credentials, no scripts, ...) on a majority end it at once. On
// failure the error is a *QuorumError of the last attempt, wrapping
// ErrNotAcquired and, when ctx ended, ctx's error. Goroutines of one
// client waiting for the same key take turns in FIFO order, and the lock
// is handed from one to the next by Unlock (see Lock.Unlock). A lock that
// another client's Unlock handed to this call directly (a grant, see
// Lock.Token) is at first valid for less than its TTL: for
// node.GrantTTL (2 s) from this call's last attempt. If it is still
// held half-way through that, one extend in the background restores
// the TTL (at once under a KeepAlive whose LostMargin needs it), so
// that a short critical section costs no extend.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return c.lock(ctx, c.cfg.prefix+key, &cfg, false)
}

// lock is Lock (or TryLock, once) for a checked configuration and the
// full key; it reports to the Acquire hook.
func (c *Client) lock(ctx context.Context, key string, cfg *config, once bool) (*Lock, error) {
	start := c.clk.Now()
	var (
		l        *Lock
		attempts int
		err      error
	)
	var giveUp time.Time // WithMaxWait's limit, on the client's clock
	if cfg.maxWait > 0 {
		giveUp = start.Add(cfg.maxWait)
	}
	if once || cfg.shared {
		// TryLock, and readers: they neither queue nor take turns.
		l, attempts, err = c.retry(ctx, key, cfg, false, giveUp)
	} else {
		l, attempts, err = c.wait(ctx, key, cfg, giveUp)
	}
	if h := c.cfg.hooks.Acquire; h != nil {
		h(AcquireInfo{Key: key, Wait: c.clk.Since(start), Attempts: attempts, Err: err})
	}
	return l, err
}

// wait is Lock's retry loop behind the key's local queue: it waits for
// this call's turn among the client's waiters for key, then retries.
func (c *Client) wait(ctx context.Context, key string, cfg *config, giveUp time.Time) (l *Lock, attempts int, err error) {
	turn := c.join(key)
	defer func() { c.leave(key, turn, l) }()
	if err := c.awaitTurn(ctx, turn, giveUp, key); err != nil {
		return nil, 0, err
	}
	return c.retry(ctx, key, cfg, true, giveUp)
}

// retry makes attempts until one succeeds, cfg.retry gives up or cfg.maxWait has passed; it
// returns the number of attempts made. After the first failure it
// subscribes to the key's releases and, once subscribed, tries once more
// at once (a release in between is not missed); later waits end at the
// first release notification, at the moment the holder's keys expire on a
// majority, or after the retry delay, whichever comes first. A call that
// heads key's local queue (queued) also takes the lock when an Unlock of
// this client hands it over (see handoff.go).
func (c *Client) retry(ctx context.Context, key string, cfg *config, queued bool, giveUp time.Time) (l *Lock, attempt int, err error) {
	// A key this client had to wait for lately is likely held again: the
	// call subscribes first and queues from its first attempt (see
	// hotFor) instead of spending a round on a plain SET to learn that.
	// (Lock only, as queued says: TryLock never queues, readers take no turns.)
	wt := waiter{c: c, key: key, cfg: cfg, queued: queued, giveUp: giveUp, hot: queued && c.contended(key)}
	defer func() { wt.end(l, err) }()
	for attempt = 1; ; attempt++ {
		if g, waited, err := wt.awaitHandoff(ctx); waited {
			if g != nil || err != nil {
				return g, attempt - 1, err
			}
			attempt-- // no attempt made: the loop checks the holder again
			continue
		}
		tok, err := wt.prepare(ctx, attempt)
		if err != nil {
			return nil, attempt - 1, err
		}
		l, qe, err := c.attempt(ctx, key, cfg, attempt > 1 || wt.hot, wt.ticket, wt.grant, tok)
		switch {
		case err != nil:
			return nil, attempt, err
		case qe == nil:
			return l, attempt, nil
		}
		prev, stop := wt.failed(qe, attempt)
		if stop {
			return nil, attempt, qe
		}
		if g, err := wt.pause(ctx, qe, attempt, prev); g != nil || err != nil {
			return g, attempt, err
		}
	}
}

// waiter is one retry call's state across its attempts.
type waiter struct {
	c      *Client
	key    string
	cfg    *config
	queued bool      // Lock: the call heads key's local queue, and queues on the nodes
	giveUp time.Time // WithMaxWait's limit, on the client's clock; zero: none
	hot    bool      // the key was contended lately: subscribe and queue from the first attempt

	w       *watches
	o       *offer
	perm    []int8      // per node, as refusals: what its last reply said
	asked   int         // waits so far: each asks cfg.retry with the next number (see RetryStrategy)
	ticket  int64       // this call's place in the nodes' queue for key; 0 before it has one
	grant   string      // the node.Key.Grant this call asks for once it queues (see granted)
	lost    bool        // a waiting attempt left a node's reply unknown: no grant is counted
	refused bool        // an attempt failed for a reason a retry may change: this call waited
	sent    []*inflight // waiting attempts whose commands may still register the call on a node
	reg     *node.Key   // the call's registration, from its first waiting attempt (see register)
}

// end is retry's last step, whatever ended it: l the lock it returns,
// err its error.
func (wt *waiter) end(l *Lock, err error) {
	c := wt.c
	if qe, ok := err.(*QuorumError); ok {
		qe.ch, qe.undo, qe.sent = nil, nil, nil // for undone and leaveWaiters only: the caller's error keeps no attempt alive
	}
	if wt.w != nil {
		wt.w.stop()
	}
	c.withdraw(wt.key, wt.o, l)
	if wt.reg != nil {
		// Waiting attempts registered this client as a waiter; a
		// node that set the key dropped the registration itself.
		// (None when a local holder handed the key over before
		// this call made a waiting attempt.)
		c.leaveWaiters(wt.reg, l, wt.sent)
	}
	if wt.refused && wt.queued {
		// Also when a grant or a handoff ended the wait after the
		// first attempt (attempt is 1 then): a key whose holders
		// hand it on by grant stays hot.
		c.waited(wt.key)
	}
}

// awaitHandoff waits, instead of trying the nodes, while a lock of this
// client holds the key, or its Unlock is handing it to this call, or
// releasing it and will poke this call once the release has returned:
// for the handoff or the poke, its retry delay apart (a delay that ends
// while awaited sends nothing). (A retry delay that ended while the
// transfer was on its way sent an attempt that the nodes could only
// refuse: about one handoff in seven with eight goroutines and 1 ms
// holds.) waited is false when the call should try the nodes; with it,
// the lock handed over, or the error that ends the call, or neither:
// look again.
func (wt *waiter) awaitHandoff(ctx context.Context) (g *Lock, waited bool, err error) {
	c := wt.c
	if !wt.queued || !c.heldHere(wt.key) && !c.awaited(wt.o) {
		return nil, false, nil
	}
	if wt.o == nil {
		wt.o = c.offer(wt.key, wt.cfg)
	}
	if wt.o == nil {
		return nil, false, nil
	}
	wt.asked++
	d, again := wt.cfg.retry.Backoff(wt.asked)
	if !wt.giveUp.IsZero() {
		d = max(0, min(d, wt.giveUp.Sub(c.clk.Now())))
	}
	g, err = c.sleep(ctx, d, nil, wt.o, 0)
	switch {
	case g != nil:
		return g, true, nil
	case err == ErrClosed:
		return nil, true, err
	case err != nil, !again, !wt.giveUp.IsZero() && !c.clk.Now().Before(wt.giveUp):
		return nil, true, notStarted("acquire", wt.key, c, ctx, ErrNotAcquired)
	}
	return nil, true, nil
}

// prepare readies attempt number attempt and returns its token: fresh
// per attempt, not just per Lock call, so that a late rollback of a
// failed attempt can never delete the keys of a later one. A hot key's
// call subscribes before its first attempt; the first waiting attempt
// registers the call, once the Leaves of the client's call before it
// have returned. Only an attempt after a failed one asks the nodes for
// the holder's TTL (by script): the first attempt of a Lock call, and
// TryLock's only one, stay one plain SET per node, unless the key is
// hot.
func (wt *waiter) prepare(ctx context.Context, attempt int) (string, error) {
	c := wt.c
	if wt.hot && wt.w == nil && attempt == 1 {
		// Subscribed before the first attempt, which queues; only
		// when this call tries the nodes (not while a lock of this
		// client will hand the key over).
		if wt.w, wt.grant = c.watchWaiting(wt.key, wt.cfg, true); wt.w != nil {
			// Not a wait between attempts: the retry strategy is
			// not asked (it sees each wait once, numbered from 1).
			// A subscription confirms in a round trip.
			_ = wt.w.ready(ctx, c, wt.cfg.timeout()) // an ended ctx or Close ends the attempt
		}
	}
	tok := newToken()
	if wt.grant != "" {
		wt.w.expect(c, node.GrantMessage(wt.grant, tok))
	}
	wt.w.forget()
	if wt.reg == nil && (attempt > 1 || wt.hot) {
		reg, err := c.registerAfterLeaves(ctx, wt.key, wt.grant, wt.cfg.shared)
		switch {
		case err == ErrClosed:
			return "", err
		case err != nil:
			return "", notStarted("acquire", wt.key, c, ctx, ErrNotAcquired)
		}
		wt.reg = reg
	}
	return tok, nil
}

// failed takes in failed attempt number attempt (its error qe): its
// commands that may still register the call, its ticket, its refusals.
// It returns the ticket the call had before it, and stop when no retry
// can help: ctx ended, or the refusals put a majority out of reach.
func (wt *waiter) failed(qe *QuorumError, attempt int) (prev int64, stop bool) {
	qe.Attempts = attempt
	if qe.sent != nil {
		wt.sent = append(pending(wt.sent), qe.sent)
	}
	wt.lost = wt.lost || qe.lost
	prev = wt.ticket
	if qe.queued {
		// Only a round that queued the call on a majority gives a
		// ticket worth keeping: any call that queues later meets
		// that majority on some node, whose counter has reached
		// it, and gets a larger one. A ticket from a minority (a
		// node whose counter lags, the others silent) could put
		// this call ahead of one already queued on a majority.
		wt.ticket = max(wt.ticket, qe.ticket)
	}
	wt.perm = mergeRefusals(wt.perm, qe.perm)
	if qe.ctxErr != nil || wt.c.hopeless(wt.perm) {
		return prev, true
	}
	wt.refused = true
	return prev, false
}

// pause is the wait after failed attempt number attempt (its error qe;
// prev the ticket before it). After the first failure it subscribes to
// the key's releases and, once subscribed, tries once more at once (a
// release in between is not missed); later waits end at the first
// release notification, at the moment the holder's keys expire on a
// majority, or after the retry delay, whichever comes first. It returns
// the lock a handoff or a grant brought meanwhile, or the error that
// ends the call, or neither: attempt again.
func (wt *waiter) pause(ctx context.Context, qe *QuorumError, attempt int, prev int64) (*Lock, error) {
	c, cfg := wt.c, wt.cfg
	wt.asked++
	d, again := cfg.retry.Backoff(wt.asked)
	if !wt.giveUp.IsZero() {
		left := wt.giveUp.Sub(c.clk.Now())
		again = again && left > 0
		d = min(d, left)
	}
	if !again {
		return nil, qe
	}
	var err error
	if attempt == 1 {
		if wt.queued && wt.o == nil {
			wt.o = c.offer(wt.key, cfg)
		}
		if wt.w == nil {
			if wt.w, wt.grant = c.watchWaiting(wt.key, cfg, wt.queued); wt.w != nil {
				if err = wt.w.ready(ctx, c, d); err == nil {
					return nil, nil
				}
			}
		}
	}
	if err == nil && qe.split && wt.ticket != prev {
		// The nodes gave this call different tickets (a node's
		// counter had started over): queue again at once with the
		// largest, so that every node orders the waiters alike.
		return nil, nil
	}
	if err == nil {
		if qe.queued && wt.w.listening(c.quorum) {
			// Queued on a majority, and heard by a majority: the
			// release that reserves the key for this call names
			// it, and wakes no one else. Wake for that, or to
			// renew the place in the queue before its lease ends.
			d = queuePoll
			if !wt.giveUp.IsZero() {
				d = min(d, max(0, wt.giveUp.Sub(c.clk.Now())))
			}
		}
		if qe.freeIn > 0 {
			d = min(d, qe.freeIn)
		}
		var g *Lock
		if g, err = c.sleep(ctx, d, wt.w, wt.o, c.spread()); g != nil {
			return g, nil
		}
		if err == nil && !wt.lost && qe.undone() && wt.w.grantedBy(c.quorum) {
			if g = c.granted(wt.key, cfg, wt.grant, wt.ticket, qe.started); g != nil {
				return g, nil
			}
		}
	}
	if err != nil {
		if err == ErrClosed {
			return nil, err
		}
		qe.setContext(ctx)
		return nil, qe
	}
	return nil, nil
}

// unsent reports whether err says a node call was never sent (its
// breaker was open, or the lock's previous command there had not
// returned): it cannot act later.
func unsent(err error) bool {
	return errors.Is(err, node.ErrCircuitOpen) || errors.Is(err, errPrevPending)
}

// watchWaiting subscribes a waiting Lock call to key's releases (watch;
// a reader's call to the key's channel only) and returns the grant it
// asks for (grantFor, for a call that queues): "" without watches, where
// no one would hear a grant (a reservation lasts a lease at most, a
// grant node.GrantTTL).
func (c *Client) watchWaiting(key string, cfg *config, queued bool) (*watches, string) {
	grant := ""
	if queued {
		grant = c.grantFor(cfg)
	}
	w := c.watch(key, !cfg.shared, grant != "")
	if w == nil {
		return nil, ""
	}
	return w, grant
}

// grantFor returns a fresh node.Key.Grant for a Lock call that waits with
// cfg, or "" where the nodes would not grant it: fenced locks (their fence
// needs a round of its own), semaphores and readers, and nodes that are
// not all Handoffers.
func (c *Client) grantFor(cfg *config) string {
	if !c.handoff || cfg.fenced || cfg.shared || cfg.queue != "" {
		return ""
	}
	return node.GrantValue(c.tag, newToken())
}

// granted returns the lock that a majority of nodes granted this call
// (node.Key.Grant, announced by name) since its last waiting attempt,
// which began at from. The attempt's replies are all in, and its
// rollback has freed every key it set (QuorumError.undone). Each grant
// came after that node had answered: a grant set before would have been
// taken by the attempt (its token in the key), and was announced naming
// the attempt before it. Where the attempt set the key (it was free
// there, reserved for the client, or held an earlier grant), a grant
// came after the rollback's release, which queued the client again
// naming this attempt (see rollback). So no command of this call is left
// to change a grant (a release of an attempt token never frees a grant),
// and the key lives there at least node.GrantTTL from from, which is
// where the validity counts from (then restore extends it, if it is
// still held). It returns nil when more than grantMaxAge has passed
// since from: an attempt then takes the granted keys with a validity
// counted from now.
func (c *Client) granted(key string, cfg *config, grant string, ticket int64, from time.Time) *Lock {
	age, short := c.clk.Since(from), node.GrantTTL(cfg.ttl)
	if age > grantMaxAge(cfg.ttl) || clock.Validity(short, age, cfg.driftFactor) <= 0 {
		return nil
	}
	k := node.NewKey(key, grant)
	k.Owner, k.Ticket, k.Grant = c.tag, ticket, grant
	l := newLock(c, k, cfg)
	// The chain as if the grant were the lock's acquire, answered by
	// every node: its release goes to all of them, a grant may come late.
	l.ch.tail = make([]step, len(c.nodes))
	for i := range l.ch.tail {
		l.ch.tail[i] = step{res: node.Result{Status: node.Done}, sent: true, reached: true, done: true}
	}
	l.ch.expires = c.clk.Now().Add(cfg.ttl + node.WaiterLease + 2*l.ch.maxTimeout) // a node may grant while its registration lasts
	l.grant(from, 0)
	c.heldByGrant(l)
	if short < cfg.ttl {
		// A node grants for less than the TTL (so that a waiter that
		// died blocks the key for a lease at most), from after the
		// last attempt: valid that long from the attempt's start, then.
		// Most locks are unlocked well before; one that is still held
		// half-way through is extended by its TTL then, in the
		// background (restore).
		l.until, l.short = clock.Until(from, short, l.drift), true
		if c.begin() {
			l.hurry, l.restored = make(chan struct{}, 1), make(chan struct{})
			// Half-way, or sooner where the node timeout needs it to land
			// in time.
			l.restoreAt = from.Add(short / 2)
			if last := l.until.Add(-l.ch.maxTimeout); last.Before(l.restoreAt) {
				l.restoreAt = last
			}
			go l.restore(c.clk.NewTimer(l.restoreAt.Sub(c.clk.Now())))
		}
	}
	return l
}

// restore extends by its TTL a lock that a grant made valid for less
// (see granted), when t (due at l.restoreAt) fires or when hurried,
// unless it has been unlocked or extended by then; the caller has
// counted it in the client's bg. If the extend fails, the lock stays
// valid for what the grant gave it, and a KeepAlive extends it before
// then.
func (l *Lock) restore(t clock.Timer) {
	defer l.c.bg.Done()
	defer close(l.restored)
	defer t.Stop()
	select {
	case <-t.C():
	case <-l.hurry:
	case <-l.c.done:
		return
	}
	select {
	case l.op <- struct{}{}:
	case <-l.c.done:
		return
	}
	defer func() { <-l.op }()
	l.mu.Lock()
	due := l.short && !l.released
	l.mu.Unlock()
	if due {
		_ = l.extend(context.Background(), l.ttl)
	}
}

// grantMaxAge bounds what a lock taken by grants loses of its validity
// against one taken by an attempt: a tenth of its TTL, and at most half
// of node.GrantTTL, so that the restore that may follow is not late (the
// grant's validity counts from the start of the waiter's last attempt,
// usually less than queuePoll before; beyond the bound an attempt takes
// the grants).
func grantMaxAge(ttl time.Duration) time.Duration { return min(ttl/10, node.GrantTTL(ttl)/2) }

// queuePoll is how long a waiter queued on the nodes, and woken by name
// when its turn comes, sleeps between attempts: often enough to renew
// its place (node.WaiterLease) and to find a key reserved for it whose
// announcement it missed.
const queuePoll = node.WaiterLease / 3

// sleep waits d on the client's clock, or until w (nil: none) hears a
// release, or until o (nil: none) receives a handoff: then it returns the
// lock handed over (nil: the lock was released without a handoff, try
// now). A release heard while a handoff to o is under way, or a release
// by an Unlock of this client that pokes o once it has returned (see
// Client.awaited), does not end the wait. A release that reserves the key
// for this waiter is announced by each node as it gets there: the wait
// ends once a majority announced it, so that the attempt that follows
// finds the key reserved on a majority, or grace after the first
// announcement (another node's may be lost, or that node reserved the key
// for another waiter); grace 0 ends it at the first, except for a grant,
// which waits up to a node timeout for the others of a majority (then the
// call holds the lock without an attempt, see Client.granted). It returns
// ctx's error if ctx ends first, ErrClosed if the client is closed first.
func (c *Client) sleep(ctx context.Context, d time.Duration, w *watches, o *offer, grace time.Duration) (*Lock, error) {
	var gift chan *Lock
	if o != nil {
		gift = o.gift
	}
	t := c.clk.NewTimer(d)
	defer t.Stop()
	var (
		heard   int
		late    clock.Timer
		lateC   <-chan time.Time
		wake    = w.wake()
		reserve = w.reservations()
		grants  = w.grantsC()
	)
	defer func() {
		if late != nil {
			late.Stop()
		}
	}()
	for {
		announced := false
		select {
		case <-t.C():
			return given(gift), nil
		case <-reserve:
			announced = true
		case <-grants:
			// As a reservation; once a majority granted, the call may
			// hold the lock without another attempt (Client.granted).
			w.nGranted++
			announced = true
		case <-lateC:
			lateC = nil
		case <-wake:
		case g := <-gift:
			return g, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, ErrClosed
		}
		if announced {
			g := grace
			if g == 0 && w.nGranted > 0 {
				// A grant is worth waiting for: the others of a
				// majority come within a release's round.
				g = c.cfg.timeout()
			}
			if heard++; heard < c.quorum && g > 0 {
				if late == nil {
					late = c.clk.NewTimer(g)
					lateC = late.C()
				}
				continue
			}
		}
		// A release was heard. While a handoff to this call is under
		// way, it is the nodes handing the key to another client's
		// waiter, or reserving it for this client, whose lock is on its
		// way here: wait for the handoff. While an Unlock of this client
		// releases instead, it is that release on its way: wait for its
		// poke.
		if c.awaited(o) {
			continue
		}
		return given(gift), nil
	}
}

// given returns a lock handed over on gift (nil: none) that came at the
// same moment as the wake-up that ends a sleep, so that the call takes it
// rather than try the nodes against it.
func given(gift chan *Lock) *Lock {
	select {
	case g := <-gift:
		return g
	default:
		return nil
	}
}

// hopeless reports whether so many nodes refused for reasons a retry
// cannot change (node.Permanent: credentials or rights, no scripts, a key
// of the wrong type, a read-only or full node, TLS, not Redis) that the
// quorum is out of reach. perm is what each node's last reply said, over
// the attempts so far (see refusals): an attempt decided before a node's
// refusal came in still counts the refusal it made the attempt before.
func (c *Client) hopeless(perm []int8) bool {
	bad := 0
	for _, p := range perm {
		if p > 0 {
			bad++
		}
	}
	return len(c.nodes)-bad < c.quorum
}

// refusals says, per node, what its reply in replies was: 1 a refusal a
// retry cannot change, -1 any other reply, 0 none yet.
func refusals(replies []quorum.Reply) []int8 {
	out := make([]int8, len(replies))
	for i, r := range replies {
		switch {
		case node.Permanent(r.Err):
			out[i] = 1
		case r.Err != nil || r.Result.Status != node.Unknown:
			out[i] = -1
		}
	}
	return out
}

// mergeRefusals updates perm with an attempt's refusals: a node's newer
// reply replaces its older one; no reply keeps it.
func mergeRefusals(perm, attempt []int8) []int8 {
	if attempt == nil {
		return perm
	}
	if perm == nil {
		perm = make([]int8, len(attempt))
	}
	for i, v := range attempt {
		if v != 0 {
			perm[i] = v
		}
	}
	return perm
}

func (c *Client) lockConfig(key string, opts []Option) (config, error) {
	cfg := c.cfg
	if len(opts) > 0 {
		// Options may keep the pointer they are given, so it must be a
		// heap copy; without options cfg stays on the stack.
		p := new(config)
		*p = cfg
		p.only = ""
		for _, o := range opts {
			o(p)
		}
		cfg = *p
		if cfg.only != "" {
			return cfg, fmt.Errorf("%w: %s configures a client (New, Dial), not one lock", ErrInvalid, cfg.only)
		}
	}
	if key == "" {
		return cfg, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if err := cfg.check(); err != nil {
		return cfg, err
	}
	if cfg.fenced && c.noFence != nil {
		return cfg, c.noFence
	}
	return cfg, nil
}

// noFencer returns the ErrInvalid that a fenced lock gets when a node is
// not a node.Fencer, or nil when every node is.
func noFencer(nodes []node.Node) error {
	for i, nd := range nodes {
		if _, ok := nd.(node.Fencer); !ok {
			return fmt.Errorf("%w: fencing asked for, and node[%d] (%s) cannot fence", ErrInvalid, i, nd.Addr())
		}
	}
	return nil
}

// attempt is one round of the algorithm: SET NX PX everywhere in parallel,
// count, check validity, roll back on failure. wait asks the nodes that
// refuse for the holder's TTL. It returns a Lock, or a *QuorumError, or
// ErrClosed.
func (c *Client) attempt(ctx context.Context, key string, cfg *config, wait bool, ticket int64, grant, token string) (*Lock, *QuorumError, error) {
	if !c.begin() {
		return nil, nil, ErrClosed
	}
	l, qe := c.try(ctx, key, cfg, wait, ticket, grant, token)
	c.bg.Done()
	// Logged once the operation has ended: a logger may call Close.
	if qe != nil && c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("redlock: attempt failed", "key", key, "validity", qe.Validity, "err", qe)
	}
	return l, qe, nil
}

// try is attempt's work, within a begun operation.
func (c *Client) try(ctx context.Context, key string, cfg *config, wait bool, ticket int64, grant, token string) (*Lock, *QuorumError) {
	if ctx.Err() != nil {
		// Nothing is sent for a context that has already ended.
		return nil, notStarted("acquire", key, c, ctx, ErrNotAcquired)
	}
	if token == "" {
		// A fresh token per attempt (see Client.retry).
		token = newToken()
	}
	l := newLock(c, c.attemptKey(key, token, cfg, ticket, grant), cfg)
	r := l.ch.send(ctx, command{op: "acquire", ttl: cfg.ttl, fenced: cfg.fenced, wait: wait})
	t := r.Wait(ctx.Done(), c.quorum)
	validity := clock.Validity(cfg.ttl, r.Elapsed(), cfg.driftFactor)
	if t.Reached(c.quorum) && validity > 0 && ctx.Err() == nil {
		if !cfg.fenced {
			l.grant(r.Started(), 0)
			return l, nil
		}
		qe := c.confirm(ctx, l, r)
		if qe == nil {
			return l, nil
		}
		r.Collect() // acquires that answered since: wait for their release too
		c.rollback(ctx, l, r, 0)
		return nil, qe
	}
	return nil, c.refused(ctx, l, r, cfg, wait, ticket, validity)
}

// attemptKey is the node.Key of an attempt on key with token: this
// client's tag as its owner (its readers' tag for a read hold), ticket
// and grant, in cfg's queue when it has one.
func (c *Client) attemptKey(key, token string, cfg *config, ticket int64, grant string) node.Key {
	k := node.NewKey(key, token)
	k.Owner = c.tag
	if cfg.shared {
		k = node.NewSharedKey(key, k.Token)
		k.Owner = c.rtag
	}
	k.Ticket, k.Grant = ticket, grant
	if cfg.queue != "" {
		k = k.InQueue(cfg.queue)
	}
	return k
}

// refused ends an attempt whose round r did not take l: it rolls r back
// (queueing the client again where a waiting attempt set the key) and
// returns the error the retry loop reads, with r's replies, validity as
// the round measured it, and for a waiting attempt its ticket, the
// commands that may still register the call, and how long until the
// holder's keys expire.
func (c *Client) refused(ctx context.Context, l *Lock, r *round, cfg *config, wait bool, ticket int64, validity time.Duration) *QuorumError {
	key := l.k.Name
	requeue := int64(0)
	if wait && c.handoff && !cfg.shared && cfg.queue == "" {
		// Nodes where this waiting attempt set the key (it was free and
		// the client headed the queue there) queue the client again as
		// the refusing nodes did, with the ticket they gave.
		// (A ticket only from a round that queued it on a majority, as
		// Client.retry keeps one.)
		requeue = ticket
		if given, queued, _ := tickets(r.Replies, c.quorum); queued {
			requeue = max(ticket, given)
		}
	}
	c.rollback(ctx, l, r, requeue)
	qe := newQuorumError("acquire", key, c, r.Replies, ErrNotAcquired, ctx)
	qe.Validity = validity
	// Replies that came in during the rollback tell more about when the
	// holder's keys expire; the error reports the round as decided.
	n := r.Collect()
	qe.perm = refusals(r.Replies)
	decided := c.clk.Now()
	if n.Pending > 0 && (wait || slices.Contains(qe.perm, 1)) {
		// Wait for the other nodes' replies (one node timeout at most):
		// a refusal no retry changes tells whether the quorum is out of
		// reach; a waiting attempt sleeps until the holder's keys expire
		// on a majority, which the first replies may overstate (a node
		// still holding a competitor's key that is being rolled back,
		// or a waiter's reservation, reports a TTL of seconds), and the
		// release of such a key is not announced.
		for n.Pending > 0 && ctx.Err() == nil {
			n = r.Wait(ctx.Done(), n.Done+n.Pending)
		}
		qe.perm = refusals(r.Replies)
	}
	if qe.freeIn = freeIn(r.Replies, c.quorum); qe.freeIn > 0 {
		// The TTLs count from the replies; the wait for the last ones
		// has used part of them.
		qe.freeIn = max(time.Millisecond, qe.freeIn-c.clk.Since(decided))
	}
	if wait {
		qe.ticket, qe.queued, qe.split = tickets(r.Replies, c.quorum)
		qe.started = r.Started()
		for i, rep := range r.Replies {
			qe.lost = qe.lost || (rep.Err != nil || rep.Result.Status == node.Unknown) && !unsent(rep.Err)
			if rep.Err == nil && rep.Result.Status == node.Done {
				qe.undo = append(qe.undo, &l.ch.tail[i]) // the rollback's release there
			}
		}
		qe.ch = &l.ch
		qe.sent = &inflight{ch: &l.ch, acq: r.next, rb: l.ch.tail, requeues: requeue != 0}
	}
	return qe
}

// confirm is a fenced acquire's second round, after a majority granted in
// round r: the fence is the largest counter the granting nodes returned,
// and it is a grant only once a majority has raised its counter to the
// fence while still holding the token, within the validity. Then any later
// grant, whose majority shares a node with this one, reads a counter of at
// least the fence there (its SET NX succeeded after our key was gone) and
// gets a larger one. Without this round a later majority could miss the
// node that returned the maximum, and its fence would go backwards.
//
// On failure the caller rolls the attempt back.
func (c *Client) confirm(ctx context.Context, l *Lock, r *round) *QuorumError {
	var fence int64
	for _, rep := range r.Replies {
		if rep.Err == nil && rep.Result.Status == node.Done {
			fence = max(fence, rep.Result.Fence)
		}
	}
	r2 := l.ch.send(ctx, command{op: "confirm", ttl: l.ttl, fence: fence})
	t := r2.Wait(ctx.Done(), c.quorum)
	validity := clock.Validity(l.ttl, c.clk.Since(r.Started()), l.drift)
	if t.Reached(c.quorum) && validity > 0 && ctx.Err() == nil {
		l.grant(r.Started(), fence)
		return nil
	}
	qe := newQuorumError("confirm", l.k.Name, c, r2.Replies, ErrNotAcquired, ctx)
	qe.Validity = validity
	return qe
}

// rollback releases a failed attempt's token through its chain: on every
// node but those that answered Taken, and on nodes still silent once their
// SET returns (a lost or late reply may hide a SET that took effect). It
// returns once the nodes that answered Done have released, so that a
// competitor is not kept waiting; the others finish in the background
// (QuorumError.undone reads how they ended, in the chain's tail).
// After a failed acquire round, a silent node's release goes at once,
// ahead of its reply (see round.ahead), unless the round was refused
// with no node answering Done: then it goes once the reply is in, and
// only where the reply is not a refusal (command.lazy).
// requeue (0: none) is the ticket a waiting attempt's rollback queues the
// client with again where it frees the key (node.Key.Requeue). A lazy
// release that frees a straggler's key after the call has given up and
// left the queue (Client.leaveWaiters) queues it there again, for a
// lease at most, as a waiting acquire still on its way then does.
// (Where the call's context ended before a majority answered, the round
// is not refused, and the release goes ahead, before the leave.)
func (c *Client) rollback(ctx context.Context, l *Lock, r *round, requeue int64) {
	var granted []int
	for i, rep := range r.Replies {
		if rep.Result.Status == node.Done {
			granted = append(granted, i)
		}
	}
	lazy := granted == nil && quorum.Tally(r.Replies).Refused(c.quorum)
	l.ch.send(ctx, command{op: "release", requeue: requeue, ttl: l.ttl, lazy: lazy})
	l.ch.wait(granted)
}

// tickets reads a waiting attempt's replies: the largest ticket a node
// queued the caller with, whether at least need nodes queued it, and
// whether some node queued it with a smaller ticket (the nodes do not
// order it the same way yet).
func tickets(replies []quorum.Reply, need int) (ticket int64, queued, split bool) {
	for _, r := range replies {
		if r.Err == nil && r.Result.Ticket > 0 {
			split = split || (ticket > 0 && r.Result.Ticket != ticket)
			ticket = max(ticket, r.Result.Ticket)
			need--
		}
	}
	return ticket, need <= 0, split
}

// newToken returns 16 random bytes from crypto/rand in hex.
func newToken() string {
	var b [16]byte
	var h [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	hex.Encode(h[:], b[:])
	return string(h[:])
}
