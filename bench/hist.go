package main

import (
	"cmp"
	"math/bits"
	"sort"
	"time"
)

// hist is a log-linear latency histogram: 64 linear sub-buckets per power
// of two, so a quantile is within 1.6% of the true value. Recording never
// allocates, so it does not pollute the allocation counts.
type hist struct {
	counts [64 * 64]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const subBits = 6

func bucket(v int64) int {
	if v < 1<<subBits {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1
	o := e - subBits + 1
	m := int(v>>(e-subBits)) - 1<<subBits
	return o<<subBits + m
}

// value returns the middle of bucket i, in nanoseconds.
func value(i int) int64 {
	if i < 1<<subBits {
		return int64(i)
	}
	o, m := i>>subBits, i&(1<<subBits-1)
	lo := int64(1<<subBits+m) << (o - 1)
	return lo + (int64(1)<<(o-1))/2
}

func (h *hist) add(d time.Duration) {
	h.counts[bucket(int64(d))]++
	h.n++
	h.sum += d
	if d > h.max {
		h.max = d
	}
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// q returns the q-quantile (0 < q <= 1), 0 when empty.
func (h *hist) q(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := time.Duration(value(i))
			if v > h.max {
				v = h.max
			}
			return v
		}
	}
	return h.max
}

// median returns the median of xs, 0 when it is empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// minMax returns the smallest and largest of xs, zeros when it is empty.
func minMax[T cmp.Ordered](xs []T) (lo, hi T) {
	if len(xs) == 0 {
		return lo, hi
	}
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// mean returns the mean of the added durations (0 for none).
func (h *hist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
