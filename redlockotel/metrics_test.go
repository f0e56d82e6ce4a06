package redlockotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlock"
	"github.com/quorumlock/redlock/redlockotel"
)

// sum adds up the data points of instrument name whose attributes
// include want: counters' and gauges' values, histograms' counts; -1
// when none.
func sum(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) float64 {
	total, found := 0.0, false
	match := func(set attribute.Set) bool {
		for _, kv := range want {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total, found = total+float64(p.Value), true
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total, found = total+float64(p.Value), true
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total, found = total+float64(p.Count), true
					}
				}
			}
		}
	}
	if !found {
		return -1
	}
	return total
}

func TestMetricsAfterRealTraffic(t *testing.T) {
	live := []string{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	dead := redistest.DeadAddr(t) // nothing listens
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	hooks, err := redlockotel.Hooks(provider.Meter("redlock-test"))
	require.NoError(t, err)
	c, err := redlock.Dial(append(live, "redis://"+dead), redlock.WithHooks(hooks),
		redlock.WithBreaker(redlock.Breaker{Failures: 3, Cooldown: time.Hour, Span: -1})) // three calls open it
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	for i := range 10 {
		l, err := c.TryLock(ctx, fmt.Sprintf("otel:%d", i))
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Unlock(ctx))
	}
	held, err := c.TryLock(ctx, "otel:busy")
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "otel:busy")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, held.Unlock(ctx))
	require.NoError(t, c.Close())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	outcome := func(o string) attribute.KeyValue { return attribute.String("outcome", o) }
	assert.Equal(t, 11.0, sum(rm, "redlock.acquires", outcome("granted")))
	assert.Equal(t, 1.0, sum(rm, "redlock.acquires", outcome("not_acquired")))
	assert.Equal(t, 12.0, sum(rm, "redlock.acquire.wait"))
	assert.Equal(t, 10.0, sum(rm, "redlock.extends", outcome("ok")))
	assert.Equal(t, 11.0, sum(rm, "redlock.unlocks", outcome("ok")))
	assert.Equal(t, 11.0, sum(rm, "redlock.hold"))
	liveAddr := live[0][len("redis://"):]
	assert.GreaterOrEqual(t, sum(rm, "redlock.node.call", attribute.String("node", liveAddr), attribute.String("op", "acquire")), 12.0)
	// Three failures open the breaker. Calls the breaker let through before
	// the third one had failed reach the dead node too: a lock's commands
	// return at a majority, so the next one can start while the dead node's
	// call is still out. After that every call is skipped.
	unreachable, skipped := sum(rm, "redlock.node.errors", attribute.String("node", dead), attribute.String("kind", "unreachable")),
		sum(rm, "redlock.node.errors", attribute.String("node", dead), attribute.String("kind", "circuit_open"))
	assert.GreaterOrEqual(t, unreachable, 3.0)
	assert.Greater(t, skipped, unreachable, "most calls to the dead node are skipped")
	assert.Equal(t, 1.0, sum(rm, "redlock.breaker.changes", attribute.String("node", dead), attribute.String("state", "open")))
}

// The cluster gauge records what a DialCluster client last reported (the
// hook is exercised against a real cluster in integration/rediscluster).
func TestColocatedGauge(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	hooks, err := redlockotel.Hooks(provider.Meter("redlock-test"))
	require.NoError(t, err)
	read := func() float64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		return sum(rm, "redlock.cluster.colocated")
	}
	assert.Equal(t, -1.0, read(), "nothing reported yet")
	hooks.Colocated(2)
	assert.Equal(t, 2.0, read())
	hooks.Colocated(0)
	assert.Equal(t, 0.0, read())
}
