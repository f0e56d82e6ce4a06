package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/node"
)

// Locks on one Redis Cluster (docs/CLUSTER.md): each lock has copies on
// distinct masters, copy i in a slot master i serves (node.FollowSlot
// with a hash tag of master i's, node.TagFor), and a majority of copies is the
// quorum, as a majority of independent masters is for Dial.
//
// Every client of the cluster must place a lock's copies under the same
// tags: two clients that named a lock's copies differently would lock
// different keys, and their majorities need not share a copy. The tags
// cannot be read from the topology each time a client dials (a
// resharding or a master added changes what that would give), so the
// first client records them in the cluster and every later one reads
// them: the placement record.

// The placement record's keys, in the slot of the tag "redlock", without
// expiry: the number of copies a client takes when WithCopies does not
// say, and, per number of copies, the copies' tags (space-separated).
const (
	copiesRecord    = "{redlock}copies"
	placementRecord = "{redlock}placement:"
)

// maxCopies is DialCluster's number of copies when WithCopies does not
// say: every master, up to five.
const maxCopies = 5

// WithCopies sets how many copies of each lock DialCluster places, on
// that many distinct masters: odd, at least 3, at most the cluster's
// masters. Default: the number of masters, at most 5 (an even number of
// masters gives one fewer). Only DialCluster takes it: ErrInvalid from
// New, Dial and a lock's options.
func WithCopies(n int) Option {
	return clientOnly("WithCopies", func(c *config) { c.copies = n })
}

// DialCluster connects through the first of seeds (node URLs, as Dial
// takes them) that answers, reads the cluster's masters and their slots
// (CLUSTER SLOTS), and returns a client whose locks have copies on
// distinct masters, copy i in a slot that master i serves, so that every
// script of a lock runs in one slot; its quorum is a majority of copies.
// Every feature of a Dial client works on it. Each copy follows its
// slot to the master that serves it after a failover or a resharding
// (node.FollowSlot). Where every master has shard channels (Redis 7),
// releases are announced with SPUBLISH and watched with SSUBSCRIBE
// (node.Options.ShardChannels), not with PUBLISH, which a cluster sends
// to every node.
//
// The first client to dial a cluster records the number of copies and
// their tags in the cluster (the placement record: keys
// "{redlock}copies" and "{redlock}placement:N"); every later client uses
// them, so that all clients lock the same keys whatever the topology
// when each dialled. A master added later is therefore not used, and a
// resharding or a failover may put two copies on one master, at dial or
// later: the client then logs a warning and reports it to the Colocated
// hook (see docs/CLUSTER.md). Errors wrap ErrInvalid (no
// seeds, a bad URL, fewer than 3 masters, bad copies, a server not in
// cluster mode, a placement record that does not parse), or the node
// error of the last seed tried or of the placement record's master.
func DialCluster(seeds []string, opts ...Option) (*Client, error) {
	return NewCluster(seeds, nil, opts...)
}

// NewCluster is DialCluster with each copy's node made by copyNode, for
// a driver other than the library's (the go-redis module's
// goredis.DialCluster): the masters and the placement record are read
// through seeds as DialCluster reads them, and copyNode(copy) is the
// node that keeps copy i of every lock, under the copy's hash tag; it
// must put every key name it is given under "{" + Tag + "}" and follow
// the copy's slot itself. Copies whose nodes are node.Movers are watched
// for a shared master as DialCluster's are (the Colocated hook). A nil
// copyNode is DialCluster. Errors are DialCluster's; a copyNode that
// returns nil is ErrInvalid.
func NewCluster(seeds []string, copyNode func(Copy) node.Node, opts ...Option) (*Client, error) {
	p, err := placeCluster(seeds, opts, true)
	if err != nil {
		return nil, err
	}
	if copyNode == nil {
		ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(p.nopts.Timeout, time.Second))
		p.nopts.ShardChannels = node.HasShardChannels(ctx, p.known, p.nopts)
		cancel()
	}
	nodes := make([]node.Node, len(p.copies))
	for i, cp := range p.copies {
		if copyNode == nil {
			nodes[i] = node.FollowSlot(cp.Master, cp.Tag, p.known, p.nopts)
		} else {
			nodes[i] = copyNode(cp)
		}
	}
	p.cfg.copies, p.cfg.only = 0, ""
	c, err := newClient(nodes, p.cfg, byCluster)
	if err != nil {
		closeAll(nodes)
		return nil, err
	}
	w := &colocation{nodes: nodes, log: c.log, hook: c.cfg.hooks.Colocated}
	for _, n := range nodes {
		if m, ok := n.(node.Mover); ok {
			m.OnMove(func(string) { w.check() })
		}
	}
	w.check()
	return c, nil
}

// colocation watches a cluster client's copies for masters that serve
// more than one of them (a resharding or a failover moved a copy's slot
// onto another copy's master; the placement record keeps the copies'
// tags): it logs each change and reports it to the Colocated hook.
type colocation struct {
	nodes []node.Node
	log   *slog.Logger
	hook  func(copies int)

	mu     sync.Mutex
	shared int // copies on a master that serves another copy too
}

// check counts the copies that share a master now and reports a change.
func (w *colocation) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	addrs := make([]string, len(w.nodes))
	for i, n := range w.nodes {
		addrs[i] = n.Addr()
	}
	groups := shared(addrs)
	n := 0
	for _, g := range groups {
		n += len(g.copies)
	}
	if n == w.shared {
		return
	}
	w.shared = n
	for _, g := range groups {
		w.log.Warn("redlock: cluster: copies of every lock on one master: losing it loses them all",
			"copies", g.copies, "master", g.master)
	}
	if n == 0 {
		w.log.Info("redlock: cluster: every copy on a master of its own again")
	}
	if w.hook != nil {
		w.hook(n)
	}
}

// Copy is where a DialCluster client keeps one copy of every lock: on a
// master, under a hash tag whose slot that master serves.
type Copy struct {
	Master node.Endpoint // the master, with the seed's credentials
	Tag    string        // the lock key name is "{" + Tag + "}" + name there
	Slot   int           // the tag's hash slot
}

// ClusterCopies reads the cluster through seeds as DialCluster does and
// returns where a client dialled with the same options places each
// lock's copies now, in copy order; it keeps no connection and, unlike
// DialCluster, writes no placement record (where there is none, it
// returns the placement a first client would record). Errors are
// DialCluster's.
func ClusterCopies(seeds []string, opts ...Option) ([]Copy, error) {
	p, err := placeCluster(seeds, opts, false)
	return p.copies, err
}

// placement is DialCluster's and ClusterCopies' common part.
type placement struct {
	cfg    config          // the client's
	nopts  node.Options    // its nodes'
	copies []Copy          // where each lock's copies go
	known  []node.Endpoint // every master
}

// sharing is copies on one master.
type sharing struct {
	copies []int
	master string
}

// shared returns the masters (addresses, by copy) that serve more than
// one copy, in the order of their first copy.
func shared(addrs []string) []sharing {
	var groups []sharing
	for i, addr := range addrs {
		j := slices.IndexFunc(groups, func(g sharing) bool { return g.master == addr })
		if j < 0 {
			groups = append(groups, sharing{master: addr})
			j = len(groups) - 1
		}
		groups[j].copies = append(groups[j].copies, i)
	}
	return slices.DeleteFunc(groups, func(g sharing) bool { return len(g.copies) < 2 })
}

// placeCluster reads the cluster through seeds and places the copies as
// the placement record says, recording them first where it says nothing
// yet, if record is set.
func placeCluster(seeds []string, opts []Option, record bool) (placement, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	fail := func(err error) (placement, error) { return placement{}, err }
	if len(seeds) == 0 {
		return fail(fmt.Errorf("%w: no cluster seeds", ErrInvalid))
	}
	eps := make([]node.Endpoint, len(seeds))
	for i, u := range seeds {
		ep, err := node.ParseURL(u)
		if err != nil {
			return fail(fmt.Errorf("redlock: seed[%d]: %w", i, err))
		}
		eps[i] = ep
	}
	if err := cfg.check(); err != nil {
		return fail(err)
	}
	nopts := cfg.nodeOptions
	if own := cmp.Or(nopts.Timeout, time.Second); cfg.maxTimeout() > own {
		nopts.Timeout = cfg.maxTimeout()
	}
	var masters []node.Master
	var err error
	for _, ep := range eps {
		ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(nopts.Timeout, time.Second))
		masters, err = node.ClusterMasters(ctx, ep, nopts)
		cancel()
		if err == nil || errors.Is(err, node.ErrNotCluster) || node.Permanent(err) {
			break
		}
	}
	if errors.Is(err, node.ErrNotCluster) {
		return fail(fmt.Errorf("%w: %w", ErrInvalid, err))
	}
	if err != nil {
		return fail(fmt.Errorf("redlock: cluster: %w", err))
	}
	n, err := cfg.placeCopies(len(masters))
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*cmp.Or(nopts.Timeout, time.Second))
	defer cancel()
	tags, err := readPlacement(ctx, masters, n, cfg.copies == 0, record, nopts)
	if err != nil {
		return fail(err)
	}
	known := make([]node.Endpoint, len(masters))
	for i, m := range masters {
		known[i] = m.Endpoint
	}
	copies := make([]Copy, len(tags))
	for i, tag := range tags {
		slot := node.Slot("{" + tag + "}")
		m, ok := node.MasterOf(masters, slot)
		if !ok {
			return fail(fmt.Errorf("redlock: cluster: no master serves slot %d, copy %d's", slot, i))
		}
		copies[i] = Copy{Master: m.Endpoint, Tag: tag, Slot: slot}
	}
	return placement{cfg: cfg, nopts: nopts, copies: copies, known: known}, nil
}

// readPlacement returns the copies' tags from the placement record: n
// copies, or, where byDefault (WithCopies did not say), the number the
// record holds. What the record does not hold yet is proposed from the
// topology (n copies on the first n masters, in the order of their first
// slot, each under a tag of its master's, node.TagFor) and, if record is
// set, recorded, so that every client reads the first proposal recorded.
func readPlacement(ctx context.Context, masters []node.Master, n int, byDefault, record bool, opts node.Options) ([]string, error) {
	get := func(key, proposal string) (string, error) {
		set := proposal
		if !record {
			set = ""
		}
		v, err := node.ClusterRecord(ctx, masters, key, set, opts)
		if err != nil {
			return "", fmt.Errorf("redlock: cluster: the placement record: %w", err)
		}
		return cmp.Or(v, proposal), nil
	}
	if byDefault {
		v, err := get(copiesRecord, strconv.Itoa(n))
		if err != nil {
			return nil, err
		}
		if n, err = strconv.Atoi(v); err != nil || n < 3 || n%2 == 0 {
			return nil, fmt.Errorf("%w: cluster: %s holds %q, not an odd number of copies of 3 or more", ErrInvalid, copiesRecord, v)
		}
	}
	var proposal []string
	if n <= len(masters) {
		proposal = make([]string, n)
		for i, m := range masters[:n] {
			proposal[i] = node.TagFor(m.Slots)
		}
	}
	key := placementRecord + strconv.Itoa(n)
	v, err := get(key, strings.Join(proposal, " "))
	if err != nil {
		return nil, err
	}
	if v == "" {
		return nil, fmt.Errorf("%w: cluster: %d copies recorded, %d masters, and no tags for them in %s", ErrInvalid, n, len(masters), key)
	}
	tags := strings.Fields(v)
	if len(tags) != n {
		return nil, fmt.Errorf("%w: cluster: %s holds %q, not %d tags", ErrInvalid, key, v, n)
	}
	return tags, nil
}

// placeCopies returns the number of copies for a cluster of n masters.
func (c *config) placeCopies(n int) (int, error) {
	if n < 3 {
		return 0, fmt.Errorf("%w: a cluster of %d masters: copies on distinct masters need at least 3", ErrInvalid, n)
	}
	k := c.copies
	if k == 0 {
		k = min(n, maxCopies)
		if k%2 == 0 {
			k--
		}
	}
	if k < 3 || k%2 == 0 || k > n {
		return 0, fmt.Errorf("%w: WithCopies(%d): copies must be odd, at least 3 and at most the cluster's %d masters", ErrInvalid, k, n)
	}
	return k, nil
}
