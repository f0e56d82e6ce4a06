// Package redistest starts throw-away redis-server processes for the unit
// tests of node and redlock that need a real server.
package redistest

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Start starts a redis-server of the test's own on a free loopback port,
// without persistence and with DEBUG allowed from loopback (DEBUG SLEEP
// stalls it), and returns its redis:// URL. The process is killed by its
// PID when the test ends. The test is skipped when redis-server is not
// installed (scripts/ensure-redis.sh installs it; $REDIS_SERVER names
// another binary).
func Start(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			t.Skip("redis-server not installed (run scripts/ensure-redis.sh)")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--logfile", "",
		"--enable-debug-command", "local")
	// Its own process group, and killed with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by PID: only the process started here
		<-exited
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "redis://" + addr
		}
		select {
		case <-exited:
			t.Fatalf("redistest: redis-server on port %d exited at start", port)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: redis-server on port %d did not accept connections: %v", port, err)
		}
	}
}

// DeadAddr returns a loopback address where nothing listens (a port just
// released), for tests of unreachable nodes.
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
