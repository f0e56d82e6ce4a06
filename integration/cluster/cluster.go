// Package cluster runs N independent Redis masters for tests, the demo and
// the experiments, with a toxiproxy in front of every node so that faults
// can be injected and so that the address a client uses stays the same
// when a node restarts (a restarted container gets a new host port).
//
// A Backend knows how to start, stop, kill, pause and resume its nodes:
// Process runs local redis-server processes; Docker runs containers.
// Cluster adds the proxies and the network faults on top of either.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Backend runs the Redis nodes themselves.
type Backend interface {
	// Name is "process" or "docker".
	Name() string
	// Size is the number of nodes.
	Size() int
	// Upstream returns host:port where node i answers now. It may change
	// after Start.
	Upstream(i int) string
	// Stop shuts node i down gracefully (SIGTERM, docker stop). Without
	// persistence it loses its keys.
	Stop(ctx context.Context, i int) error
	// Kill ends node i at once (SIGKILL, docker kill).
	Kill(ctx context.Context, i int) error
	// Start starts a stopped or killed node i again and waits until it
	// answers PING.
	Start(ctx context.Context, i int) error
	// Pause freezes node i (SIGSTOP, docker pause): it accepts nothing and
	// answers nothing, but keeps its state.
	Pause(ctx context.Context, i int) error
	// Resume undoes Pause.
	Resume(ctx context.Context, i int) error
	// Close removes every node and everything the backend made.
	Close() error
}

// Options configures a cluster.
type Options struct {
	// Nodes is the number of masters. Default 5.
	Nodes int
	// Persist turns on AOF with appendfsync always, so a restarted node
	// keeps its keys. Default off, as in the Redlock description's
	// unsafe-restart scenario.
	Persist bool
	// Backend is "process", "docker", "compose" (docker-compose.yml, 5
	// nodes) or "" for automatic: docker when an engine answers, else
	// process. REDLOCK_BACKEND overrides "".
	Backend string
	// Image is the docker image. Default $REDIS_IMAGE, else
	// quorumlock/redis:7-local.
	Image string
	// NodeArgs, if set, returns extra redis-server arguments for node i
	// (e.g. a TLS port). Process backend only; the plain port stays open
	// for the harness.
	NodeArgs func(i int) []string
}

// Cluster is a set of Redis masters behind toxiproxies.
type Cluster struct {
	Backend Backend

	server  *toxiproxy.ApiServer
	mu      sync.Mutex
	proxies []*toxiproxy.Proxy
	listen  []string
	direct  []*Admin // straight to the backend, not through the proxy
}

// Start brings up a cluster. Close it when done, also on failure paths.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Nodes <= 0 {
		o.Nodes = 5
	}
	kind := o.Backend
	if kind == "" {
		kind = os.Getenv("REDLOCK_BACKEND")
	}
	if kind == "" {
		kind = "process"
		if DockerAvailable(ctx) {
			kind = "docker"
		}
	}
	var b Backend
	var err error
	switch kind {
	case "process":
		b, err = StartProcesses(ctx, o)
	case "docker":
		b, err = StartDocker(ctx, o)
	case "compose":
		b, err = StartCompose(ctx, o)
	default:
		return nil, fmt.Errorf("cluster: unknown backend %q (want process, docker or compose)", kind)
	}
	if err != nil {
		return nil, err
	}
	c, err := WithProxies(b)
	if err != nil {
		b.Close()
		return nil, err
	}
	return c, nil
}

// WithProxies puts a toxiproxy on a loopback port in front of every node
// of b.
func WithProxies(b Backend) (*Cluster, error) {
	logger := zerolog.Nop()
	c := &Cluster{
		Backend: b,
		server:  toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger),
	}
	for i := 0; i < b.Size(); i++ {
		addr, err := freePort()
		if err != nil {
			c.Close()
			return nil, err
		}
		c.listen = append(c.listen, addr)
		c.proxies = append(c.proxies, nil)
		c.direct = append(c.direct, nil)
		if err := c.repoint(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// repoint (re)creates the proxy of node i towards the backend's current
// upstream address. Toxics on the old proxy are dropped.
func (c *Cluster) repoint(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A new direct pool in any case: the old one's connections went to the
	// old server and, after a restart on the same address, would fail
	// once with EOF.
	if c.direct[i] != nil {
		c.direct[i].Close()
	}
	c.direct[i] = newAdmin(c.Backend.Upstream(i), 2*time.Second)
	if old := c.proxies[i]; old != nil {
		if old.Upstream == c.Backend.Upstream(i) {
			return nil
		}
		old.Stop()
	}
	p := toxiproxy.NewProxy(c.server, fmt.Sprintf("redis%d", i+1), c.listen[i], c.Backend.Upstream(i))
	var err error
	for try := 0; try < 50; try++ { // the old listener may take a moment to go
		if err = p.Start(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("cluster: proxy for node %d: %w", i, err)
	}
	c.proxies[i] = p
	return nil
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return c.Backend.Size() }

// Addr returns the stable proxy address of node i, host:port.
func (c *Cluster) Addr(i int) string { return c.listen[i] }

// URLs returns the stable redis:// URLs of every node, through the proxies.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.listen))
	for i, a := range c.listen {
		out[i] = "redis://" + a
	}
	return out
}

// Direct returns an admin client connected straight to node i's backend
// (bypassing its proxy and faults), for inspection and set-up. It is
// replaced when node i is started again; do not keep it across a Start.
func (c *Cluster) Direct(i int) *Admin {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.direct[i]
}

// Stop shuts node i down gracefully.
func (c *Cluster) Stop(ctx context.Context, i int) error { return c.Backend.Stop(ctx, i) }

// Kill ends node i at once.
func (c *Cluster) Kill(ctx context.Context, i int) error { return c.Backend.Kill(ctx, i) }

// Start starts node i again and points its proxy at it.
func (c *Cluster) Start(ctx context.Context, i int) error {
	if err := c.Backend.Start(ctx, i); err != nil {
		return err
	}
	return c.repoint(i)
}

// Restart stops node i, waits delay (a "delayed restart" keeps a node
// that lost its keys away for longer than the largest TTL) and starts it.
func (c *Cluster) Restart(ctx context.Context, i int, delay time.Duration) error {
	if err := c.Stop(ctx, i); err != nil {
		return err
	}
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.Start(ctx, i)
}

// Pause freezes node i.
func (c *Cluster) Pause(ctx context.Context, i int) error { return c.Backend.Pause(ctx, i) }

// Resume unfreezes node i.
func (c *Cluster) Resume(ctx context.Context, i int) error { return c.Backend.Resume(ctx, i) }

func (c *Cluster) toxic(i int, json string) error {
	c.mu.Lock()
	p := c.proxies[i]
	c.mu.Unlock()
	_, err := p.Toxics.AddToxicJson(strings.NewReader(json))
	return err
}

// Latency adds d to every reply of node i.
func (c *Cluster) Latency(i int, d time.Duration) error {
	return c.toxic(i, fmt.Sprintf(`{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds()))
}

// Blackhole makes node i accept connections and swallow everything sent
// to it, never answering (a cut-off or hung host).
func (c *Cluster) Blackhole(i int) error {
	return c.toxic(i, `{"name":"blackhole","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)
}

// Drop makes node i accept connections and lose everything sent to it,
// as Blackhole does, but Heal keeps the connections open: what was sent
// meanwhile stays lost and later commands get through again on the same
// connections (a middlebox that dropped bytes without ending the flow).
// Blackhole's healing closes them.
func (c *Cluster) Drop(i int) error {
	return c.toxic(i, `{"name":"drop","type":"drop","stream":"upstream","attributes":{}}`)
}

// dropToxic loses every chunk of data, like toxiproxy's timeout toxic
// with no timeout, without closing the connection when it is removed.
type dropToxic struct{}

func (dropToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
		}
	}
}

func init() { toxics.Register("drop", new(dropToxic)) }

// ResetPeer makes node i reset every connection at once (RST).
func (c *Cluster) ResetPeer(i int) error {
	return c.toxic(i, `{"name":"reset","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`)
}

// Heal removes every network fault from node i. Commands swallowed by a
// blackhole stay lost; their callers have timed out.
func (c *Cluster) Heal(i int) {
	c.mu.Lock()
	p := c.proxies[i]
	c.mu.Unlock()
	p.Toxics.ResetToxics(context.Background())
}

// Keys returns, per node, the keys matching pattern (read directly).
func (c *Cluster) Keys(ctx context.Context, pattern string) ([][]string, error) {
	out := make([][]string, c.Size())
	var errs []error
	for i := range out {
		keys, err := c.Direct(i).Keys(ctx, pattern)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
		}
		out[i] = keys
	}
	return out, errors.Join(errs...)
}

// Close stops the proxies and the backend.
func (c *Cluster) Close() error {
	c.mu.Lock()
	for i, p := range c.proxies {
		if p != nil {
			p.Stop()
		}
		if c.direct[i] != nil {
			c.direct[i].Close()
		}
	}
	c.mu.Unlock()
	if c.Backend == nil {
		return nil
	}
	return c.Backend.Close()
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
