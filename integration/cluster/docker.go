package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

const (
	// DefaultImage is the Redis image used when neither Options.Image nor
	// $REDIS_IMAGE is set. `make image` builds it from the host's
	// redis-server (scripts/redis-image.sh); nothing is pulled.
	DefaultImage = "quorumlock/redis:7-local"

	// LabelCluster is set on every container and on the network a Docker
	// backend makes, with the backend's ID as value, so that leftovers can
	// be found: docker ps -a --filter label=io.quorumlock.cluster=<ID>.
	LabelCluster = "io.quorumlock.cluster"
	// LabelNode is set on every container to its node number, 1..N.
	LabelNode = "io.quorumlock.node"

	redisPort = "6379/tcp"

	// dockerStopGrace is how long docker stop waits for redis-server to
	// exit on SIGTERM before it sends SIGKILL.
	dockerStopGrace = 10 * time.Second
	// dockerStartTimeout bounds one container start, PING included.
	dockerStartTimeout = 60 * time.Second
)

// Docker is a Backend of Redis containers, one per node, run with
// testcontainers-go on a user-defined network made for this cluster. Node
// i has the network alias redis<i+1>; its port 6379 is published on a
// random host port, which changes when the container is started again
// (Cluster's proxies hide that).
type Docker struct {
	id      string // value of LabelCluster
	image   string
	persist bool
	host    string // where published ports are reached
	cli     *testcontainers.DockerClient
	net     *testcontainers.DockerNetwork

	// StartupTime is how long StartDocker took, from the first Docker call
	// until every node answered PING.
	StartupTime time.Duration

	mu    sync.Mutex
	ctrs  []testcontainers.Container // nil where creation failed
	addrs []string                   // host:port where node i answers now

	closeOnce sync.Once
	closeErr  error
}

var _ Backend = (*Docker)(nil)

// disableReaper makes sure testcontainers-go does not start Ryuk, its
// reaper container: no registry is reachable, so it could not be pulled.
// It sets TESTCONTAINERS_RYUK_DISABLED=true in the process environment
// when the variable is unset (testcontainers-go reads it once, on first
// use, and only the exact value "true" disables the reaper). A value the
// user set is left alone. Without Ryuk nothing removes the containers if
// the process dies before Close; they carry LabelCluster to find them.
func disableReaper() {
	if _, ok := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !ok {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
}

func reaperHint() string {
	if v := os.Getenv("TESTCONTAINERS_RYUK_DISABLED"); v != "true" {
		return fmt.Sprintf(" (note: TESTCONTAINERS_RYUK_DISABLED=%q, so testcontainers-go wants its reaper image; set it to exactly \"true\")", v)
	}
	return ""
}

var dockerProbe struct {
	mu        sync.Mutex
	known     bool
	available bool
}

// DockerAvailable reports whether a Docker engine answers within about
// 2 s, found the way testcontainers-go finds it (its properties file,
// DOCKER_HOST, the docker context, the default socket). It never pulls
// anything and returns within 2 s even if the engine hangs. The answer is
// cached for the life of the process, unless ctx ended first. Like
// StartDocker it sets TESTCONTAINERS_RYUK_DISABLED when unset.
//
// testcontainers-go also caches, once per process, where the engine is
// and whether that failed; an engine slower than 2 s to answer this probe
// therefore counts as absent for the whole process.
func DockerAvailable(ctx context.Context) bool {
	dockerProbe.mu.Lock()
	defer dockerProbe.mu.Unlock()
	if dockerProbe.known {
		return dockerProbe.available
	}
	disableReaper()
	// Not derived from ctx: a caller's early cancel must not become the
	// failure testcontainers-go caches. The probe ends by this deadline
	// whatever happens, so it leaves no goroutine behind for long.
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	res := make(chan bool, 1)
	go func() {
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(pctx)
		if err != nil {
			res <- false
			return
		}
		defer cli.Close()
		_, err = cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
		res <- err == nil
	}()
	select {
	case ok := <-res:
		dockerProbe.known, dockerProbe.available = true, ok
		return ok
	case <-ctx.Done():
		return false
	}
}

// DockerImage returns the image StartDocker would use for o.
func DockerImage(o Options) string {
	if o.Image != "" {
		return o.Image
	}
	if img := os.Getenv("REDIS_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// StartDocker starts o.Nodes Redis containers (default 5) in parallel and
// waits until each answers PING. The image (see DockerImage) must exist
// locally: nothing is pulled. It sets TESTCONTAINERS_RYUK_DISABLED=true in
// the environment when unset (see disableReaper). On error everything made
// so far is removed.
func StartDocker(ctx context.Context, o Options) (Backend, error) {
	d, err := startDocker(ctx, o)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func startDocker(ctx context.Context, o Options) (*Docker, error) {
	if o.NodeArgs != nil {
		return nil, errors.New("cluster: NodeArgs is for the process backend only")
	}
	began := time.Now()
	disableReaper()
	if o.Nodes <= 0 {
		o.Nodes = 5
	}
	d := &Docker{
		id:      uuid.NewString(),
		image:   DockerImage(o),
		persist: o.Persist,
		ctrs:    make([]testcontainers.Container, o.Nodes),
		addrs:   make([]string, o.Nodes),
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: docker: %w%s", err, reaperHint())
	}
	d.cli = cli
	d.host = publishedHost(cli)
	if _, err := cli.ImageInspect(ctx, d.image); err != nil {
		if cerrdefs.IsNotFound(err) {
			err = fmt.Errorf("cluster: docker image %s is not present locally and is never pulled; run `make image` to build it from the host's redis-server (or set REDIS_IMAGE to an image you have)", d.image)
		} else {
			err = fmt.Errorf("cluster: docker: inspect image %s: %w", d.image, err)
		}
		return nil, d.fail(err)
	}
	mctx, mcancel := mutation(ctx)
	nw, err := network.New(mctx, network.WithLabels(map[string]string{LabelCluster: d.id}))
	mcancel()
	if err != nil {
		return nil, d.fail(fmt.Errorf("cluster: docker: create network: %w%s", err, reaperHint()))
	}
	d.net = nw

	errs := make([]error, o.Nodes)
	var wg sync.WaitGroup
	for i := 0; i < o.Nodes; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = d.create(ctx, i)
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, d.fail(err)
	}
	d.StartupTime = time.Since(began)
	return d, nil
}

// fail removes everything made so far and returns err, naming the
// cluster's ID (the value of LabelCluster) and any cleanup failure.
func (d *Docker) fail(err error) error {
	err = fmt.Errorf("%w [docker cluster %s]", err, d.id)
	if cerr := d.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("cluster: docker: cleanup after failed start, look for label %s=%s: %w", LabelCluster, d.id, cerr))
	}
	return err
}

// mutation returns the context for a Docker request that creates
// something: bounded, but not cancelled with ctx, so that the request
// returns what it made and Close can remove it. (A create cut short on
// the client side can still complete in the engine after Close has
// looked for leftovers: seen with network create.)
func mutation(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), dockerStartTimeout)
}

// create creates and starts the container of node i.
func (d *Docker) create(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, dockerStartTimeout)
	defer cancel()
	alias := fmt.Sprintf("redis%d", i+1)
	cmd := []string{"--protected-mode", "no", "--save", ""}
	if d.persist {
		cmd = append(cmd, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		cmd = append(cmd, "--appendonly", "no")
	}
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:          d.image,
			Name:           fmt.Sprintf("redlock-%s-%s", d.id[:8], alias),
			Cmd:            cmd,
			ExposedPorts:   []string{redisPort},
			Labels:         map[string]string{LabelCluster: d.id, LabelNode: strconv.Itoa(i + 1)},
			Networks:       []string{d.net.Name},
			NetworkAliases: map[string][]string{d.net.Name: {alias}},
			// Also run again by Container.Start after a stop or kill. No
			// ForListeningPort: its internal check needs /bin/sh (the
			// image has none) and its external one dials the first
			// binding, which may be the IPv6 one (see hostPort) and
			// proves nothing anyway, as docker-proxy accepts before
			// redis listens. A PONG proves both.
			WaitingFor: wait.ForAll(
				wait.ForMappedPort(redisPort).WithPollInterval(20*time.Millisecond),
				pingStrategy{host: d.host},
			).WithDeadline(dockerStartTimeout),
		},
		Logger: tclog.NewNoopLogger(),
	}
	mctx, mcancel := mutation(ctx)
	ctr, err := testcontainers.GenericContainer(mctx, req) // create only
	mcancel()
	d.mu.Lock()
	if ctr != nil { // also on error: Close must remove it
		d.ctrs[i] = ctr
	}
	d.mu.Unlock()
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		// Runs the wait strategy too. If ctx cuts the start request
		// short, the container may still start, but Close removes it.
		err = ctr.Start(ctx)
	}
	if err != nil {
		return fmt.Errorf("cluster: docker: start node %d (%s): %w%s", i, d.image, err, reaperHint())
	}
	return d.refresh(ctx, i)
}

// refresh reads node i's current host port and waits for PING there.
func (d *Docker) refresh(ctx context.Context, i int) error {
	ctr := d.ctr(i)
	addr, err := hostPort(ctx, d.host, ctr)
	if err != nil {
		return fmt.Errorf("cluster: docker: node %d: %w", i, err)
	}
	d.mu.Lock()
	d.addrs[i] = addr
	d.mu.Unlock()
	return waitPing(ctx, addr, nil)
}

// publishedHost returns the host on which published ports are reached:
// $TESTCONTAINERS_HOST_OVERRIDE if set, the engine's host for a tcp://
// engine, else 127.0.0.1. testcontainers-go's own guess (Container.Host)
// is the default gateway whenever /.dockerenv exists, which is wrong for
// an engine running inside the same container (as on this project's CI
// machine); with the socket of the outer host's engine mounted into a
// container, set TESTCONTAINERS_HOST_OVERRIDE to the gateway.
func publishedHost(cli *testcontainers.DockerClient) string {
	if h := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE"); h != "" {
		return h
	}
	if u, err := url.Parse(cli.DaemonHost()); err == nil {
		switch u.Scheme {
		case "tcp", "http", "https":
			if h := u.Hostname(); h != "" && h != "localhost" {
				return h
			}
		}
	}
	return "127.0.0.1"
}

// hostPort returns host:port where the container's 6379 is published for
// IPv4. Docker 20.10 may publish [::] on a different host port than
// 0.0.0.0 (both appear in inspect; testcontainers' MappedPort takes
// whichever comes first), so the IPv4 binding is picked explicitly.
func hostPort(ctx context.Context, host string, t wait.StrategyTarget) (string, error) {
	info, err := t.Inspect(ctx)
	if err != nil {
		return "", fmt.Errorf("inspect: %w", err)
	}
	var port string
	for k, bindings := range info.NetworkSettings.Ports {
		if k.String() != redisPort {
			continue
		}
		for _, b := range bindings {
			if b.HostPort == "" {
				continue
			}
			if port == "" || !b.HostIP.IsValid() || b.HostIP.Is4() {
				port = b.HostPort
			}
			if !b.HostIP.IsValid() || b.HostIP.Is4() {
				break
			}
		}
	}
	if port == "" {
		return "", fmt.Errorf("%s is not published", redisPort)
	}
	return net.JoinHostPort(host, port), nil
}

// pingStrategy waits until redis-server answers PING on the published
// port (docker-proxy accepts connections on it before redis listens), and
// fails early, with the container's last log lines, if it exits.
type pingStrategy struct{ host string }

func (p pingStrategy) WaitUntilReady(ctx context.Context, t wait.StrategyTarget) error {
	addr, err := hostPort(ctx, p.host, t)
	if err != nil {
		return err
	}
	n := newAdmin(addr, 250*time.Millisecond)
	defer n.Close()
	for try := 0; ; try++ {
		if _, err = n.Command(ctx, "PING"); err == nil {
			return nil
		}
		if try%10 == 9 {
			if st, serr := t.State(ctx); serr == nil && !st.Running {
				return fmt.Errorf("redis-server exited (code %d) before answering PING%s", st.ExitCode, logTail(ctx, t))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no PONG from %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func logTail(ctx context.Context, t wait.StrategyTarget) string {
	rc, err := t.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 1<<16))
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return "; log:\n" + string(bytes.Join(lines, []byte("\n")))
}

func (d *Docker) ctr(i int) testcontainers.Container {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctrs[i]
}

// ID is the value of LabelCluster on everything this backend made.
func (d *Docker) ID() string { return d.id }

// Network is the name of the cluster's docker network.
func (d *Docker) Network() string {
	if d.net == nil {
		return ""
	}
	return d.net.Name
}

// ContainerID returns node i's container ID.
func (d *Docker) ContainerID(i int) string {
	if c := d.ctr(i); c != nil {
		return c.GetContainerID()
	}
	return ""
}

// Name returns "docker".
func (d *Docker) Name() string { return "docker" }

// Size returns the number of nodes.
func (d *Docker) Size() int { return len(d.addrs) }

// Upstream returns the host:port node i is published on now. It changes
// when the node is started again.
func (d *Docker) Upstream(i int) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.addrs[i]
}

func (d *Docker) state(ctx context.Context, i int) (running, paused bool, err error) {
	res, err := d.cli.ContainerInspect(ctx, d.ContainerID(i), client.ContainerInspectOptions{})
	if err != nil {
		return false, false, fmt.Errorf("cluster: docker: inspect node %d: %w", i, err)
	}
	st := res.Container.State
	return st.Running, st.Paused, nil
}

func (d *Docker) mustRun(ctx context.Context, i int) error {
	running, _, err := d.state(ctx, i)
	if err != nil {
		return err
	}
	if !running {
		return fmt.Errorf("cluster: node %d is not running", i)
	}
	return nil
}

// Stop runs docker stop: SIGTERM, SIGKILL after 10 s. Docker stops a
// paused container too. Without persistence the node loses its keys.
func (d *Docker) Stop(ctx context.Context, i int) error {
	if err := d.mustRun(ctx, i); err != nil {
		return err
	}
	grace := dockerStopGrace
	if err := d.ctr(i).Stop(ctx, &grace); err != nil {
		return fmt.Errorf("cluster: docker: stop node %d: %w", i, err)
	}
	return nil
}

// Kill runs docker kill (SIGKILL) and waits until the container is down.
func (d *Docker) Kill(ctx context.Context, i int) error {
	if err := d.mustRun(ctx, i); err != nil {
		return err
	}
	if _, err := d.cli.ContainerKill(ctx, d.ContainerID(i), client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		return fmt.Errorf("cluster: docker: kill node %d: %w", i, err)
	}
	for {
		running, _, err := d.state(ctx, i)
		if err != nil || !running {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Start runs docker start on a stopped or killed node, reads its new host
// port and waits until it answers PING there.
func (d *Docker) Start(ctx context.Context, i int) error {
	running, _, err := d.state(ctx, i)
	if err != nil {
		return err
	}
	if running {
		return fmt.Errorf("cluster: node %d already running", i)
	}
	sctx, cancel := context.WithTimeout(ctx, dockerStartTimeout)
	defer cancel()
	if err := d.ctr(i).Start(sctx); err != nil {
		return fmt.Errorf("cluster: docker: start node %d: %w", i, err)
	}
	return d.refresh(sctx, i)
}

// Pause runs docker pause (cgroup freezer). Connections to the published
// port are still accepted, by docker-proxy and the kernel, but nothing is
// answered.
func (d *Docker) Pause(ctx context.Context, i int) error {
	if _, err := d.cli.ContainerPause(ctx, d.ContainerID(i), client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("cluster: docker: pause node %d: %w", i, err)
	}
	return nil
}

// Resume runs docker unpause.
func (d *Docker) Resume(ctx context.Context, i int) error {
	if _, err := d.cli.ContainerUnpause(ctx, d.ContainerID(i), client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("cluster: docker: resume node %d: %w", i, err)
	}
	return nil
}

// Close force-removes every container and the network, including any
// that carry this backend's label but whose handle was lost in a failed
// start. It is safe to call more than once and from a failed StartDocker;
// later calls return the first call's error.
func (d *Docker) Close() error {
	d.closeOnce.Do(func() { d.closeErr = d.close() })
	return d.closeErr
}

func (d *Docker) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d.mu.Lock()
	ctrs := append([]testcontainers.Container(nil), d.ctrs...)
	d.mu.Unlock()

	errs := make([]error, len(ctrs))
	var wg sync.WaitGroup
	for i, c := range ctrs {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func(i int, c testcontainers.Container) {
			defer wg.Done()
			// No grace: the data is thrown away anyway.
			if err := c.Terminate(ctx, testcontainers.StopTimeout(0)); err != nil && !cerrdefs.IsNotFound(err) {
				errs[i] = fmt.Errorf("cluster: docker: remove node %d: %w", i, err)
			}
		}(i, c)
	}
	wg.Wait()

	if d.cli == nil {
		return errors.Join(errs...)
	}
	defer d.cli.Close()
	// Sweep: containers made in a start that failed half-way.
	filter := make(client.Filters).Add("label", LabelCluster+"="+d.id)
	if list, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter}); err != nil {
		errs = append(errs, fmt.Errorf("cluster: docker: list containers: %w", err))
	} else {
		for _, c := range list.Items {
			if _, err := d.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("cluster: docker: remove container %s: %w", c.ID[:12], err))
			}
		}
	}
	if d.net != nil {
		if err := d.net.Remove(ctx); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("cluster: docker: remove network %s: %w", d.net.Name, err))
		}
	}
	// And a network whose handle was lost.
	if list, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: filter}); err == nil {
		for _, n := range list.Items {
			if _, err := d.cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("cluster: docker: remove network %s: %w", n.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
