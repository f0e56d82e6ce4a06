// Package faultnode wraps a node.Node and injects faults into its
// commands: a delay, a reply lost after the command ran, a command lost
// before it ran, a command that runs after its caller gave up (late
// execution, which also reorders it behind the commands other
// connections send meanwhile) and restarts of the node that lose its
// keys.
//
// Which fault a command gets is decided by a Schedule: a pure function of
// a seed, the wrapper's stream (one per client and node: one connection)
// and the command's sequence number on that stream, so the same seed
// gives the n-th command on every connection the same fault. The
// goroutines' interleaving is not replayed, so neither is the order in
// which commands of different connections meet.
//
// Every error the wrapper makes up wraps one of package node's kinds, as
// a real driver's would: node.ErrTimeout where the caller cannot know
// whether the command ran (lost reply, lost command, late execution, a
// delay past the deadline), node.ErrUnreachable where it surely did not
// (the node is down for a restart), so that the client classifies them
// as it would a real node's.
package faultnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/node"
)

// Kind is one kind of fault.
type Kind uint8

const (
	// None: the command runs as it would without the wrapper.
	None Kind = iota
	// Delay: the command runs after a pause; a pause that outlasts the
	// caller's deadline makes it a lost command.
	Delay
	// LostReply: the command runs, its reply is lost: the caller waits
	// until its deadline and gets node.ErrTimeout.
	LostReply
	// LostCommand: the command never reaches the node: the caller waits
	// until its deadline and gets node.ErrTimeout.
	LostCommand
	// Late: the caller gets node.ErrTimeout at its deadline and the
	// command runs afterwards, with a context of its own, after a pause:
	// a command that sat in a network buffer, overtaken by the commands
	// other connections sent meanwhile.
	Late
	// Restart is not a per-command fault but State.Restart: the node
	// loses its keys and refuses commands for a while.
	Restart
	numKinds
)

// Kinds lists every kind but None, in order.
var Kinds = []Kind{Delay, LostReply, LostCommand, Late, Restart}

// String names the kind in lower case.
func (k Kind) String() string {
	switch k {
	case None:
		return "none"
	case Delay:
		return "delay"
	case LostReply:
		return "lost-reply"
	case LostCommand:
		return "lost-command"
	case Late:
		return "late"
	case Restart:
		return "restart"
	}
	return "?"
}

// Schedule decides the faults. Probabilities are per command, in [0, 1];
// their sum must not exceed 1. The zero value injects nothing.
type Schedule struct {
	Seed int64
	// Delay, LostReply, LostCommand and Late are the probabilities of
	// each kind for one command.
	Delay, LostReply, LostCommand, Late float64
	// MaxDelay bounds a Delay's pause (uniform in [0, MaxDelay)).
	MaxDelay time.Duration
	// MaxLate bounds how long after its caller's deadline a Late command
	// runs (uniform in [0, MaxLate)).
	MaxLate time.Duration
}

// Fault is the decision for one command.
type Fault struct {
	Kind  Kind
	Pause time.Duration // Delay: before the command; Late: after the deadline
}

// Decide returns the fault of command seq on stream: the same for the
// same Seed, stream and seq.
func (s *Schedule) Decide(stream, seq uint64) Fault {
	r := mix(uint64(s.Seed), stream, seq)
	p := float64(r>>11) / (1 << 53)
	pause := func(max time.Duration) time.Duration {
		if max <= 0 {
			return 0
		}
		return time.Duration(mix(r, 1, 0) % uint64(max))
	}
	switch {
	case p < s.Delay:
		return Fault{Kind: Delay, Pause: pause(s.MaxDelay)}
	case p < s.Delay+s.LostReply:
		return Fault{Kind: LostReply}
	case p < s.Delay+s.LostReply+s.LostCommand:
		return Fault{Kind: LostCommand}
	case p < s.Delay+s.LostReply+s.LostCommand+s.Late:
		return Fault{Kind: Late, Pause: pause(s.MaxLate)}
	}
	return Fault{}
}

// mix hashes its arguments into 64 well-mixed bits (splitmix64 steps).
func mix(a, b, c uint64) uint64 {
	x := a
	for _, v := range []uint64{b, c} {
		x += 0x9e3779b97f4a7c15 ^ v
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		x ^= x >> 31
	}
	return x
}

// State is one node as every wrapper of it sees it: several clients
// (hosts) each wrap their own connection to one node, and a restart of
// the node concerns them all. Its zero value is a node that is up, with
// faults on. It is safe for concurrent use.
type State struct {
	// Wipe, called by Restart, deletes what the node loses in a restart
	// (the keys of the history using it). Set it before first use.
	Wipe func(ctx context.Context) error
	// Trace, when not nil, is told of every command that ran on the
	// node (on time, late, or with its reply lost), as it returns: what
	// the node did, in the order it did it, to read a violation by.
	// Set it before first use.
	Trace func(Event)

	// run is held shared by every command while it runs on the node,
	// and exclusively by a restart: a command runs wholly before the
	// restart or wholly after.
	run  sync.RWMutex
	down atomic.Int64 // UnixNano until which the node is down; 0: up
	off  atomic.Bool  // faults stopped (Stop)
	slow atomic.Int64 // commands that timed out after Stop, no fault injected
	// lastSlow is when the last of them timed out (UnixNano; 0: none).
	lastSlow atomic.Int64
	late     sync.WaitGroup
	// counts by Kind of the faults injected through this node's
	// wrappers.
	counts [numKinds]atomic.Int64
}

// Restart makes the node lose its keys (Wipe) and refuse every command
// with node.ErrUnreachable for down: a restart without persistence,
// delayed as the Redlock description asks for by more than the longest
// TTL. It waits for the commands running on the node to finish first,
// and returns when the node is back: it wipes the keys again then, since
// a command the wrapper sent before the restart can still run on the
// server after the first wipe (it timed out in the wrapper but sat in
// the connection), which a real restart would have lost with the
// connection.
func (s *State) Restart(ctx context.Context, down time.Duration) error {
	s.run.Lock()
	s.counts[Restart].Add(1)
	s.down.Store(math.MaxInt64)
	var err error
	if s.Wipe != nil {
		err = s.Wipe(ctx)
	}
	s.run.Unlock()
	t := time.NewTimer(down)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	s.run.Lock()
	defer s.run.Unlock()
	if s.Wipe != nil {
		err = errors.Join(err, s.Wipe(context.WithoutCancel(ctx)))
	}
	s.down.Store(0)
	return err
}

// Stop ends the per-command faults: from now on commands run as they
// would without the wrapper. A restart in progress goes on (cutting it
// short would bring back a node that lost its keys before the longest
// TTL ran out), and commands already made late still run (see Drain).
func (s *State) Stop() { s.off.Store(true) }

// Slow returns how many commands timed out after Stop: the node (or
// the machine it runs on) answered later than the caller's deadline
// with no fault injected.
func (s *State) Slow() int64 { return s.slow.Load() }

// LastSlow returns when the last command counted by Slow timed out;
// the zero Time when none has.
func (s *State) LastSlow() time.Time {
	if n := s.lastSlow.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Drain waits until every late command has run.
func (s *State) Drain() { s.late.Wait() }

// Counts returns how many faults of each kind were injected, by kind.
func (s *State) Counts() map[Kind]int64 {
	out := map[Kind]int64{}
	for _, k := range Kinds {
		if n := s.counts[k].Load(); n > 0 {
			out[k] = n
		}
	}
	return out
}

// isDown reports whether the node is down for a restart now.
func (s *State) isDown() bool {
	d := s.down.Load()
	return d != 0 && time.Now().UnixNano() < d
}

// Event is one command that ran on a node (State.Trace).
type Event struct {
	Stream uint64    // the wrapper's stream: one per client and node
	Op     string    // the Node method, in lower case ("acquire", ...)
	Key    node.Key  // the key it was called with (a copy)
	Start  time.Time // when it began to run on the node
	End    time.Time // when it returned
	Status node.Status
	Err    error
}

// String is the event on one line.
func (e Event) String() string {
	s := fmt.Sprintf("%s +%v s%d %s %s tok=%s owner=%s grant=%s queue=%s ticket=%d requeue=%v tomb=%v -> %v",
		e.Start.Format("15:04:05.000000"), e.End.Sub(e.Start).Round(time.Microsecond), e.Stream, e.Op,
		e.Key.Name, e.Key.Token, e.Key.Owner, e.Key.Grant, e.Key.Queue, e.Key.Ticket, e.Key.Requeue, e.Key.Tomb, e.Status)
	if e.Err != nil {
		s += " err=" + e.Err.Error()
	}
	return s
}

// Inner is what a Node wraps: a node.Node with every optional capability
// the lock client looks for in one (a queue and handoff, fencing, shared
// holds, release notifications). Both drivers of this repository (package
// node's Redis and the go-redis node) are one. Inspect, LastLate and
// Close are forwarded when the inner node has them.
type Inner interface {
	node.Node
	node.Handoffer
	node.Fencer
	node.Sharer
	node.Watcher
	node.Announcer
}

// Node is a node.Node that injects faults into the commands it forwards
// to the node it wraps. It offers every optional interface the client
// type-asserts (Handoffer, Fencer, Sharer, Watcher, Announcer, Inspector,
// LateAnswerer, io.Closer), each forwarded with the same faults.
type Node struct {
	in     Inner
	sched  *Schedule
	stream uint64
	st     *State
	seq    atomic.Uint64

	lateMu sync.Mutex // guards lateAt, lateRTT
	// lateAt and lateRTT are when the last late command's reply came
	// and its round trip from its call's start (LateAnswerer).
	lateAt  time.Time
	lateRTT time.Duration
}

var (
	_ node.Node         = (*Node)(nil)
	_ node.Handoffer    = (*Node)(nil)
	_ node.Fencer       = (*Node)(nil)
	_ node.Sharer       = (*Node)(nil)
	_ node.Watcher      = (*Node)(nil)
	_ node.Announcer    = (*Node)(nil)
	_ node.Inspector    = (*Node)(nil)
	_ node.LateAnswerer = (*Node)(nil)
	_ io.Closer         = (*Node)(nil)
)

// ErrShape is returned by Wrap for a node that lacks a capability of Inner.
var ErrShape = errors.New("faultnode: the node lacks a capability the wrapper forwards")

// Wrap returns in with faults decided by sched on stream (a number unique
// to this connection in the history: one per client and node) and the
// node's shared state st. in must be an Inner (ErrShape otherwise): a
// wrapper that offered an interface its node lacks would make the client
// send it commands it cannot run, and one that hid an interface would
// test another client than the one used.
func Wrap(in node.Node, sched *Schedule, stream uint64, st *State) (*Node, error) {
	full, ok := in.(Inner)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrShape, in)
	}
	return &Node{in: full, sched: sched, stream: stream, st: st}, nil
}

// command is one command on the inner node.
type command func(ctx context.Context) (node.Result, error)

// do runs one command under the schedule's fault. run is the command on
// the inner node with the caller's arguments; detach, called only for a
// late command and before do returns, makes the same command on copies
// of them, since a node may not keep a *node.Key past its return.
func (n *Node) do(ctx context.Context, op string, run command, detach func() command) (node.Result, error) {
	if n.st.off.Load() {
		res, err := n.runUp(ctx, op, run)
		if errors.Is(err, node.ErrTimeout) {
			n.st.slow.Add(1)
			n.st.lastSlow.Store(time.Now().UnixNano())
		}
		return res, err
	}
	f := n.sched.Decide(n.stream, n.seq.Add(1))
	if f.Kind != None {
		n.st.counts[f.Kind].Add(1)
	}
	switch f.Kind {
	case Delay:
		t := time.NewTimer(f.Pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return node.Result{}, n.fail(op, "delayed past the deadline", node.ErrTimeout)
		}
	case LostReply:
		_, _ = n.runUp(ctx, op, run)
		untilDeadline(ctx)
		return node.Result{}, n.fail(op, "reply lost", node.ErrTimeout)
	case LostCommand:
		untilDeadline(ctx)
		return node.Result{}, n.fail(op, "command lost", node.ErrTimeout)
	case Late:
		start := time.Now()
		n.st.late.Add(1)
		go n.runLate(start, f.Pause, ctx, detach())
		untilDeadline(ctx)
		return node.Result{}, n.fail(op, "command delayed, will run late", node.ErrTimeout)
	}
	return n.runUp(ctx, op, run)
}

// noDeadline bounds the wait of a lost command whose caller set no
// deadline (the client sets one on every node call).
const noDeadline = time.Second

// untilDeadline waits until ctx is done, or noDeadline when ctx has no
// deadline: a caller whose command is lost hears nothing before then.
func untilDeadline(ctx context.Context) {
	if _, ok := ctx.Deadline(); ok {
		<-ctx.Done()
		return
	}
	t := time.NewTimer(noDeadline)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// runLate runs a command made late: after its caller's deadline plus
// pause, with its own deadline as long as the caller's was.
func (n *Node) runLate(start time.Time, pause time.Duration, caller context.Context, run command) {
	defer n.st.late.Done()
	untilDeadline(caller)
	budget := noDeadline
	if d, ok := caller.Deadline(); ok {
		budget = max(d.Sub(start), 10*time.Millisecond)
	}
	time.Sleep(pause)
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	if _, err := n.runUp(ctx, "late", run); err == nil {
		n.lateMu.Lock()
		n.lateAt, n.lateRTT = time.Now(), time.Since(start)
		n.lateMu.Unlock()
	}
}

// runUp runs a command on the inner node unless the node is down.
func (n *Node) runUp(ctx context.Context, op string, run command) (node.Result, error) {
	n.st.run.RLock()
	defer n.st.run.RUnlock()
	if n.st.isDown() {
		return node.Result{}, n.fail(op, "node down (restarting)", node.ErrUnreachable)
	}
	return run(ctx)
}

// fail makes an error of kind for op.
func (n *Node) fail(op, why string, kind error) error {
	return fmt.Errorf("faultnode %s: %s: %s: %w", n.in.Addr(), op, why, kind)
}

// Addr returns the wrapped node's address.
func (n *Node) Addr() string { return n.in.Addr() }

// on returns run on k, and the same on a copy of k when detached.
func (n *Node) on(ctx context.Context, op string, k *node.Key, run func(ctx context.Context, k *node.Key) (node.Result, error)) (node.Result, error) {
	run = n.traced(op, run)
	return n.do(ctx, op, func(ctx context.Context) (node.Result, error) { return run(ctx, k) },
		func() command {
			kc := *k
			return func(ctx context.Context) (node.Result, error) { return run(ctx, &kc) }
		})
}

// traced returns run, telling State.Trace of each call when it is set.
func (n *Node) traced(op string, run func(ctx context.Context, k *node.Key) (node.Result, error)) func(ctx context.Context, k *node.Key) (node.Result, error) {
	tr := n.st.Trace
	if tr == nil {
		return run
	}
	return func(ctx context.Context, k *node.Key) (node.Result, error) {
		start := time.Now()
		res, err := run(ctx, k)
		tr(Event{Stream: n.stream, Op: op, Key: *k, Start: start, End: time.Now(), Status: res.Status, Err: err})
		return res, err
	}
}

// Acquire forwards node.Node.Acquire under the schedule.
func (n *Node) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	op := "acquire"
	if holderTTL {
		op = "acquire-wait" // traced apart: a waiting attempt may queue the owner
	}
	return n.on(ctx, op, k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.Acquire(ctx, k, ttl, holderTTL)
	})
}

// Extend forwards node.Node.Extend under the schedule.
func (n *Node) Extend(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	return n.on(ctx, "extend", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.Extend(ctx, k, ttl)
	})
}

// Release forwards node.Node.Release under the schedule.
func (n *Node) Release(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	return n.on(ctx, "release", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.Release(ctx, k, announce)
	})
}

// Transfer forwards node.Handoffer.Transfer under the schedule (traced
// with to, the key it hands on to).
func (n *Node) Transfer(ctx context.Context, from, to *node.Key, ttl time.Duration) (node.Result, error) {
	run := n.traced("transfer", func(ctx context.Context, k *node.Key) (node.Result, error) { return n.in.Transfer(ctx, from, k, ttl) })
	return n.do(ctx, "transfer", func(ctx context.Context) (node.Result, error) { return run(ctx, to) },
		func() command {
			fc, tc := *from, *to
			run := n.traced("transfer", func(ctx context.Context, k *node.Key) (node.Result, error) { return n.in.Transfer(ctx, &fc, k, ttl) })
			return func(ctx context.Context) (node.Result, error) { return run(ctx, &tc) }
		})
}

// Leave forwards node.Handoffer.Leave under the schedule.
func (n *Node) Leave(ctx context.Context, k *node.Key) error {
	_, err := n.on(ctx, "leave", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return node.Result{Status: node.Done}, n.in.Leave(ctx, k)
	})
	return err
}

// AcquireFenced forwards node.Fencer.AcquireFenced under the schedule.
func (n *Node) AcquireFenced(ctx context.Context, k *node.Key, ttl, counterTTL time.Duration) (node.Result, error) {
	return n.on(ctx, "acquire-fenced", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.AcquireFenced(ctx, k, ttl, counterTTL)
	})
}

// ConfirmFence forwards node.Fencer.ConfirmFence under the schedule.
func (n *Node) ConfirmFence(ctx context.Context, k *node.Key, fence int64, counterTTL time.Duration) (node.Result, error) {
	return n.on(ctx, "confirm-fence", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.ConfirmFence(ctx, k, fence, counterTTL)
	})
}

// AcquireShared forwards node.Sharer.AcquireShared under the schedule.
func (n *Node) AcquireShared(ctx context.Context, k *node.Key, ttl time.Duration, wait bool) (node.Result, error) {
	return n.on(ctx, "acquire-shared", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.AcquireShared(ctx, k, ttl, wait)
	})
}

// ExtendShared forwards node.Sharer.ExtendShared under the schedule.
func (n *Node) ExtendShared(ctx context.Context, k *node.Key, ttl time.Duration) (node.Result, error) {
	return n.on(ctx, "extend-shared", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.ExtendShared(ctx, k, ttl)
	})
}

// ReleaseShared forwards node.Sharer.ReleaseShared under the schedule.
func (n *Node) ReleaseShared(ctx context.Context, k *node.Key, announce bool) (node.Result, error) {
	return n.on(ctx, "release-shared", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.ReleaseShared(ctx, k, announce)
	})
}

// Announce forwards node.Announcer.Announce under the schedule.
func (n *Node) Announce(ctx context.Context, k *node.Key, text string, ttl time.Duration) (node.Result, error) {
	return n.on(ctx, "announce", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.Announce(ctx, k, text, ttl)
	})
}

// ConfirmAnnounce forwards node.Announcer.ConfirmAnnounce under the
// schedule.
func (n *Node) ConfirmAnnounce(ctx context.Context, k *node.Key, fence int64, counterTTL time.Duration, text string, ttl time.Duration) (node.Result, error) {
	return n.on(ctx, "confirm-announce", k, func(ctx context.Context, k *node.Key) (node.Result, error) {
		return n.in.ConfirmAnnounce(ctx, k, fence, counterTTL, text, ttl)
	})
}

// InspectAnnounce forwards node.Announcer.InspectAnnounce under the
// schedule: an election's Leader reads by it. A late read is dropped
// (a read changes nothing).
func (n *Node) InspectAnnounce(ctx context.Context, key string) (node.Announced, error) {
	var a node.Announced
	k := node.Key{Name: key}
	read := func(out *node.Announced) func(ctx context.Context, _ *node.Key) (node.Result, error) {
		return func(ctx context.Context, _ *node.Key) (node.Result, error) {
			got, err := n.in.InspectAnnounce(ctx, key)
			if out != nil && err == nil {
				*out = got
			}
			return node.Result{Status: node.Done}, err
		}
	}
	run := n.traced("inspect-announce", read(&a))
	late := n.traced("inspect-announce", read(nil)) // its answer reaches no one
	_, err := n.do(ctx, "inspect-announce", func(ctx context.Context) (node.Result, error) { return run(ctx, &k) },
		func() command { return func(ctx context.Context) (node.Result, error) { return late(ctx, &k) } })
	return a, err
}

// Watch forwards node.Watcher.Watch without faults: release
// notifications are a hint the client never relies on (it polls too),
// and a restart of the node here keeps its subscriptions.
func (n *Node) Watch(key, owner string, released chan<- struct{}) node.Watch {
	return n.in.Watch(key, owner, released)
}

// Inspect forwards node.Inspector.Inspect without faults (the lock
// algorithm never calls it); node.ErrUnsupported when the inner node is
// no Inspector.
func (n *Node) Inspect(ctx context.Context, key string) (node.Info, error) {
	if in, ok := n.in.(node.Inspector); ok {
		return in.Inspect(ctx, key)
	}
	return node.Info{}, n.fail("inspect", "not an inspector", node.ErrUnsupported)
}

// LastLate reports the later of the inner node's last late reply and
// the wrapper's last late command (node.LateAnswerer): a late command's
// reply comes after its caller's deadline, as a slow node's would.
func (n *Node) LastLate() (time.Time, time.Duration) {
	var at time.Time
	var rtt time.Duration
	if la, ok := n.in.(node.LateAnswerer); ok {
		at, rtt = la.LastLate()
	}
	n.lateMu.Lock()
	defer n.lateMu.Unlock()
	if n.lateAt.After(at) {
		return n.lateAt, n.lateRTT
	}
	return at, rtt
}

// Close closes the inner node when it is an io.Closer, after the late
// commands of its State have run (they use it).
func (n *Node) Close() error {
	n.st.Drain()
	if c, ok := n.in.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
