package node

import (
	"context"
	"io"
	"sync/atomic"
	"time"
)

// slotted is FollowSlot's node: a lock's copy on one master of a Redis
// Cluster, every key it is given kept under the hash tag "{tag}", in a
// slot that master serves (see TagFor), so that the keys of each script
// (a lock key and those named after it) share one slot.
type slotted struct {
	cur    atomic.Pointer[current] // the master the copy's calls go to
	pre    string                  // "{tag}"
	follow *follower
}

// current is a copy's master. A *Redis, not an interface: a Key passed
// to its methods stays on the caller's stack (they keep only what it
// points to), so the tagged copy of each call's Key costs no allocation.
type current struct {
	n    *Redis
	addr string
}

// after hands a call's error on c to the follower.
func (s *slotted) after(c *current, err error) {
	if err != nil {
		s.follow.after(c.n, err)
	}
}

var (
	_ Node         = (*slotted)(nil)
	_ Handoffer    = (*slotted)(nil)
	_ Fencer       = (*slotted)(nil)
	_ Sharer       = (*slotted)(nil)
	_ Watcher      = (*slotted)(nil)
	_ Announcer    = (*slotted)(nil)
	_ Inspector    = (*slotted)(nil)
	_ LateAnswerer = (*slotted)(nil)
	_ Mover        = (*slotted)(nil)
	_ io.Closer    = (*slotted)(nil)
)

// key is k with its names under the tag.
func (s *slotted) key(k *Key) Key { return k.Prefixed(s.pre) }

// Addr returns the address of the copy's master.
func (s *slotted) Addr() string { return s.cur.Load().addr }

func (s *slotted) Acquire(ctx context.Context, k *Key, ttl time.Duration, holderTTL bool) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.Acquire(ctx, &kk, ttl, holderTTL)
	s.after(c, err)
	return res, err
}

func (s *slotted) Extend(ctx context.Context, k *Key, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.Extend(ctx, &kk, ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) Release(ctx context.Context, k *Key, announce bool) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.Release(ctx, &kk, announce)
	s.after(c, err)
	return res, err
}

func (s *slotted) Transfer(ctx context.Context, from, to *Key, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	kfrom := s.key(from)
	kto := s.key(to)
	res, err := c.n.Transfer(ctx, &kfrom, &kto, ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) Leave(ctx context.Context, k *Key) error {
	c := s.cur.Load()
	kk := s.key(k)
	err := c.n.Leave(ctx, &kk)
	s.after(c, err)
	return err
}

func (s *slotted) AcquireFenced(ctx context.Context, k *Key, ttl, counterTTL time.Duration) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.AcquireFenced(ctx, &kk, ttl, counterTTL)
	s.after(c, err)
	return res, err
}

func (s *slotted) ConfirmFence(ctx context.Context, k *Key, fence int64, counterTTL time.Duration) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.ConfirmFence(ctx, &kk, fence, counterTTL)
	s.after(c, err)
	return res, err
}

func (s *slotted) AcquireShared(ctx context.Context, k *Key, ttl time.Duration, wait bool) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.AcquireShared(ctx, &kk, ttl, wait)
	s.after(c, err)
	return res, err
}

func (s *slotted) ExtendShared(ctx context.Context, k *Key, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.ExtendShared(ctx, &kk, ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) ReleaseShared(ctx context.Context, k *Key, announce bool) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.ReleaseShared(ctx, &kk, announce)
	s.after(c, err)
	return res, err
}

func (s *slotted) Watch(key, owner string, released chan<- struct{}) Watch {
	return s.cur.Load().n.Watch(s.pre+key, owner, released)
}

func (s *slotted) Announce(ctx context.Context, k *Key, text string, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.Announce(ctx, &kk, text, ttl)
	s.after(c, err)
	return res, err
}

func (s *slotted) ConfirmAnnounce(ctx context.Context, k *Key, fence int64, counterTTL time.Duration, text string, ttl time.Duration) (Result, error) {
	c := s.cur.Load()
	kk := s.key(k)
	res, err := c.n.ConfirmAnnounce(ctx, &kk, fence, counterTTL, text, ttl)
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
	return s.cur.Load().n.LastLate()
}

// OnMove sets fn, called after each move of the copy to another master.
func (s *slotted) OnMove(fn func(addr string)) {
	s.follow.mu.Lock()
	defer s.follow.mu.Unlock()
	s.follow.moved = fn
}

func (s *slotted) Close() error {
	return s.follow.close()
}
