// Command redlock is a small tool around the Redlock client of this module.
//
//	redlock demo [flags]
//
// demo starts five independent Redis masters (or uses existing ones),
// lets several workers — each with its own client, as separate hosts
// would — contend for one lock, kills a node midway, prints a live log and
// checks from the outside that no two workers ever held the lock at once.
// Run "redlock demo -h" for its flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1   // the command failed or found a violation
	exitUsage       = 2   // bad command line
	exitInterrupted = 130 // stopped by SIGINT/SIGTERM (128 + SIGINT)
)

// command is one subcommand: its name, a one-line summary for the usage
// text, and its entry point, which returns the exit code.
type command struct {
	name    string
	summary string
	main    func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands that exist; usage shows exactly these.
func commands() []command {
	return []command{
		{"demo", "contending workers on five Redis masters, one killed midway;\nchecks that no two workers ever hold the lock at once", demoMain},
	}
}

// run dispatches args (without the program name) to a subcommand and
// returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.main(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "redlock: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: redlock <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		for i, line := range strings.Split(c.summary, "\n") {
			name := ""
			if i == 0 {
				name = c.name
			}
			fmt.Fprintf(w, "  %-8s %s\n", name, line)
		}
	}
	fmt.Fprint(w, "\nRun \"redlock <command> -h\" for the flags of a command.\n")
}
