package main

import "testing"

// TestScenarioClients: the goroutines of a scenario share one client
// instance unless it asks for several; a handoff counts between
// goroutines, or between clients when there are several.
func TestScenarioClients(t *testing.T) {
	one := scenario{workers: 8, contended: true}
	for w := range one.workers {
		if c := one.client(w); c != 0 {
			t.Errorf("one client: worker %d on client %d", w, c)
		}
	}
	if !one.handoff(0, 1) || one.handoff(3, 3) {
		t.Error("one client: a handoff is to another goroutine")
	}
	four := scenario{workers: 8, clients: 4, contended: true}
	want := []int{0, 0, 1, 1, 2, 2, 3, 3}
	for w, c := range want {
		if got := four.client(w); got != c {
			t.Errorf("four clients: worker %d on client %d, want %d", w, got, c)
		}
	}
	if four.handoff(0, 1) || !four.handoff(1, 2) {
		t.Error("four clients: a handoff is to another client")
	}
}

// TestScenarios: every listed scenario has a unique id, a round and at
// least one known set-up; scenarioIDs (the flag's help, made before the
// flags are read) works on zero params.
func TestScenarios(t *testing.T) {
	known := map[string]bool{"direct": true, "proxied": true, "mixed": true}
	seen := map[string]bool{}
	for _, sc := range scenarios(params{parallel: 32, contenders: 8, clients: 4}) {
		if seen[sc.id] {
			t.Errorf("scenario %q listed twice", sc.id)
		}
		seen[sc.id] = true
		if sc.round == nil {
			t.Errorf("scenario %q has no round", sc.id)
		}
		if len(sc.setups) == 0 {
			t.Errorf("scenario %q runs in no set-up", sc.id)
		}
		for _, s := range sc.setups {
			if !known[s] {
				t.Errorf("scenario %q: unknown set-up %q", sc.id, s)
			}
		}
	}
	if len(scenarioIDs()) != len(seen) {
		t.Errorf("scenarioIDs: %v, want %d ids", scenarioIDs(), len(seen))
	}
}
