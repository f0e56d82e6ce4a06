package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// ComposeFile is the file StartCompose looks for, walking up from the
	// working directory.
	ComposeFile = "docker-compose.yml"

	// composeNodes is how many services docker-compose.yml defines.
	composeNodes = 5
	// composeFirstPort is the host port of quorumlock-redis1; node i is
	// published on composeFirstPort+i.
	composeFirstPort = 7001

	// composeUpTimeout bounds `up -d` and `down -v`; dockerCLITimeout
	// bounds one docker stop|kill|start|pause|unpause|inspect.
	composeUpTimeout = 2 * time.Minute
	dockerCLITimeout = 30 * time.Second
)

// Compose is a Backend over the repository's docker-compose.yml: five
// containers with the fixed names quorumlock-redis1..5, published on
// 127.0.0.1:7001..7005 (the stack `make up` brings up). Faults are
// injected with the docker CLI on those names.
//
// The fixed names and ports allow only one such stack per Docker engine,
// so StartCompose refuses to run when any of the containers already
// exists rather than adopt (and later remove) somebody else's stack.
type Compose struct {
	compose []string // "docker-compose", or "docker" "compose"
	file    string   // absolute path of docker-compose.yml
	image   string   // passed to the compose file as REDIS_IMAGE

	mu     sync.Mutex
	paused []bool // nodes Pause froze and Resume has not thawed

	closeOnce sync.Once
	closeErr  error
}

var _ Backend = (*Compose)(nil)

// StartCompose brings up the docker-compose.yml stack with `<compose> -f
// <file> up -d` and waits until every node answers PING on its host port.
// o.Nodes must be 0 or 5 and o.Persist false (the compose file fixes
// both); the image is DockerImage(o) and must exist locally. On error
// everything it started is taken down again.
func StartCompose(ctx context.Context, o Options) (*Compose, error) {
	if o.Nodes != 0 && o.Nodes != composeNodes {
		return nil, fmt.Errorf("cluster: compose backend has exactly %d nodes (docker-compose.yml), not %d", composeNodes, o.Nodes)
	}
	if o.NodeArgs != nil {
		return nil, errors.New("cluster: NodeArgs is for the process backend only")
	}
	if o.Persist {
		return nil, errors.New("cluster: compose backend cannot persist: docker-compose.yml runs redis with --appendonly no")
	}
	file, err := FindComposeFile()
	if err != nil {
		return nil, err
	}
	cmd, err := ComposeCommand(ctx)
	if err != nil {
		return nil, err
	}
	c := &Compose{compose: cmd, file: file, image: DockerImage(o), paused: make([]bool, composeNodes)}
	if err := c.preflight(ctx); err != nil {
		return nil, err
	}
	if _, err := c.run(ctx, composeUpTimeout, c.composeArgs("up", "-d")...); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	for i := range composeNodes {
		if err := waitPing(ctx, c.Upstream(i), nil); err != nil {
			return nil, errors.Join(fmt.Errorf("cluster: compose node %d: %w", i, err), c.Close())
		}
	}
	return c, nil
}

// FindComposeFile returns the absolute path of the nearest
// docker-compose.yml in the working directory or one of its parents.
func FindComposeFile() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cluster: compose: %w", err)
	}
	for {
		p := filepath.Join(dir, ComposeFile)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cluster: compose: no %s in the working directory or any parent", ComposeFile)
		}
		dir = parent
	}
}

// ComposeCommand returns the compose command line to use: docker-compose
// (v1) when it is on PATH, else docker compose (v2) when that answers.
func ComposeCommand(ctx context.Context) ([]string, error) {
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err == nil {
		return []string{"docker", "compose"}, nil
	}
	return nil, errors.New("cluster: compose backend: neither docker-compose nor docker compose is available")
}

// preflight checks, before anything is started, that the image exists
// (compose would try to pull it) and that no container of the stack does.
func (c *Compose) preflight(ctx context.Context) error {
	if _, err := c.run(ctx, dockerCLITimeout, "docker", "image", "inspect", "--format", "{{.Id}}", c.image); err != nil {
		return fmt.Errorf("cluster: compose: docker image %s is not present locally and is never pulled; run `make image` to build it (or set REDIS_IMAGE): %w", c.image, err)
	}
	var found []string
	for i := range composeNodes {
		out, err := c.run(ctx, dockerCLITimeout, "docker", "ps", "-a", "-q", "--filter", "name=^"+c.container(i)+"$")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "" {
			found = append(found, c.container(i))
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("cluster: compose: %s already exist: another copy of the stack is up (`make down` removes it)", strings.Join(found, ", "))
	}
	return nil
}

// Name returns "compose".
func (c *Compose) Name() string { return "compose" }

// Size returns 5.
func (c *Compose) Size() int { return composeNodes }

// File returns the path of the docker-compose.yml in use.
func (c *Compose) File() string { return c.file }

// Upstream returns 127.0.0.1:700<i+1>; it never changes.
func (c *Compose) Upstream(i int) string { return fmt.Sprintf("127.0.0.1:%d", composeFirstPort+i) }

// Container returns node i's container name, quorumlock-redis<i+1>.
func (c *Compose) Container(i int) string { return c.container(i) }

func (c *Compose) container(i int) string { return fmt.Sprintf("quorumlock-redis%d", i+1) }

func (c *Compose) check(i int) error {
	if i < 0 || i >= composeNodes {
		return fmt.Errorf("cluster: compose: no node %d (have %d)", i, composeNodes)
	}
	return nil
}

// Stop runs docker stop: SIGTERM, SIGKILL after 10 s. The node loses its
// keys.
func (c *Compose) Stop(ctx context.Context, i int) error {
	if err := c.docker(ctx, "stop", i); err != nil {
		return err
	}
	c.setPaused(i, false)
	return nil
}

// Kill runs docker kill (SIGKILL) and waits until the container is down.
func (c *Compose) Kill(ctx context.Context, i int) error {
	if err := c.docker(ctx, "kill", i); err != nil {
		return err
	}
	c.setPaused(i, false)
	for {
		out, err := c.run(ctx, dockerCLITimeout, "docker", "inspect", "--format", "{{.State.Running}}", c.container(i))
		if err != nil || strings.TrimSpace(out) == "false" {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Start runs docker start on a stopped or killed node and waits until it
// answers PING on its (unchanged) host port.
func (c *Compose) Start(ctx context.Context, i int) error {
	if err := c.docker(ctx, "start", i); err != nil {
		return err
	}
	return waitPing(ctx, c.Upstream(i), nil)
}

// Pause runs docker pause: the published port still accepts connections
// but nothing is answered.
func (c *Compose) Pause(ctx context.Context, i int) error {
	if err := c.docker(ctx, "pause", i); err != nil {
		return err
	}
	c.setPaused(i, true)
	return nil
}

// Resume runs docker unpause.
func (c *Compose) Resume(ctx context.Context, i int) error {
	if err := c.docker(ctx, "unpause", i); err != nil {
		return err
	}
	c.setPaused(i, false)
	return nil
}

// Close thaws paused nodes and runs `<compose> -f <file> down -v`, which
// removes the containers, their network and volumes. It is safe to call
// more than once; later calls return the first call's error.
func (c *Compose) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.down() })
	return c.closeErr
}

func (c *Compose) down() error {
	ctx := context.Background()
	c.mu.Lock()
	paused := append([]bool(nil), c.paused...)
	c.mu.Unlock()
	for i, p := range paused {
		if p {
			_ = c.docker(ctx, "unpause", i) // down would wait for a frozen container
		}
	}
	_, err := c.run(ctx, composeUpTimeout, c.composeArgs("down", "-v")...)
	return err
}

func (c *Compose) setPaused(i int, p bool) {
	c.mu.Lock()
	c.paused[i] = p
	c.mu.Unlock()
}

// docker runs `docker <verb> quorumlock-redis<i+1>`.
func (c *Compose) docker(ctx context.Context, verb string, i int) error {
	if err := c.check(i); err != nil {
		return err
	}
	if _, err := c.run(ctx, dockerCLITimeout, "docker", verb, c.container(i)); err != nil {
		return fmt.Errorf("cluster: compose: %s node %d: %w", verb, i, err)
	}
	return nil
}

func (c *Compose) composeArgs(args ...string) []string {
	return append(append(append([]string(nil), c.compose...), "-f", c.file), args...)
}

// run executes argv within timeout (and ctx) and returns its stdout; the
// error carries stderr. The command gets its own process group so that a
// Ctrl-C on the terminal reaches only this process, which then cleans up
// on its own terms (a `down` must not be interrupted half-way).
func (c *Compose) run(ctx context.Context, timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "REDIS_IMAGE="+c.image)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := lastLines(stderr.String(), 3)
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if msg != "" {
			return stdout.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, msg)
		}
		return stdout.String(), fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return stdout.String(), nil
}

// lastLines returns the last n non-blank lines of s, joined by "; ":
// compose prints progress before the error that matters.
func lastLines(s string, n int) string {
	var lines []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "; ")
}
