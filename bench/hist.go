package main

import (
	"math/bits"
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
