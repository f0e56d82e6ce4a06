package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/redlock"
)

// killNode is the node the demo kills: node 3 of 5, index 2.
const killNode = 2

// backends are the values -backend accepts; see clusterBackend for
// "auto".
const backends = "auto|process|docker|compose"

// demoConfig is the demo's command line.
type demoConfig struct {
	backend  string        // one of backends
	urls     []string      // existing nodes to use; then none is started or killed
	workers  int           // contending workers, each with its own client
	duration time.Duration // how long the workers contend
	killAt   time.Duration // when node 3 is killed; 0 or >= duration: never
	ttl      time.Duration // lock TTL
	nodeTO   time.Duration // per-node timeout; 0: the library's default for ttl
	hold     time.Duration // work done under each lock
}

// clusterBackend is the cluster.Options.Backend for cfg.backend. "auto"
// means $REDLOCK_BACKEND if set, else the docker-compose cluster when a
// Docker engine answers (the same five masters `make up` starts), else
// local redis-server processes.
func (cfg demoConfig) clusterBackend(ctx context.Context) string {
	switch {
	case cfg.backend != "auto":
		return cfg.backend
	case os.Getenv("REDLOCK_BACKEND") != "":
		return os.Getenv("REDLOCK_BACKEND")
	case cluster.DockerAvailable(ctx):
		return "compose"
	}
	return "process"
}

// retry is the workers' retry strategy: exponential backoff with full
// jitter, as by default, but capped at the length of one critical section
// rather than at 500ms, and with no limit on attempts (each Lock call has
// a deadline instead). Redlock has no queue: with the default cap, workers
// that lost a few rounds sleep through the moments the lock is free, and
// one or two workers get nearly every grant.
func (cfg demoConfig) retry() redlock.RetryStrategy {
	return redlock.ExponentialBackoff(10*time.Millisecond, max(cfg.hold, 20*time.Millisecond))
}

// kills reports whether the demo is to kill a node.
func (cfg demoConfig) kills() bool {
	return len(cfg.urls) == 0 && cfg.killAt > 0 && cfg.killAt < cfg.duration
}

const demoUsage = `usage: redlock-demo [flags]

Starts five independent Redis masters, lets -workers workers (each with its
own client and connection pools, as separate hosts would have) contend for
one lock for -duration, kills node 3 at -kill-at, and prints a live log: every
grant and release, the kill, failures, and a status line each second. At the
end it prints a summary and checks, from the outside, that no two workers
ever held the lock at once (overlapping lock windows, lost counter updates).
Exit status 1 if they did.

flags:
`

// parseDemoFlags parses the demo's flags. Every error is a usage error,
// already reported on stderr; -h prints the help there and returns
// flag.ErrHelp.
func parseDemoFlags(args []string, stderr io.Writer) (demoConfig, error) {
	cfg := demoConfig{}
	var urls string
	fs := flag.NewFlagSet("redlock-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.backend, "backend", "auto", "where the nodes run: "+backends+
		"\n(auto: $REDLOCK_BACKEND, else compose if a Docker engine answers, else process;\ncompose: the repository's docker-compose.yml on ports 7001-7005)")
	fs.IntVar(&cfg.workers, "workers", 4, "contending workers, each with its own client")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long the workers contend")
	fs.DurationVar(&cfg.killAt, "kill-at", 4*time.Second, "when to kill node 3 (SIGKILL / docker kill); 0 = never")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lock TTL")
	fs.DurationVar(&cfg.nodeTO, "node-timeout", 50*time.Millisecond, "bound of each command on each node (0: the library's default, TTL/200 clamped to [20ms, 250ms],\n20ms for a 2s TTL)")
	fs.DurationVar(&cfg.hold, "hold", 150*time.Millisecond, "work done under each lock (a read, a pause, a write)")
	fs.StringVar(&urls, "urls", "", "comma-separated redis:// URLs of existing nodes to use instead of starting any\n(no node is killed then)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, usageError(fs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	cfg.urls = splitURLs(urls)
	if err := cfg.validate(); err != nil {
		return cfg, usageError(fs, err)
	}
	return cfg, nil
}

func (cfg demoConfig) validate() error {
	switch {
	case !slices.Contains(strings.Split(backends, "|"), cfg.backend):
		return fmt.Errorf("-backend %q: want one of %s", cfg.backend, backends)
	case cfg.workers < 1:
		return fmt.Errorf("-workers %d: need at least 1", cfg.workers)
	case cfg.duration <= 0:
		return fmt.Errorf("-duration %v: must be > 0", cfg.duration)
	case cfg.killAt < 0:
		return fmt.Errorf("-kill-at %v: must be >= 0", cfg.killAt)
	case cfg.ttl <= 0:
		return fmt.Errorf("-ttl %v: must be > 0", cfg.ttl)
	case cfg.nodeTO < 0 || cfg.nodeTO >= cfg.ttl:
		return fmt.Errorf("-node-timeout %v: must be in [0, -ttl %v)", cfg.nodeTO, cfg.ttl)
	case cfg.hold < 0:
		return fmt.Errorf("-hold %v: must be >= 0", cfg.hold)
	}
	return nil
}

func splitURLs(s string) []string {
	var out []string
	for u := range strings.SplitSeq(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// usageError reports err (after flag's own errors, in the same place)
// and returns it.
func usageError(fs *flag.FlagSet, err error) error {
	fmt.Fprintf(fs.Output(), "redlock-demo: %v\n", err)
	return err
}
