package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/redlock"
)

// ExampleNodes takes a lock over three independent masters the program
// already talks to through go-redis, and releases it.
func ExampleNodes() {
	var clients []redis.UniversalClient
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"} {
		c := redis.NewClient(&redis.Options{
			Addr: addr,
			// The node bounds each call by its deadline; go-redis' own
			// timeouts bound what a late call leaves running. Fail at
			// once on a node that is down, and say only HELLO to a new
			// connection (see the package comment).
			ReadTimeout:     time.Second,
			WriteTimeout:    time.Second,
			DialerRetries:   1,
			MinRetryBackoff: -1,
			DisableIdentity: true,
		})
		defer c.Close() // after client.Close: the redlock client never closes them
		clients = append(clients, c)
	}

	client, err := redlock.New(goredis.Nodes(clients...), redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err) // a cluster client, the same master twice, a bad option
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := client.Lock(ctx, "nightly-report")
	if errors.Is(err, redlock.ErrNotAcquired) {
		log.Printf("someone else runs it: %v", err)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println("working until", lock.Until().Format(time.TimeOnly))
	if err := lock.Unlock(context.Background()); errors.Is(err, redlock.ErrNotHeld) {
		log.Printf("the work outran the lock: %v", err)
	}
}

// ExampleDialCluster locks on a Redis Cluster the program reaches
// through a go-redis ClusterClient: copies on distinct masters, as
// redlock.DialCluster places them.
func ExampleDialCluster() {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"},
	})
	defer cc.Close() // after client.Close: the redlock client never closes it

	client, err := goredis.DialCluster(cc, redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err) // fewer than 3 masters, not a cluster, a bad option
	}
	defer client.Close()

	lock, err := client.Lock(context.Background(), "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())
	fmt.Println("working until", lock.Until().Format(time.TimeOnly))
}
