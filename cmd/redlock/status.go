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
	"github.com/quorumlock/redlock/redlock"
)

const statusTrailer = `environment:
  REDLOCK_NODES   node URLs, comma-separated, when --nodes is not given
  REDLOCK_CLUSTER a Redis Cluster's node URLs, when neither --nodes,
                  --cluster nor REDLOCK_NODES is given

exit codes:
  0    free: a majority of the nodes answered and do not hold the key
       (--permits: at least one permit is free)
  1    held: one token holds the key on a majority of the nodes, readers
       hold it shared there, or an Unlock reserved it there for the next
       waiter (--permits: every permit is held)
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
	nf.registerCluster(fs)
	timeout := fs.Duration("timeout", time.Second, "how long to wait for each node")
	permits := fs.Int("permits", 0, "show the `N` permits of the semaphore KEY, one line each")
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
	ts, err := nf.targets(*timeout)
	if err != nil {
		fmt.Fprintf(stderr, "redlock status: %v\n", err)
		return exitUsage
	}
	if *permits < 0 {
		fmt.Fprintf(stderr, "redlock status: --permits must be >= 1, got %d\n", *permits)
		return exitUsage
	}
	if *permits > 0 {
		return permitStatus(ctx, ts, key, *permits, *timeout, stdout)
	}
	infos, errs := inspect(ctx, ts, key, *timeout)

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tTOKEN\tTTL")
	held := map[string]int{}
	answered, free := 0, 0
	for i, t := range ts {
		switch {
		case errs[i] != nil:
			fmt.Fprintf(tw, "%s\terror (%s)\t%v\t\n", t.label, node.KindOf(errs[i]), errs[i])
		case infos[i].Token == "":
			answered++
			free++
			fmt.Fprintf(tw, "%s\tfree\t\t\n", t.label)
		default:
			answered++
			held[infos[i].Token]++
			ttl := "no expiry"
			if infos[i].TTL >= 0 {
				ttl = infos[i].TTL.Round(time.Millisecond).String()
			}
			state, tok := "held", shortToken(infos[i].Token)
			if w, ok := reservation(infos[i].Token); ok {
				// An Unlock handed the key to the head of the queue.
				state, tok = "reserved", "for waiter "+w
			} else if infos[i].Token == node.SharedValue {
				state, tok = "shared", fmt.Sprintf("%d readers", infos[i].Readers)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.label, state, tok, ttl)
		}
	}
	tw.Flush()

	need := quorum.Majority(len(ts))
	for tok, n := range held {
		if n < need {
			continue
		}
		if w, ok := reservation(tok); ok {
			fmt.Fprintf(stdout, "%q is being handed to waiter %s (reserved on %d of %d nodes)\n", key, w, n, len(ts))
		} else if tok == node.SharedValue {
			fmt.Fprintf(stdout, "%q is held shared by readers on a majority (%d of %d nodes)\n", key, n, len(ts))
		} else {
			fmt.Fprintf(stdout, "%q is held by a majority (%d of %d nodes) with token %s\n", key, n, len(ts), shortToken(tok))
		}
		return exitHeld
	}
	switch {
	case free >= need:
		fmt.Fprintf(stdout, "%q is free (%d of %d nodes answered)\n", key, answered, len(ts))
		return exitOK
	case answered < need:
		fmt.Fprintf(stdout, "%q: unreachable nodes: only %d of %d answered, %d needed\n", key, answered, len(ts), need)
		return exitUnavailable
	}
	fmt.Fprintf(stdout, "%q is split: held on %d of %d nodes, by no majority\n", key, answered-free, len(ts))
	return exitSplit
}

// inspect reads key on every node in parallel.
func inspect(ctx context.Context, ts []target, key string, timeout time.Duration) ([]node.Info, []error) {
	infos := make([]node.Info, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := node.New(t.ep, node.Options{Timeout: timeout})
			defer n.Close()
			ictx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			infos[i], errs[i] = n.Inspect(ictx, t.pre+key)
		}()
	}
	wg.Wait()
	return infos, errs
}

// permitStatus shows the permits of the semaphore name, one line each:
// the token that holds it on a majority, or free, or split.
func permitStatus(ctx context.Context, ts []target, name string, permits int, timeout time.Duration, stdout io.Writer) int {
	need := quorum.Majority(len(ts))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PERMIT\tKEY\tSTATE\tTOKEN\tNODES")
	held, free, unknown := 0, 0, 0
	cells := make([][]string, len(ts)) // per node, per permit: what the node holds
	for i := range permits {
		key := redlock.PermitKey(name, i)
		infos, errs := inspect(ctx, ts, key, timeout)
		for j := range ts {
			cells[j] = append(cells[j], nodeCell(infos[j], errs[j]))
		}
		answered, nfree := 0, 0
		tokens := map[string]int{}
		for j := range ts {
			switch {
			case errs[j] != nil:
			case infos[j].Token == "":
				answered++
				nfree++
			default:
				answered++
				tokens[infos[j].Token]++
			}
		}
		state, tok, nodes := "split", "", answered-nfree
		for t, n := range tokens {
			if n >= need {
				state, tok, nodes = "held", shortToken(t), n
				if w, ok := reservation(t); ok {
					state, tok = "reserved", "for waiter "+w
				}
			}
		}
		switch {
		case state != "split":
			held++
		case nfree >= need:
			state, nodes = "free", nfree
			free++
		case answered < need:
			state = "unreachable"
			unknown++
		default:
			held++ // split: not free either
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d of %d\n", i, key, state, tok, nodes, len(ts))
	}
	tw.Flush()
	// The holders per node: a permit's row says what a majority holds.
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "NODE")
	for i := range permits {
		fmt.Fprintf(tw, "\tPERMIT %d", i)
	}
	fmt.Fprintln(tw)
	for j, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\n", t.label, strings.Join(cells[j], "\t"))
	}
	tw.Flush()
	switch {
	case free > 0:
		fmt.Fprintf(stdout, "%q: %d of %d permits free\n", name, free, permits)
		return exitOK
	case unknown > 0:
		fmt.Fprintf(stdout, "%q: no permit is free, %d could not be told (too few nodes answered)\n", name, unknown)
		return exitUnavailable
	}
	fmt.Fprintf(stdout, "%q: all %d permits are held\n", name, permits)
	return exitHeld
}

// nodeCell is what one node holds under a permit's key, in a word.
func nodeCell(info node.Info, err error) string {
	switch {
	case err != nil:
		return "error (" + node.KindOf(err) + ")"
	case info.Token == "":
		return "free"
	}
	if _, ok := reservation(info.Token); ok {
		return "reserved"
	}
	return shortToken(info.Token)
}

// reservation returns the waiter a key's value reserves the key for
// ("~" + its tag); a grant (node.GrantValue: "~" + tag + ":" + id) is a
// lock held, not a reservation.
func reservation(value string) (waiter string, ok bool) {
	w, ok := strings.CutPrefix(value, "~")
	return w, ok && !strings.Contains(w, ":")
}
