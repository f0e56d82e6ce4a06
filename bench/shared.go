package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// The shared pass (issue 23) measures this library alone, on the direct
// nodes: read holds and semaphore permits against its own Lock in the
// same run, a read/write mix and a semaphore under contention. Its
// scenario id for -scenarios is "shared".

// sharedRes is the shared pass' outcome.
type sharedRes struct {
	// Uncontended cycles, per mode, per round: time per cycle, and the
	// per-round ratios to Lock+Unlock.
	modes  []string
	perOp  [][]time.Duration // [mode][round]
	ratios [][]float64       // [mode][round], mode 0 (Lock) is 1
	rtt    time.Duration     // Lock+Unlock cycle p50: about one round trip per phase

	// Read/write mix.
	rwDur                time.Duration
	readerHold           time.Duration
	rwReaders            int
	readSections         int
	writeWait            hist
	writes, rwViolations int
	rwErrs               int
	rwSteal              float64 // share of the machine's CPU stolen during the mix (see stolenTicks)

	// Semaphore: contended (16 goroutines on 4 clients, the target
	// row), then one goroutine per client.
	sems []semRes
}

// semRes is one run of the semaphore pass.
type semRes struct {
	dur        time.Duration
	permits    int
	workers    int
	clients    int
	hold       time.Duration
	held       time.Duration // total time permits were held
	perWorker  []int
	violations int
	errs       int
	wait       hist
	steal      float64
}

// sharedPass runs the pass on urls.
func (b *bench) sharedPass(urls []string) (*sharedRes, error) {
	r := &sharedRes{}
	if err := b.sharedUncontended(urls, r); err != nil {
		return nil, err
	}
	var err error
	if r.rwSteal, err = stolenDuring(func() error { return b.sharedRW(urls, r) }); err != nil {
		return nil, err
	}
	for _, per := range []int{4, 1} {
		sr := semRes{clients: 4, workers: 4 * per, permits: 4, hold: 5 * time.Millisecond, dur: 5 * time.Second}
		if b.p.quick {
			sr.dur = 2 * time.Second
		}
		if sr.steal, err = stolenDuring(func() error { return b.sharedSemaphore(urls, &sr) }); err != nil {
			return nil, err
		}
		r.sems = append(r.sems, sr)
	}
	return r, nil
}

// ourClient dials a client as contender A is dialled.
func (b *bench) ourClient(urls []string) (*redlock.Client, error) {
	s := b.p.setup
	return redlock.Dial(urls, redlock.WithTTL(s.ttl),
		redlock.WithNodeOptions(node.Options{MaxIdle: s.pool, MaxActive: s.pool, Timeout: s.sockTimeout, CheckIdle: s.checkIdle, Pooled: s.pooled}))
}

// sharedUncontended: one goroutine, a distinct key per cycle, the three
// modes interleaved in rounds (their order rotating), as the healthy
// serial scenario does for the contenders.
func (b *bench) sharedUncontended(urls []string, r *sharedRes) error {
	c, err := b.ourClient(urls)
	if err != nil {
		return err
	}
	defer c.Close()
	r.modes = []string{"Lock+Unlock", "RLock+Unlock", "Semaphore(4).Acquire+Unlock"}
	var seq atomic.Int64
	key := func() string { return fmt.Sprintf("bench:shared:%d", seq.Add(1)) }
	cycle := func(mode int) error {
		ctx := b.ctx
		var l *redlock.Lock
		var err error
		switch mode {
		case 0:
			l, err = c.Lock(ctx, key())
		case 1:
			l, err = c.RLock(ctx, key())
		default:
			var s *redlock.Semaphore
			if s, err = c.Semaphore(key(), 4); err == nil {
				l, err = s.Acquire(ctx)
			}
		}
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
	r.perOp = make([][]time.Duration, len(r.modes))
	r.ratios = make([][]float64, len(r.modes))
	var lockCycles hist
	// Warm-up: connections and scripts.
	for m := range r.modes {
		for range 50 {
			if err := cycle(m); err != nil {
				return err
			}
		}
	}
	for round := range b.p.rounds {
		per := make([]time.Duration, len(r.modes))
		for j := range r.modes {
			m := (round + j) % len(r.modes)
			n, start := 0, time.Now()
			end := start.Add(b.p.roundDur)
			for time.Now().Before(end) {
				t0 := time.Now()
				if err := cycle(m); err != nil {
					return err
				}
				if m == 0 {
					lockCycles.add(time.Since(t0))
				}
				n++
			}
			per[m] = time.Since(start) / time.Duration(n)
		}
		for m := range r.modes {
			r.perOp[m] = append(r.perOp[m], per[m])
			r.ratios[m] = append(r.ratios[m], float64(per[m])/float64(per[0]))
		}
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
	}
	r.rtt = lockCycles.q(0.5)
	return nil
}

// sharedRW: 16 readers on four clients hold one key shared for 5 ms at a
// time, again and again; one writer on a fifth client takes it every
// 50 ms for 5 ms. Reader sections, the writer's waits, and exclusion.
func (b *bench) sharedRW(urls []string, r *sharedRes) error {
	const (
		clients = 4
		per     = 4
		hold    = 5 * time.Millisecond
		every   = 50 * time.Millisecond
	)
	r.rwDur, r.rwReaders, r.readerHold = 5*time.Second, clients*per, hold
	if b.p.quick {
		r.rwDur = 2 * time.Second
	}
	cs := make([]*redlock.Client, clients+1)
	for i := range cs {
		c, err := b.ourClient(urls)
		if err != nil {
			return err
		}
		defer c.Close()
		cs[i] = c
	}
	key := fmt.Sprintf("bench:rw:%d", time.Now().UnixNano())
	end := time.Now().Add(r.rwDur)
	ctx, cancel := context.WithDeadline(b.ctx, end)
	defer cancel()
	var readers, writers atomic.Int32
	var violations, sections, errs atomic.Int32
	var wg sync.WaitGroup
	for i := range clients * per {
		c := cs[i/per]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := c.RLock(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				readers.Add(1)
				if writers.Load() != 0 {
					violations.Add(1)
				}
				time.Sleep(hold)
				readers.Add(-1)
				sections.Add(1)
				_ = l.Unlock(context.Background())
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := cs[clients]
		for next := time.Now().Add(every); ; next = next.Add(every) {
			time.Sleep(time.Until(next))
			if ctx.Err() != nil {
				return
			}
			t0 := time.Now()
			l, err := w.Lock(ctx, key)
			if err != nil {
				if ctx.Err() == nil {
					errs.Add(1)
				}
				continue
			}
			r.writeWait.add(time.Since(t0))
			writers.Add(1)
			if readers.Load() != 0 || writers.Load() != 1 {
				violations.Add(1)
			}
			time.Sleep(hold)
			writers.Add(-1)
			r.writes++
			_ = l.Unlock(context.Background())
		}
	}()
	wg.Wait()
	r.readSections, r.rwViolations, r.rwErrs = int(sections.Load()), int(violations.Load()), int(errs.Load())
	return nil
}

// sharedSemaphore: r.workers goroutines on r.clients clients share a
// semaphore of r.permits permits for r.dur, each holding one for r.hold
// at a time.
func (b *bench) sharedSemaphore(urls []string, r *semRes) error {
	clients, per, permits, hold := r.clients, r.workers/r.clients, int32(r.permits), r.hold
	name := fmt.Sprintf("bench:sem:%d", time.Now().UnixNano())
	sems := make([]*redlock.Semaphore, clients)
	for i := range sems {
		c, err := b.ourClient(urls)
		if err != nil {
			return err
		}
		defer c.Close()
		if sems[i], err = c.Semaphore(name, r.permits); err != nil {
			return err
		}
	}
	start := time.Now()
	end := start.Add(r.dur)
	ctx, cancel := context.WithDeadline(b.ctx, end)
	defer cancel()
	var inUse, violations, errs atomic.Int32
	var heldNS atomic.Int64
	r.perWorker = make([]int, clients*per)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range clients * per {
		s := sems[i/per]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				l, err := s.Acquire(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				t1 := time.Now()
				if inUse.Add(1) > permits {
					violations.Add(1)
				}
				time.Sleep(hold)
				inUse.Add(-1)
				t2 := time.Now()
				if t2.After(end) {
					t2 = end
				}
				heldNS.Add(int64(t2.Sub(t1)))
				mu.Lock()
				r.perWorker[i]++
				r.wait.add(t1.Sub(t0))
				mu.Unlock()
				_ = l.Unlock(context.Background())
			}
		}()
	}
	wg.Wait()
	r.held = time.Duration(heldNS.Load())
	r.violations, r.errs = int(violations.Load()), int(errs.Load())
	return nil
}

// renderShared writes the shared pass' section of the report.
func renderShared(b *strings.Builder, r *sharedRes) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Shared locks and semaphores (issue 23)\n\n")
	w("This library alone (contender A's set-up), all five nodes reached directly. Uncontended: one goroutine, a distinct key per cycle, %d interleaved rounds per mode (their order rotating); the ratio is the median over rounds of the mode's time per cycle ÷ Lock+Unlock's in the same round [min–max]. Lock+Unlock cycle p50: %s.\n\n", len(r.ratios[0]), fmtDur(r.rtt))
	w("| mode | time per cycle, median of rounds | ratio to Lock+Unlock | target |\n|---|---|---|---|\n")
	for m, name := range r.modes {
		target := "–"
		if m > 0 {
			target = passMiss(median(r.ratios[m]) <= 1.10) + " (≤ 1.10×)"
		}
		w("| %s | %s | %s | %s |\n", name, fmtDur(medianDur(r.perOp[m])), ratioCell(r.ratios[m]), target)
	}
	bound := 2 * (r.readerHold + r.rtt)
	w("\n**Readers and a writer**: %d readers on 4 clients take one key shared for %v again and again; a writer on a fifth client takes it every 50 ms for %v; %v.\n\n",
		r.rwReaders, r.readerHold, r.readerHold, r.rwDur)
	w("| reader sections/s | writer grants | writer wait p50 / p99 / max | target: p99 ≤ 2 × (reader hold + one round trip) = %s | exclusion violations | errors | CPU stolen |\n|---|---|---|---|---|---|---|\n", fmtDur(bound))
	w("| %.0f | %d | %s / %s / %s | %s | %d | %d | %.0f%% |\n\n", float64(r.readSections)/r.rwDur.Seconds(), r.writes,
		fmtDur(r.writeWait.q(0.5)), fmtDur(r.writeWait.q(0.99)), fmtDur(r.writeWait.q(1)), passMiss(r.writeWait.q(0.99) <= bound), r.rwViolations, r.rwErrs, 100*r.rwSteal)
	w("**Semaphore**: %d permits, %d clients, each holding a permit for %v at a time; %v per row. Permits in use: total hold time ÷ run time. Fairness: min ÷ max sections per goroutine. The targets are for the contended row (16 goroutines); with one goroutine per client nobody waits for a permit, and the row shows what a cycle costs beside the hold.\n\n",
		r.sems[0].permits, r.sems[0].clients, r.sems[0].hold, r.sems[0].dur)
	w("| goroutines | permits in use (target ≥ 3.5) | fairness (target ≥ 0.8) | sections | wait p50 / p99 | more than %d at once | errors | CPU stolen |\n|---|---|---|---|---|---|---|---|\n", r.sems[0].permits)
	for j, sr := range r.sems {
		util := sr.held.Seconds() / sr.dur.Seconds()
		fair := fairness(sr.perWorker)
		sections := 0
		for _, n := range sr.perWorker {
			sections += n
		}
		utilV, fairV := " "+passMiss(util >= 3.5), " "+passMiss(fair >= 0.8)
		if j > 0 {
			utilV, fairV = "", ""
		}
		w("| %d | %.2f%s | %.2f%s | %d | %s / %s | %d | %d | %.0f%% |\n", sr.workers, util, utilV, fair, fairV, sections,
			fmtDur(sr.wait.q(0.5)), fmtDur(sr.wait.q(0.99)), sr.violations, sr.errs, 100*sr.steal)
	}
	w("\n")
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "**MISS**"
}

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
