package integration_test

import (
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/redlock"
)

// driverEnv names the node driver of the clients the tests make (client,
// scDial): "redigo" (the default: redlock.Dial), "goredis" (goredis nodes
// over go-redis clients with ContextTimeoutEnabled: go-redis bounds reads
// and writes by each call's deadline) or "goredis-default" (the same with
// go-redis' default, ContextTimeoutEnabled off: the nodes bound each call
// from a goroutine). Tests that build nodes themselves keep theirs.
const driverEnv = "REDLOCK_DRIVER"

// driver returns the driver REDLOCK_DRIVER names.
func driver() string {
	if d := os.Getenv(driverEnv); d != "" {
		return d
	}
	return "redigo"
}

// dial returns a client over the nodes at urls by the driver REDLOCK_DRIVER
// names. The caller closes the client; the go-redis clients of goredis
// nodes are closed at the end of the test, after it (t.Cleanup runs
// last-registered first).
func dial(t *testing.T, urls []string, opts ...redlock.Option) (*redlock.Client, error) {
	t.Helper()
	switch d := driver(); d {
	case "redigo":
		return redlock.Dial(urls, opts...)
	case "goredis", "goredis-default":
		clients := make([]redis.UniversalClient, len(urls))
		for i, u := range urls {
			c, err := goredisClient(u, d == "goredis")
			if err != nil {
				t.Fatalf("%s: %v", driverEnv, err)
			}
			t.Cleanup(func() { _ = c.Close() })
			clients[i] = c
		}
		return redlock.New(goredis.Nodes(clients...), opts...)
	default:
		t.Fatalf("%s=%q: want redigo, goredis or goredis-default", driverEnv, d)
		return nil, nil
	}
}

// goredisClient is a go-redis client for the node at rawURL, set up like
// the redigo nodes redlock.Dial makes (node.Options' defaults): calls
// bounded by their deadline (which redlock.WithNodeTimeout sets), by
// go-redis itself when ctxTimeout is set, socket timeouts of node.Options'
// 1 s Timeout, up to 64 connections idle for at most 5 minutes, no
// command sent twice (redigo retries nothing), no dial retried within a
// call, and no round trip on a new connection beyond HELLO.
func goredisClient(rawURL string, ctxTimeout bool) (*redis.Client, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = ctxTimeout
	o.DialTimeout = time.Second // the per-call deadline is shorter
	o.ReadTimeout = time.Second
	o.WriteTimeout = time.Second
	o.PoolSize = 64
	o.ConnMaxIdleTime = 5 * time.Minute
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(o), nil
}
