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
// is not given.
const envNodes = "REDLOCK_NODES"

// nodeFlags are the flags every subcommand that talks to nodes shares.
type nodeFlags struct {
	nodes   string
	ttl     time.Duration
	timeout time.Duration
}

func (f *nodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.nodes, "nodes", "", "comma-separated node URLs: redis://[user:password@]host:port[/db], rediss:// for TLS\n(default $"+envNodes+")")
	fs.DurationVar(&f.ttl, "ttl", redlock.DefaultTTL, "lock TTL; the lock is kept alive while it is held")
	fs.DurationVar(&f.timeout, "node-timeout", 0, "timeout of each command on each node (default TTL/200, between 20ms and 250ms)")
}

// urls returns the node URLs from --nodes or the environment.
func (f *nodeFlags) urls() ([]string, error) {
	list := f.nodes
	if list == "" {
		list = os.Getenv(envNodes)
	}
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no nodes: give --nodes URL,URL,... or set " + envNodes)
	}
	return out, nil
}

// options returns the client options the flags set.
func (f *nodeFlags) options() []redlock.Option {
	opts := []redlock.Option{redlock.WithTTL(f.ttl)}
	if f.timeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(f.timeout))
	}
	return opts
}

// endpoints parses the node URLs (errors never contain a password).
func (f *nodeFlags) endpoints() ([]node.Endpoint, error) {
	urls, err := f.urls()
	if err != nil {
		return nil, err
	}
	eps := make([]node.Endpoint, len(urls))
	for i, u := range urls {
		if eps[i], err = node.ParseURL(u); err != nil {
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
	}
	return eps, nil
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
