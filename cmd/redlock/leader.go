package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/quorumlock/redlock/redlock"
)

const leaderTrailer = `environment:
  REDLOCK_NODES   node URLs, comma-separated, when --nodes is not given
  REDLOCK_CLUSTER a Redis Cluster's node URLs, when neither --nodes,
                  --cluster nor REDLOCK_NODES is given

exit codes:
  0    a leader was printed (--watch: interrupted)
  1    nobody leads: a majority of the nodes holds no key of the election
  2    bad command line
  69   too few nodes answered to tell, or they disagree
`

// leaderMain is "redlock leader [flags] NAME".
func leaderMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leader", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nf nodeFlags
	nf.register(fs)
	watch := fs.Bool("watch", false, "print a line per change of leader until interrupted")
	fs.Usage = usageFunc(fs, "redlock leader [flags] NAME",
		"Prints the value and term of the leader of the election NAME, as a\nmajority of the nodes holds them (redlock.Election).", leaderTrailer)
	if err := fs.Parse(args); err != nil {
		return flagErr(err)
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		fmt.Fprintln(stderr, "redlock leader: need exactly one NAME")
		fs.Usage()
		return exitUsage
	}
	c, err := nf.dial(nf.options())
	if err != nil {
		fmt.Fprintf(stderr, "redlock leader: %v\n", err)
		return exitUsage
	}
	defer c.Close()
	e, err := c.Election(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "redlock leader: %v\n", err)
		return exitUsage
	}
	if *watch {
		for ldr := range e.Observe(ctx) {
			fmt.Fprintln(stdout, leaderLine(ldr))
		}
		return exitOK
	}
	ldr, err := e.Leader(ctx)
	switch {
	case errors.Is(err, redlock.ErrNoLeader):
		fmt.Fprintln(stdout, leaderLine(ldr))
		return exitHeld
	case err != nil:
		fmt.Fprintf(stderr, "redlock leader: %v\n", err)
		return exitUnavailable
	}
	fmt.Fprintln(stdout, leaderLine(ldr))
	return exitOK
}

// leaderLine is one line of output: the value and the term, or "none".
func leaderLine(l redlock.Leader) string {
	if l == (redlock.Leader{}) {
		return "none"
	}
	return fmt.Sprintf("%s\tterm %d", l.Value, l.Term)
}
