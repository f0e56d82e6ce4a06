// Command redlock-demo shows the Redlock client of this repository at
// work:
//
//	redlock-demo [flags]
//
// It starts five independent Redis masters (or uses existing ones), lets
// several workers — each with its own client, as separate hosts would —
// contend for one lock, kills a node midway, prints a live log and checks
// from the outside that no two workers ever held the lock at once. Run
// "redlock-demo -h" for its flags.
//
// It lives in the integration module, with the cluster harness it runs
// the nodes with, so that the library's own module and its redlock
// command do not depend on testcontainers-go, toxiproxy or Docker.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	tclog "github.com/testcontainers/testcontainers-go/log"
)

func main() {
	// testcontainers-go's default logger prints a banner when the harness
	// first probes for a Docker engine; the demo's log is its own output.
	tclog.SetDefault(tclog.NewNoopLogger())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1   // the demo failed or found a violation
	exitUsage       = 2   // bad command line
	exitInterrupted = 130 // stopped by SIGINT/SIGTERM (128 + SIGINT)
)

// run runs the demo with args (without the program name) and returns the
// exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseDemoFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return exitUsage
	}
	err = demo(ctx, cfg, stdout)
	var violated *violationError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &violated):
		return exitFailed // the summary said it all
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "redlock-demo: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(stderr, "redlock-demo: %v\n", err)
	return exitFailed
}
