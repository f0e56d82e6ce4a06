package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/node"
)

// Elections: one leader at a time over the majority (docs/ELECTION.md).
// A campaign is a fenced Lock on the election's key that waits in the
// nodes' queue, so candidates are served in the order they started; its
// fence is the term. What the leader announces lives beside the key on
// each node (node.Announcer), only while the key holds the leader's
// token, and is read by majority.

var (
	// ErrNoLeader is Leader's error when a majority of nodes says nobody
	// leads the election.
	ErrNoLeader = errors.New("redlock: no leader")
	// ErrResigned is a Leadership's Err after Resign (or the client's
	// Close, which resigns).
	ErrResigned = errors.New("redlock: leadership resigned")
)

// Election is one named election among the clients of the same nodes.
// Make one with Client.Election; it is safe for concurrent use.
type Election struct {
	c       *Client
	name    string   // as given, without the client's prefix
	key     string   // the lock key, prefix included
	opts    []Option // the campaign lock's options, WithFencing last
	ttl     time.Duration
	timeout time.Duration // the node timeout: a read's deadline
}

// Leader is who leads an election, as a majority of nodes says.
type Leader struct {
	Value string // what the leader announced (Campaign's value or its last Proclaim)
	Term  int64  // the term's fencing number: larger for every later term of this election, across clients
}

// Election returns the election name over the client's nodes. opts
// configure the campaigns' lock: WithTTL (how long a term outlives a
// leader that stops renewing), WithNodeTimeout, WithRetry, WithMaxWait,
// WithExtendAfter, WithLostMargin; fencing is always on. Errors:
// ErrInvalid for an empty name, a bad option, or nodes that cannot fence
// or keep a leader's announcement (node.Fencer, node.Announcer);
// ErrClosed after Close.
func (c *Client) Election(name string, opts ...Option) (*Election, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty election name", ErrInvalid)
	}
	opts = append(slices.Clip(opts), WithFencing())
	cfg, err := c.lockConfig(name, opts)
	if err != nil {
		return nil, err
	}
	for i, nd := range c.nodes {
		if _, ok := nd.(node.Announcer); !ok {
			return nil, fmt.Errorf("%w: node[%d] (%s) cannot keep a leader's announcement (node.Announcer)", ErrInvalid, i, nd.Addr())
		}
	}
	c.life.mu.Lock()
	closed := c.life.closed
	c.life.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	return &Election{c: c, name: name, key: c.cfg.prefix + name, opts: opts, ttl: cfg.ttl, timeout: cfg.timeout()}, nil
}

// Campaign waits until this candidate leads, in the order the
// candidates started (the nodes' queue), then announces value and
// returns the leadership, kept alive until Resign or its loss. When ctx
// ends first it returns an error wrapping ErrNotAcquired and ctx's
// error; errors otherwise are Lock's.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	return e.campaign(ctx, value, false)
}

// TryCampaign is Campaign that does not wait: ErrNotAcquired at once when
// another candidate leads.
func (e *Election) TryCampaign(ctx context.Context, value string) (*Leadership, error) {
	return e.campaign(ctx, value, true)
}

func (e *Election) campaign(ctx context.Context, value string, once bool) (*Leadership, error) {
	var (
		l   *Lock
		err error
	)
	// The attempt that wins announces value with its confirm round
	// (Client.confirm): a majority holds the record when it returns.
	opts := append(slices.Clip(e.opts), func(c *config) { c.announce = &value })
	if once {
		l, err = e.c.TryLock(ctx, e.name, opts...)
	} else {
		l, err = e.c.Lock(ctx, e.name, opts...)
	}
	if err != nil {
		return nil, err
	}
	ld := &Leadership{e: e, l: l, term: l.Fence(), value: value, done: make(chan struct{})}
	if !e.c.lead(ld) {
		_ = l.Unlock(context.WithoutCancel(ctx))
		return nil, ErrClosed
	}
	ld.start()
	return ld, nil
}

// record is what a leader keeps beside the key: its term and value.
func record(term int64, value string) string {
	return strconv.FormatInt(term, 10) + "\n" + value
}

// parseRecord reads a record; ok is false for anything else.
func parseRecord(text string) (Leader, bool) {
	t, v, ok := strings.Cut(text, "\n")
	term, err := strconv.ParseInt(t, 10, 64)
	if !ok || err != nil || term <= 0 {
		return Leader{}, false
	}
	return Leader{Value: v, Term: term}, true
}

// Leadership is one term of a candidate that leads: it is kept alive
// (the lock extended, its announcement renewed) until Resign, the
// client's Close, or its loss, which Context and Err report.
type Leadership struct {
	e    *Election
	l    *Lock
	term int64

	job    context.Context         // the lock's KeepAlive job, under base
	keep   context.CancelFunc      // stops the KeepAlive
	end    context.CancelCauseFunc // ends base: the term with a cause
	done   chan struct{}           // closed when renew has returned
	resign sync.Once

	// announcing serialises announcements: Proclaim and renew send under
	// it, so that an older value never lands after a newer one.
	announcing sync.Mutex
	mu         sync.Mutex // guards value, and is never held across I/O
	value      string
}

// start keeps the leadership alive: the lock by KeepAlive, the
// announcement by renew.
func (ld *Leadership) start() {
	base, end := context.WithCancelCause(context.Background())
	ld.job, ld.keep = ld.l.KeepAlive(base)
	ld.end = end
	go ld.renew()
}

// renew announces the value again every third of the TTL: the record
// lives a TTL from its last announcement, so it stays while the lock is
// extended, and goes within a TTL of a leader that stopped.
func (ld *Leadership) renew() {
	defer close(ld.done)
	c := ld.e.c
	for {
		t := c.clk.NewTimer(ld.e.ttl / 3)
		select {
		case <-ld.job.Done():
			t.Stop()
			return
		case <-c.life.done:
			t.Stop()
			return
		case <-t.C():
		}
		ld.announcing.Lock()
		_ = ld.l.announce(ld.job, record(ld.term, ld.Value()))
		ld.announcing.Unlock()
	}
}

// Context returns a context cancelled when the term ends: at Resign (its
// cause ErrResigned), or as soon as the lock can no longer be proven held
// (a cause wrapping ErrLost; see Lock.KeepAlive), before its validity
// runs out.
func (ld *Leadership) Context() context.Context { return ld.job }

// Err returns nil while the term lasts; after it, an error wrapping
// ErrLost (the lock was lost) or ErrResigned.
func (ld *Leadership) Err() error {
	if ld.job.Err() == nil {
		return nil
	}
	cause := context.Cause(ld.job)
	switch {
	case errors.Is(cause, ErrResigned):
		return ErrResigned
	case errors.Is(cause, ErrLost):
		return cause
	}
	return wrap("redlock: leadership ended", ErrLost, cause)
}

// Term returns the term's fencing number (the lock's Fence): larger for
// every later term of the election, whichever client leads it. Storage
// that the leader writes should refuse a smaller one than it has seen.
func (ld *Leadership) Term() int64 { return ld.term }

// Value returns what the leader announced last (Campaign's value or a
// successful Proclaim's).
func (ld *Leadership) Value() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Proclaim announces value for the rest of the term: Leader reports it
// once a majority holds it. It returns ErrNotHeld once the term ended,
// and a *QuorumError when a majority did not take it (the value
// announced before stays).
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	if err := ld.Err(); err != nil {
		return wrap(fmt.Sprintf("redlock: proclaim %q", ld.e.name), ErrNotHeld, err)
	}
	ld.announcing.Lock()
	defer ld.announcing.Unlock()
	if err := ld.l.announce(ctx, record(ld.term, value)); err != nil {
		return err
	}
	ld.mu.Lock()
	ld.value = value
	ld.mu.Unlock()
	return nil
}

// Resign ends the term: the lock is released, and the next candidate in
// line leads at once (the nodes grant it the key), not after a TTL. It
// returns the Unlock's error (ErrNotHeld when the term had been lost);
// a second Resign returns ErrNotHeld.
func (ld *Leadership) Resign(ctx context.Context) error {
	first := false
	ld.resign.Do(func() { first = true })
	if !first {
		return wrap(fmt.Sprintf("redlock: resign %q", ld.e.name), ErrNotHeld, ErrResigned)
	}
	ld.e.c.unlead(ld)
	return ld.stop(ctx)
}

// stop ends the term and releases the lock, its record with it (the
// release removes the record where it is this term's: node.Key.Record).
func (ld *Leadership) stop(ctx context.Context) error {
	ld.end(ErrResigned)
	ld.keep()
	<-ld.done
	return ld.l.Unlock(ctx)
}

// announce sends text to be kept beside the lock's key (node.Announcer)
// through the lock's chain, after its earlier commands on each node.
func (l *Lock) announce(ctx context.Context, text string) error {
	return l.sendRecord(ctx, command{op: "announce", ttl: l.ttl, text: text})
}

func (l *Lock) sendRecord(ctx context.Context, cmd command) error {
	if err := l.begin(ctx, cmd.op); err != nil {
		return err
	}
	defer l.end()
	c := l.ch.c
	r := l.ch.send(ctx, cmd)
	t := r.Wait(ctx.Done(), c.quorum)
	if t.Reached(c.quorum) {
		return nil
	}
	qe := newQuorumError(cmd.op, l.k.Name, c, r.Snapshot(nil), nil, ctx)
	if t.Refused(c.quorum) {
		qe.sentinel = ErrNotHeld
	}
	return qe
}

// lead registers ld for the client's Close to resign; false once the
// client is closing.
func (c *Client) lead(ld *Leadership) bool {
	c.life.mu.Lock()
	defer c.life.mu.Unlock()
	if c.life.closed || c.life.resigning {
		return false
	}
	if c.life.leading == nil {
		c.life.leading = map[*Leadership]struct{}{}
	}
	c.life.leading[ld] = struct{}{}
	return true
}

func (c *Client) unlead(ld *Leadership) {
	c.life.mu.Lock()
	defer c.life.mu.Unlock()
	delete(c.life.leading, ld)
}

// resignAll resigns the client's leaderships, for Close: each within
// four node timeouts.
func (c *Client) resignAll() {
	c.life.mu.Lock()
	c.life.resigning = true
	leading := c.life.leading
	c.life.leading = nil
	c.life.mu.Unlock()
	for ld := range leading {
		ld.resign.Do(func() {})
		ctx, cancel := context.WithTimeout(context.Background(), 4*ld.l.ch.timeout)
		_ = ld.stop(ctx)
		cancel()
	}
}
