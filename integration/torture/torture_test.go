package torture_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock/integration/faultnode"
	"github.com/quorumlock/redlock/integration/history"
)

// shortFaults and shortFatal are the fault kinds and the fatal oracles
// of a run (make test, make torture): every kind, and the oracles that
// hold today (Exclusion, Permits, Leader, Fence). Release, Leftover and
// Starvation find the library's known
// defects (docs/TESTING.md lists them, with seeds): they are printed,
// with their counts, and fail the run only when HISTORY_FATAL names
// them (HISTORY_FATAL=exclusion,permits,leader,fence,release,leftover,starvation).
var (
	shortFaults = "delay,lost-reply,lost-command,late,restart"
	shortFatal  = "exclusion,permits,leader,fence"
)

// env returns the variable name, or def when it is unset or empty; the
// value "none" stands for an empty list.
func env(name, def string) string {
	switch v := os.Getenv(name); v {
	case "":
		return def
	case "none":
		return ""
	default:
		return v
	}
}

// config applies HISTORY_FAULTS and HISTORY_OPS to the default shape.
func config(t *testing.T, faults string) history.Config {
	cfg := history.Default()
	on := map[string]bool{}
	for _, k := range strings.Split(faults, ",") {
		on[strings.TrimSpace(k)] = true
	}
	known := map[string]bool{}
	for _, k := range faultnode.Kinds {
		known[k.String()] = true
	}
	for k := range on {
		if k != "" && !known[k] {
			t.Fatalf("HISTORY_FAULTS: unknown fault kind %q", k)
		}
	}
	if !on[faultnode.Delay.String()] {
		cfg.Faults.Delay = 0
	}
	if !on[faultnode.LostReply.String()] {
		cfg.Faults.LostReply = 0
	}
	if !on[faultnode.LostCommand.String()] {
		cfg.Faults.LostCommand = 0
	}
	if !on[faultnode.Late.String()] {
		cfg.Faults.Late = 0
	}
	if !on[faultnode.Restart.String()] {
		cfg.Restart = 0
	}
	if ops := os.Getenv("HISTORY_OPS"); ops != "" {
		cfg.Ops = strings.Split(ops, ",")
	}
	return cfg
}

func oracles(t *testing.T, list string) map[history.Oracle]bool {
	out := map[history.Oracle]bool{}
	for _, o := range strings.Split(list, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		ok := false
		for _, k := range history.Oracles {
			ok = ok || string(k) == o
		}
		if !ok {
			t.Fatalf("HISTORY_FATAL: unknown oracle %q", o)
		}
		out[history.Oracle(o)] = true
	}
	return out
}

// TestHistories runs seeded histories for HISTORY_BUDGET and fails on a
// violation of a fatal oracle; every violation is printed with its seed,
// and the counts per oracle at the end.
func TestHistories(t *testing.T) {
	o, cfg := runOptions(t, "HISTORY_BUDGET", "40s")
	sum, failed := history.RunMany(context.Background(), history.Standalone(shared), cfg, o)
	report(t, sum, failed)
}

// runOptions reads the run's options and the histories' shape from the
// environment (HISTORY_*; the budget from budgetVar, default def).
func runOptions(t *testing.T, budgetVar, def string) (history.Options, history.Config) {
	budget, err := time.ParseDuration(env(budgetVar, def))
	if err != nil {
		t.Fatal(err)
	}
	conc, err := strconv.Atoi(env("HISTORY_CONCURRENCY", "8"))
	if err != nil {
		t.Fatal(err)
	}
	first := time.Now().UnixNano() % 1e12
	if s := os.Getenv("HISTORY_FIRST_SEED"); s != "" {
		if first, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	o := history.Options{Budget: budget, Concurrency: conc, FirstSeed: first, Log: os.Stdout}
	if s := os.Getenv("HISTORY_SEED"); s != "" {
		if o.FirstSeed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatal(err)
		}
		o.Max, o.Concurrency, o.Budget = 1, 1, time.Hour
		if r := os.Getenv("HISTORY_REPEAT"); r != "" {
			if o.Max, err = strconv.Atoi(r); err != nil {
				t.Fatal(err)
			}
			o.Repeat = o.Max
		}
	}
	if o.LogLimit, err = strconv.Atoi(env("HISTORY_LOG", "3")); err != nil {
		t.Fatal(err)
	}
	cfg := config(t, env("HISTORY_FAULTS", shortFaults))
	if o.TraceDir = os.Getenv("HISTORY_TRACE"); o.TraceDir != "" {
		cfg.Trace = true
	}
	o.Fatal = oracles(t, env("HISTORY_FATAL", shortFatal))
	o.Print = map[history.Oracle]bool{}
	for _, k := range history.Oracles {
		o.Print[k] = true
	}
	t.Logf("first seed %d (HISTORY_SEED=<seed> replays one history), faults %q, fatal oracles %q",
		o.FirstSeed, env("HISTORY_FAULTS", shortFaults), env("HISTORY_FATAL", shortFatal))
	return o, cfg
}

// report prints the summary and fails on the histories that failed a
// fatal oracle.
func report(t *testing.T, sum *history.Summary, failed []*history.Result) {
	os.Stdout.WriteString(sum.String())
	for _, r := range failed {
		t.Errorf("history failed a fatal oracle (replay: HISTORY_SEED=%d):\n%s", r.Seed, r)
	}
}
