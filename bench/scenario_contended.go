package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// contendedScenario: p.contenders goroutines of one client instance on
// one key (a fresh one per round), each holding the lock for p.hold, with
// each contender's own retrying Lock.
func contendedScenario(p params) scenario {
	return scenario{
		id:      "contended",
		title:   fmt.Sprintf("Contended (%d goroutines on one key, holding %v)", p.contenders, p.hold),
		setups:  []string{"direct", "proxied"},
		workers: p.contenders, contended: true,
		round: contendedRound, table: contendedTable,
	}
}

// contendedClientsScenario: as contendedScenario, the goroutines split
// over p.clients client instances, as that many hosts would be.
func contendedClientsScenario(p params) scenario {
	return scenario{
		id:      "contended-clients",
		title:   fmt.Sprintf("Contended across clients (%d client instances × %d goroutines on one key, holding %v)", p.clients, p.contenders/max(1, p.clients), p.hold),
		setups:  []string{"direct", "proxied"},
		workers: p.contenders, clients: p.clients, contended: true,
		round: contendedRound, table: contendedTable,
	}
}

// contShared is what the goroutines of one contended round share.
type contShared struct {
	round      string // suffix making the key distinct per round
	mu         sync.Mutex
	last       time.Time // when the last holder began to release
	lastHolder int
	gap        *hist // to the next holder, whoever it is
	gapOther   *hist // to the next holder when it is another goroutine
	held       *hist // from a grant to the start of its release
	inCS       atomic.Int32
	violations atomic.Int32
}

// contendedRound runs every worker's contendedLoop on the round's key.
func contendedRound(b *bench, sc scenario, ws []*wstate, end time.Time, r *result, tag string) int {
	var wg sync.WaitGroup
	record := r != nil
	sh := &contShared{round: tag, lastHolder: -1}
	if record {
		sh.gap, sh.gapOther, sh.held = &r.gap, &r.gapOther, &r.held
	}
	for i, st := range ws {
		wg.Add(1)
		go b.contendedLoop(sc, i, st, sh, end, record, &wg)
	}
	wg.Wait()
	return int(sh.violations.Load())
}

// contendedLoop takes the lock, holds it for p.hold and releases it, until
// end; it records the handoff gaps and checks mutual exclusion.
func (b *bench) contendedLoop(sc scenario, id int, st *wstate, sh *contShared, end time.Time, record bool, wg *sync.WaitGroup) {
	defer wg.Done()
	bg := context.Background()
	ctx, cancel := context.WithDeadline(bg, end)
	defer cancel()
	// A fresh key per round: a round cut while a Lock was half way (or an
	// unlock that failed) must not leave the next round a stale key.
	key := st.keys[0] + ":" + sh.round
	for time.Now().Before(end) {
		t0 := time.Now()
		if err := st.w.Lock(ctx, key); err != nil {
			if ctx.Err() != nil {
				st.cut++
				return
			}
			st.failed(&st.lockErrs, err)
			continue
		}
		t1 := time.Now()
		sh.mu.Lock()
		if !sh.last.IsZero() && record {
			sh.gap.add(t1.Sub(sh.last))
			if sc.handoff(sh.lastHolder, id) {
				sh.gapOther.add(t1.Sub(sh.last))
			}
		}
		sh.last = time.Time{}
		sh.lastHolder = id
		sh.mu.Unlock()
		if sh.inCS.Add(1) != 1 {
			sh.violations.Add(1)
		}
		b.holdFor(cmp.Or(sc.hold, b.p.hold))
		sh.inCS.Add(-1)
		sh.mu.Lock()
		sh.last = time.Now()
		if record {
			sh.held.add(sh.last.Sub(t1))
		}
		sh.mu.Unlock()
		err := st.w.Unlock(bg)
		t2 := time.Now()
		if err != nil {
			st.failed(&st.unlockErs, err)
		}
		if record {
			st.acq.add(t1.Sub(t0))
			st.cycle.add(t2.Sub(t0))
			st.sections++
		}
		st.maxCycle = max(st.maxCycle, t2.Sub(t0))
		st.n++
	}
}

// contendedTable is the contended scenarios' table in the report: critical
// sections, handoffs, waits and fairness.
func contendedTable(b *strings.Builder, p params, s *scenarioRes) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	other := "goroutine"
	if s.sc.clients > 1 {
		other = "client"
	}
	w("| contender | sections | sections/s | handoff gap p50 / p99 | to another %s: p50 / p99 (n) | lock wait p50 / p99 | held, mean | fairness min / max per goroutine | lock / unlock errors | cut at round end | exclusion violations | allocs/section* | ratio median [min–max] | CPU stolen, median [max] of rounds | lock wait p99 in calm rounds |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", other)
	for _, r := range s.res {
		n, el := totals(r)
		lo, hi := minMax(r.perWorker)
		a, _ := allocsPer(r)
		w("| %s %s | %d | %.0f | %s / %s | %s / %s (%d) | %s / %s | %s | %d / %d | %d / %d | %d | %d | %.1f | %s | %s | %s |\n", r.c.id, r.c.name, n, rate(n, el),
			fmtDur(r.gap.q(0.5)), fmtDur(r.gap.q(0.99)), fmtDur(r.gapOther.q(0.5)), fmtDur(r.gapOther.q(0.99)), r.gapOther.n,
			fmtDur(r.acq.q(0.5)), fmtDur(r.acq.q(0.99)), fmtDur(r.held.mean()),
			lo, hi, r.lockErrs, r.unlockErrs, r.cut, r.violations, a, ratioCell(r.ratios), stealCell(r), calmP99(r))
	}
	w("\nHandoff gap: from the holder starting to release (end of its critical section, before Unlock) to the next holder's Lock returning; the goroutine that just released may take the lock straight back (it calls Lock again at once while the others sleep in their retry delay), so the gap to *another* goroutine (across clients: to a goroutine of another client) is shown apart. Lock wait: Lock call to grant, retries included. Held: from Lock returning to Unlock being called, the mean; the hold is a time.Sleep, which overshoots by up to a millisecond more when other goroutines of the process (here all the contender's clients, as hosts) are active during it (docs/PERFORMANCE.md, \"Where a cross-client section goes\"), so it differs between contenders. Fairness: sections per goroutine over all rounds. Each round uses a fresh key. CPU stolen: the share of the machine's CPU time (/proc/stat) that the hypervisor gave to other guests during the round; a waiter in a FIFO line waits for every section ahead of it, so a stall of a few milliseconds lengthens up to seven waits at once. Calm rounds: those with less than %.0f%% stolen; their p99 is shown beside, the verdicts use every round.\n\n", 100*calmSteal)
}

// holdFor is a holder's critical section: time.Sleep(d), or with
// -precise-hold a nanosleep system call, which the kernel ends within its
// timer slack (50µs). time.Sleep's timer fires from the Go netpoller,
// which sleeps in whole milliseconds (epoll_pwait): a sleep that began, or
// whose process was last woken, at a fraction of a millisecond into it
// ends up to a millisecond late.
func (b *bench) holdFor(d time.Duration) {
	if !b.p.preciseHold {
		time.Sleep(d)
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
