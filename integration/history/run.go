package history

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/integration/faultnode"
)

// Summary adds up many histories.
type Summary struct {
	Histories, Ops, Grants, Abandoned int
	Tombstones                        int // found after Close, expiring within Config.TombMax
	OpsBy                             map[string]int
	Faults                            map[faultnode.Kind]int64
	// Violations counts violations per oracle, Histories per oracle the
	// histories with at least one, and Seeds the first seeds of those.
	Violations, Failing map[Oracle]int
	Seeds               map[Oracle][]int64
	// SlowRelease counts the histories that failed Release while node
	// calls timed out after the faults stopped (Result.SlowCalls).
	SlowRelease int
	// Extended counts the histories that passed Release only by the
	// bound counted from a node call that timed out (Result.Extended).
	Extended      int
	HarnessErrors int
	Unreadable    int
	Elapsed       time.Duration
}

func newSummary() *Summary {
	return &Summary{OpsBy: map[string]int{}, Faults: map[faultnode.Kind]int64{},
		Violations: map[Oracle]int{}, Failing: map[Oracle]int{}, Seeds: map[Oracle][]int64{}}
}

func (s *Summary) add(r *Result) {
	s.Histories++
	s.Ops += r.Ops
	s.Grants += r.Grants
	s.Abandoned += r.Abandoned
	s.Tombstones += r.Tombstones
	for k, v := range r.opsBy {
		s.OpsBy[k] += v
	}
	for k, v := range r.Faults {
		s.Faults[k] += v
	}
	for o, vs := range r.Violations {
		if len(vs) == 0 {
			continue
		}
		s.Violations[o] += len(vs)
		s.Failing[o]++
		if len(s.Seeds[o]) < 10 {
			s.Seeds[o] = append(s.Seeds[o], r.Seed)
		}
	}
	if len(r.Violations[Release]) > 0 && r.SlowCalls > 0 {
		s.SlowRelease++
	}
	if r.Extended && len(r.Violations[Release]) == 0 {
		s.Extended++
	}
	if len(r.Errors) > 0 {
		s.HarnessErrors++
	}
	s.Unreadable += r.Unreadable
}

// String reports the counts: histories, operations, faults by kind and
// violations per oracle, with the first failing seeds of each.
func (s *Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "histories %d in %v, operations %d, grants %d, closes abandoning releases %d, harness errors %d, nodes unreadable %d, tombstones expiring after Close %d\n",
		s.Histories, s.Elapsed.Round(time.Second), s.Ops, s.Grants, s.Abandoned, s.HarnessErrors, s.Unreadable, s.Tombstones)
	ops := make([]string, 0, len(s.OpsBy))
	for k := range s.OpsBy {
		ops = append(ops, k)
	}
	sort.Strings(ops)
	b.WriteString("operations by kind:")
	for _, k := range ops {
		fmt.Fprintf(&b, " %s %d", k, s.OpsBy[k])
	}
	b.WriteString("\nfaults injected:")
	for _, k := range faultnode.Kinds {
		fmt.Fprintf(&b, " %s %d", k, s.Faults[k])
	}
	b.WriteString("\nviolations per oracle:\n")
	for _, o := range Oracles {
		fmt.Fprintf(&b, "  %-10s %6d violations in %5d histories", o, s.Violations[o], s.Failing[o])
		if len(s.Seeds[o]) > 0 {
			fmt.Fprintf(&b, "  seeds %v", s.Seeds[o])
		}
		if o == Release && s.Failing[o] > 0 {
			fmt.Fprintf(&b, "\n  %-10s %6s (%d of these histories while node calls timed out after the faults stopped, no fault injected)", "", "", s.SlowRelease)
		}
		if o == Release && s.Extended > 0 {
			fmt.Fprintf(&b, "\n  %-10s %6s (%d histories free only within the bound counted from a node call that timed out after the faults stopped, no fault injected)", "", "", s.Extended)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Options says how many histories RunMany runs.
type Options struct {
	// Budget is how long to keep starting histories; Max, when > 0, caps
	// how many.
	Budget time.Duration
	Max    int
	// Concurrency is how many histories run at once, each on keys of its
	// own.
	Concurrency int
	// FirstSeed is the first history's seed; the others follow it.
	FirstSeed int64
	// Repeat, when > 1, runs every seed that many times: a violation
	// that hangs on the goroutines' interleaving shows in some runs of
	// its seed, not all.
	Repeat int
	// Log, when not nil, gets every history with a violation of an
	// oracle in Fatal or Print (the seed first), as it ends.
	Log io.Writer
	// Fatal are the oracles whose violations fail the run; Print the
	// others that are printed as they come.
	Fatal, Print map[Oracle]bool
	// LogLimit, when > 0, caps how many histories are printed per
	// oracle (the summary still counts them all, with their first
	// seeds).
	LogLimit int
	// TraceDir, when set, gets the trace of each history that failed
	// Release, Leftover or Starvation (Config.Trace), as trace-<seed>.log.
	TraceDir string
}

// RunMany runs histories of seeds FirstSeed, FirstSeed+1, ... until the
// budget is spent, Concurrency at a time, and adds them up. It returns the
// summary and the results that failed a Fatal oracle.
func RunMany(ctx context.Context, nodes Nodes, cfg Config, o Options) (*Summary, []*Result) {
	sum := newSummary()
	start := time.Now()
	var mu sync.Mutex
	var failed []*Result
	logged := map[Oracle]int{}
	seeds := make(chan int64)
	var wg sync.WaitGroup
	conc := max(o.Concurrency, 1)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The workers start one after another, spread over one
			// history's operations, as they run once the run is under
			// way. Started at the same instant, the first histories'
			// clients dial every node at once (six histories: 90
			// connections and their script loads on two cores), every
			// first command timed out, and those histories failed the
			// release oracle with no grant at all.
			select {
			case <-time.After(time.Duration(w) * cfg.Duration / time.Duration(conc)):
			case <-ctx.Done():
			}
			for seed := range seeds {
				r := Run(ctx, nodes, cfg, seed)
				mu.Lock()
				sum.add(r)
				bad := r.Failed(o.Fatal)
				if bad {
					failed = append(failed, r)
				}
				if o.Log != nil && (bad || r.Failed(o.Print)) {
					show := bad || o.LogLimit <= 0
					for _, k := range Oracles {
						if len(r.Violations[k]) > 0 && o.Print[k] {
							logged[k]++
							show = show || logged[k] <= o.LogLimit
						}
					}
					if show {
						fmt.Fprintln(o.Log, r.String())
					}
					if o.TraceDir != "" && len(r.Trace) > 0 {
						_ = os.WriteFile(filepath.Join(o.TraceDir, fmt.Sprintf("trace-%d.log", r.Seed)),
							[]byte(r.String()+"\n"+strings.Join(r.Trace, "\n")+"\n"), 0o644)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := int64(0); ; i++ {
		if ctx.Err() != nil || time.Since(start) > o.Budget || (o.Max > 0 && int(i) >= o.Max) {
			break
		}
		seeds <- o.FirstSeed + i/int64(max(o.Repeat, 1))
	}
	close(seeds)
	wg.Wait()
	sum.Elapsed = time.Since(start)
	return sum, failed
}
