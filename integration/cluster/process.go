package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Processes is a Backend of local redis-server processes on loopback.
type Processes struct {
	bin      string
	dir      string
	persist  bool
	nodeArgs func(i int) []string

	mu    sync.Mutex
	ports []int
	cmds  []*exec.Cmd
	waits []chan struct{}
}

// RedisServer returns the path of redis-server, from $REDIS_SERVER or
// PATH, with a clear error naming the package to install when missing.
func RedisServer() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("cluster: redis-server not found: install it (Debian/Ubuntu: apt-get install -y redis-server) or set REDIS_SERVER")
	}
	return p, nil
}

// StartProcesses starts o.Nodes redis-server processes on free loopback
// ports, each in its own temporary directory.
func StartProcesses(ctx context.Context, o Options) (*Processes, error) {
	bin, err := RedisServer()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redlock-cluster-")
	if err != nil {
		return nil, err
	}
	p := &Processes{bin: bin, dir: dir, persist: o.Persist, nodeArgs: o.NodeArgs}
	for i := 0; i < o.Nodes; i++ {
		addr, err := freePort()
		if err != nil {
			p.Close()
			return nil, err
		}
		_, port, _ := splitPort(addr)
		p.ports = append(p.ports, port)
		p.cmds = append(p.cmds, nil)
		p.waits = append(p.waits, nil)
		if err := os.MkdirAll(p.nodeDir(i), 0o755); err != nil {
			p.Close()
			return nil, err
		}
		if err := p.Start(ctx, i); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

func splitPort(addr string) (string, int, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			n, err := strconv.Atoi(addr[i+1:])
			return addr[:i], n, err
		}
	}
	return "", 0, fmt.Errorf("no port in %q", addr)
}

func (p *Processes) nodeDir(i int) string { return filepath.Join(p.dir, fmt.Sprintf("node%d", i+1)) }

// Name returns "process".
func (p *Processes) Name() string { return "process" }

// Size returns the number of nodes.
func (p *Processes) Size() int { return len(p.ports) }

// Upstream returns 127.0.0.1:port of node i; it never changes.
func (p *Processes) Upstream(i int) string { return "127.0.0.1:" + strconv.Itoa(p.ports[i]) }

// Start starts node i and waits until it answers PING.
func (p *Processes) Start(ctx context.Context, i int) error {
	p.mu.Lock()
	if p.cmds[i] != nil {
		p.mu.Unlock()
		return fmt.Errorf("cluster: node %d already running", i)
	}
	args := []string{
		"--port", strconv.Itoa(p.ports[i]), "--bind", "127.0.0.1",
		"--protected-mode", "no", "--save", "", "--dir", p.nodeDir(i),
		"--logfile", filepath.Join(p.nodeDir(i), "redis.log"),
	}
	if p.persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if p.nodeArgs != nil {
		args = append(args, p.nodeArgs(i)...)
	}
	cmd := exec.Command(p.bin, args...)
	// Own process group: a Ctrl-C to the test binary must not reach it
	// before Close does, and it must die with us (Pdeathsig).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("cluster: start node %d: %w", i, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmds[i], p.waits[i] = cmd, done
	p.mu.Unlock()
	return waitPing(ctx, p.Upstream(i), done)
}

// waitPing waits up to 10s for addr to answer PING, or for exited.
func waitPing(ctx context.Context, addr string, exited <-chan struct{}) error {
	n := newAdmin(addr, 200*time.Millisecond)
	defer n.Close()
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if _, err = n.Command(ctx, "PING"); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("cluster: redis-server at %s exited at start", addr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster: %s did not answer PING within 10s: %w", addr, err)
}

func (p *Processes) signal(i int, sig syscall.Signal) (*exec.Cmd, chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := p.cmds[i]
	if cmd == nil {
		return nil, nil, fmt.Errorf("cluster: node %d is not running", i)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return nil, nil, err
	}
	return cmd, p.waits[i], nil
}

func (p *Processes) end(ctx context.Context, i int, sig syscall.Signal) error {
	// A paused process must be continued to handle SIGTERM.
	if sig == syscall.SIGTERM {
		_, _, _ = p.signal(i, syscall.SIGCONT)
	}
	_, done, err := p.signal(i, sig)
	if err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_, _, _ = p.signal(i, syscall.SIGKILL)
		<-done
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	p.cmds[i], p.waits[i] = nil, nil
	p.mu.Unlock()
	return nil
}

// Stop sends SIGTERM and waits for the process to exit.
func (p *Processes) Stop(ctx context.Context, i int) error { return p.end(ctx, i, syscall.SIGTERM) }

// Kill sends SIGKILL and waits for the process to exit.
func (p *Processes) Kill(ctx context.Context, i int) error { return p.end(ctx, i, syscall.SIGKILL) }

// Pause sends SIGSTOP.
func (p *Processes) Pause(_ context.Context, i int) error {
	_, _, err := p.signal(i, syscall.SIGSTOP)
	return err
}

// Resume sends SIGCONT.
func (p *Processes) Resume(_ context.Context, i int) error {
	_, _, err := p.signal(i, syscall.SIGCONT)
	return err
}

// Close kills every node it started and removes its directory.
func (p *Processes) Close() error {
	for i := range p.cmds {
		p.mu.Lock()
		running := p.cmds[i] != nil
		p.mu.Unlock()
		if running {
			_ = p.end(context.Background(), i, syscall.SIGKILL)
		}
	}
	return os.RemoveAll(p.dir)
}
