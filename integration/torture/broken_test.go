package torture_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock/integration/history"
)

// The oracles must be able to fail: histories broken on purpose must
// show violations.

// TestExclusionOracleCatchesUnsafeRestarts restarts a majority of the
// nodes at once and at once brings them back (no delay), losing the
// holders' keys: another client's TryLock then takes a lock still held,
// which the Redlock description warns of, and the exclusion oracle must
// see it.
func TestExclusionOracleCatchesUnsafeRestarts(t *testing.T) {
	cfg := history.Default()
	cfg.Faults.Delay, cfg.Faults.LostReply, cfg.Faults.LostCommand, cfg.Faults.Late = 0, 0, 0, 0
	cfg.Restart, cfg.RestartNodes, cfg.RestartDown = 1, 3, time.Nanosecond
	cfg.Ops = []string{"trylock"}
	cfg.MaxHold = 250 * time.Millisecond
	cfg.Duration = 500 * time.Millisecond
	// A history shows the overlap only when a hold is in progress at the
	// restart and another TryLock lands before it ends: about one in ten
	// here (12 histories missed it in about one run of three; 48, in
	// about one in thirty by that rate), so 96.
	sum, _ := history.RunMany(context.Background(), history.Standalone(shared), cfg, history.Options{Max: 96, Budget: 2 * time.Minute, Concurrency: 6, FirstSeed: 1})
	t.Logf("\n%s", sum)
	if sum.Violations[history.Exclusion] == 0 {
		t.Fatalf("a majority restarted without delay under held locks broke no exclusion in %d histories", sum.Histories)
	}
}

// TestReleaseAndLeftoverOraclesCatchForgottenLocks has the holders drop
// their locks without Unlock: the keys stay for their TTL, which the
// Release oracle (free within a node timeout plus a round trip) and the
// Leftover oracle (nothing left after Close) must both report.
func TestReleaseAndLeftoverOraclesCatchForgottenLocks(t *testing.T) {
	cfg := history.Default()
	cfg.Faults.Delay, cfg.Faults.LostReply, cfg.Faults.LostCommand, cfg.Faults.Late, cfg.Restart = 0, 0, 0, 0, 0
	cfg.Forget = true
	cfg.Ops = []string{"trylock", "sem"}
	// Keys that outlive the history and Close: with the default TTLs
	// (300-800 ms) a history whose last lock came early had nothing left
	// by the time Close returned, now and then.
	cfg.TTLMin, cfg.TTLMax = 4*time.Second, 5*time.Second
	// Every history must forget a lock: under -race on a busy machine
	// the default 50 ms node timeout failed most TryLocks of a history
	// (0-2 grants in 4 histories, stop 54), leaving nothing to find.
	// The oracles' bound grows with it (a node timeout plus a round
	// trip), still far below the TTLs.
	cfg.NodeTimeout = 250 * time.Millisecond
	// On a cluster's copies too: the oracles read each copy's keys under
	// its hash tag, and would find nothing under another name.
	for _, target := range []struct {
		name  string
		nodes func() history.Nodes
	}{
		{"independent nodes", func() history.Nodes { return history.Standalone(shared) }},
		{"cluster copies", func() history.Nodes { return clusterCopies(t) }},
	} {
		t.Run(target.name, func(t *testing.T) {
			sum, _ := history.RunMany(context.Background(), target.nodes(), cfg, history.Options{Max: 4, Budget: time.Minute, Concurrency: 4, FirstSeed: 1})
			t.Logf("\n%s", sum)
			if sum.Failing[history.Release] != sum.Histories || sum.Failing[history.Leftover] != sum.Histories {
				t.Fatalf("forgotten locks: release failed %d and leftover %d of %d histories; want all",
					sum.Failing[history.Release], sum.Failing[history.Leftover], sum.Histories)
			}
		})
	}
}
