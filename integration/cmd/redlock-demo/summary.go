package main

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// maxOverlapsShown caps the overlaps listed in the summary.
const maxOverlapsShown = 10

// summarize prints the summary and the verdict. It returns a
// *violationError when the checker found overlapping lock windows or the
// counter lost updates, and an error when no lock was granted at all.
func (r *demoRun) summarize(elapsed time.Duration, interrupted bool, closeErr error) error {
	s := r.stats.snapshot()
	overlaps := r.chk.Overlaps()
	lost, value, want := r.ctr.Lost()
	note := r.v.note

	note("")
	note("--- summary " + strings.Repeat("-", 60))
	ran := seconds(elapsed)
	if interrupted {
		ran += " (interrupted)"
	}
	note("%-18s %s: %d workers, lock TTL %v, %v of work per lock", "duration", ran, r.cfg.workers, r.cfg.ttl, r.cfg.hold)
	note("%-18s %s", "nodes", r.nodesLine(s))
	note("%-18s %s", "grants", grantsLine(s.grants))
	note("%-18s %d (the shared counter reads %d of %d increments)", "critical sections", s.total(), value, want)
	r.latencyLines(s)
	note("%-18s %d in %d lock windows", "overlaps", len(overlaps), len(r.chk.Windows()))
	for i, o := range overlaps {
		if i == maxOverlapsShown {
			note("%-18s ... and %d more", "", len(overlaps)-i)
			break
		}
		note("%-18s %s", "", o)
	}
	note("%-18s %d", "lost updates", lost)
	if closeErr != nil {
		note("%-18s FAILED: %v", "cleanup", closeErr)
	} else {
		note("%-18s %s", "cleanup", r.env.closed())
	}
	note("")
	if len(overlaps) > 0 || lost != 0 {
		err := &violationError{overlaps: len(overlaps), lost: lost}
		if len(overlaps) == 0 {
			note("No two lock windows overlapped: the work ran on after its lock's validity ended (-hold %v, -ttl %v).", r.cfg.hold, r.cfg.ttl)
		}
		note("MUTUAL EXCLUSION VIOLATED: %d overlapping lock windows, %d lost counter updates", err.overlaps, err.lost)
		return err
	}
	if s.total() == 0 {
		note("no lock was granted: mutual exclusion was never put to the test")
		return errors.New("no lock was granted")
	}
	note("mutual exclusion held: no two workers held the lock at once")
	return nil
}

func (r *demoRun) nodesLine(s snapshot) string {
	line := fmt.Sprintf("%d, quorum %d", len(r.env.urls), r.env.quorum())
	if r.env.cluster != nil {
		line += ", " + r.env.cluster.Backend.Name() + " backend"
	}
	if !s.killedAt.IsZero() {
		line += fmt.Sprintf("; node %d killed at +%s", killNode+1, seconds(s.killedAt.Sub(r.v.t0)))
	} else {
		line += "; no node killed"
	}
	return line
}

func grantsLine(grants []int) string {
	parts := make([]string, len(grants))
	for i, g := range grants {
		parts[i] = fmt.Sprintf("worker %d: %d", i+1, g)
	}
	return strings.Join(parts, ", ")
}

// latencyLines prints acquire latency percentiles, before and after the
// kill when there was one.
func (r *demoRun) latencyLines(s snapshot) {
	const label = "acquire latency"
	if s.killedAt.IsZero() {
		r.v.note("%-18s %s", label, latencyLine(s.all()))
	} else {
		r.v.note("%-18s grants before the kill: %s", label, latencyLine(s.before))
		r.v.note("%-18s grants after the kill:  %s", "", latencyLine(s.after))
	}
	r.v.note("%-18s (time in Lock until granted, waiting for the other workers included)", "")
}

func latencyLine(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no grants"
	}
	return fmt.Sprintf("p50 %s, p99 %s (%d grants)", ms(percentile(ds, 50)), ms(percentile(ds, 99)), len(ds))
}
