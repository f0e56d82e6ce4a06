package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/redlock"
)

const (
	// clusterNodes is how many masters the demo starts.
	clusterNodes = 5
	// startTimeout bounds bringing the cluster up (containers included).
	startTimeout = 3 * time.Minute
	// probeTimeout bounds the PING of one node for the status line.
	probeTimeout = 250 * time.Millisecond
)

// env is what the demo runs against: the nodes (a cluster it started, or
// existing ones named by -urls), one client per worker and a PING probe
// per node. close releases all of it.
type env struct {
	urls    []string
	cluster *cluster.Cluster // nil with -urls: nothing to kill or remove
	clients []*redlock.Client
	probes  []*cluster.Admin
	key     string // the lock every worker contends for

	closeOnce sync.Once
	closeErr  error
}

// prepare brings up the nodes (unless cfg names existing ones) and dials
// the clients. On error it leaves nothing behind.
func prepare(ctx context.Context, cfg demoConfig, v *view) (*env, error) {
	e := &env{key: "redlock-demo:" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	if err := e.startNodes(ctx, cfg, v); err != nil {
		return nil, errors.Join(err, e.close())
	}
	if err := e.dial(cfg); err != nil {
		return nil, errors.Join(err, e.close())
	}
	return e, nil
}

// startNodes starts the cluster, or takes cfg.urls as they are.
func (e *env) startNodes(ctx context.Context, cfg demoConfig, v *view) error {
	if len(cfg.urls) > 0 {
		e.urls = cfg.urls
		v.note("using %d existing nodes (-urls); none is started, killed or removed:", len(e.urls))
		e.listNodes(v)
		return nil
	}
	v.note("starting %d Redis masters (-backend %s) ...", clusterNodes, cfg.backend)
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Nodes: clusterNodes, Backend: cfg.clusterBackend(ctx)})
	if err != nil {
		return fmt.Errorf("starting the nodes: %w", err)
	}
	e.cluster, e.urls = c, c.URLs()
	v.note("%d nodes up in %s: %s, each behind its own toxiproxy on loopback:",
		c.Size(), seconds(time.Since(began)), describeBackend(c.Backend))
	e.listNodes(v)
	return nil
}

func (e *env) listNodes(v *view) {
	for i, u := range e.urls {
		where := ""
		if e.cluster != nil {
			where = " -> " + e.cluster.Backend.Upstream(i)
			if c, ok := e.cluster.Backend.(*cluster.Compose); ok {
				where += " (" + c.Container(i) + ")"
			}
		}
		v.note("  node %d  %s%s", i+1, u, where)
	}
}

// describeBackend says in a few words what runs the nodes.
func describeBackend(b cluster.Backend) string {
	switch b.Name() {
	case "process":
		return "local redis-server processes (process backend)"
	case "docker":
		return "Docker containers (docker backend)"
	case "compose":
		return "the docker-compose.yml containers (compose backend)"
	}
	return b.Name() + " backend"
}

// dial makes one client per worker, each with its own connection pools,
// and one probe per node.
func (e *env) dial(cfg demoConfig) error {
	for range cfg.workers {
		c, err := redlock.Dial(e.urls, redlock.WithTTL(cfg.ttl), redlock.WithNodeTimeout(cfg.nodeTO), redlock.WithRetry(cfg.retry()))
		if err != nil {
			return err
		}
		e.clients = append(e.clients, c)
	}
	for _, u := range e.urls {
		p, err := cluster.NewAdmin(u, probeTimeout)
		if err != nil {
			return err
		}
		e.probes = append(e.probes, p)
	}
	return nil
}

// quorum is how many nodes must agree on a lock.
func (e *env) quorum() int { return e.clients[0].Quorum() }

// probe reports which nodes answer PING now, in parallel.
func (e *env) probe(ctx context.Context) []bool {
	up := make([]bool, len(e.probes))
	var wg sync.WaitGroup
	for i, p := range e.probes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			_, err := p.Command(ctx, "PING")
			up[i] = err == nil
		})
	}
	wg.Wait()
	return up
}

// kill kills node i of the cluster and says how.
func (e *env) kill(ctx context.Context, i int) (how string, err error) {
	switch b := e.cluster.Backend.(type) {
	case *cluster.Compose:
		how = "docker kill " + b.Container(i)
	case *cluster.Docker:
		id := b.ContainerID(i)
		how = "docker kill " + id[:min(12, len(id))]
	default:
		how = "SIGKILL to redis-server at " + b.Upstream(i)
	}
	return how, e.cluster.Kill(ctx, i)
}

// close closes the clients and probes and, if the demo started the nodes,
// removes them. It is safe to call more than once; later calls return the
// first one's error.
func (e *env) close() error {
	e.closeOnce.Do(func() {
		var errs []error
		for _, c := range e.clients {
			// Releases to the node the demo killed cannot finish; their
			// keys expire by their TTL, as the log says.
			if err := c.Close(); !errors.Is(err, redlock.ErrAbandoned) {
				errs = append(errs, err)
			}
		}
		for _, p := range e.probes {
			errs = append(errs, p.Close())
		}
		if e.cluster != nil {
			errs = append(errs, e.cluster.Close())
		}
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

// closed describes, for the summary, what close did.
func (e *env) closed() string {
	if e.cluster == nil {
		return "clients closed; the -urls nodes were left as they were"
	}
	switch e.cluster.Backend.Name() {
	case "process":
		return fmt.Sprintf("%d redis-server processes stopped, proxies and clients closed", e.cluster.Size())
	case "compose":
		return "compose down -v: containers, network and volumes removed; proxies and clients closed"
	case "docker":
		return fmt.Sprintf("%d containers and their network removed, proxies and clients closed", e.cluster.Size())
	}
	return fmt.Sprintf("%d %s nodes removed, proxies and clients closed", e.cluster.Size(), e.cluster.Backend.Name())
}
