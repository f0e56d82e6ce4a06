package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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

// allocPass finds where A's allocations come from: after a warm-up, one
// batch of allocCycles serial cycles straight to the nodes (urls) with
// every allocation recorded. With -allocprofile it also writes every
// contender's allocation profiles. The clients run without hooks, as in
// the direct set-up.
func (b *bench) allocPass(urls []string) ([]allocSite, error) {
	b.log("allocation pass (no proxies): start")
	cons, err := makeContenders(urls, b.p.setup)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range cons {
			_ = c.close()
		}
	}()
	sc := scenario{id: "alloc", workers: 1}
	states := make([]*wstate, len(cons))
	for i, c := range cons {
		states[i] = b.newStates(sc, c)[0]
		b.cycles(states[i], b.p.allocCycles/2, nil) // warm-up: pools, scripts
	}
	sites := allocSites(b.p.allocCycles, func() { b.cycles(states[0], b.p.allocCycles, nil) })
	if b.p.profDir != "" {
		b.allocProfiles(states)
	}
	b.log("allocation pass: done")
	return sites, nil
}

// allocProfiles writes, per contender, the allocations of allocCycles
// cycles as a pprof pair: view with
//
//	go tool pprof -sample_index=alloc_objects -base DIR/allocs-X-base.pprof DIR/allocs-X.pprof
func (b *bench) allocProfiles(states []*wstate) {
	if err := os.MkdirAll(b.p.profDir, 0o755); err != nil {
		b.log("allocprofile: %v", err)
		return
	}
	write := func(name string) {
		runtime.GC()
		f, err := os.Create(filepath.Join(b.p.profDir, name))
		if err != nil {
			b.log("allocprofile: %v", err)
			return
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			b.log("allocprofile: %v", err)
		}
	}
	old := runtime.MemProfileRate
	defer func() { runtime.MemProfileRate = old }()
	for i, st := range states {
		id := contenderIDs[i]
		runtime.MemProfileRate = 1
		write("allocs-" + id + "-base.pprof")
		b.cycles(st, b.p.allocCycles, nil)
		time.Sleep(200 * time.Millisecond) // late background calls finish
		write("allocs-" + id + ".pprof")
		runtime.MemProfileRate = old
	}
	b.log("allocation profiles written to %s", b.p.profDir)
}

// cycles runs exactly k lock+unlock cycles on one goroutine (this one).
func (b *bench) cycles(st *wstate, k int, h *hist) {
	bg := context.Background()
	for range k {
		key := st.keys[st.k%len(st.keys)]
		st.k++
		t0 := time.Now()
		if err := st.w.Lock(bg, key); err != nil {
			st.lockErrs++
			continue
		}
		if err := st.w.Unlock(bg); err != nil {
			st.unlockErs++
		}
		if h != nil {
			h.add(time.Since(t0))
		}
	}
}
