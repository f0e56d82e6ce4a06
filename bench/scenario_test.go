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
