package main

import (
	"runtime"
	"sort"
	"strings"
	"time"
)

// allocSite is one allocating function and how many objects per cycle it
// allocated, with the innermost library function on the way to it.
type allocSite struct {
	fn, via  string
	perCycle float64
}

const libraryPrefix = "github.com/quorumlock/redlock/"

// allocSites runs run (cycles lock+unlock cycles) with every allocation
// recorded (MemProfileRate 1) and returns the allocating functions by
// objects per cycle, most first: the innermost frame outside the runtime,
// and the innermost frame of the library that led there.
func allocSites(cycles int, run func()) []allocSite {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	// The profile is published at the end of a GC cycle; two make sure
	// that what came before is in the first snapshot.
	runtime.GC()
	runtime.GC()
	before := memRecords()
	run()
	time.Sleep(200 * time.Millisecond) // calls still finishing in the background
	runtime.GC()
	runtime.GC()
	after := memRecords()

	agg := map[[2]string]int64{}
	for stk, n := range after {
		d := n - before[stk]
		if d <= 0 {
			continue
		}
		fn, via := siteOf(stk)
		agg[[2]string{fn, via}] += d
	}
	var out []allocSite
	for k, n := range agg {
		out = append(out, allocSite{fn: k[0], via: k[1], perCycle: float64(n) / float64(cycles)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].perCycle > out[j].perCycle })
	return out
}

func memRecords() map[[32]uintptr]int64 {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	m := make(map[[32]uintptr]int64, len(recs))
	for _, r := range recs {
		m[r.Stack0] += r.AllocObjects
	}
	return m
}

// siteOf names the allocating function of a stack (the innermost frame
// outside package runtime) and the innermost library frame on it.
func siteOf(stk [32]uintptr) (fn, via string) {
	pcs := stk[:]
	for i, pc := range pcs {
		if pc == 0 {
			pcs = pcs[:i]
			break
		}
	}
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		name := f.Function
		if fn == "" && name != "" && !strings.HasPrefix(name, "runtime.") {
			fn = name
		}
		if strings.HasPrefix(name, libraryPrefix) {
			via = name
			break
		}
		if !more {
			break
		}
	}
	return short(fn), short(via)
}

// short drops the module path from a function name.
func short(fn string) string {
	fn = strings.TrimPrefix(fn, libraryPrefix)
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		fn = fn[i+1:]
	}
	return fn
}
