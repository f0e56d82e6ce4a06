package node

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// Full is a Node with every optional capability a lock client looks for:
// a queue and handoff, fencing, shared holds, release notifications,
// elections' records and inspection. Both drivers of this module (Redis
// and the goredis module's node) are one.
type Full interface {
	Node
	Handoffer
	Fencer
	Sharer
	Watcher
	Announcer
	Inspector
}

// InSlot returns n with every key it is given kept under the hash tag
// "{tag}": a lock's copy on one master of a Redis Cluster, in a slot that
// master serves (see TagFor), so that the keys of each script (a lock
// key and those named after it) share one slot. n must be a Full
// (ErrUnsupported otherwise): a wrapper that offered a capability its
// node lacks would be sent commands it cannot run. LastLate and Close
// are forwarded when n has them; Addr is n's.
func InSlot(n Node, tag string) (Node, error) {
	f, ok := n.(Full)
	if !ok || tag == "" {
		return nil, fmt.Errorf("node %s: %w: InSlot needs a node with every capability and a tag", n.Addr(), ErrUnsupported)
	}
	s := &slotted{pre: "{" + tag + "}"}
	s.cur.Store(&current{n: f, addr: n.Addr()})
	return s, nil
}

// slotted is InSlot's and FollowSlot's node.
type slotted struct {
	cur    atomic.Pointer[current] // the master the copy's calls go to
	pre    string                  // "{tag}"
	follow *follower               // FollowSlot's; nil for InSlot's
}

// current is a copy's master.
type current struct {
	n    Full
	addr string
}

// after hands a call's error on c to the follower.
func (s *slotted) after(c *current, err error) {
	if err != nil && s.follow != nil {
		s.follow.after(c.n, err)
	}
}

var (
	_ Full         = (*slotted)(nil)
	_ LateAnswerer = (*slotted)(nil)
	_ io.Closer    = (*slotted)(nil)
)

// key is k with its names under the tag. The boxed values NewKey made
// are of the untagged names: the driver boxes the new ones.
func (s *slotted) key(k *Key) *Key {
	kc := *k
	kc.Name = s.pre + k.Name
	if kc.Queue != "" {
		kc.Queue = s.pre + kc.Queue
	}
	kc.name, kc.token, kc.waiters, kc.readers = nil, nil, nil, nil
	return &kc
}

// Addr returns the address of the copy's master.
func (s *slotted) Addr() string { return s.cur.Load().addr }

func (s *slotted) Acquire(ctx context.Context, k *Key, ttl time.Duration, holderTTL bool) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.Acquire(ctx, s.key(k), ttl, holderTTL)
	s.after(c, err)
	return res, err
}

func (s *slotted) Extend(ctx context.Context, k *Key, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.Extend(ctx, s.key(k), ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) Release(ctx context.Context, k *Key, announce bool) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.Release(ctx, s.key(k), announce)
	s.after(c, err)
	return res, err
}

func (s *slotted) Transfer(ctx context.Context, from, to *Key, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.Transfer(ctx, s.key(from), s.key(to), ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) Leave(ctx context.Context, k *Key) error {
	c := s.cur.Load()
	err := c.n.Leave(ctx, s.key(k))
	s.after(c, err)
	return err
}

func (s *slotted) AcquireFenced(ctx context.Context, k *Key, ttl, counterTTL time.Duration) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.AcquireFenced(ctx, s.key(k), ttl, counterTTL)
	s.after(c, err)
	return res, err
}

func (s *slotted) ConfirmFence(ctx context.Context, k *Key, fence int64, counterTTL time.Duration) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.ConfirmFence(ctx, s.key(k), fence, counterTTL)
	s.after(c, err)
	return res, err
}

func (s *slotted) AcquireShared(ctx context.Context, k *Key, ttl time.Duration, wait bool) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.AcquireShared(ctx, s.key(k), ttl, wait)
	s.after(c, err)
	return res, err
}

func (s *slotted) ExtendShared(ctx context.Context, k *Key, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.ExtendShared(ctx, s.key(k), ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) ReleaseShared(ctx context.Context, k *Key, announce bool) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.ReleaseShared(ctx, s.key(k), announce)
	s.after(c, err)
	return res, err
}

func (s *slotted) Watch(key, owner string, released chan<- struct{}) Watch {
	return s.cur.Load().n.Watch(s.pre+key, owner, released)
}

func (s *slotted) Announce(ctx context.Context, k *Key, text string, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.Announce(ctx, s.key(k), text, ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) ConfirmAnnounce(ctx context.Context, k *Key, fence int64, counterTTL time.Duration, text string, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	res, err := c.n.ConfirmAnnounce(ctx, s.key(k), fence, counterTTL, text, ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) InspectAnnounce(ctx context.Context, key string) (Announced, error) {
	c := s.cur.Load()
	res, err := c.n.InspectAnnounce(ctx, s.pre+key)
	s.after(c, err)
	return res, err
}

func (s *slotted) Inspect(ctx context.Context, key string) (Info, error) {
	c := s.cur.Load()
	res, err := c.n.Inspect(ctx, s.pre+key)
	s.after(c, err)
	return res, err
}

func (s *slotted) LastLate() (time.Time, time.Duration) {
	if la, ok := s.cur.Load().n.(LateAnswerer); ok {
		return la.LastLate()
	}
	return time.Time{}, 0
}

func (s *slotted) Close() error {
	if s.follow != nil {
		return s.follow.close()
	}
	if c, ok := s.cur.Load().n.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
