package main

import (
	"fmt"
	"time"
)

// hostsHold is how long a holder keeps the lock in contendedHostsScenario.
const hostsHold = 10 * time.Millisecond

// contendedHostsScenario: p.clients client instances (as that many
// hosts) of one goroutine each on one key, each holding the lock for
// hostsHold: every handoff goes to another host, so it measures the
// queue across clients, the targeted wake and the handoff between hosts
// (issue 22's scenario).
func contendedHostsScenario(p params) scenario {
	return scenario{
		id:      "contended-hosts",
		title:   fmt.Sprintf("Contended across hosts (%d client instances × 1 goroutine on one key, holding %v)", p.clients, hostsHold),
		setups:  []string{"direct", "proxied"},
		workers: p.clients, clients: p.clients, contended: true, hold: hostsHold,
		round: contendedRound, table: contendedTable,
	}
}
