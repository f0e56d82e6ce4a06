// Package torture runs randomized histories of lock clients against five
// real Redis masters whose commands suffer faults (package history and
// faultnode), and checks them against the oracles of package history.
//
// Tunables are environment variables:
//
//	HISTORY_BUDGET       how long to start histories (default 40s; make torture: 10m)
//	HISTORY_SEED         run only this seed (a failing history's seed replays it)
//	HISTORY_FIRST_SEED   the first seed of a run (default: from the clock, printed)
//	HISTORY_CONCURRENCY  histories at once (default 8)
//	HISTORY_FAULTS       fault kinds on, comma-separated (default: the short run's set)
//	HISTORY_FATAL        oracles that fail the test (default: the short run's set)
//	HISTORY_OPS          operations drawn (default all)
//	HISTORY_TRACE        a directory: each history failing release,
//	                     leftover or starvation writes there every command
//	                     the nodes ran, with its waits, grants and breakers
package torture_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/integration/cluster"
)

var shared *cluster.Cluster

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 5})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "torture: cannot start the cluster:", err)
		os.Exit(1)
	}
	shared = c
	code := m.Run()
	if left := closeCluster(); code == 0 && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "torture: keys left on the Redis Cluster: %v\n", left)
		code = 1
	}
	if code == 0 {
		keys, err := c.Keys(context.Background(), "*")
		if err != nil {
			fmt.Fprintln(os.Stderr, "torture: listing keys:", err)
			code = 1
		}
		for i, ks := range keys {
			if len(ks) > 0 {
				fmt.Fprintf(os.Stderr, "torture: keys left on node %d: %v\n", i, ks)
				code = 1
			}
		}
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "torture: closing the cluster:", err)
	}
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "torture: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}
