package main

import (
	"fmt"
	"strings"
	"time"
)

// Targets of the issue "Lean kernel" for A, each a median over the
// interleaved rounds of one run, relative to the floor in the same round.
const (
	targetSerial   = 1.05 // healthy serial, direct: time per cycle ÷ the floor's
	targetP50      = 1.03 // healthy serial, direct: cycle p50 ÷ the floor's
	targetCPU      = 1.10 // healthy serial, direct: CPU per cycle ÷ the floor's
	targetParallel = 1.02 // healthy parallel, direct: time per cycle ÷ the floor's
	targetFault    = 1.05 // one node +30 ms or blackholed: time per cycle ÷ the floor's
	targetGor      = 10   // blackholed: client goroutines left at the end of a round
)

// cost is a contender's cost per cycle in one scenario: medians over its
// rounds, so that one disturbed round does not move it.
type cost struct {
	allocs, bytes float64
	cpu           time.Duration
}

func roundMedians(r *result) cost {
	var a, by, c []float64
	for _, x := range r.rounds {
		if x.cycles == 0 {
			continue
		}
		n := float64(x.cycles)
		a = append(a, float64(x.mallocs)/n)
		by = append(by, float64(x.bytes)/n)
		c = append(c, float64(x.cpu)/n)
	}
	return cost{allocs: median(a), bytes: median(by), cpu: time.Duration(median(c))}
}

// setupScenarios lists the scenarios that run in set-up id.
func setupScenarios(p params, id string) string {
	var ids []string
	for _, sc := range scenarios(p) {
		for _, s := range sc.setups {
			if s == id {
				ids = append(ids, sc.id)
			}
		}
	}
	return strings.Join(ids, ", ")
}

func verdict(ok bool) string {
	if ok {
		return "**PASS**"
	}
	return "**MISS**"
}

// renderHeadline writes the report's headline: the healthy hot path with
// every node reached directly, each contender against the raw floor
// measured in the same rounds.
func renderHeadline(b *strings.Builder, p params, rs []*scenarioRes) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	ser, par := find(rs, "direct", "healthy-serial"), find(rs, "direct", "healthy-parallel")
	w("## Headline: the hot path without proxies\n\n")
	if ser == nil && par == nil {
		w("Not run: `-setups` or `-scenarios` left the direct set-up's healthy scenarios out.\n\n")
		return
	}
	w("Every node reached directly (no toxiproxy), all healthy, a distinct key per cycle; serial is 1 goroutine, parallel %d goroutines sharing one client instance. %d interleaved rounds of %v per contender, the order rotating. Each ratio is the median over rounds of (the contender's figure ÷ the raw floor D's in the same round) [min–max]; allocations per cycle are the median of the rounds' (with no proxy in the process they are the client's own). A and E without hooks.\n\n", p.parallel, p.rounds, p.roundDur)
	w("| contender | serial: time/op ÷ floor | serial: cycle p50 ÷ floor | serial: CPU/op ÷ floor | serial: allocs/cycle | parallel (%d): time/op ÷ floor | parallel: CPU/op ÷ floor | parallel: allocs/cycle |\n|---|---|---|---|---|---|---|---|\n", p.parallel)
	cells := func(s *scenarioRes, i int, serial bool) string {
		if s == nil {
			if serial {
				return "not run | not run | not run | not run"
			}
			return "not run | not run | not run"
		}
		r := s.res[i]
		a := fmt.Sprintf("%.1f", roundMedians(r).allocs)
		if serial {
			return strings.Join([]string{ratioCell(r.ratios), ratioCell(r.p50Ratios), ratioCell(r.cpuRatios), a}, " | ")
		}
		return strings.Join([]string{ratioCell(r.ratios), ratioCell(r.cpuRatios), a}, " | ")
	}
	for i, id := range contenderIDs {
		name := shortNames[id]
		if s := either(ser, par); s != nil {
			name = s.res[i].c.name
		}
		w("| %s %s | %s | %s |\n", id, name, cells(ser, i, true), cells(par, i, false))
	}
	var fl []string
	if ser != nil {
		fl = append(fl, fmt.Sprintf("serial %s, CPU %s per cycle", floorFigures(ser), fmtDur(roundMedians(ser.res[floorIdx]).cpu)))
	}
	if par != nil {
		fl = append(fl, "parallel "+floorFigures(par))
	}
	w("\nThe floor D itself: %s. Per-scenario figures: *Details: direct* below.\n\n", strings.Join(fl, "; "))
}

// either returns the first of a and b that is not nil.
func either(a, b *scenarioRes) *scenarioRes {
	if a != nil {
		return a
	}
	return b
}

// renderTargets writes the targets for A, each with the set-up it
// is read in, the measured median and PASS or MISS.
func renderTargets(b *strings.Builder, p params, rs []*scenarioRes) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Targets (our client, A)\n\n")
	w("| target | set-up | measured | verdict |\n|---|---|---|---|\n")
	row := func(name, setup, id string, cell func(s *scenarioRes) (string, bool)) {
		s := find(rs, setup, id)
		if s == nil {
			w("| %s | %s | not run | – |\n", name, setup)
			return
		}
		v, ok := cell(s)
		w("| %s | %s | %s | %s |\n", name, setup, v, verdict(ok))
	}
	// ratio reads a median ratio of A's against target.
	ratio := func(target float64, of func(*result) []float64) func(*scenarioRes) (string, bool) {
		return func(s *scenarioRes) (string, bool) {
			xs := of(s.res[0])
			m := median(xs)
			return ratioCell(xs), m > 0 && m <= target
		}
	}
	// calmRatio is ratio with, beside it, the median of the calm rounds
	// (see result.calm); the verdict uses every round.
	calmRatio := func(target float64, of, calm func(*result) []float64) func(*scenarioRes) (string, bool) {
		return func(s *scenarioRes) (string, bool) {
			cell, ok := ratio(target, of)(s)
			c := calm(s.res[0])
			if len(c) == 0 {
				return cell + "; calm rounds: none", ok
			}
			return fmt.Sprintf("%s; calm rounds (%d of %d): %s", cell, len(c), len(of(s.res[0])), ratioCell(c)), ok
		}
	}
	timeRatios := func(r *result) []float64 { return r.ratios }

	// The hot path: no proxies.
	row(fmt.Sprintf("healthy serial: time/op ≤ %.2f× the floor's", targetSerial), "direct", "healthy-serial", calmRatio(targetSerial, timeRatios, func(r *result) []float64 { return r.calm.ratios }))
	row(fmt.Sprintf("healthy serial: cycle p50 ≤ %.2f× the floor's", targetP50), "direct", "healthy-serial", calmRatio(targetP50, func(r *result) []float64 { return r.p50Ratios }, func(r *result) []float64 { return r.calm.p50Ratios }))
	row(fmt.Sprintf("healthy serial: CPU/op ≤ %.2f× the floor's", targetCPU), "direct", "healthy-serial", calmRatio(targetCPU, func(r *result) []float64 { return r.cpuRatios }, func(r *result) []float64 { return r.calm.cpuRatios }))
	row("healthy serial: allocations per cycle ≤ the floor's", "direct", "healthy-serial", func(s *scenarioRes) (string, bool) {
		a, f := roundMedians(s.res[0]).allocs, roundMedians(s.res[floorIdx]).allocs
		return fmt.Sprintf("%.1f vs the floor's %.1f", a, f), a > 0 && a <= f
	})
	row(fmt.Sprintf("healthy parallel (%d goroutines): time/op ≤ %.2f× the floor's", p.parallel, targetParallel), "direct", "healthy-parallel", calmRatio(targetParallel, timeRatios, func(r *result) []float64 { return r.calm.ratios }))

	// One faulty node: through its proxy, the other nodes direct (mixed)
	// or proxied too.
	for _, setup := range []string{"mixed", "proxied"} {
		row(fmt.Sprintf("one node +%v: time/op ≤ %.2f× the floor's", p.latency, targetFault), setup, "latency", func(s *scenarioRes) (string, bool) {
			cell, ok := ratio(targetFault, timeRatios)(s)
			if a := s.res[0]; len(a.calls) > p.faultNode {
				c := a.calls[p.faultNode]
				cell += fmt.Sprintf("; node %d's breaker opened %d× during the rounds (calls: %d answered, %d timed out, %d skipped)", p.faultNode+1, c.opened, c.ok, c.timeout, c.skipped)
				if c.opened > 0 || c.skipped > 0 {
					cell += ": the ratio is that of a client skipping the slow node"
				}
			}
			return cell, ok
		})
	}
	for _, setup := range []string{"mixed", "proxied"} {
		row(fmt.Sprintf("one node blackholed: time/op ≤ %.2f× the floor's", targetFault), setup, "blackhole", ratio(targetFault, timeRatios))
	}
	for _, setup := range []string{"mixed", "proxied"} {
		row(fmt.Sprintf("one node blackholed: ≤ %d client goroutines left at the end of a round (median [min…max] of rounds)", targetGor), setup, "blackhole", func(s *scenarioRes) (string, bool) {
			g := s.res[0].gorEnd
			return gorCell(g), len(g) > 0 && medianInts(g) <= targetGor
		})
	}

	// Contention (issues 12 and 22): read without proxies (direct), and
	// behind them (proxied, the set-up of earlier reports) for reference.
	for _, setup := range []string{"direct", "proxied"} {
		row(fmt.Sprintf("contended, %d goroutines of one client: sections/s ≥ 1.15× the floor's; fairness ≥ 0.95; lock wait p99 ≤ 15 ms; CPU per section ≤ 1.5× the floor's", p.contenders), setup, "contended", func(s *scenarioRes) (string, bool) {
			a, f := s.res[0], s.res[floorIdx]
			p99 := a.acq.q(0.99)
			fair := fairness(a.perWorker)
			an, ael := totals(a)
			fn, fel := totals(f)
			ra, rf := rate(an, ael), rate(fn, fel)
			cpu := median(a.cpuRatios)
			return fmt.Sprintf("%.0f vs %.0f sections/s (%.2f×); fairness %.2f; wait p99 %s (calm rounds: %s; CPU stolen %s); CPU/section %s", ra, rf, ra/rf, fair, fmtDur(p99), calmP99(a), stealCell(a), ratioCell(a.cpuRatios)),
				rf > 0 && ra >= 1.15*rf && fair >= 0.95 && p99 <= 15*time.Millisecond && cpu <= 1.5
		})
		row(fmt.Sprintf("contended across %d clients × %d goroutines: handoff to another client p50 ≤ 2 ms; lock wait p99 ≤ 50 ms", p.clients, p.contenders/p.clients), setup, "contended-clients", func(s *scenarioRes) (string, bool) {
			a := s.res[0]
			h, p99 := a.gapOther.q(0.5), a.acq.q(0.99)
			return fmt.Sprintf("handoff p50 %s (n %d); wait p99 %s", fmtDur(h), a.gapOther.n, fmtDur(p99)),
				a.gapOther.n > 0 && h <= 2*time.Millisecond && p99 <= 50*time.Millisecond
		})
		row(fmt.Sprintf("contended across %d hosts × 1 goroutine, %v hold: sections/s ≥ the floor's; fairness ≥ 0.95; lock wait p99 ≤ 45 ms; handoff to another client p50 ≤ 1.2× the floor's; CPU per section ≤ 1.5× the floor's; no lock errors", p.clients, hostsHold), setup, "contended-hosts", func(s *scenarioRes) (string, bool) {
			a, f := s.res[0], s.res[floorIdx]
			an, ael := totals(a)
			fn, fel := totals(f)
			ra, rf := rate(an, ael), rate(fn, fel)
			fair := fairness(a.perWorker)
			p99 := a.acq.q(0.99)
			h, fh := a.gapOther.q(0.5), f.gapOther.q(0.5)
			hr := 0.0
			if fh > 0 {
				hr = float64(h) / float64(fh)
			}
			cpu := median(a.cpuRatios)
			return fmt.Sprintf("%.0f vs %.0f sections/s; fairness %.2f; wait p99 %s (calm rounds: %s; CPU stolen %s); handoff p50 %s vs %s (%.2f×); CPU/section %s; lock errors %d", ra, rf, fair, fmtDur(p99), calmP99(a), stealCell(a), fmtDur(h), fmtDur(fh), hr, ratioCell(a.cpuRatios), a.lockErrs),
				ra >= rf && fair >= 0.95 && p99 <= 45*time.Millisecond && fh > 0 && hr <= 1.2 && cpu <= 1.5 && a.lockErrs == 0
		})
	}
	row("a holder dies without unlocking: the next waiter holds the lock ≤ 20 ms after the holder's keys expired (p99; upper bound, see the scenario)", "proxied", "holder-dies", func(s *scenarioRes) (string, bool) {
		a := s.res[0]
		return fmt.Sprintf("p50 %s, p99 %s, max %s (n %d); violations %d", fmtDur(a.gap.q(0.5)), fmtDur(a.gap.q(0.99)), fmtDur(a.gap.max), a.gap.n, a.violations),
			a.gap.n > 0 && a.gap.q(0.99) <= 20*time.Millisecond && a.violations == 0
	})
	w("\nAll from this run. Ratios: median over the interleaved rounds of A's figure ÷ the floor D's in the same round [min–max]. The healthy targets are read without proxies (*direct*); a fault needs a proxy in front of the faulty node, so the fault targets are read with only that node behind one (*mixed*, the four others direct) and, for reference, with all five behind one (*proxied*, which compresses ratios towards 1); the contention targets (issues 12 and 22) in both: *direct* is the library as users run it, *proxied* is the set-up of the reports before it. A lock wait p99 sums the stalls of every section ahead of a waiter, so it is shown beside the p99 of the calm rounds (less than 5%% of the CPU stolen by the hypervisor); the verdict uses every round. The healthy rows give, the same way, the median of the calm rounds beside (rounds where neither A nor the floor had 5%% or more stolen). Goroutines: client (non-proxy) goroutines right after a round's last cycle minus right before the round, i.e. what A leaves running on the dead node. The breaker counts of the +%v rows come from A's hooks.\n\n", p.latency)
}

// fairness is min ÷ max of sections per goroutine (0 when none).
func fairness(perWorker []int) float64 {
	lo, hi := minMax(perWorker)
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}
