package integration_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// cli builds the redlock command once per test binary.
func cli(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "redlock-cli")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "redlock")
		out, err := exec.Command("go", "build", "-o", cliPath, "github.com/quorumlock/redlock/cmd/redlock").CombinedOutput()
		if err != nil {
			cliErr = errors.New(string(out))
		}
	})
	require.NoError(t, cliErr)
	return cliPath
}

// redlockCmd is the redlock command with args, on the shared cluster.
func redlockCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(cli(t), args...)
	cmd.Env = append(os.Environ(), "REDLOCK_NODES="+strings.Join(shared.URLs(), ","))
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	require.ErrorAs(t, err, &ee)
	return ee.ExitCode()
}

// waitFile waits until path exists and contains want.
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(b), want)
	}, 20*time.Second, 10*time.Millisecond, "%s never contained %q", path, want)
}

// TestCLIRunExcludes: two redlock run processes on one key, each running
// its command three times; the commands log entry and exit in one file,
// and never overlap.
func TestCLIRunExcludes(t *testing.T) {
	p := prefix(t, 5*time.Second)
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "enter $1" >> "$LOG"; sleep 0.2; echo "exit $1" >> "$LOG"`
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 {
				cmd := redlockCmd(t, "run", "--ttl", "2s", p+"job", "--", "sh", "-c", script, "sh", string(rune('a'+w))+string(rune('0'+i)))
				cmd.Env = append(cmd.Env, "LOG="+log)
				out, err := cmd.CombinedOutput()
				assert.NoError(t, err, "%s", out)
			}
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 12)
	for i := 0; i < len(lines); i += 2 {
		in, out := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		require.Equal(t, "enter", in[0], "%v", lines)
		require.Equal(t, []string{"exit", in[1]}, out, "two commands overlapped: %v", lines)
	}
}

// TestCLIRunNoWaitConflict: -n on a held key exits with the conflict code
// at once, -E changes it, and the command does not run.
func TestCLIRunNoWaitConflict(t *testing.T) {
	p := prefix(t, 5*time.Second)
	c := client(t)
	l, err := c.TryLock(context.Background(), p+"job")
	require.NoError(t, err)
	defer l.Unlock(context.Background())
	marker := filepath.Join(t.TempDir(), "ran")
	start := time.Now()
	out, err := redlockCmd(t, "run", "-n", p+"job", "--", "touch", marker).CombinedOutput()
	assert.Equal(t, 1, exitCode(t, err), "%s", out)
	assert.Contains(t, string(out), "held elsewhere")
	assert.Less(t, time.Since(start), 5*time.Second, "-n waited")
	out, err = redlockCmd(t, "run", "-n", "-E", "9", p+"job", "--", "touch", marker).CombinedOutput()
	assert.Equal(t, 9, exitCode(t, err), "%s", out)
	out, err = redlockCmd(t, "run", "--wait", "300ms", p+"job", "--", "touch", marker).CombinedOutput()
	assert.Equal(t, 1, exitCode(t, err), "--wait ran out: %s", out)
	assert.NoFileExists(t, marker)
}

// TestCLIRunExitStatus: the command's status passes through; a signal
// that ends it gives 128+N.
func TestCLIRunExitStatus(t *testing.T) {
	p := prefix(t, 5*time.Second)
	err := redlockCmd(t, "run", p+"a", "--", "sh", "-c", "exit 7").Run()
	assert.Equal(t, 7, exitCode(t, err))
	err = redlockCmd(t, "run", p+"b", "--", "sh", "-c", "kill -KILL $$").Run()
	assert.Equal(t, 128+9, exitCode(t, err))
	err = redlockCmd(t, "run", p+"c", "--", "true").Run()
	assert.Equal(t, 0, exitCode(t, err))
}

// TestCLIRunLostLock: the lock's keys vanish from a majority; the command
// gets SIGTERM (it records it) and redlock exits with 75.
func TestCLIRunLostLock(t *testing.T) {
	p := prefix(t, 5*time.Second)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := `trap 'echo term >> "$LOG"; exit 0' TERM; echo started >> "$LOG"; while true; do sleep 0.05; done`
	cmd := redlockCmd(t, "run", "--ttl", "1500ms", "--node-timeout", "100ms", p+"job", "--", "sh", "-c", script)
	cmd.Env = append(cmd.Env, "LOG="+log)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	waitFile(t, log, "started")
	for i := range 3 {
		_, err := shared.Direct(i).Command(context.Background(), "DEL", p+"job")
		require.NoError(t, err)
	}
	err := cmd.Wait()
	assert.Equal(t, 75, exitCode(t, err), "%s", stderr.String())
	waitFile(t, log, "term")
	assert.Contains(t, stderr.String(), "lock lost")
}

// TestCLIRunForwardsSignals: SIGTERM to redlock reaches the command; the
// lock stays held until the command has exited, and is released then.
func TestCLIRunForwardsSignals(t *testing.T) {
	p := prefix(t, 5*time.Second)
	log := filepath.Join(t.TempDir(), "log")
	script := `trap 'echo term >> "$LOG"; sleep 0.5; echo done >> "$LOG"; exit 0' TERM; echo started >> "$LOG"; while true; do sleep 0.05; done`
	cmd := redlockCmd(t, "run", p+"job", "--", "sh", "-c", script)
	cmd.Env = append(cmd.Env, "LOG="+log)
	require.NoError(t, cmd.Start())
	waitFile(t, log, "started")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waitFile(t, log, "term")
	c := client(t, redlock.WithRetry(redlock.NoRetry()))
	_, err := c.TryLock(context.Background(), p+"job")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "released before the command exited")
	require.NoError(t, cmd.Wait())
	b, _ := os.ReadFile(log)
	assert.Contains(t, string(b), "done")
	l, err := c.TryLock(context.Background(), p+"job")
	require.NoError(t, err, "released after the command exited")
	require.NoError(t, l.Unlock(context.Background()))
}

// TestCLIStatus: held (exit 1) and free (exit 0).
func TestCLIStatus(t *testing.T) {
	p := prefix(t, 5*time.Second)
	c := client(t)
	l, err := c.TryLock(context.Background(), p+"job")
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond) // the SETs that lost the race to the quorum land too
	out, err := redlockCmd(t, "status", p+"job").Output()
	assert.Equal(t, 1, exitCode(t, err), "%s", out)
	assert.Contains(t, string(out), "held by a majority")
	assert.Contains(t, string(out), l.Token()[:8])
	require.NoError(t, l.Unlock(context.Background()))
	time.Sleep(50 * time.Millisecond)
	out, err = redlockCmd(t, "status", p+"job").Output()
	assert.Equal(t, 0, exitCode(t, err), "%s", out)
	assert.Contains(t, string(out), "is free")
}

// TestCLIRunFence: with --fence the command gets REDLOCK_FENCE, larger on
// every run; without it, none.
func TestCLIRunFence(t *testing.T) {
	p := fencePrefix(t, 5*time.Second)
	fence := func(args ...string) string {
		out, err := redlockCmd(t, append(append([]string{"run"}, args...), p+"job", "--", "sh", "-c", `echo "[$REDLOCK_FENCE]"`)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.Trim(strings.TrimSpace(string(out)), "[]")
	}
	first, err := strconv.ParseInt(fence("--fence"), 10, 64)
	require.NoError(t, err)
	second, err := strconv.ParseInt(fence("--fence"), 10, 64)
	require.NoError(t, err)
	assert.Greater(t, second, first)
	assert.Empty(t, fence())
}

// TestCLIRunShared: two --shared runs hold the key at once (each waits
// until the other has started, and for the test to let them end); an
// exclusive -n run meanwhile exits 1;
// status shows the readers; --shared -n on an exclusively held key exits
// 1; bad flag combinations exit 2.
func TestCLIRunShared(t *testing.T) {
	p := prefix(t, 5*time.Second)
	dir := t.TempDir()
	script := `echo in > "$DIR/$ME"; while [ ! -e "$DIR/$OTHER" ] || [ ! -e "$DIR/stop" ]; do sleep 0.02; done`
	var cmds []*exec.Cmd
	for _, me := range []string{"a", "b"} {
		other := map[string]string{"a": "b", "b": "a"}[me]
		cmd := redlockCmd(t, "run", "--shared", "--wait", "20s", p+"cache", "--", "sh", "-c", script)
		cmd.Env = append(cmd.Env, "DIR="+dir, "ME="+me, "OTHER="+other)
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	waitFile(t, filepath.Join(dir, "a"), "in")
	waitFile(t, filepath.Join(dir, "b"), "in")
	out, err := redlockCmd(t, "run", "-n", p+"cache", "--", "true").CombinedOutput()
	assert.Equal(t, 1, exitCode(t, err), "an exclusive run while readers hold: %s", out)
	out, err = redlockCmd(t, "status", p+"cache").Output()
	assert.Equal(t, 1, exitCode(t, err), "%s", out)
	assert.Contains(t, string(out), "held shared by readers")
	assert.Contains(t, string(out), "2 readers")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "both readers ran together")
	}

	c := client(t)
	l, err := c.TryLock(context.Background(), p+"cache")
	require.NoError(t, err)
	out, err = redlockCmd(t, "run", "--shared", "-n", p+"cache", "--", "true").CombinedOutput()
	assert.Equal(t, 1, exitCode(t, err), "%s", out)
	assert.Contains(t, string(out), "by a writer")
	require.NoError(t, l.Unlock(context.Background()))

	for _, args := range [][]string{{"--shared", "--permits", "2"}, {"--shared", "--fence"}, {"--permits", "0"}} {
		out, err := redlockCmd(t, append(append([]string{"run"}, args...), p+"x", "--", "true")...).CombinedOutput()
		assert.Equal(t, 2, exitCode(t, err), "%v: %s", args, out)
	}
}

// TestCLIRunPermits: with --permits 2, two runs hold permits at once and
// a third -n run exits 1; status --permits shows both held, then free.
func TestCLIRunPermits(t *testing.T) {
	p := prefix(t, 5*time.Second)
	dir := t.TempDir()
	var cmds []*exec.Cmd
	for _, me := range []string{"a", "b"} {
		cmd := redlockCmd(t, "run", "--permits", "2", "--wait", "20s", p+"api", "--", "sh", "-c",
			`echo "$REDLOCK_KEY $REDLOCK_TOKEN" > "$DIR/$ME"; while [ ! -e "$DIR/stop" ]; do sleep 0.02; done`)
		cmd.Env = append(cmd.Env, "DIR="+dir, "ME="+me)
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	waitFile(t, filepath.Join(dir, "a"), ":permit:")
	waitFile(t, filepath.Join(dir, "b"), ":permit:")
	a, _ := os.ReadFile(filepath.Join(dir, "a"))
	b, _ := os.ReadFile(filepath.Join(dir, "b"))
	assert.NotEqual(t, string(a), string(b), "two permits, two slots")
	out, err := redlockCmd(t, "run", "--permits", "2", "-n", p+"api", "--", "true").CombinedOutput()
	assert.Equal(t, 1, exitCode(t, err), "%s", out)
	assert.Contains(t, string(out), "all 2 permits")
	time.Sleep(50 * time.Millisecond) // the SETs that lost the race to the quorum land too
	out, err = redlockCmd(t, "status", "--permits", "2", p+"api").Output()
	assert.Equal(t, 1, exitCode(t, err), "%s", out)
	assert.Contains(t, string(out), "all 2 permits are held")
	assert.Contains(t, string(out), "PERMIT 1", "the holders per node")
	for _, run := range []string{string(a), string(b)} {
		// Each run's token shows in its permit's row and on at least
		// three nodes' rows.
		tok := strings.Fields(run)[1][:8]
		assert.GreaterOrEqual(t, strings.Count(string(out), tok), 4, "token %s: %s", tok, out)
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait())
	}
	time.Sleep(50 * time.Millisecond)
	out, err = redlockCmd(t, "status", "--permits", "2", p+"api").Output()
	assert.Equal(t, 0, exitCode(t, err), "%s", out)
	assert.Contains(t, string(out), "2 of 2 permits free")
}

// TestCLILeader: "redlock leader NAME" prints "none" and exits 1 while
// nobody leads, then the leader's value and term; --watch prints a line
// per change until interrupted.
func TestCLILeader(t *testing.T) {
	p := fencePrefix(t, 5*time.Second)
	ctx := context.Background()
	out, err := redlockCmd(t, "leader", p+"e").Output()
	assert.Equal(t, 1, exitCode(t, err), "%s", out)
	assert.Equal(t, "none\n", string(out))

	var watched texts // safe for the child's output and a reader
	watch := redlockCmd(t, "leader", "--watch", p+"e")
	watch.Stdout = &watched
	require.NoError(t, watch.Start())
	waitOutput := func(want string) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Contains(watched.String(), want) },
			20*time.Second, 10*time.Millisecond, "--watch printed %q, not %q", watched.String(), want)
	}
	waitOutput("none\n")

	e, err := client(t).Election(p + "e")
	require.NoError(t, err)
	ld, err := e.Campaign(ctx, "host-a")
	require.NoError(t, err)
	line := "host-a\tterm " + strconv.FormatInt(ld.Term(), 10) + "\n"
	out, err = redlockCmd(t, "leader", p+"e").Output()
	assert.NoError(t, err)
	assert.Equal(t, line, string(out))
	waitOutput(line)

	require.NoError(t, ld.Resign(ctx))
	waitOutput(line + "none\n")
	require.NoError(t, watch.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, watch.Wait(), "--watch exits 0 when interrupted")
}

// TestCLIRunElect: two "redlock run --elect" processes, each running its
// command twice (--again until the log shows two runs of its own, then
// interrupted): the commands never overlap, each gets the term it leads
// in, and the terms grow in the order the commands ran.
func TestCLIRunElect(t *testing.T) {
	p := fencePrefix(t, 5*time.Second)
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "enter $1 $REDLOCK_TERM $REDLOCK_LEADER" >> "$LOG"; sleep 0.2; echo "exit $1" >> "$LOG"`
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := string(rune('a' + w))
			for range 2 {
				cmd := redlockCmd(t, "run", "--elect", "--ttl", "2s", "--value", "cand-"+who, p+"e", "--", "sh", "-c", script, "sh", who)
				cmd.Env = append(cmd.Env, "LOG="+log)
				out, err := cmd.CombinedOutput()
				assert.NoError(t, err, "%s", out)
			}
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 8)
	var last int64
	for i := 0; i < len(lines); i += 2 {
		in, out := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		require.Len(t, in, 4, "%v", lines)
		require.Equal(t, []string{"exit", in[1]}, out, "two leaders' commands overlapped: %v", lines)
		term, err := strconv.ParseInt(in[2], 10, 64)
		require.NoError(t, err, "REDLOCK_TERM: %v", lines)
		assert.Greater(t, term, last, "terms grow: %v", lines)
		assert.Equal(t, "cand-"+in[1], in[3], "REDLOCK_LEADER")
		last = term
	}
}
