package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/integration/cluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestDemoWithProcessBackend(t *testing.T) {
	if _, err := cluster.RedisServer(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-backend", "process", "-duration", "3s", "-kill-at", "1s", "-workers", "3"}, &stdout, &stderr)
	out := stdout.String()
	t.Log("\n" + out)
	require.Equal(t, exitOK, code, "stderr: %s", stderr.String())
	assert.Empty(t, stderr.String())

	assert.Contains(t, out, "KILLED node 3")
	assert.Regexp(t, `worker [123] holds the lock, valid \d\.\d\ds`, out)
	assert.Contains(t, out, "status: ")
	assert.Contains(t, out, "3:DOWN", "a status line after the kill shows node 3 down")
	assert.Contains(t, out, "after the kill:")
	assert.Regexp(t, `(?m)^overlaps +0 in \d+ lock windows$`, out)
	assert.Regexp(t, `(?m)^lost updates +0$`, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	assert.Equal(t, "mutual exclusion held: no two workers held the lock at once", lines[len(lines)-1], "the verdict is the last line")

	children, _ := exec.Command("pgrep", "-a", "-P", strconv.Itoa(os.Getpid())).Output()
	assert.Empty(t, strings.TrimSpace(string(children)), "a process the demo started is still running")
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"-h"}, exitOK, "", "-kill-at"},
		{[]string{"-nope"}, exitUsage, "", "usage: redlock-demo [flags]"},
		{[]string{"-workers", "0"}, exitUsage, "", "-workers 0: need at least 1"},
		{[]string{"-backend", "k8s"}, exitUsage, "", `-backend "k8s"`},
		{[]string{"extra"}, exitUsage, "", `unexpected argument "extra"`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, tc.code, run(ctx, tc.args, &stdout, &stderr))
			assert.Contains(t, stdout.String(), tc.stdout)
			assert.Contains(t, stderr.String(), tc.stderr)
		})
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, 50*time.Millisecond, percentile(ds, 50))
	assert.Equal(t, 99*time.Millisecond, percentile(ds, 99))
	assert.Equal(t, 100*time.Millisecond, percentile(ds, 100))
	assert.Equal(t, 7*time.Millisecond, percentile([]time.Duration{7 * time.Millisecond}, 99))
	assert.Zero(t, percentile(nil, 50))
}
