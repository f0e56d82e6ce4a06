package torture_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/integration/history"
)

// TestHistoriesAcrossNodeRestarts runs histories (every fault kind) while
// the cluster restarts real nodes, one at a time, without persistence and
// delayed past the longest TTL, as the Redlock description requires: the
// clients' connections break, the nodes come back empty, and exclusion,
// the semaphore's permits and the election's terms must hold. The other
// oracles are printed.
func TestHistoriesAcrossNodeRestarts(t *testing.T) {
	budget, err := time.ParseDuration(env("HISTORY_RESTART_BUDGET", "8s"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(t, env("HISTORY_FAULTS", shortFaults))
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	restarts := 0
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i = (i + 1) % shared.Size() {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
			// Not ctx: a node stopped must start again.
			if err := shared.Restart(context.Background(), i, cfg.TTLMax+cfg.NodeTimeout+100*time.Millisecond); err != nil {
				t.Errorf("restart node %d: %v", i, err)
				return
			}
			restarts++
		}
	}()
	o := history.Options{Budget: budget, Concurrency: 4, FirstSeed: time.Now().UnixNano() % 1e12, Log: os.Stdout, LogLimit: 2,
		Fatal: oracles(t, "exclusion,permits,leader,fence"), Print: oracles(t, "release,leftover,starvation")}
	sum, failed := history.RunMany(context.Background(), history.Standalone(shared), cfg, o)
	stop()
	wg.Wait()
	t.Logf("%d node restarts during the histories", restarts)
	os.Stdout.WriteString(sum.String())
	for _, r := range failed {
		t.Errorf("history failed a fatal oracle (replay: HISTORY_SEED=%d):\n%s", r.Seed, r)
	}
}
