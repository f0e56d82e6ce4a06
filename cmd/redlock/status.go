package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

const statusTrailer = `environment:
  REDLOCK_NODES   node URLs, comma-separated, when --nodes is not given

exit codes:
  0    free: a majority of the nodes answered and do not hold the key
  1    held: one token holds the key on a majority of the nodes, or an
       Unlock reserved it there for the next waiter
  2    bad command line
  3    split: held on some nodes, by no majority
  69   too few nodes answered to tell
`

// statusMain is "redlock status [flags] KEY".
func statusMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nf nodeFlags
	fs.StringVar(&nf.nodes, "nodes", "", "comma-separated node URLs: redis://[user:password@]host:port[/db], rediss:// for TLS\n(default $"+envNodes+")")
	timeout := fs.Duration("timeout", time.Second, "how long to wait for each node")
	fs.Usage = usageFunc(fs, "redlock status [flags] KEY",
		"Shows, per node, whether KEY is held, by which token and for how long,\nand whether a majority holds it.", statusTrailer)
	if err := fs.Parse(args); err != nil {
		return flagErr(err)
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		fmt.Fprintln(stderr, "redlock status: need exactly one KEY")
		fs.Usage()
		return exitUsage
	}
	key := fs.Arg(0)
	eps, err := nf.endpoints()
	if err != nil {
		fmt.Fprintf(stderr, "redlock status: %v\n", err)
		return exitUsage
	}
	infos := make([]node.Info, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := node.New(ep, node.Options{Timeout: *timeout})
			defer n.Close()
			ictx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			infos[i], errs[i] = n.Inspect(ictx, key)
		}()
	}
	wg.Wait()

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tTOKEN\tTTL")
	held := map[string]int{}
	answered, free := 0, 0
	for i, ep := range eps {
		switch {
		case errs[i] != nil:
			fmt.Fprintf(tw, "%s\terror (%s)\t%v\t\n", ep.Addr(), node.KindOf(errs[i]), errs[i])
		case infos[i].Token == "":
			answered++
			free++
			fmt.Fprintf(tw, "%s\tfree\t\t\n", ep.Addr())
		default:
			answered++
			held[infos[i].Token]++
			ttl := "no expiry"
			if infos[i].TTL >= 0 {
				ttl = infos[i].TTL.Round(time.Millisecond).String()
			}
			state, tok := "held", shortToken(infos[i].Token)
			if w, ok := strings.CutPrefix(infos[i].Token, "~"); ok {
				// An Unlock handed the key to the head of the queue.
				state, tok = "reserved", "for waiter "+w
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ep.Addr(), state, tok, ttl)
		}
	}
	tw.Flush()

	need := quorum.Majority(len(eps))
	for tok, n := range held {
		if n < need {
			continue
		}
		if w, ok := strings.CutPrefix(tok, "~"); ok {
			fmt.Fprintf(stdout, "%q is being handed to waiter %s (reserved on %d of %d nodes)\n", key, w, n, len(eps))
		} else {
			fmt.Fprintf(stdout, "%q is held by a majority (%d of %d nodes) with token %s\n", key, n, len(eps), shortToken(tok))
		}
		return exitHeld
	}
	switch {
	case free >= need:
		fmt.Fprintf(stdout, "%q is free (%d of %d nodes answered)\n", key, answered, len(eps))
		return exitOK
	case answered < need:
		fmt.Fprintf(stdout, "%q: unreachable nodes: only %d of %d answered, %d needed\n", key, answered, len(eps), need)
		return exitUnavailable
	}
	fmt.Fprintf(stdout, "%q is split: held on %d of %d nodes, by no majority\n", key, answered-free, len(eps))
	return exitSplit
}
