// Package redlockprom exports a redlock client's activity as Prometheus
// metrics. It lives in its own module so that the library's go.mod does
// not depend on the Prometheus client.
//
//	m := redlockprom.New("")
//	prometheus.MustRegister(m)
//	client, err := redlock.Dial(urls, redlock.WithHooks(m.Hooks()))
package redlockprom

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// Metrics is a prometheus.Collector fed by a redlock client's hooks. One
// Metrics may serve several clients; nodes are labelled by address (the
// cluster gauge shows the last client's report).
type Metrics struct {
	acquires  *prometheus.CounterVec   // outcome
	wait      *prometheus.HistogramVec // outcome
	extends   *prometheus.CounterVec   // outcome
	unlocks   *prometheus.CounterVec   // outcome
	hold      prometheus.Histogram
	lost      prometheus.Counter
	calls     *prometheus.HistogramVec // node, op
	errs      *prometheus.CounterVec   // node, op, kind
	breaker   *prometheus.GaugeVec     // node
	colocated prometheus.Gauge
	collected []prometheus.Collector
}

// New returns the metrics, named namespace_redlock_... ("redlock_..."
// when namespace is empty). Register them with a prometheus.Registerer.
func New(namespace string) *Metrics {
	name := func(n string) prometheus.Opts {
		return prometheus.Opts{Namespace: namespace, Subsystem: "redlock", Name: n}
	}
	counter := func(n, help string, labels ...string) *prometheus.CounterVec {
		o := name(n)
		o.Help = help
		return prometheus.NewCounterVec(prometheus.CounterOpts(o), labels)
	}
	hist := func(n, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		o := name(n)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		acquires: counter("acquires_total", "TryLock and Lock calls by outcome: granted, not_acquired, canceled, closed, error.", "outcome"),
		wait:     hist("acquire_wait_seconds", "Time from a TryLock or Lock call to its return, backoffs included.", prometheus.ExponentialBuckets(0.0005, 2, 16), "outcome"),
		extends:  counter("extends_total", "Extends by outcome: ok, not_held, failed.", "outcome"),
		unlocks:  counter("unlocks_total", "Unlocks by outcome: ok, not_held, failed.", "outcome"),
		lost:     counter("lost_total", "Locks that KeepAlive could no longer prove held.").WithLabelValues(),
		calls:    hist("node_call_seconds", "Latency of each command on each node.", prometheus.ExponentialBuckets(0.0001, 2, 14), "node", "op"),
		errs:     counter("node_errors_total", "Failed commands by node, operation and kind: as node.KindOf names them.", "node", "op", "kind"),
	}
	ho := name("hold_seconds")
	m.hold = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ho.Namespace, Subsystem: ho.Subsystem, Name: ho.Name,
		Help: "How long locks were held, from the start of the acquisition to Unlock.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)})
	bo := name("breaker_state")
	m.breaker = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: bo.Namespace, Subsystem: bo.Subsystem, Name: bo.Name,
		Help: "Each node's circuit breaker: 0 closed, 1 open, 2 half-open."}, []string{"node"})
	co := name("cluster_colocated_copies")
	m.colocated = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: co.Namespace, Subsystem: co.Subsystem, Name: co.Name,
		Help: "A DialCluster client's lock copies that share their master with another copy (0: each on a master of its own); losing that master loses them all."})
	m.collected = []prometheus.Collector{m.acquires, m.wait, m.extends, m.unlocks, m.hold, m.lost, m.calls, m.errs, m.breaker, m.colocated}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collected {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collected {
		c.Collect(ch)
	}
}

// Hooks returns the hooks that feed the metrics; pass them to
// redlock.WithHooks.
func (m *Metrics) Hooks() redlock.Hooks {
	return redlock.Hooks{
		Acquire: func(i redlock.AcquireInfo) {
			o := i.Outcome()
			m.acquires.WithLabelValues(o).Inc()
			m.wait.WithLabelValues(o).Observe(i.Wait.Seconds())
		},
		Extend: func(i redlock.OpInfo) { m.extends.WithLabelValues(i.Outcome()).Inc() },
		Unlock: func(i redlock.OpInfo) {
			m.unlocks.WithLabelValues(i.Outcome()).Inc()
			m.hold.Observe(i.Held.Seconds())
		},
		Lost: func(string, error) { m.lost.Inc() },
		NodeCall: func(i redlock.NodeCallInfo) {
			if i.Err != nil {
				m.errs.WithLabelValues(i.Addr, i.Op, node.KindOf(i.Err)).Inc()
				if errors.Is(i.Err, node.ErrCircuitOpen) {
					return // skipped: no latency to speak of
				}
			}
			m.calls.WithLabelValues(i.Addr, i.Op).Observe(i.Latency.Seconds())
		},
		Breaker: func(c redlock.BreakerChange) {
			m.breaker.WithLabelValues(c.Addr).Set(float64(c.To))
		},
		Colocated: func(n int) { m.colocated.Set(float64(n)) },
	}
}
