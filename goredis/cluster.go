package goredis

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// DialCluster returns a Redlock client whose locks have copies on
// distinct masters of the Redis Cluster that cc reaches, placed by the
// same rule and the same placement record as redlock.DialCluster's
// (docs/CLUSTER.md), so that a go-redis client and a redigo one lock the
// same keys. The cluster's masters and the placement record are read
// through cc's Addrs (with its Username, Password and TLSConfig) by the
// library's own connections, which are then closed; every lock command
// goes through cc, which routes it to the master of its copy's slot and
// follows MOVED, ASK and failovers itself. Where every master has shard
// channels (Redis 7), releases are announced with SPUBLISH and watched
// with SSUBSCRIBE, as redlock.DialCluster's copies do. Each copy's node
// is named "{tag}" (its Addr: the copy's hash tag; go-redis, not the
// node, knows the master). The client never closes cc. Errors are
// redlock.DialCluster's; a nil cc is redlock.ErrInvalid.
func DialCluster(cc *redis.ClusterClient, opts ...redlock.Option) (*redlock.Client, error) {
	if cc == nil {
		return redlock.NewCluster(nil, nil, opts...)
	}
	o := cc.Options()
	seeds := make([]string, len(o.Addrs))
	for i, addr := range o.Addrs {
		u := url.URL{Scheme: "redis", Host: addr}
		if o.TLSConfig != nil {
			u.Scheme = "rediss"
		}
		if o.Username != "" || o.Password != "" {
			u.User = url.UserPassword(o.Username, o.Password)
		}
		seeds[i] = u.String()
	}
	if o.TLSConfig != nil {
		opts = append([]redlock.Option{redlock.WithNodeOptions(node.Options{TLSConfig: o.TLSConfig})}, opts...)
	}
	sharded := hasShardChannels(cc)
	return redlock.NewCluster(seeds, func(cp redlock.Copy) node.Node {
		n := newNode(cc, Options{})
		if sharded {
			n.sc, n.hub.sharded = shardedScripts, true
		}
		return &copyNode{redisNode: n, pre: "{" + cp.Tag + "}"}
	}, opts...)
}

// hasShardChannels reports whether every master cc reaches has shard
// channels (SPUBLISH), as node.HasShardChannels decides for
// redlock.DialCluster's copies: the two drivers' clients of a cluster
// then announce and listen alike.
func hasShardChannels(cc *redis.ClusterClient) bool {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	var mu sync.Mutex
	has, answered := true, false
	_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Do(ctx, "COMMAND", "INFO", "SPUBLISH").Slice()
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			answered = true
			has = has && len(info) == 1 && info[0] != nil
		}
		return nil
	})
	return has && answered
}

// copyNode is one copy of every lock on a Redis Cluster, through a
// ClusterClient: every key name it is given is put under its hash tag
// (node.Key.Prefixed), so that each script's keys share the tag's slot.
type copyNode struct {
	*redisNode
	pre string // "{tag}"
}

var (
	_ node.Node      = (*copyNode)(nil)
	_ node.Inspector = (*copyNode)(nil)
	_ node.Fencer    = (*copyNode)(nil)
	_ node.Watcher   = (*copyNode)(nil)
	_ node.Handoffer = (*copyNode)(nil)
	_ node.Sharer    = (*copyNode)(nil)
	_ node.Announcer = (*copyNode)(nil)
)

// Addr returns the copy's hash tag, "{tag}".
func (n *copyNode) Addr() string { return n.pre }

// String names the copy by its tag.
func (n *copyNode) String() string { return "goredis cluster copy " + n.pre }

func (n *copyNode) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.Acquire(ctx, &kk, ttl, holderTTL)
}

func (n *copyNode) Extend(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.Extend(ctx, &kk, ttl)
}

func (n *copyNode) Release(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.Release(ctx, &kk, announce)
}

func (n *copyNode) AcquireFenced(ctx context.Context, k *node.Key, ttl, counterTTL time.Duration) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.AcquireFenced(ctx, &kk, ttl, counterTTL)
}

func (n *copyNode) ConfirmFence(ctx context.Context, k *node.Key, fence int64, counterTTL time.Duration) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.ConfirmFence(ctx, &kk, fence, counterTTL)
}

func (n *copyNode) Transfer(ctx context.Context, from, to *node.Key, ttl time.Duration) (node.Result, error) {
	kf, kt := from.Prefixed(n.pre), to.Prefixed(n.pre)
	return n.redisNode.Transfer(ctx, &kf, &kt, ttl)
}

func (n *copyNode) Leave(ctx context.Context, k *node.Key) error {
	kk := k.Prefixed(n.pre)
	return n.redisNode.Leave(ctx, &kk)
}

func (n *copyNode) AcquireShared(ctx context.Context, k *node.Key, ttl time.Duration, wait bool) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.AcquireShared(ctx, &kk, ttl, wait)
}

func (n *copyNode) ExtendShared(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.ExtendShared(ctx, &kk, ttl)
}

func (n *copyNode) ReleaseShared(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.ReleaseShared(ctx, &kk, announce)
}

func (n *copyNode) Inspect(ctx context.Context, key string) (node.Info, error) {
	return n.redisNode.Inspect(ctx, n.pre+key)
}

func (n *copyNode) Announce(ctx context.Context, k *node.Key, text string, ttl time.Duration) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.Announce(ctx, &kk, text, ttl)
}

func (n *copyNode) ConfirmAnnounce(ctx context.Context, k *node.Key, fence int64, counterTTL time.Duration, text string, ttl time.Duration) (node.Result, error) {
	kk := k.Prefixed(n.pre)
	return n.redisNode.ConfirmAnnounce(ctx, &kk, fence, counterTTL, text, ttl)
}

func (n *copyNode) InspectAnnounce(ctx context.Context, key string) (node.Announced, error) {
	return n.redisNode.InspectAnnounce(ctx, n.pre+key)
}

func (n *copyNode) Watch(key, owner string, released chan<- struct{}) node.Watch {
	return n.redisNode.Watch(n.pre+key, owner, released)
}
