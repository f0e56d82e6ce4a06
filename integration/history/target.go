package history

import (
	"context"
	"time"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// Nodes are what a history's clients lock on: independent nodes
// (Standalone), or the copies of a Redis Cluster client (Copies).
type Nodes interface {
	// Size is the number of nodes (copies).
	Size() int
	// New makes node i for one client, with connections of its own.
	New(i int) (node.Node, error)
	// Direct reads and deletes node i's keys, bypassing the clients.
	Direct(i int) Direct
}

// Direct is the harness' own access to one node: Keys and Command on the
// names the node stores, Inspect of a lock key as the clients name it.
type Direct interface {
	Keys(ctx context.Context, pattern string) ([]string, error)
	Command(ctx context.Context, cmd string, args ...any) (any, error)
	Inspect(ctx context.Context, key string) (node.Info, error)
}

// Standalone is cl's nodes, each a lock's node as Dial makes it.
func Standalone(cl *cluster.Cluster) Nodes { return standalone{cl} }

type standalone struct{ cl *cluster.Cluster }

func (s standalone) Size() int { return s.cl.Size() }

func (s standalone) New(i int) (node.Node, error) {
	ep, err := node.ParseURL(s.cl.URLs()[i])
	if err != nil {
		return nil, err
	}
	return node.New(ep, node.Options{}), nil
}

func (s standalone) Direct(i int) Direct { return s.cl.Direct(i) }

// Copies is the copies a DialCluster client of rc places each lock on
// (node.FollowSlot, as DialCluster makes them), read directly on the
// master of each copy under its hash tag. The copies must stay where
// they are while it is used (no resharding, no failover); Close closes
// the direct connections.
func Copies(rc *cluster.RedisCluster) (*CopyNodes, error) {
	seeds := make([]string, rc.Size())
	for i := range seeds {
		seeds[i] = rc.URL(i)
	}
	copies, err := redlock.ClusterCopies(seeds)
	if err != nil {
		return nil, err
	}
	known := make([]node.Endpoint, len(copies))
	for i, cp := range copies {
		known[i] = cp.Master
	}
	c := &CopyNodes{copies: copies, known: known}
	for _, cp := range copies {
		a, err := cluster.NewAdmin("redis://"+cp.Master.Addr(), 2*time.Second)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.direct = append(c.direct, tagged{a, "{" + cp.Tag + "}"})
	}
	return c, nil
}

// CopyNodes is Copies' Nodes.
type CopyNodes struct {
	copies []redlock.Copy
	known  []node.Endpoint
	direct []tagged
}

func (c *CopyNodes) Size() int { return len(c.copies) }

func (c *CopyNodes) New(i int) (node.Node, error) {
	return node.FollowSlot(c.copies[i].Master, c.copies[i].Tag, c.known, node.Options{}), nil
}

func (c *CopyNodes) Direct(i int) Direct { return c.direct[i] }

// Close closes the direct connections.
func (c *CopyNodes) Close() {
	for _, d := range c.direct {
		_ = d.Close()
	}
}

// tagged is a master's admin connection that looks at one copy's keys:
// the lock keys and patterns the harness names get the copy's tag.
type tagged struct {
	*cluster.Admin
	tag string
}

func (t tagged) Keys(ctx context.Context, pattern string) ([]string, error) {
	return t.Admin.Keys(ctx, t.tag+pattern)
}

func (t tagged) Inspect(ctx context.Context, key string) (node.Info, error) {
	return t.Admin.Inspect(ctx, t.tag+key)
}
