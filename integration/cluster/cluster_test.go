package cluster_test

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/node"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var backendNames = []string{"process", "docker"}

// eachBackend runs f as a subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, backend string)) {
	for _, b := range backendNames {
		t.Run(b, func(t *testing.T) { f(t, b) })
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// start brings up a cluster (3 nodes unless o says otherwise), closes it
// when the test ends and, for docker, checks that nothing it made is left.
func start(t *testing.T, backend string, o cluster.Options) *cluster.Cluster {
	t.Helper()
	if backend == "docker" && !cluster.DockerAvailable(context.Background()) {
		t.Skip("no Docker engine answers")
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	o.Backend = backend
	began := time.Now()
	c, err := cluster.Start(ctxFor(t, 2*time.Minute), o)
	require.NoError(t, err)
	t.Logf("%s: %d nodes up in %v", backend, o.Nodes, time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		began := time.Now()
		assert.NoError(t, c.Close())
		t.Logf("%s: closed in %v", backend, time.Since(began).Round(time.Millisecond))
		if d, ok := c.Backend.(*cluster.Docker); ok {
			assertNoLeftovers(t, d.ID())
		}
	})
	return c
}

// assertNoLeftovers checks with the docker CLI that no container or
// network labelled with the cluster's ID remains.
func assertNoLeftovers(t *testing.T, id string) {
	t.Helper()
	filter := "label=" + cluster.LabelCluster + "=" + id
	for _, args := range [][]string{
		{"ps", "-a", "-q", "--filter", filter},
		{"network", "ls", "-q", "--filter", filter},
	} {
		out, err := exec.Command("docker", args...).CombinedOutput()
		require.NoError(t, err, "docker %s: %s", strings.Join(args, " "), out)
		assert.Empty(t, strings.TrimSpace(string(out)), "left over after Close: docker %s", strings.Join(args, " "))
	}
}

// viaProxy returns a client for node i that goes through its proxy.
func viaProxy(t *testing.T, c *cluster.Cluster, i int, timeout time.Duration) *cluster.Admin {
	t.Helper()
	n, err := cluster.NewAdmin(c.URLs()[i], timeout)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

// timed runs f and logs how long it took.
func timed(t *testing.T, what string, f func() error) {
	t.Helper()
	began := time.Now()
	err := f()
	require.NoError(t, err, what)
	t.Logf("%s took %v", what, time.Since(began).Round(time.Millisecond))
}

// eventually runs cmd on n until it succeeds, at most 5 times: a pooled
// connection that the restart or the fault cut is dropped after one
// failed use.
func eventually(t *testing.T, n *cluster.Admin, cmd string, args ...any) any {
	t.Helper()
	var err error
	for try := 0; try < 5; try++ {
		var reply any
		if reply, err = n.Command(context.Background(), cmd, args...); err == nil {
			if try > 0 {
				t.Logf("%s succeeded after %d failed tries (stale connection)", cmd, try)
			}
			return reply
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "%s through the proxy", cmd)
	return nil
}

func set(t *testing.T, c *cluster.Cluster, i int, key, val string) {
	t.Helper()
	reply, err := c.Direct(i).Command(context.Background(), "SET", key, val)
	require.NoError(t, err)
	require.Equal(t, "OK", reply)
}

func TestDirectWriteProxyRead(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		c := start(t, backend, cluster.Options{})
		require.Equal(t, 3, c.Size())
		require.Equal(t, backend, c.Backend.Name())
		for i := 0; i < c.Size(); i++ {
			set(t, c, i, "k", "v"+string(rune('1'+i)))
		}
		for i := 0; i < c.Size(); i++ {
			n := viaProxy(t, c, i, time.Second)
			got, err := n.Command(context.Background(), "GET", "k")
			require.NoError(t, err)
			assert.Equal(t, []byte("v"+string(rune('1'+i))), got, "node %d", i)
			assert.NotEqual(t, c.Backend.Upstream(i), c.Addr(i), "the proxy has its own address")
		}
	})
}

func TestKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		c := start(t, backend, cluster.Options{})
		set(t, c, 0, "lock:a", "1")
		set(t, c, 0, "lock:b", "1")
		set(t, c, 1, "lock:a", "1")
		set(t, c, 1, "other", "1")
		keys, err := c.Keys(context.Background(), "lock:*")
		require.NoError(t, err)
		require.Len(t, keys, 3)
		assert.ElementsMatch(t, []string{"lock:a", "lock:b"}, keys[0])
		assert.ElementsMatch(t, []string{"lock:a"}, keys[1])
		assert.Empty(t, keys[2])
	})
}

func TestAdminInspect(t *testing.T) {
	c := start(t, "process", cluster.Options{Nodes: 1})
	ctx := ctxFor(t, time.Minute)
	a := c.Direct(0)
	info, err := a.Inspect(ctx, "absent")
	require.NoError(t, err)
	assert.Equal(t, node.Info{}, info, "an absent key: no token, TTL 0")

	_, err = a.Command(ctx, "SET", "lock", "tok", "PX", 5000)
	require.NoError(t, err)
	info, err = a.Inspect(ctx, "lock")
	require.NoError(t, err)
	assert.Equal(t, "tok", info.Token)
	assert.Greater(t, info.TTL, 4*time.Second)
	assert.LessOrEqual(t, info.TTL, 5*time.Second)

	set(t, c, 0, "forever", "v")
	info, err = a.Inspect(ctx, "forever")
	require.NoError(t, err)
	assert.Equal(t, node.Info{Token: "v", TTL: -time.Millisecond}, info, "a key without expiry")

	_, err = a.Command(ctx, "NOSUCHCOMMAND")
	assert.ErrorContains(t, err, "unknown command", "an error reply is an error")
}

// TestAdminHonoursDeadline: a call to a paused node ends at the caller's
// deadline when that is sooner than the Admin's timeout.
func TestAdminHonoursDeadline(t *testing.T) {
	c := start(t, "process", cluster.Options{Nodes: 1})
	a := viaProxy(t, c, 0, 5*time.Second)
	eventually(t, a, "PING")
	require.NoError(t, c.Pause(ctxFor(t, time.Minute), 0))
	t.Cleanup(func() { assert.NoError(t, c.Resume(context.Background(), 0)) })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := a.Command(ctx, "PING")
	assert.ErrorIs(t, err, node.ErrTimeout)
	assert.Less(t, time.Since(began), time.Second, "the call outlived its context")
}

func TestPauseResume(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		c := start(t, backend, cluster.Options{})
		ctx := ctxFor(t, time.Minute)
		set(t, c, 1, "k", "v")
		n := viaProxy(t, c, 1, 300*time.Millisecond)
		_, err := n.Command(ctx, "PING")
		require.NoError(t, err)

		timed(t, backend+" pause", func() error { return c.Pause(ctx, 1) })
		began := time.Now()
		_, err = n.Command(ctx, "GET", "k")
		require.Error(t, err)
		assert.True(t, errors.Is(err, node.ErrTimeout), "want a timeout, got %v", err)
		assert.GreaterOrEqual(t, time.Since(began), 250*time.Millisecond)
		// A new connection is accepted but not answered either.
		_, err = viaProxy(t, c, 1, 300*time.Millisecond).Command(ctx, "PING")
		assert.True(t, errors.Is(err, node.ErrTimeout), "new connection: want a timeout, got %v", err)
		// The other nodes are not affected.
		_, err = viaProxy(t, c, 0, 300*time.Millisecond).Command(ctx, "PING")
		require.NoError(t, err)

		timed(t, backend+" resume", func() error { return c.Resume(ctx, 1) })
		assert.Equal(t, []byte("v"), eventually(t, n, "GET", "k"), "a paused node keeps its keys")
	})
}

// restart stops (or kills) node i and starts it again, checks the key is
// gone or kept, and that the proxy URL works throughout.
func restart(t *testing.T, backend string, kill, persist bool) {
	c := start(t, backend, cluster.Options{Persist: persist})
	ctx := ctxFor(t, 2*time.Minute)
	const i = 2
	set(t, c, i, "k", "v")
	n := viaProxy(t, c, i, time.Second)
	require.Equal(t, []byte("v"), eventually(t, n, "GET", "k"))
	before := c.Backend.Upstream(i)

	verb := "stop"
	if kill {
		verb = "kill"
		timed(t, backend+" kill", func() error { return c.Kill(ctx, i) })
	} else {
		timed(t, backend+" stop", func() error { return c.Stop(ctx, i) })
	}
	_, err := viaProxy(t, c, i, 300*time.Millisecond).Command(ctx, "PING")
	assert.Error(t, err, "a %sped node must not answer", verb)
	// Starting a running node and stopping a stopped one are errors.
	assert.Error(t, c.Backend.Stop(ctx, i))

	timed(t, backend+" start after "+verb, func() error { return c.Start(ctx, i) })
	t.Logf("%s upstream of node %d: %s before, %s after (proxy stays %s)", backend, i, before, c.Backend.Upstream(i), c.Addr(i))
	assert.Error(t, c.Backend.Start(ctx, i), "already running")

	got := eventually(t, n, "GET", "k") // the old proxy URL, the old client
	if persist {
		assert.Equal(t, []byte("v"), got, "with appendfsync always the key survives a %s", verb)
	} else {
		assert.Nil(t, got, "without persistence a %sped node loses its keys", verb)
	}
	// Direct (re-pointed by Start) agrees.
	direct, err := c.Direct(i).Command(ctx, "EXISTS", "k")
	require.NoError(t, err)
	assert.Equal(t, map[bool]int64{true: 1, false: 0}[persist], direct)
	// And the node takes writes again.
	assert.Equal(t, "OK", eventually(t, n, "SET", "k2", "v2"))
}

func TestStopStartLosesKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) { restart(t, backend, false, false) })
}

func TestKillStartLosesKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) { restart(t, backend, true, false) })
}

func TestPersistSurvivesStopStart(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) { restart(t, backend, false, true) })
}

func TestPersistSurvivesKillStart(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) { restart(t, backend, true, true) })
}

func TestLatencyHeal(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		c := start(t, backend, cluster.Options{})
		n := viaProxy(t, c, 0, 2*time.Second)
		eventually(t, n, "PING")

		require.NoError(t, c.Latency(0, 100*time.Millisecond))
		began := time.Now()
		_, err := n.Command(context.Background(), "PING")
		require.NoError(t, err)
		slow := time.Since(began)
		assert.GreaterOrEqual(t, slow, 100*time.Millisecond)
		t.Logf("%s PING with +100ms latency: %v", backend, slow.Round(time.Millisecond))
		// Only node 0 is slowed.
		began = time.Now()
		_, err = viaProxy(t, c, 1, 2*time.Second).Command(context.Background(), "PING")
		require.NoError(t, err)
		assert.Less(t, time.Since(began), 100*time.Millisecond)

		c.Heal(0)
		best := time.Hour
		for try := 0; try < 3; try++ {
			began = time.Now()
			_, err = n.Command(context.Background(), "PING")
			require.NoError(t, err)
			best = min(best, time.Since(began))
		}
		assert.Less(t, best, 100*time.Millisecond, "Heal removes the latency")
		t.Logf("%s PING after Heal: %v", backend, best)
	})
}

func TestBlackholeHeal(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		c := start(t, backend, cluster.Options{})
		set(t, c, 0, "k", "v")
		n := viaProxy(t, c, 0, 300*time.Millisecond)
		eventually(t, n, "PING")

		require.NoError(t, c.Blackhole(0))
		_, err := n.Command(context.Background(), "GET", "k")
		require.Error(t, err)
		assert.True(t, errors.Is(err, node.ErrTimeout), "want a timeout, got %v", err)
		// The node itself is fine.
		_, err = c.Direct(0).Command(context.Background(), "PING")
		require.NoError(t, err)

		c.Heal(0)
		assert.Equal(t, []byte("v"), eventually(t, n, "GET", "k"))
	})
}

func TestResetPeerHeal(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		c := start(t, backend, cluster.Options{})
		n := viaProxy(t, c, 0, 300*time.Millisecond)
		eventually(t, n, "PING")
		require.NoError(t, c.ResetPeer(0))
		_, err := n.Command(context.Background(), "PING")
		require.Error(t, err)
		c.Heal(0)
		eventually(t, n, "PING")
	})
}

// TestStartFive starts the default five nodes, to measure start time.
func TestStartFive(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		c := start(t, backend, cluster.Options{Nodes: 5})
		require.Equal(t, 5, c.Size())
		if d, ok := c.Backend.(*cluster.Docker); ok {
			t.Logf("docker backend StartupTime (5 containers in parallel): %v", d.StartupTime.Round(time.Millisecond))
		}
		for i := 0; i < 5; i++ {
			eventually(t, viaProxy(t, c, i, time.Second), "PING")
		}
	})
}

func TestCloseTwice(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		c := start(t, backend, cluster.Options{Nodes: 1})
		require.NoError(t, c.Close())
		// start's cleanup closes it a second time.
	})
}

func TestDockerMissingImage(t *testing.T) {
	if !cluster.DockerAvailable(context.Background()) {
		t.Skip("no Docker engine answers")
	}
	const img = "quorumlock/redis:no-such-tag-local"
	_, err := cluster.StartDocker(ctxFor(t, time.Minute), cluster.Options{Nodes: 1, Image: img})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "make image")
	assert.Contains(t, err.Error(), img)
}

// TestDockerFailedStartLeavesNothing cuts a start short with its context:
// whatever was made must be gone when StartDocker returns.
func TestDockerFailedStartLeavesNothing(t *testing.T) {
	if !cluster.DockerAvailable(context.Background()) {
		t.Skip("no Docker engine answers")
	}
	for _, cut := range []time.Duration{300 * time.Millisecond, 700 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), cut)
		b, err := cluster.StartDocker(ctx, cluster.Options{Nodes: 3})
		cancel()
		if err == nil {
			require.NoError(t, b.Close())
			t.Logf("started within %v; nothing to check", cut)
			continue
		}
		t.Logf("cut after %v: %v", cut, err)
		m := regexp.MustCompile(`docker cluster ([0-9a-f-]{36})`).FindStringSubmatch(err.Error())
		require.NotNil(t, m, "the error names the cluster: %v", err)
		assertNoLeftovers(t, m[1])
	}
}

func TestDockerAvailableCached(t *testing.T) {
	first := cluster.DockerAvailable(context.Background())
	began := time.Now()
	assert.Equal(t, first, cluster.DockerAvailable(context.Background()))
	assert.Less(t, time.Since(began), 10*time.Millisecond)
}
