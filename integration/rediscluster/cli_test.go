package rediscluster_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// TestCLIOnACluster: redlock run --cluster holds the lock on the
// cluster while its command runs (REDLOCK_CLUSTER names it as well), and
// redlock status --cluster shows each copy's master and slot, held, then
// free.
func TestCLIOnACluster(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "redlock")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/quorumlock/redlock/cmd/redlock").CombinedOutput()
	require.NoError(t, err, "%s", out)
	k := key(t, three)
	seeds := three.URL(0) + "," + three.URL(1)
	copies, err := redlock.ClusterCopies(strings.Split(seeds, ","))
	require.NoError(t, err)
	require.Len(t, copies, 3)

	// run holds the lock while its command runs; status reads it.
	started := filepath.Join(dir, "started")
	run := exec.Command(bin, "run", "--cluster", seeds, k, "--", "sh", "-c", "touch "+started+"; sleep 2")
	require.NoError(t, run.Start())
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 10*time.Second, 10*time.Millisecond)
	status := exec.Command(bin, "status", k)
	status.Env = append(os.Environ(), "REDLOCK_NODES=", "REDLOCK_CLUSTER="+seeds)
	text, err := status.Output()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", text)
	assert.Equal(t, 1, ee.ExitCode(), "held: %s", text)
	for _, c := range copies {
		assert.Contains(t, string(text), c.Master.Addr()+" slot "+strconv.Itoa(c.Slot), "each copy's master and slot")
	}
	assert.Contains(t, string(text), "is held by a majority (3 of 3 nodes)")

	// Another run on the same key is refused while the first holds it.
	other := exec.Command(bin, "run", "--cluster", seeds, "-n", k, "--", "true")
	err = other.Run()
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 1, ee.ExitCode(), "conflict")

	require.NoError(t, run.Wait())
	text, err = exec.Command(bin, "status", "--cluster", seeds, k).Output()
	require.NoError(t, err, "free: %s", text)
	assert.Contains(t, string(text), "is free")
}
