package redlockprom_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlock"
	"github.com/quorumlock/redlock/redlockprom"
)

// value sums the series of metric name whose labels include labels in
// what reg gathers: counters' and gauges' values, histograms' sample
// counts. It returns -1 when no series matches.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			found = true
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	if !found {
		return -1
	}
	return sum
}

func TestMetricsAfterRealTraffic(t *testing.T) {
	live := []string{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	dead := redistest.DeadAddr(t) // nothing listens
	m := redlockprom.New("")
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	c, err := redlock.Dial(append(live, "redis://"+dead), redlock.WithHooks(m.Hooks()),
		redlock.WithBreaker(redlock.Breaker{Failures: 3, Cooldown: time.Hour, Span: -1})) // three calls open it
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()

	for i := range 10 {
		l, err := c.TryLock(ctx, fmt.Sprintf("prom:%d", i))
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Unlock(ctx))
	}
	held, err := c.TryLock(ctx, "prom:busy")
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "prom:busy")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, held.Unlock(ctx))
	require.NoError(t, c.Close())

	assert.Equal(t, 11.0, value(t, reg, "redlock_acquires_total", map[string]string{"outcome": "granted"}))
	assert.Equal(t, 1.0, value(t, reg, "redlock_acquires_total", map[string]string{"outcome": "not_acquired"}))
	assert.Equal(t, 12.0, value(t, reg, "redlock_acquire_wait_seconds", nil))
	assert.Equal(t, 10.0, value(t, reg, "redlock_extends_total", map[string]string{"outcome": "ok"}))
	assert.Equal(t, 11.0, value(t, reg, "redlock_unlocks_total", map[string]string{"outcome": "ok"}))
	assert.Equal(t, 11.0, value(t, reg, "redlock_hold_seconds", nil))
	liveAddr := live[0][len("redis://"):]
	assert.GreaterOrEqual(t, value(t, reg, "redlock_node_call_seconds", map[string]string{"node": liveAddr, "op": "acquire"}), 12.0)
	// Three failures open the breaker. Calls the breaker let through before
	// the third one had failed reach the dead node too: a lock's commands
	// return at a majority, so the next one can start while the dead node's
	// call is still out. After that every call is skipped.
	unreachable, skipped := value(t, reg, "redlock_node_errors_total", map[string]string{"node": dead, "kind": "unreachable"}),
		value(t, reg, "redlock_node_errors_total", map[string]string{"node": dead, "kind": "circuit_open"})
	assert.GreaterOrEqual(t, unreachable, 3.0)
	assert.Greater(t, skipped, unreachable, "most calls to the dead node are skipped")
	assert.Equal(t, 1.0, value(t, reg, "redlock_breaker_state", map[string]string{"node": dead}), "open")
	assert.Equal(t, -1.0, value(t, reg, "redlock_breaker_state", map[string]string{"node": liveAddr}), "never changed")
}

// The cluster gauge shows what a DialCluster client last reported (the
// hook is exercised against a real cluster in integration/rediscluster).
func TestColocatedGauge(t *testing.T) {
	m := redlockprom.New("app")
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	assert.Equal(t, 0.0, value(t, reg, "app_redlock_cluster_colocated_copies", nil))
	m.Hooks().Colocated(2)
	assert.Equal(t, 2.0, value(t, reg, "app_redlock_cluster_colocated_copies", nil))
	m.Hooks().Colocated(0)
	assert.Equal(t, 0.0, value(t, reg, "app_redlock_cluster_colocated_copies", nil))
}
