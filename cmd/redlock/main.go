// Command redlock is the command-line tool of this module:
//
//	redlock run [flags] KEY -- COMMAND [ARGS...]
//	redlock status [flags] KEY
//	redlock leader [flags] NAME
//
// run holds a Redlock lock while a command runs, for cron jobs and other
// shell work that must run once at a time across hosts; status shows who
// holds a lock on each node; leader shows who leads an election. "redlock <command> -h" lists the flags, the
// environment and the exit codes.
//
// It links only the library (redlock, node, clock). The
// demonstration against a cluster of five local Redis masters is a
// separate program in the integration module, with the test harness it
// needs: "cd integration && go run ./cmd/redlock-demo" (make demo).
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
		{"run", "take a lock, run a command while keeping it alive, release it", runMain},
		{"status", "show who holds a lock on each node", statusMain},
		{"leader", "show who leads an election (--watch: every change)", leaderMain},
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
	cmds := commands()
	if len(cmds) == 0 {
		fmt.Fprint(w, "  (none yet)\n")
	}
	for _, c := range cmds {
		for i, line := range strings.Split(c.summary, "\n") {
			name := ""
			if i == 0 {
				name = c.name
			}
			fmt.Fprintf(w, "  %-8s %s\n", name, line)
		}
	}
	fmt.Fprint(w, "\nRun \"redlock <command> -h\" for the flags of a command.\n")
	fmt.Fprint(w, "The demo is a program of its own: cd integration && go run ./cmd/redlock-demo\n")
}
