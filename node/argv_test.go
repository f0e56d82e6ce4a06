package node_test

import (
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
)

// argvs builds each script's longest ARGV with a: every optional
// argument set (a waiting attempt with a grant and a proposal, a
// rollback's requeue with a tombstone, a confirm with a record).
func argvs(a node.Argv) map[string][]any {
	k := node.NewKey("lk", "tok")
	k.Owner, k.Ticket, k.Grant, k.GrantFence, k.GrantRecord = "tag", 7, "~g", 9, "rec"
	k.Requeue, k.Tomb = true, time.Second
	to := node.NewKey("lk", "tok2")
	const ttl, counterTTL = 10 * time.Second, time.Hour
	return map[string][]any{
		"Acquire":         a.Acquire(nil, &k, ttl, true),
		"Extend":          a.Extend(nil, &k, ttl),
		"Release":         a.Release(nil, &k, false),
		"AcquireFenced":   a.AcquireFenced(nil, &k, ttl, counterTTL),
		"ConfirmFence":    a.ConfirmFence(nil, &k, 9, counterTTL, "rec", ttl),
		"Transfer":        a.Transfer(nil, &k, &to, ttl),
		"Leave":           a.Leave(nil, &k),
		"AcquireShared":   a.AcquireShared(nil, &k, ttl, true),
		"ExtendShared":    a.Extend(nil, &k, ttl),
		"ReleaseShared":   a.ReleaseShared(nil, &k, false),
		"Announce":        a.Announce(nil, &k, "rec", ttl),
		"Inspect":         nil,
		"InspectAnnounce": nil,
	}
}

// TestArgvMatchesTheHeaders: the builder of each script sends, with
// every option set, exactly the ARGV its header documents (read from
// its file: a library spliced in ahead of a script has a header too).
func TestArgvMatchesTheHeaders(t *testing.T) {
	argDoc := regexp.MustCompile(`^-- ARGV\[(\d+)\]`)
	upper := regexp.MustCompile(`([a-z])([A-Z])`)
	built := argvs(node.Argv{})
	s := reflect.TypeFor[node.Scripts]()
	for i := range s.NumField() {
		name := s.Field(i).Name
		args, ok := built[name]
		require.True(t, ok, "no ARGV builder tested for %s", name)
		src, err := os.ReadFile("scripts/" + strings.ToLower(upper.ReplaceAllString(name, "${1}_${2}")) + ".lua")
		require.NoError(t, err)
		documented := 0
		for _, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			if m := argDoc.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				documented = max(documented, n)
			}
		}
		assert.Len(t, args, documented, "%s: ARGV built with every option set", name)
	}
}

// TestArgvBoxingChangesNoValue: a driver's boxing functions hand out the
// values the zero Argv sends.
func TestArgvBoxingChangesNoValue(t *testing.T) {
	var msCalls, tagCalls int
	boxed := node.Argv{
		MS:  func(d time.Duration) any { msCalls++; return d.Milliseconds() },
		Tag: func(s string) any { tagCalls++; return s },
	}
	assert.Equal(t, argvs(node.Argv{}), argvs(boxed))
	assert.Positive(t, msCalls)
	assert.Positive(t, tagCalls)
}

// TestArgvNoGrants: a driver that may send a script twice asks for no
// grant, in an attempt or in a rollback's requeue, and otherwise sends
// the same arguments.
func TestArgvNoGrants(t *testing.T) {
	with, without := argvs(node.Argv{}), argvs(node.Argv{NoGrants: true})
	assert.Equal(t, with["Acquire"][:5], without["Acquire"], "acquire: no grant and no GrantTTL")
	assert.Equal(t, with["AcquireFenced"][:6], without["AcquireFenced"], "fenced: no grant, proposal or record")
	require.Len(t, without["Release"], 7)
	assert.Equal(t, "", without["Release"][5], "requeue: the grant is not asked for again")
	assert.Equal(t, "~g", with["Release"][5])
	assert.Equal(t, with["Leave"], without["Leave"], "a Leave still names the grant it hands on")
}

// TestArgvOnlyAWaitingAttemptRegisters: a first try sends no owner and
// asks for no grant.
func TestArgvOnlyAWaitingAttemptRegisters(t *testing.T) {
	k := node.NewKey("lk", "tok")
	k.Owner, k.Grant = "tag", "~g"
	args := node.Argv{}.Acquire(nil, &k, time.Second, false)
	assert.Equal(t, []any{"tok", int64(1000), "", node.WaiterLease.Milliseconds(), int64(0)}, args)
	shared := node.Argv{}.AcquireShared(nil, &k, time.Second, false)
	assert.Equal(t, "", shared[2])
}
