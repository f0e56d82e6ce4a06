package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{nil, exitUsage, "", "usage: redlock <command>"},
		{[]string{"help"}, exitOK, "usage: redlock <command>", ""},
		{[]string{"-h"}, exitOK, "usage: redlock <command>", ""},
		{[]string{"--help"}, exitOK, "usage: redlock <command>", ""},
		{[]string{"nope"}, exitUsage, "", `unknown command "nope"`},
		{[]string{"demo"}, exitUsage, "", `unknown command "demo"`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, tc.code, run(ctx, tc.args, &stdout, &stderr))
			assert.Contains(t, stdout.String(), tc.stdout)
			assert.Contains(t, stderr.String(), tc.stderr)
			if tc.code == exitOK {
				assert.Empty(t, stderr.String(), "help goes to stdout")
			} else {
				assert.Empty(t, stdout.String(), "errors and their usage go to stderr")
			}
		})
	}
}

func TestUsageListsExactlyTheCommands(t *testing.T) {
	var stdout bytes.Buffer
	run(context.Background(), []string{"help"}, &stdout, &stdout)
	out := stdout.String()
	listed := map[string]bool{}
	for _, c := range commands() {
		assert.Contains(t, out, "  "+c.name+" ")
		listed[c.name] = true
	}
	// The demo moved to the integration module.
	for _, name := range []string{"demo", "run", "status"} {
		if !listed[name] {
			assert.NotContains(t, out, "  "+name+" ", "usage lists only the commands that exist")
		}
	}
	assert.Contains(t, out, "go run ./cmd/redlock-demo", "usage says where the demo went")
}
