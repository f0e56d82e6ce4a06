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
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
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
	nodes  []node.Node
	owned  bool // nodes were made by Dial and are closed by Close
	quorum int
	cfg    config
	log    *slog.Logger
	clk    clock.Clock

	// bg counts node calls still running after their caller returned
	// (the minority a quorum did not wait for) and late clean-ups.
	bg sync.WaitGroup
	// life guards closed. Every operation holds a read lock from its
	// check of closed until it has started its node calls (enter, exit),
	// and Close the write lock while it sets closed, so no call is added
	// to bg once Close waits on it.
	life      sync.RWMutex
	closed    bool
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
	nodes := make([]node.Node, len(eps))
	for i, ep := range eps {
		nodes[i] = node.New(ep, cfg.nodeOptions)
	}
	c, err := newClient(nodes, cfg, true)
	if err != nil {
		for _, n := range nodes {
			n.Close()
		}
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
		if j, dup := seen[addr]; dup {
			return nil, fmt.Errorf("%w: node[%d] and node[%d] are both %s; Redlock needs independent masters", ErrInvalid, j, i, nd.Addr())
		}
		seen[addr] = i
	}
	q := quorum.Majority(n)
	if cfg.quorum != 0 {
		if cfg.quorum < q || cfg.quorum > n {
			return nil, fmt.Errorf("%w: quorum %d must be in [%d, %d] for %d nodes", ErrInvalid, cfg.quorum, q, n, n)
		}
		q = cfg.quorum
	}
	c := &Client{nodes: nodes, owned: owned, quorum: q, cfg: cfg, log: cfg.logger, clk: cfg.clock}
	if n%2 == 0 {
		c.log.Warn("redlock: even number of nodes tolerates no more failures than one fewer", "nodes", n, "quorum", q)
	}
	return c, nil
}

// Nodes returns the client's nodes, in the order indexes refer to.
func (c *Client) Nodes() []node.Node { return c.nodes }

// Quorum returns how many nodes must agree.
func (c *Client) Quorum() int { return c.quorum }

// Close waits for operations in progress and for node calls still
// running in the background (each bounded by the node timeout), then
// closes the nodes if Dial made them. Locks are not released: they
// expire. Lock, TryLock, Extend and Unlock called after Close fail with
// ErrClosed. Close may be called more than once, from any goroutine;
// every call returns once the client is closed, with the first call's
// result. It must not be called from the client's logger or from a
// node.Node's methods: they run inside the operations Close waits for.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.life.Lock()
		c.closed = true
		c.life.Unlock()
		c.bg.Wait()
		if !c.owned {
			return
		}
		var errs []error
		for _, n := range c.nodes {
			errs = append(errs, n.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// enter starts an operation that may start node calls; it reports false
// once the client is closed. Every true must be matched by exit, and no
// operation may enter twice (a pending Close would deadlock it).
func (c *Client) enter() bool {
	c.life.RLock()
	if c.closed {
		c.life.RUnlock()
		return false
	}
	return true
}

func (c *Client) exit() { c.life.RUnlock() }

// TryLock makes exactly one attempt to take key. It returns a Lock, or an
// error wrapping ErrNotAcquired (a *QuorumError) when no majority was had
// within the validity window, or ErrInvalid for bad input.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	l, qe, err := c.attempt(ctx, c.cfg.prefix+key, &cfg)
	switch {
	case err != nil:
		return nil, err
	case qe != nil:
		return nil, qe
	}
	return l, nil
}

// Lock takes key, retrying with the client's RetryStrategy until it holds
// the lock, the strategy gives up, or ctx ends. On failure the error is a
// *QuorumError of the last attempt, wrapping ErrNotAcquired and, when ctx
// ended, ctx's error.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	key = c.cfg.prefix + key
	for attempt := 1; ; attempt++ {
		l, qe, err := c.attempt(ctx, key, &cfg)
		switch {
		case err != nil:
			return nil, err
		case qe == nil:
			return l, nil
		}
		qe.Attempts = attempt
		if qe.ctxErr != nil || c.hopeless(qe) {
			return nil, qe
		}
		d, again := cfg.retry.Backoff(attempt)
		if !again {
			return nil, qe
		}
		select {
		case <-c.clk.After(d):
		case <-ctx.Done():
			qe.setContext(ctx)
			return nil, qe
		}
	}
}

// hopeless reports whether so many nodes refused for reasons a retry
// cannot change (bad credentials or rights, an untrusted certificate, not
// a Redis server) that the quorum is out of reach.
func (c *Client) hopeless(qe *QuorumError) bool {
	bad := 0
	for _, r := range qe.Replies {
		if errors.Is(r.Err, node.ErrAuth) || errors.Is(r.Err, node.ErrTLS) || errors.Is(r.Err, node.ErrProtocol) || errors.Is(r.Err, node.ErrClosed) {
			bad++
		}
	}
	return len(c.nodes)-bad < c.quorum
}

func (c *Client) lockConfig(key string, opts []LockOption) (config, error) {
	cfg := c.cfg
	if len(opts) > 0 {
		// Options may keep the pointer they are given, so it must be a
		// heap copy; without options cfg stays on the stack.
		p := new(config)
		*p = cfg
		for _, o := range opts {
			o(p)
		}
		cfg = *p
	}
	if key == "" {
		return cfg, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if err := cfg.check(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// attempt is one round of the algorithm: SET NX PX everywhere in parallel,
// count, check validity, roll back on failure. It returns a Lock, or a
// *QuorumError, or ErrClosed.
func (c *Client) attempt(ctx context.Context, key string, cfg *config) (*Lock, *QuorumError, error) {
	if !c.enter() {
		return nil, nil, ErrClosed
	}
	defer c.exit()
	if ctx.Err() != nil {
		// Nothing is sent for a context that has already ended.
		return nil, notStarted("acquire", key, c, ctx, ErrNotAcquired), nil
	}
	// A fresh token per attempt, not just per Lock call: a late rollback
	// of a failed attempt then can never delete the keys of a later one.
	k := node.NewKey(key, newToken(), cfg.ttl)
	// Node calls outlive ctx: their replies decide what to roll back.
	r := quorum.Start(context.WithoutCancel(ctx), c.clk, &c.bg, c.nodes, cfg.timeout(),
		func(ctx context.Context, _ int, n node.Node) (node.Status, error) {
			return n.Acquire(ctx, k, k.TTL)
		})
	t := r.Wait(ctx.Done(), c.quorum)
	validity := clock.Validity(k.TTL, r.Elapsed(), cfg.driftFactor)
	if t.Reached && validity > 0 && ctx.Err() == nil {
		until := clock.Until(r.Started(), k.TTL, cfg.driftFactor)
		return &Lock{c: c, k: k, until: until, prev: r, drift: cfg.driftFactor, timeout: cfg.timeout()}, nil, nil
	}
	c.rollback(ctx, r, k, cfg.timeout())
	qe := newQuorumError("acquire", key, c.quorum, r, ErrNotAcquired, ctx)
	qe.Validity = validity
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("redlock: attempt failed", "key", key, "done", t.Done, "other", t.Other, "pending", t.Pending, "validity", validity, "err", qe)
	}
	return nil, qe, nil
}

// rollback releases an attempt's token on every node that may hold it.
// Nodes that answered Done are released before rollback returns, so a
// competitor is not kept waiting; nodes that failed (a lost reply may hide
// a SET that took effect) are released in the background; nodes still
// silent are released as soon as their late reply lands. Nodes that
// answered Taken are skipped: SET NX's nil reply proves the key was not
// set. The caller's context may be cancelled, so releases run on a context
// that is not.
func (c *Client) rollback(ctx context.Context, r *quorum.Round, k *node.Key, timeout time.Duration) {
	bg := context.WithoutCancel(ctx)
	replies := r.Replies
	var done, failed, pending bool
	for _, rep := range replies {
		switch {
		case rep.Status == node.Done:
			done = true
		case rep.Err != nil:
			failed = true
		case !rep.Answered():
			pending = true
		}
	}
	release := func(want func(quorum.Reply) bool) *quorum.Round {
		return quorum.Start(bg, c.clk, &c.bg, c.nodes, timeout, func(ctx context.Context, i int, n node.Node) (node.Status, error) {
			if !want(replies[i]) {
				return node.Unknown, nil
			}
			return n.Release(ctx, k)
		})
	}
	if failed {
		release(func(rep quorum.Reply) bool { return rep.Err != nil }) // not waited for
	}
	if done {
		release(func(rep quorum.Reply) bool { return rep.Status == node.Done }).WaitAll()
	}
	if pending {
		r.Rest(func(rep quorum.Reply) { c.releaseLate(bg, rep, k, timeout) })
	}
}

// releaseLate releases token on the node of a reply that arrived after its
// round was decided, unless the node said the key was not ours.
func (c *Client) releaseLate(ctx context.Context, rep quorum.Reply, k *node.Key, timeout time.Duration) {
	if rep.Status == node.Taken || rep.Status == node.Absent {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := c.nodes[rep.Node].Release(ctx, k)
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("redlock: released after late reply", "key", k.Name, "node", rep.Node, "late_status", rep.Status, "status", st, "err", err)
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
