package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// Exit codes shared by the subcommands. A command run by "redlock run"
// passes its own status through; these are the ones redlock itself uses.
const (
	exitOK          = 0
	exitHeld        = 1   // status: the key is held; run: conflict (default of --conflict-exit-code)
	exitUsage       = 2   // bad command line
	exitSplit       = 3   // status: the key is held on some nodes but by no majority
	exitUnavailable = 69  // too few nodes answered, or they refused us (EX_UNAVAILABLE)
	exitLost        = 75  // run: the lock was lost while the command ran (EX_TEMPFAIL)
	exitCannotExec  = 126 // run: the command could not be started
	exitNotFound    = 127 // run: the command was not found
	exitInterrupted = 130 // interrupted before the command started (128 + SIGINT)
)

// envNodes is the environment variable that lists the nodes when --nodes
// is not given; envCluster lists a Redis Cluster's nodes when neither
// flag nor envNodes is.
const (
	envNodes   = "REDLOCK_NODES"
	envCluster = "REDLOCK_CLUSTER"
)

// nodeFlags are the flags every subcommand that talks to nodes shares.
type nodeFlags struct {
	nodes   string
	cluster string
	ttl     time.Duration
	timeout time.Duration
}

func (f *nodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.nodes, "nodes", "", "comma-separated node URLs: redis://[user:password@]host:port[/db], rediss:// for TLS\n(default $"+envNodes+")")
	f.registerCluster(fs)
	fs.DurationVar(&f.ttl, "ttl", redlock.DefaultTTL, "lock TTL; the lock is kept alive while it is held")
	fs.DurationVar(&f.timeout, "node-timeout", 0, "timeout of each command on each node (default TTL/200, between 20ms and 250ms)")
}

func (f *nodeFlags) registerCluster(fs *flag.FlagSet) {
	fs.StringVar(&f.cluster, "cluster", "", "comma-separated URLs of nodes of one Redis Cluster, instead of --nodes:\neach lock's copies go to distinct masters (default $"+envCluster+")")
}

// urls returns the node URLs from --nodes or --cluster or the
// environment, and whether they are a cluster's.
func (f *nodeFlags) urls() ([]string, bool, error) {
	list, cluster := f.nodes, false
	switch {
	case f.nodes != "" && f.cluster != "":
		return nil, false, errors.New("--nodes and --cluster: give one")
	case f.cluster != "":
		list, cluster = f.cluster, true
	case list == "" && os.Getenv(envNodes) != "":
		list = os.Getenv(envNodes)
	case list == "":
		list, cluster = os.Getenv(envCluster), true
	}
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return nil, false, errors.New("no nodes: give --nodes URL,URL,... (or --cluster URL,...) or set " + envNodes + " (or " + envCluster + ")")
	}
	return out, cluster, nil
}

// dial returns a client over the nodes (Dial) or the cluster
// (DialCluster) the flags name, with opts.
func (f *nodeFlags) dial(opts []redlock.Option) (*redlock.Client, error) {
	urls, cluster, err := f.urls()
	if err != nil {
		return nil, err
	}
	if cluster {
		return redlock.DialCluster(urls, opts...)
	}
	return redlock.Dial(urls, opts...)
}

// target is one node status reads: its endpoint, the prefix of the
// key's name there (a cluster copy's hash tag), and how it is shown.
type target struct {
	ep    node.Endpoint
	pre   string
	label string
}

// targets returns the nodes status reads: each node of --nodes, or the
// master of each copy of a cluster's locks (redlock.ClusterCopies).
func (f *nodeFlags) targets(timeout time.Duration) ([]target, error) {
	urls, cluster, err := f.urls()
	if err != nil {
		return nil, err
	}
	var ts []target
	if cluster {
		copies, err := redlock.ClusterCopies(urls, redlock.WithNodeOptions(node.Options{Timeout: timeout}))
		if err != nil {
			return nil, err
		}
		for _, c := range copies {
			ts = append(ts, target{ep: c.Master, pre: "{" + c.Tag + "}", label: fmt.Sprintf("%s slot %d", c.Master.Addr(), c.Slot)})
		}
		return ts, nil
	}
	for i, u := range urls {
		ep, err := node.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		ts = append(ts, target{ep: ep, label: ep.Addr()})
	}
	return ts, nil
}

// options returns the client options the flags set.
func (f *nodeFlags) options() []redlock.Option {
	opts := []redlock.Option{redlock.WithTTL(f.ttl)}
	if f.timeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(f.timeout))
	}
	return opts
}

// usageFunc prints a subcommand's synopsis, what it does, its flags and
// trailer (environment, exit codes).
func usageFunc(fs *flag.FlagSet, synopsis, about, trailer string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\n%s\n\nflags:\n", synopsis, about)
		fs.PrintDefaults()
		fmt.Fprintf(w, "\n%s", trailer)
	}
}

// shortToken shortens a token for display.
func shortToken(tok string) string {
	if len(tok) > 8 {
		return tok[:8] + "…"
	}
	return tok
}
