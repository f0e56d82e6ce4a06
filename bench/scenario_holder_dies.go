package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// holderDiesScenario: each cycle a holder on a client of its own takes a
// fresh key with a short TTL (p.dieTTL) and never releases it; two
// waiters, each on a client of its own, then wait for it.
func holderDiesScenario(p params) scenario {
	return scenario{
		id:      "holder-dies",
		title:   fmt.Sprintf("A holder dies without unlocking (TTL %v; %d waiters, each on a client of its own)", p.dieTTL, 2),
		setups:  []string{"proxied"},
		workers: 2, clients: 2, contended: true,
		round: diesRound, prepare: prepareHolder, table: holderDiesTable,
	}
}

// prepareHolder gives the first worker the dying holder: a client of its
// own with the short TTL, and the node timeout the default TTL would
// derive (the short TTL's own is 5 ms, too tight for the proxies on two
// cores).
func prepareHolder(b *bench, c *contender, ws []*wstate) {
	s := b.cur
	s.ttl, s.nodeTimeout, s.stats = b.p.dieTTL, s.rawTimeout, nil
	ws[0].holder = b.another(c.id, s).newWorker()
}

// diesRound runs dieCycles cycles of the holder-dies scenario. In each,
// the holder takes a fresh key and "dies": it never releases it. Every
// worker then calls Lock on the key at once, on its own client. It records
// how long after the holder's keys expired the first waiter held the lock
// (r.gap), and returns the cycles in which a waiter held the lock while
// the holder could still believe it held it, or two waiters at once.
func diesRound(b *bench, _ scenario, ws []*wstate, _ time.Time, r *result, round string) int {
	h, bg, viol := ws[0], context.Background(), 0
	for range b.p.dieCycles {
		if b.ctx.Err() != nil {
			break
		}
		key := h.keys[0] + ":" + round + ":" + strconv.Itoa(h.k)
		h.k++
		hctx, cancel := context.WithTimeout(bg, 5*time.Second)
		t0 := time.Now()
		err := h.holder.Lock(hctx, key)
		cancel()
		if err != nil {
			h.failed(&h.lockErrs, err)
			continue
		}
		// The keys were set after t0, so they expire after t0 + TTL: the
		// delay measured from there is an upper bound of the true one.
		// The holder counts its validity from t0 too: it may believe it
		// holds the lock until t0 + TTL − drift.
		expiry := t0.Add(b.p.dieTTL)
		holderEnd := expiry.Add(-(b.p.dieTTL/100 + 2*time.Millisecond))
		var (
			mu    sync.Mutex
			first time.Time
			inCS  atomic.Int32
			bad   atomic.Bool
			wg    sync.WaitGroup
		)
		for _, st := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithDeadline(bg, expiry.Add(10*time.Second))
				defer cancel()
				t := time.Now()
				if err := st.w.Lock(ctx, key); err != nil {
					st.failed(&st.lockErrs, err)
					return
				}
				got := time.Now()
				if inCS.Add(1) != 1 || got.Before(holderEnd) {
					bad.Store(true)
				}
				mu.Lock()
				if first.IsZero() {
					first = got
				}
				mu.Unlock()
				inCS.Add(-1)
				if err := st.w.Unlock(bg); err != nil {
					st.failed(&st.unlockErs, err)
				}
				if r != nil {
					st.acq.add(got.Sub(t))
					st.sections++
				}
			}()
		}
		wg.Wait()
		if bad.Load() {
			viol++
		}
		if first.IsZero() {
			continue
		}
		if r != nil {
			r.gap.add(first.Sub(expiry))
			h.cycle.add(first.Sub(t0))
		}
		h.maxCycle = max(h.maxCycle, time.Since(t0))
		h.n++
	}
	return viol
}

// holderDiesTable is the holder-dies scenario's table in the report: how
// soon after the holder's expiry a waiter held the lock.
func holderDiesTable(b *strings.Builder, p params, s *scenarioRes) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("| contender | cycles | first waiter holds, after the holder's expiry: p50 / p99 / max | lock wait p50 / p99 | lock / unlock errors | exclusion violations | ratio median [min–max] |\n|---|---|---|---|---|---|---|\n")
	for _, r := range s.res {
		n, _ := totals(r)
		w("| %s %s | %d | %s / %s / %s | %s / %s | %d / %d | %d | %s |\n", r.c.id, r.c.name, n,
			fmtDur(r.gap.q(0.5)), fmtDur(r.gap.q(0.99)), fmtDur(r.gap.max),
			fmtDur(r.acq.q(0.5)), fmtDur(r.acq.q(0.99)), r.lockErrs, r.unlockErrs, r.violations, ratioCell(r.ratios))
	}
	w("\nEach cycle: a holder on a client of its own takes a fresh key with a %v TTL and never releases it; both waiters, each on its own client, call Lock at once. \"After the holder's expiry\" is measured from the holder's Lock call + TTL: its keys were set after that, so the figure is an upper bound of the delay after the keys expired on a majority. Lock wait: both waiters, Lock call to grant (the second one waits for the first's section too). A violation is a cycle in which a waiter held the lock before the holder's own validity (from its Lock call: TTL − drift) had ended, or two waiters held it at once. Ratio: time per cycle ÷ the floor's.\n\n", p.dieTTL)
}
