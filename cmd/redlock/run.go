package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

const runTrailer = `With --elect, KEY names an election (redlock.Election): redlock campaigns,
waiting its turn behind the candidates that started before it, runs the
command while it leads, with REDLOCK_TERM (the term, a fencing number
larger than every earlier term's) and REDLOCK_LEADER (its --value) in its
environment, and resigns when it exits, so the next candidate leads at
once; --again campaigns again each time, until interrupted.

The command runs as a child in its own process group, with the lock held
and kept alive. With --shared the hold is a read hold: any number of them at
once, none with an exclusive one (like flock -s). With --permits N it is one
of N permits of the semaphore KEY, a slot whose key is KEY:permit:I. It gets REDLOCK_KEY, REDLOCK_TOKEN and REDLOCK_UNTIL (the end
of the validity when it started, RFC 3339, UTC; at most 2 s away for a lock
another client's release handed over, before the extend that follows) in its environment, and with
--fence REDLOCK_FENCE: the lock's fencing token, a decimal integer larger than
that of every earlier grant of KEY, for the command to hand to storage that
rejects writes with a smaller one.
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redlock are forwarded to it; the
lock is released after it exits, never before.

When the lock can no longer be proven held, the command is stopped before
another host can take over: if extends keep failing, SIGTERM once less than
--grace of validity is left and SIGKILL when it runs out; if an extend finds
the lock held by someone else, SIGTERM at once and SIGKILL after --grace.

environment:
  REDLOCK_NODES   node URLs, comma-separated, when --nodes is not given
  REDLOCK_CLUSTER a Redis Cluster's node URLs, when neither --nodes,
                  --cluster nor REDLOCK_NODES is given

exit codes:
  the command's   its exit status, or 128+N when signal N ended it
  1               the lock is held elsewhere (-n, or --wait ran out); see -E
  2               bad command line
  69              too few nodes answered, or they refused the credentials
  75              the lock was lost while the command ran
  126, 127        the command could not be started, or was not found
  130             interrupted while waiting for the lock
`

// runMain is "redlock run [flags] KEY -- COMMAND [ARGS...]".
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nf nodeFlags
	nf.register(fs)
	var (
		wait     time.Duration
		noWait   bool
		conflict int
		grace    time.Duration
		fence    bool
		shared   bool
		permits  int
	)
	fs.DurationVar(&wait, "wait", 0, "how long to wait for the lock (default: until interrupted)")
	fs.BoolVar(&noWait, "n", false, "make one attempt; exit with the conflict code if the lock is held")
	fs.BoolVar(&noWait, "no-wait", false, "same as -n")
	fs.IntVar(&conflict, "conflict-exit-code", exitHeld, "exit code when the lock is held elsewhere")
	fs.IntVar(&conflict, "E", exitHeld, "same as --conflict-exit-code")
	fs.BoolVar(&fence, "fence", false, "take a fenced lock and pass its token as REDLOCK_FENCE (one more round trip)")
	fs.BoolVar(&shared, "shared", false, "take a shared (read) hold: other --shared holds may run at once, no exclusive one")
	fs.IntVar(&permits, "permits", 0, "take one of `N` permits of the semaphore KEY: at most N holders at once")
	fs.DurationVar(&grace, "grace", 0, "time the command gets between SIGTERM and SIGKILL when the lock is lost (default TTL/3)")
	elect := fs.Bool("elect", false, "KEY names an election: campaign, and run the command while leading (REDLOCK_TERM)")
	again := fs.Bool("again", false, "with --elect: campaign again each time the command exits")
	value := fs.String("value", "", "with --elect: the value the leader announces (default host:pid)")
	fs.Usage = usageFunc(fs, "redlock run [flags] KEY -- COMMAND [ARGS...]",
		"Takes the lock KEY on a majority of the nodes, runs COMMAND while keeping\nthe lock alive, releases it when COMMAND exits and exits with its status.", runTrailer)
	if err := fs.Parse(args); err != nil {
		return flagErr(err)
	}
	rest := fs.Args()
	if len(rest) > 1 && rest[1] == "--" {
		rest = append(rest[:1:1], rest[2:]...)
	}
	if len(rest) < 2 || rest[0] == "" {
		fmt.Fprintln(stderr, "redlock run: need KEY -- COMMAND [ARGS...]")
		fs.Usage()
		return exitUsage
	}
	key, argv := rest[0], rest[1:]
	if grace == 0 {
		grace = nf.ttl / 3
	}
	// One message for the one flag that is wrong.
	var bad string
	switch {
	case nf.ttl <= 0:
		bad = fmt.Sprintf("--ttl must be > 0, got %v", nf.ttl)
	case grace < 0 || grace >= nf.ttl:
		bad = fmt.Sprintf("--grace must be in [0, --ttl %v), got %v", nf.ttl, grace)
	case wait < 0:
		bad = fmt.Sprintf("--wait must be >= 0, got %v", wait)
	case conflict < 0 || conflict > 255:
		bad = fmt.Sprintf("--conflict-exit-code must be in [0, 255], got %d", conflict)
	case permits < 0 || permitsSet(fs) && permits == 0:
		bad = fmt.Sprintf("--permits must be >= 1, got %d", permits)
	case shared && permits > 0:
		bad = "--shared and --permits do not go together"
	case shared && fence:
		bad = "--fence orders exclusive holds; it does not go with --shared"
	case *elect && (shared || permits > 0):
		bad = "--elect takes one leader; it does not go with --shared or --permits"
	case !*elect && (*again || *value != ""):
		bad = "--again and --value go with --elect"
	}
	if bad != "" {
		fmt.Fprintln(stderr, "redlock run:", bad)
		return exitUsage
	}
	c, err := nf.dial(nf.options())
	if err != nil {
		fmt.Fprintf(stderr, "redlock run: %v\n", err)
		return exitUsage
	}
	defer c.Close()

	if *elect {
		return runElected(ctx, c, electSpec{name: key, value: *value, again: *again, wait: wait, noWait: noWait}, argv, grace, conflict, stdout, stderr)
	}
	l, code := takeLock(ctx, c, lockSpec{key: key, shared: shared, permits: permits}, wait, noWait, fence, grace, stderr)
	if l == nil {
		if code == exitHeld {
			code = conflict
		}
		return code
	}
	return runHeld(lockHeld(l), argv, grace, stdout, stderr)
}

// flagErr maps a flag parse error to an exit code (-h is not an error).
func flagErr(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// permitsSet reports whether --permits was given.
func permitsSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "permits" })
	return set
}

// lockSpec is what run takes: KEY exclusively, shared, or one of its
// permits.
type lockSpec struct {
	key     string
	shared  bool
	permits int // > 0: a permit of the semaphore key
}

// take makes one attempt, or with wait waits as Lock does.
func (s lockSpec) take(ctx context.Context, c *redlock.Client, wait bool, opts []redlock.Option) (*redlock.Lock, error) {
	switch {
	case s.permits > 0:
		sem, err := c.Semaphore(s.key, s.permits)
		if err != nil {
			return nil, err
		}
		if wait {
			return sem.Acquire(ctx, opts...)
		}
		return sem.TryAcquire(ctx, opts...)
	case s.shared && wait:
		return c.RLock(ctx, s.key, opts...)
	case s.shared:
		return c.TryRLock(ctx, s.key, opts...)
	case wait:
		return c.Lock(ctx, s.key, opts...)
	}
	return c.TryLock(ctx, s.key, opts...)
}

// held says why the lock could not be had.
func (s lockSpec) held() string {
	switch {
	case s.permits > 0:
		return fmt.Sprintf("all %d permits of %q are held", s.permits, s.key)
	case s.shared:
		return fmt.Sprintf("%q is held (or awaited) by a writer", s.key)
	}
	return fmt.Sprintf("%q is held elsewhere", s.key)
}

// takeLock takes the lock as the flags say. On failure it reports why on
// stderr and returns the exit code.
func takeLock(ctx context.Context, c *redlock.Client, spec lockSpec, wait time.Duration, noWait, fence bool, grace time.Duration, stderr io.Writer) (*redlock.Lock, int) {
	key := spec.key
	opts := []redlock.Option{redlock.WithLostMargin(grace)}
	if fence {
		opts = append(opts, redlock.WithFencing())
	}
	var (
		l   *redlock.Lock
		err error
	)
	if noWait {
		l, err = spec.take(ctx, c, false, opts)
	} else {
		lctx := ctx
		if wait > 0 {
			var cancel context.CancelFunc
			lctx, cancel = context.WithTimeout(ctx, wait)
			defer cancel()
		}
		// Retry until the lock is free, wait runs out or a signal comes.
		opts = append(opts, redlock.WithRetry(redlock.ExponentialBackoff(10*time.Millisecond, 500*time.Millisecond)))
		l, err = spec.take(lctx, c, true, opts)
	}
	if err == nil {
		return l, exitOK
	}
	var qe *redlock.QuorumError
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "redlock run: interrupted while waiting for %q\n", key)
		return nil, exitInterrupted
	case errors.As(err, &qe) && qe.Count(node.Taken) > 0:
		fmt.Fprintf(stderr, "redlock run: %s\n", spec.held())
		return nil, exitHeld
	}
	fmt.Fprintf(stderr, "redlock run: %v\n", err)
	return nil, exitUnavailable
}

// held is what a command runs under: a lock, or a leadership.
type held struct {
	what    string             // for messages: "unlock \"KEY\"", "resign \"NAME\""
	env     []string           // the command's extra environment
	job     context.Context    // ends, with a cause wrapping ErrLost, when the hold can no longer be proven
	stop    context.CancelFunc // stops what keeps the hold alive
	until   func() time.Time   // the end of the validity (zero: unknown)
	release func() error
}

// lockHeld is l, kept alive while the command runs.
func lockHeld(l *redlock.Lock) held {
	env := []string{
		"REDLOCK_KEY=" + l.Key(),
		"REDLOCK_TOKEN=" + l.Token(),
		"REDLOCK_UNTIL=" + time.Now().Add(l.TTL()).UTC().Format(time.RFC3339Nano),
	}
	if f := l.Fence(); f != 0 {
		env = append(env, "REDLOCK_FENCE="+strconv.FormatInt(f, 10))
	}
	job, stop := l.KeepAlive(context.Background())
	return held{
		what: fmt.Sprintf("unlock %q", l.Key()), env: env, job: job, stop: stop, until: l.Until,
		// On a fresh context: a signal may have ended the caller's.
		release: func() error { return l.Unlock(context.Background()) },
	}
}

// runHeld runs argv as a child while h lasts, and releases h after the
// child exited. It returns redlock's exit code.
func runHeld(h held, argv []string, grace time.Duration, stdout, stderr io.Writer) int {
	defer func() {
		// The child has exited: release (also after a loss, which
		// finds nothing).
		h.stop()
		if err := h.release(); err != nil && !errors.Is(err, redlock.ErrNotHeld) {
			fmt.Fprintf(stderr, "redlock run: %s: %v (the keys expire by their TTL)\n", h.what, err)
		}
	}()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), h.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Forwarding starts before the child does, so no signal falls between.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "redlock run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	group := -cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	jobDone := h.job.Done()
	var (
		lost error
		kill <-chan time.Time
	)
	for {
		select {
		case s := <-sigs:
			_ = syscall.Kill(group, s.(syscall.Signal))
		case <-jobDone:
			jobDone = nil
			lost = context.Cause(h.job)
			fmt.Fprintf(stderr, "redlock run: %v; sending SIGTERM to the command\n", lost)
			_ = syscall.Kill(group, syscall.SIGTERM)
			// SIGKILL after the grace, and at Until at the latest.
			wait := grace
			if u := h.until(); !u.IsZero() {
				wait = min(grace, max(0, time.Until(u)))
			}
			kill = time.After(wait)
		case <-kill:
			kill = nil
			fmt.Fprintf(stderr, "redlock run: the command outlived its grace; sending SIGKILL\n")
			_ = syscall.Kill(group, syscall.SIGKILL)
		case err := <-exited:
			if lost != nil {
				return exitLost
			}
			return exitStatus(cmd, err, stderr)
		}
	}
}

// exitStatus is the child's exit status, or 128+N when signal N ended it.
func exitStatus(cmd *exec.Cmd, err error, stderr io.Writer) int {
	ps := cmd.ProcessState
	if ps == nil {
		fmt.Fprintf(stderr, "redlock run: %v\n", err)
		return exitCannotExec
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// electSpec is what run --elect campaigns for.
type electSpec struct {
	name   string
	value  string
	again  bool
	wait   time.Duration
	noWait bool
}

// runElected campaigns in the election s.name and runs argv while
// leading; with s.again it campaigns again each time argv exits, until
// ctx ends (a signal while waiting).
func runElected(ctx context.Context, c *redlock.Client, s electSpec, argv []string, grace time.Duration, conflict int, stdout, stderr io.Writer) int {
	e, err := c.Election(s.name, redlock.WithLostMargin(grace),
		redlock.WithRetry(redlock.ExponentialBackoff(10*time.Millisecond, 500*time.Millisecond)))
	if err != nil {
		fmt.Fprintf(stderr, "redlock run: %v\n", err)
		return exitUsage
	}
	if s.value == "" {
		host, _ := os.Hostname()
		s.value = host + ":" + strconv.Itoa(os.Getpid())
	}
	for {
		ld, code := campaign(ctx, e, s, stderr)
		if ld == nil {
			if code == exitHeld {
				code = conflict
			}
			return code
		}
		code = runHeld(leadershipHeld(ld, s.value), argv, grace, stdout, stderr)
		if !s.again || ctx.Err() != nil {
			return code
		}
	}
}

// campaign waits for the leadership as the flags say. On failure it
// reports why on stderr and returns the exit code.
func campaign(ctx context.Context, e *redlock.Election, s electSpec, stderr io.Writer) (*redlock.Leadership, int) {
	var (
		ld  *redlock.Leadership
		err error
	)
	if s.noWait {
		ld, err = e.TryCampaign(ctx, s.value)
	} else {
		cctx := ctx
		if s.wait > 0 {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, s.wait)
			defer cancel()
		}
		ld, err = e.Campaign(cctx, s.value)
	}
	var qe *redlock.QuorumError
	switch {
	case err == nil:
		return ld, exitOK
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "redlock run: interrupted while campaigning in %q\n", s.name)
		return nil, exitInterrupted
	case errors.As(err, &qe) && qe.Count(node.Taken) > 0:
		fmt.Fprintf(stderr, "redlock run: another candidate leads %q\n", s.name)
		return nil, exitHeld
	}
	fmt.Fprintf(stderr, "redlock run: %v\n", err)
	return nil, exitUnavailable
}

// leadershipHeld is ld as run holds it: resigned when the command exits.
func leadershipHeld(ld *redlock.Leadership, value string) held {
	return held{
		what: "resign",
		env: []string{
			"REDLOCK_TERM=" + strconv.FormatInt(ld.Term(), 10),
			"REDLOCK_LEADER=" + value,
		},
		job:     ld.Context(),
		stop:    func() {},
		until:   func() time.Time { return time.Time{} },
		release: func() error { return ld.Resign(context.Background()) },
	}
}
