package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// stats is what the demo measures while it runs: grants per worker and
// acquire latencies, split at the node kill. Safe for concurrent use.
type stats struct {
	mu       sync.Mutex
	grants   []int           // by worker index (worker 1 is index 0)
	before   []time.Duration // latencies of grants before the kill
	after    []time.Duration // ... and after it
	killedAt time.Time       // zero until a node was killed
}

func newStats(workers int) *stats {
	return &stats{grants: make([]int, workers)}
}

// granted records that worker w (1-based) got the lock at, from a Lock
// call that took latency.
func (s *stats) granted(w int, at time.Time, latency time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grants[w-1]++
	if !s.killedAt.IsZero() && !at.Before(s.killedAt) {
		s.after = append(s.after, latency)
	} else {
		s.before = append(s.before, latency)
	}
}

// killed records the moment a node was killed.
func (s *stats) killed(at time.Time) {
	s.mu.Lock()
	s.killedAt = at
	s.mu.Unlock()
}

// snapshot is a copy of stats at one instant.
type snapshot struct {
	grants   []int
	before   []time.Duration
	after    []time.Duration
	killedAt time.Time
}

func (s *stats) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return snapshot{
		grants:   slices.Clone(s.grants),
		before:   slices.Clone(s.before),
		after:    slices.Clone(s.after),
		killedAt: s.killedAt,
	}
}

// total is the number of grants.
func (s snapshot) total() int {
	n := 0
	for _, g := range s.grants {
		n += g
	}
	return n
}

// all returns every latency, before and after the kill.
func (s snapshot) all() []time.Duration {
	return append(slices.Clone(s.before), s.after...)
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// ds, 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	rank := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
