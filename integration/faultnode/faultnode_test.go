package faultnode_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/integration/faultnode"
	"github.com/quorumlock/redlock/node"
)

// fake is an Inner that counts the commands it ran and answers Done.
type fake struct {
	ran  atomic.Int64
	mu   sync.Mutex
	keys []string // names of the keys acquired, in order
}

func (f *fake) Addr() string { return "fake:1" }
func (f *fake) done(k *node.Key) (node.Result, error) {
	f.ran.Add(1)
	f.mu.Lock()
	f.keys = append(f.keys, k.Name)
	f.mu.Unlock()
	return node.Result{Status: node.Done}, nil
}
func (f *fake) Acquire(_ context.Context, k *node.Key, _ time.Duration, _ bool) (node.Result, error) {
	return f.done(k)
}
func (f *fake) Extend(_ context.Context, k *node.Key, _ time.Duration) (node.Result, error) {
	return f.done(k)
}
func (f *fake) Release(_ context.Context, k *node.Key, _ bool) (node.Result, error) {
	return f.done(k)
}
func (f *fake) Transfer(_ context.Context, from, _ *node.Key, _ time.Duration) (node.Result, error) {
	return f.done(from)
}
func (f *fake) Leave(_ context.Context, k *node.Key) error { _, err := f.done(k); return err }
func (f *fake) AcquireFenced(_ context.Context, k *node.Key, _, _ time.Duration) (node.Result, error) {
	return f.done(k)
}
func (f *fake) ConfirmFence(_ context.Context, k *node.Key, _ int64, _ time.Duration) (node.Result, error) {
	return f.done(k)
}
func (f *fake) AcquireShared(_ context.Context, k *node.Key, _ time.Duration, _ bool) (node.Result, error) {
	return f.done(k)
}
func (f *fake) ExtendShared(_ context.Context, k *node.Key, _ time.Duration) (node.Result, error) {
	return f.done(k)
}
func (f *fake) ReleaseShared(_ context.Context, k *node.Key, _ bool) (node.Result, error) {
	return f.done(k)
}
func (f *fake) Watch(string, string, chan<- struct{}) node.Watch { return nil }
func (f *fake) Announce(_ context.Context, k *node.Key, _ string, _ time.Duration) (node.Result, error) {
	return f.done(k)
}
func (f *fake) ConfirmAnnounce(_ context.Context, k *node.Key, _ int64, _ time.Duration, _ string, _ time.Duration) (node.Result, error) {
	return f.done(k)
}
func (f *fake) InspectAnnounce(_ context.Context, key string) (node.Announced, error) {
	_, err := f.done(&node.Key{Name: key})
	return node.Announced{}, err
}

func TestDecideReplaysTheSameScheduleForTheSameSeed(t *testing.T) {
	s := faultnode.Schedule{Seed: 42, Delay: 0.1, LostReply: 0.05, LostCommand: 0.05, Late: 0.05,
		MaxDelay: 30 * time.Millisecond, MaxLate: 60 * time.Millisecond}
	again := s
	other := s
	other.Seed = 43
	counts := map[faultnode.Kind]int{}
	differ := 0
	const n = 100000
	for seq := range uint64(n) {
		f := s.Decide(3, seq)
		if f != again.Decide(3, seq) {
			t.Fatalf("seq %d: the same seed decided %v and %v", seq, f, again.Decide(3, seq))
		}
		if f != other.Decide(3, seq) {
			differ++
		}
		counts[f.Kind]++
		if f.Kind == faultnode.Delay && f.Pause >= s.MaxDelay || f.Kind == faultnode.Late && f.Pause >= s.MaxLate {
			t.Fatalf("seq %d: pause %v out of bounds", seq, f.Pause)
		}
	}
	if differ == 0 {
		t.Fatal("another seed decided the same schedule")
	}
	// Each kind near its probability (5 sigma of a binomial).
	for kind, p := range map[faultnode.Kind]float64{faultnode.Delay: 0.1, faultnode.LostReply: 0.05, faultnode.LostCommand: 0.05, faultnode.Late: 0.05} {
		want := p * n
		if d := float64(counts[kind]) - want; d*d > 25*want {
			t.Errorf("%v: %d of %d commands, want about %.0f", kind, counts[kind], n, want)
		}
	}
}

// wrap returns a wrapper of a fake whose every command gets fault p of
// one kind.
func wrap(t *testing.T, s faultnode.Schedule) (*faultnode.Node, *fake, *faultnode.State) {
	t.Helper()
	f := &fake{}
	st := &faultnode.State{}
	n, err := faultnode.Wrap(f, &s, 0, st)
	if err != nil {
		t.Fatal(err)
	}
	return n, f, st
}

func call(n *faultnode.Node, name string) (node.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	k := node.NewKey(name, "tok")
	return n.Acquire(ctx, &k, time.Second, false)
}

func TestLostReplyRunsTheCommandAndTimesOut(t *testing.T) {
	n, f, st := wrap(t, faultnode.Schedule{LostReply: 1})
	res, err := call(n, "a")
	if !errors.Is(err, node.ErrTimeout) || res.Status != node.Unknown {
		t.Fatalf("got %v, %v; want Unknown and node.ErrTimeout", res.Status, err)
	}
	if f.ran.Load() != 1 {
		t.Fatalf("the command ran %d times, want 1", f.ran.Load())
	}
	if st.Counts()[faultnode.LostReply] != 1 {
		t.Fatalf("counts %v", st.Counts())
	}
}

func TestLostCommandNeverRuns(t *testing.T) {
	n, f, _ := wrap(t, faultnode.Schedule{LostCommand: 1})
	if _, err := call(n, "a"); !errors.Is(err, node.ErrTimeout) {
		t.Fatalf("got %v, want node.ErrTimeout", err)
	}
	time.Sleep(30 * time.Millisecond)
	if f.ran.Load() != 0 {
		t.Fatalf("a lost command ran %d times", f.ran.Load())
	}
}

func TestLateCommandRunsAfterItsCallerGaveUpBehindLaterOnes(t *testing.T) {
	s := faultnode.Schedule{Late: 1, MaxLate: 40 * time.Millisecond}
	n, f, st := wrap(t, s)
	// Another connection to the same node, without faults.
	other, err := faultnode.Wrap(f, &faultnode.Schedule{}, 1, st)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := call(n, "first"); !errors.Is(err, node.ErrTimeout) {
		t.Fatalf("got %v, want node.ErrTimeout", err)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("a late command's caller heard before its deadline")
	}
	if res, err := call(other, "second"); err != nil || res.Status != node.Done {
		t.Fatalf("the other connection: %v, %v", res.Status, err)
	}
	st.Drain()
	f.mu.Lock()
	order := append([]string(nil), f.keys...)
	f.mu.Unlock()
	// Seq 1 on stream 0 pauses 36ms after the deadline: far longer than
	// the second call takes.
	if p := s.Decide(0, 1).Pause; p < 20*time.Millisecond {
		t.Fatalf("the schedule changed: pause %v; pick a MaxLate that gives a long one", p)
	}
	if len(order) != 2 || order[0] != "second" {
		t.Fatalf("ran %v: want the late command after the later one", order)
	}
	if at, _ := n.LastLate(); at.IsZero() {
		t.Fatal("LastLate does not tell of the late command")
	}
	// After Stop, commands pass through at once.
	st.Stop()
	if res, err := call(n, "third"); err != nil || res.Status != node.Done {
		t.Fatalf("after Stop: %v, %v", res.Status, err)
	}
}

// TestRestartWipesAndRefusesUntilUp: a restart wipes the keys, refuses
// commands while the node is down, and wipes again as it comes back (a
// command sent before it may have run on the server meanwhile), then
// returns.
func TestRestartWipesAndRefusesUntilUp(t *testing.T) {
	n, f, st := wrap(t, faultnode.Schedule{})
	var wiped atomic.Int32
	st.Wipe = func(context.Context) error { wiped.Add(1); return nil }
	restarted := make(chan error, 1)
	go func() { restarted <- st.Restart(context.Background(), 100*time.Millisecond) }()
	for wiped.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := call(n, "a"); !errors.Is(err, node.ErrUnreachable) {
		t.Fatalf("while down: %v, want node.ErrUnreachable", err)
	}
	st.Stop() // the faults stop, the restart goes on
	if _, err := call(n, "a"); !errors.Is(err, node.ErrUnreachable) {
		t.Fatalf("while down after Stop: %v, want node.ErrUnreachable", err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if res, err := call(n, "a"); err != nil || res.Status != node.Done {
		t.Fatalf("once up: %v, %v", res.Status, err)
	}
	if wiped.Load() != 2 || f.ran.Load() != 1 || st.Counts()[faultnode.Restart] != 1 {
		t.Fatalf("wiped %d, ran %d, counts %v", wiped.Load(), f.ran.Load(), st.Counts())
	}
}

func TestWrapRefusesANodeWithoutTheCapabilities(t *testing.T) {
	var bare node.Node = struct{ node.Node }{&fake{}}
	if _, err := faultnode.Wrap(bare, &faultnode.Schedule{}, 0, &faultnode.State{}); !errors.Is(err, faultnode.ErrShape) {
		t.Fatalf("got %v, want ErrShape", err)
	}
}

// TestMain checks that no late command's goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
