package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
)

// fakeNode is an in-memory node.Node whose keys expire on a fake clock.
// Hooks let a test make a call fail, advance the clock, or block until the
// test lets it go.
type fakeNode struct {
	addr string
	clk  *clock.Fake

	mu    sync.Mutex
	keys  map[string]entry
	calls map[string]int
	// before runs at the start of every call with the operation's name;
	// a non-nil error makes the call fail with it.
	before func(ctx context.Context, op string) error
	// beforeExtend, if set, runs after before in every Extend, with the
	// TTL asked for.
	beforeExtend func(ttl time.Duration)
	// announce, if set, is called (under mu) with the key of each
	// announced delete and the message ("": none; a reservation names
	// the waiter, a grant is its value).
	announce func(key, msg string)
	// fences holds the fence counters (node.Fencer), seeded from the
	// fake clock as acquire_fenced.lua seeds them from TIME; naive the
	// per-key count of fenced grants, an INCR counter for comparison.
	fences map[string]int64
	naive  map[string]int64
	// readers models node.Sharer: per key, each reader's end of hold;
	// the key itself holds node.SharedValue until the last of them.
	readers map[string]map[string]time.Time
	skew    time.Duration // added to the fake clock for the time seed
}

// watchingNode is a fakeNode that offers node.Watcher: watches are ready
// when the test says (ready, closed by default), and an announced release
// on the node notifies them.
type watchingNode struct {
	*fakeNode
	wmu      sync.Mutex
	ready    chan struct{}
	watchers map[string]map[*fakeWatch]struct{}
	watched  map[string]int // Watch calls per key
	pubs     map[string]int // announcements per key
}

type fakeWatch struct {
	n        *watchingNode
	key      string
	owner    string
	released chan<- struct{}
}

func (w *fakeWatch) Ready() <-chan struct{} { return w.n.ready }
func (w *fakeWatch) Stop() {
	w.n.wmu.Lock()
	defer w.n.wmu.Unlock()
	delete(w.n.watchers[w.key], w)
	if len(w.n.watchers[w.key]) == 0 {
		delete(w.n.watchers, w.key)
	}
}

func newWatching(f *fakeNode) *watchingNode {
	n := &watchingNode{fakeNode: f, ready: make(chan struct{}), watchers: map[string]map[*fakeWatch]struct{}{}, watched: map[string]int{}, pubs: map[string]int{}}
	close(n.ready)
	f.announce = n.publish
	return n
}

func (n *watchingNode) Watch(key, owner string, released chan<- struct{}) node.Watch {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	w := &fakeWatch{n: n, key: key, owner: owner, released: released}
	if n.watchers[key] == nil {
		n.watchers[key] = map[*fakeWatch]struct{}{}
	}
	n.watchers[key][w] = struct{}{}
	n.watched[key]++
	return w
}

// publish notifies key's watchers, as a release channel message msg
// would: those that watch for msg's owner, or for all, when msg names one.
func (n *watchingNode) publish(key, msg string) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	n.pubs[key]++
	for w := range n.watchers[key] {
		if !node.Wakes(w.owner, msg) {
			continue
		}
		select {
		case w.released <- struct{}{}:
		default:
		}
	}
}

// publishedOn returns how many announcements key has had on the node.
func (n *watchingNode) publishedOn(key string) int {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return n.pubs[key]
}

// watching returns how many watches key has on the node now.
func (n *watchingNode) watching(key string) int {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return len(n.watchers[key])
}

type entry struct {
	token string
	until time.Time
}

var errInjected = errors.New("injected failure")

func newFakes(n int, clk *clock.Fake) []*fakeNode {
	out := make([]*fakeNode, n)
	for i := range out {
		out[i] = &fakeNode{addr: fmt.Sprintf("fake%d:6379", i), clk: clk, keys: map[string]entry{}, calls: map[string]int{},
			fences: map[string]int64{}, naive: map[string]int64{}, readers: map[string]map[string]time.Time{}}
	}
	return out
}

func asNodes(fs []*fakeNode) []node.Node {
	out := make([]node.Node, len(fs))
	for i, f := range fs {
		out[i] = f
	}
	return out
}

func (f *fakeNode) setBefore(h func(ctx context.Context, op string) error) {
	f.mu.Lock()
	f.before = h
	f.mu.Unlock()
}

func (f *fakeNode) hook(ctx context.Context, op string) error {
	f.mu.Lock()
	f.calls[op]++
	h := f.before
	f.mu.Unlock()
	if h != nil {
		if err := h(ctx, op); err != nil {
			return &node.Error{Addr: f.addr, Op: op, Err: err}
		}
	}
	return nil
}

// get returns the live entry under key, dropping it if expired.
func (f *fakeNode) get(key string) (entry, bool) {
	e, ok := f.keys[key]
	if ok && !f.clk.Now().Before(e.until) {
		delete(f.keys, key)
		return entry{}, false
	}
	return e, ok
}

func (f *fakeNode) token(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, _ := f.get(key)
	return e.token
}

func (f *fakeNode) put(key, token string, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[key] = entry{token: token, until: f.clk.Now().Add(ttl)}
}

// returned counts a call of op that returned, answered or not, as
// "<op> returned": a call counted by hook and not here is in flight.
func (f *fakeNode) returned(op string) {
	f.mu.Lock()
	f.calls[op+" returned"]++
	f.mu.Unlock()
}

func (f *fakeNode) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *fakeNode) Addr() string { return f.addr }
func (f *fakeNode) Close() error { return nil }

func (f *fakeNode) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	key, token := k.Name, k.Token
	if err := f.hook(ctx, "acquire"); err != nil {
		return node.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if holderTTL {
		f.calls["acquire waiting"]++ // a waiting attempt: by script, queued
	}
	if e, ok := f.get(key); ok {
		switch {
		case e.token == token:
			return node.Result{Status: node.Done}, nil
		case holderTTL:
			return node.Result{Status: node.Taken, TTL: e.until.Sub(f.clk.Now())}, nil
		}
		return node.Result{Status: node.Taken}, nil
	}
	f.keys[key] = entry{token: token, until: f.clk.Now().Add(ttl)}
	return node.Result{Status: node.Done}, nil
}

func (f *fakeNode) Extend(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	key, token := k.Name, k.Token
	if err := f.hook(ctx, "extend"); err != nil {
		return node.Result{}, err
	}
	f.mu.Lock()
	h := f.beforeExtend
	f.mu.Unlock()
	if h != nil {
		h(ttl)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer func() { f.calls["extend returned"]++ }() // under mu
	e, ok := f.get(key)
	switch {
	case !ok:
		return node.Result{Status: node.Absent}, nil
	case e.token != token:
		return node.Result{Status: node.Taken}, nil
	}
	if until := f.clk.Now().Add(ttl); until.After(e.until) { // never shortens, as extend.lua
		f.keys[key] = entry{token: token, until: until}
	}
	return node.Result{Status: node.Done}, nil
}

func (f *fakeNode) Release(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	defer f.returned("release")
	key, token := k.Name, k.Token
	if err := f.hook(ctx, "release"); err != nil {
		return node.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.get(key)
	switch {
	case !ok:
		return node.Result{Status: node.Absent}, nil
	case e.token != token:
		return node.Result{Status: node.Taken}, nil
	}
	delete(f.keys, key)
	if announce && f.announce != nil {
		f.announce(key, "")
	}
	return node.Result{Status: node.Done}, nil
}

// AcquireFenced is acquire_fenced.lua on the fake: the counter becomes
// max(counter+1, the fake clock in µs). (Counter expiry is not modelled:
// restart drops counters, which is what an expiry amounts to.)
func (f *fakeNode) AcquireFenced(ctx context.Context, k *node.Key, ttl, counterTTL time.Duration) (node.Result, error) {
	if err := f.hook(ctx, "acquire"); err != nil {
		return node.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.get(k.Name); ok {
		return node.Result{Status: node.Taken, TTL: e.until.Sub(f.clk.Now())}, nil
	}
	f.keys[k.Name] = entry{token: k.Token, until: f.clk.Now().Add(ttl)}
	c := max(f.fences[k.Name]+1, f.clk.Now().Add(f.skew).UnixMicro())
	f.fences[k.Name] = c
	f.naive[k.Name]++
	return node.Result{Status: node.Done, Fence: c}, nil
}

// ConfirmFence is confirm_fence.lua on the fake.
func (f *fakeNode) ConfirmFence(ctx context.Context, k *node.Key, fence int64, counterTTL time.Duration) (node.Result, error) {
	if err := f.hook(ctx, "confirm"); err != nil {
		return node.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.get(k.Name)
	switch {
	case !ok:
		return node.Result{Status: node.Absent}, nil
	case e.token != k.Token:
		return node.Result{Status: node.Taken}, nil
	}
	f.fences[k.Name] = max(f.fences[k.Name], fence)
	return node.Result{Status: node.Done}, nil
}

// AcquireShared is acquire_shared.lua on the fake, without the queue.
func (f *fakeNode) AcquireShared(ctx context.Context, k *node.Key, ttl time.Duration, _ bool) (node.Result, error) {
	if err := f.hook(ctx, "acquire"); err != nil {
		return node.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clk.Now()
	e, ok := f.get(k.Name)
	if ok && e.token != node.SharedValue {
		return node.Result{Status: node.Taken, TTL: e.until.Sub(now)}, nil
	}
	rs := f.liveReaders(k.Name)
	rs[k.Token] = now.Add(ttl)
	f.setMarker(k.Name)
	return node.Result{Status: node.Done}, nil
}

// notShared is not_shared in shared.lua on the fake: what an extend or
// release of a reader answers when key does not hold the readers' marker
// (Taken: a writer holds it; Absent: it is free), and false when readers
// hold it. Under mu.
func (f *fakeNode) notShared(key string) (node.Result, bool) {
	e, ok := f.get(key)
	switch {
	case !ok:
		return node.Result{Status: node.Absent}, true
	case e.token != node.SharedValue:
		return node.Result{Status: node.Taken}, true
	}
	return node.Result{}, false
}

// ExtendShared is extend_shared.lua on the fake.
func (f *fakeNode) ExtendShared(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	if err := f.hook(ctx, "extend"); err != nil {
		return node.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if res, ok := f.notShared(k.Name); ok {
		return res, nil
	}
	rs := f.liveReaders(k.Name)
	end, ok := rs[k.Token]
	if !ok {
		return node.Result{Status: node.Absent}, nil
	}
	if until := f.clk.Now().Add(ttl); until.After(end) {
		rs[k.Token] = until
	}
	f.setMarker(k.Name)
	return node.Result{Status: node.Done}, nil
}

// ReleaseShared is release_shared.lua on the fake, without the queue.
func (f *fakeNode) ReleaseShared(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	if err := f.hook(ctx, "release"); err != nil {
		return node.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if res, ok := f.notShared(k.Name); ok {
		return res, nil
	}
	rs := f.liveReaders(k.Name)
	_, mine := rs[k.Token]
	delete(rs, k.Token)
	if len(rs) > 0 {
		f.setMarker(k.Name)
	} else {
		delete(f.keys, k.Name)
		delete(f.readers, k.Name)
		if announce && f.announce != nil {
			f.announce(k.Name, "")
		}
	}
	if !mine {
		return node.Result{Status: node.Absent}, nil
	}
	return node.Result{Status: node.Done}, nil
}

// liveReaders returns key's readers whose hold has not ended (f.mu held).
func (f *fakeNode) liveReaders(key string) map[string]time.Time {
	rs := f.readers[key]
	if rs == nil {
		rs = map[string]time.Time{}
		f.readers[key] = rs
	}
	now := f.clk.Now()
	for tok, end := range rs {
		if !now.Before(end) {
			delete(rs, tok)
		}
	}
	return rs
}

// setMarker sets key to the readers' marker until the last reader's end
// (f.mu held).
func (f *fakeNode) setMarker(key string) {
	var last time.Time
	for _, end := range f.readers[key] {
		if end.After(last) {
			last = end
		}
	}
	f.keys[key] = entry{token: node.SharedValue, until: last}
}

// readerCount returns how many live readers key has on the node.
func (f *fakeNode) readerCount(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.get(key); !ok || e.token != node.SharedValue {
		return 0
	}
	return len(f.liveReaders(key))
}

// restart drops key and its counters from the node, as a restart
// without persistence does (for that key).
func (f *fakeNode) restart(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.keys, key)
	delete(f.fences, key)
	delete(f.naive, key)
}

// counters returns the node's fence counter and naive count for key.
func (f *fakeNode) counters(key string) (fence, naive int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fences[key], f.naive[key]
}

func (f *fakeNode) Inspect(ctx context.Context, key string) (node.Info, error) {
	if err := f.hook(ctx, "inspect"); err != nil {
		return node.Info{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.get(key)
	if !ok {
		return node.Info{}, nil
	}
	return node.Info{Token: e.token, TTL: e.until.Sub(f.clk.Now())}, nil
}

// failOn makes op fail at once.
func failOn(op string) func(context.Context, string) error {
	return func(_ context.Context, o string) error {
		if o == op {
			return errInjected
		}
		return nil
	}
}

// gate blocks op until release is closed (or the call's deadline passes).
func gate(op string, release <-chan struct{}) func(context.Context, string) error {
	return func(ctx context.Context, o string) error {
		if o != op {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// entryOf returns key's entry on f, if it is live.
func (f *fakeNode) entryOf(key string) (entry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get(key)
}
