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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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
	// Set by New and never changed.
	nodes  []node.Node
	quorum int
	cfg    config
	log    *slog.Logger
	clk    clock.Clock
	// caps is what the nodes can do, and this client's names on them.
	caps capabilities
	// health has per node the circuit breaker and the round-trip
	// estimate (breaker.go, rto.go).
	health health
	// life is the client's operations in progress and its Close.
	life lifecycle
	// lq is the local queue of Lock calls per key and the handoffs
	// between them (wait.go, handoff.go).
	lq local
	// reg is the client half of the nodes' queue: registrations, the
	// Leaves owed and the queues to sweep at Close (leave.go, owe.go).
	reg registry
	// fin is per node the releases being finished (finish.go).
	fin finishers
	// rounds hands out the rounds' deadlines (deadline.go).
	rounds deadlines
}

// capabilities is what a client's nodes can do, and its names there; set
// by New and never changed.
type capabilities struct {
	// owned: the nodes were made by Dial and are closed by Close.
	owned bool
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
}

// health is what a client keeps per node to judge it.
type health struct {
	// breakers has one circuit breaker per node, nil when turned off;
	// each guards itself.
	breakers []*breaker
	// rtts has one round-trip estimate per node, for the adaptive node
	// timeouts; nil when WithNodeTimeout fixes them (see rto.go). lates
	// has each node as a node.LateAnswerer (nil where it is not one), for
	// the estimates and the breaker (answersLate).
	rtts  []rtt
	lates []node.LateAnswerer
}

// lifecycle is a client's operations in progress and its Close.
type lifecycle struct {
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
	// closeOnce runs Close's work once; closeErr is its result.
	closeOnce sync.Once
	closeErr  error
	// leading has the leaderships Close resigns (election.go); resigning:
	// Close has taken them, and no campaign adds one.
	leading   map[*Leadership]struct{}
	resigning bool
}

// finishers is per node the queue of releases that failed for a reason
// that may pass, and the goroutines working them (see finishLater).
type finishers struct {
	per []finisher
	wg  sync.WaitGroup
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
	return newClient(nodes, cfg, byNew)
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
	c, err := newClient(nodes, cfg, byDial)
	if err != nil {
		closeAll(nodes)
		return nil, err
	}
	return c, nil
}

// origin is who made a client's nodes: New's caller, Dial, or
// DialCluster, whose nodes are copies on a cluster's masters.
type origin int

const (
	byNew origin = iota
	byDial
	byCluster
)

func newClient(nodes []node.Node, cfg config, by origin) (*Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.copies != 0 {
		return nil, fmt.Errorf("%w: WithCopies is an option of DialCluster only", ErrInvalid)
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
		// Copies on one cluster master are distinct keys there (their
		// tags differ); a resharding may have put them together, which
		// DialCluster reports.
		if j, dup := seen[addr]; dup && by != byCluster {
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
	c := &Client{nodes: nodes, quorum: q, cfg: cfg, log: cfg.logger, clk: cfg.clock,
		caps:   capabilities{owned: by != byNew, noFence: noFence},
		health: health{breakers: newNodeBreakers(cfg.breaker, n, cfg.timeout())},
		life:   lifecycle{done: make(chan struct{})},
		lq:     local{queues: map[string]*turnstile{}, freed: map[string]string{}, held: map[string][]*Lock{}},
		reg:    registry{live: map[*node.Key]bool{}, leaving: map[string]chan struct{}{}, touched: map[string]touched{}, byGrant: map[*Lock]bool{}},
		fin:    finishers{per: make([]finisher, n)}}
	c.health.lates = make([]node.LateAnswerer, n)
	c.caps.handoff = true
	for i, nd := range nodes {
		c.health.lates[i], _ = nd.(node.LateAnswerer)
		_, ok := nd.(node.Handoffer)
		c.caps.handoff = c.caps.handoff && ok
	}
	c.caps.tag = newToken()[:16]
	c.caps.rtag = readerTag(c.caps.tag)
	if cfg.nodeTimeout == 0 {
		c.health.rtts = make([]rtt, n)
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
	c.life.closeOnce.Do(func() {
		c.resignAll()
		c.life.mu.Lock()
		c.life.closed = true
		c.life.mu.Unlock()
		close(c.life.done)
		c.life.bg.Wait()
		if c.caps.handoff {
			c.leaveOwed()
		}
		c.fin.wg.Wait()
		abandoned := c.abandoned()
		if abandoned != nil {
			c.log.Warn("redlock: close: releases left unfinished", "err", abandoned)
		}
		var closed error
		if c.caps.owned {
			closed = closeAll(c.nodes)
		}
		c.life.closeErr = errors.Join(abandoned, closed)
	})
	return c.life.closeErr
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
// Every true must be matched by c.life.bg.Done().
func (c *Client) begin() bool {
	c.life.mu.Lock()
	defer c.life.mu.Unlock()
	if c.life.closed {
		return false
	}
	c.life.bg.Add(1)
	return true
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
	if cfg.fenced && c.caps.noFence != nil {
		return cfg, c.caps.noFence
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

// newToken returns 16 random bytes from crypto/rand in hex.
func newToken() string {
	var b [16]byte
	var h [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	hex.Encode(h[:], b[:])
	return string(h[:])
}
