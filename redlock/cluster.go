package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/node"
)

// Locks on one Redis Cluster (docs/CLUSTER.md): each lock has copies on
// distinct masters, copy i in a slot master i serves (node.FollowSlot
// with a hash tag of master i's, node.TagFor), and a majority of copies is the
// quorum, as a majority of independent masters is for Dial.

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
// (node.FollowSlot); the copies' masters are chosen when it dials, so a
// master added later is not used (see docs/CLUSTER.md). Errors wrap
// ErrInvalid (no seeds, a bad URL, fewer than 3 masters, bad copies, a
// server not in cluster mode), or the node error of the last seed tried.
func DialCluster(seeds []string, opts ...Option) (*Client, error) {
	p, err := placeCluster(seeds, opts)
	if err != nil {
		return nil, err
	}
	nodes := make([]node.Node, len(p.copies))
	for i, cp := range p.copies {
		nodes[i] = node.FollowSlot(cp.Master, cp.Tag, p.known, p.nopts)
	}
	p.cfg.copies, p.cfg.only = 0, ""
	c, err := newClient(nodes, p.cfg, true)
	if err != nil {
		closeAll(nodes)
		return nil, err
	}
	return c, nil
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
// lock's copies now, in copy order; it keeps no connection. Errors are
// DialCluster's.
func ClusterCopies(seeds []string, opts ...Option) ([]Copy, error) {
	p, err := placeCluster(seeds, opts)
	return p.copies, err
}

// placement is DialCluster's and ClusterCopies' common part.
type placement struct {
	cfg    config          // the client's
	nopts  node.Options    // its nodes'
	copies []Copy          // where each lock's copies go
	known  []node.Endpoint // every master
}

// placeCluster reads the cluster through seeds and places the copies.
func placeCluster(seeds []string, opts []Option) (placement, error) {
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
	known := make([]node.Endpoint, len(masters))
	for i, m := range masters {
		known[i] = m.Endpoint
	}
	copies := make([]Copy, n)
	for i, m := range masters[:n] {
		tag := node.TagFor(m.Slots)
		copies[i] = Copy{Master: m.Endpoint, Tag: tag, Slot: node.Slot("{" + tag + "}")}
	}
	return placement{cfg: cfg, nopts: nopts, copies: copies, known: known}, nil
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
