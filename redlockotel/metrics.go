// Package redlockotel records a redlock client's activity as
// OpenTelemetry metrics. It lives in its own module so that the library's
// go.mod does not depend on OpenTelemetry.
//
//	hooks, err := redlockotel.Hooks(otel.GetMeterProvider().Meter("redlock"))
//	client, err := redlock.Dial(urls, redlock.WithHooks(hooks))
package redlockotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// Hooks returns redlock hooks that record on meter:
//
//	redlock.acquires         counter, by outcome (granted, not_acquired, canceled, closed, error)
//	redlock.acquire.wait     histogram, seconds from a TryLock or Lock call to its return
//	redlock.extends          counter, by outcome (ok, not_held, failed)
//	redlock.unlocks          counter, by outcome (ok, not_held, failed)
//	redlock.hold             histogram, seconds from acquisition to Unlock
//	redlock.lost             counter, locks KeepAlive could no longer prove held
//	redlock.node.call        histogram, seconds per node command, by node and op
//	redlock.node.errors      counter, by node, op and kind (as node.KindOf names it)
//	redlock.breaker.changes  counter, by node and the state entered
//	redlock.cluster.colocated gauge, a DialCluster client's copies that share their master with another copy
//
// It fails only if meter refuses an instrument.
func Hooks(meter metric.Meter) (redlock.Hooks, error) {
	var r recorder
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"))
		errs = append(errs, err)
		return h
	}
	r.acquires = counter("redlock.acquires", "TryLock and Lock calls by outcome")
	r.wait = hist("redlock.acquire.wait", "Time from a TryLock or Lock call to its return")
	r.extends = counter("redlock.extends", "Extends by outcome")
	r.unlocks = counter("redlock.unlocks", "Unlocks by outcome")
	r.hold = hist("redlock.hold", "Time from the start of an acquisition to Unlock")
	r.lost = counter("redlock.lost", "Locks that KeepAlive could no longer prove held")
	r.calls = hist("redlock.node.call", "Latency of each command on each node")
	r.errs = counter("redlock.node.errors", "Failed node commands by node, op and kind")
	r.changes = counter("redlock.breaker.changes", "Circuit breaker changes by node and the state entered")
	var err error
	r.colocated, err = meter.Int64Gauge("redlock.cluster.colocated", metric.WithDescription("A DialCluster client's lock copies that share their master with another copy"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return redlock.Hooks{}, err
	}
	return r.hooks(), nil
}

type recorder struct {
	acquires, extends, unlocks, lost, errs, changes metric.Int64Counter
	wait, hold, calls                               metric.Float64Histogram
	colocated                                       metric.Int64Gauge
}

func outcome(o string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("outcome", o))
}

func (r recorder) hooks() redlock.Hooks {
	ctx := context.Background()
	return redlock.Hooks{
		Acquire: func(i redlock.AcquireInfo) {
			o := outcome(i.Outcome())
			r.acquires.Add(ctx, 1, o)
			r.wait.Record(ctx, i.Wait.Seconds(), o)
		},
		Extend: func(i redlock.OpInfo) { r.extends.Add(ctx, 1, outcome(i.Outcome())) },
		Unlock: func(i redlock.OpInfo) {
			r.unlocks.Add(ctx, 1, outcome(i.Outcome()))
			r.hold.Record(ctx, i.Held.Seconds())
		},
		Lost: func(string, error) { r.lost.Add(ctx, 1) },
		NodeCall: func(i redlock.NodeCallInfo) {
			at := []attribute.KeyValue{attribute.String("node", i.Addr), attribute.String("op", i.Op)}
			if i.Err != nil {
				r.errs.Add(ctx, 1, metric.WithAttributes(append(at, attribute.String("kind", node.KindOf(i.Err)))...))
				if errors.Is(i.Err, node.ErrCircuitOpen) {
					return
				}
			}
			r.calls.Record(ctx, i.Latency.Seconds(), metric.WithAttributes(at...))
		},
		Breaker: func(c redlock.BreakerChange) {
			r.changes.Add(ctx, 1, metric.WithAttributes(attribute.String("node", c.Addr), attribute.String("state", c.To.String())))
		},
		Colocated: func(n int) { r.colocated.Record(ctx, int64(n)) },
	}
}
