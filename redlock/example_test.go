package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/redlock/redlock"
)

// Example is the README's quick start: take a lock over five masters, work
// while it is valid, release it.
func Example() {
	client, err := redlock.Dial([]string{
		"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
		"redis://127.0.0.1:7004", "redis://127.0.0.1:7005",
	}, redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err) // bad URL, duplicate node, bad option: nothing was sent
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

	// Work only while the lock is valid; check before each step that
	// must not run twice.
	if lock.TTL() > 0 {
		fmt.Println("working until", lock.Until().Format(time.TimeOnly))
	}

	if err := lock.Unlock(context.Background()); errors.Is(err, redlock.ErrNotHeld) {
		log.Printf("the work outran the lock: %v", err)
	}
}

// ExampleLock_Extend keeps a lock for a long job by extending it before its
// validity runs out, and stops when it can no longer be extended.
func ExampleLock_Extend() {
	client, err := redlock.Dial([]string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	lock, err := client.TryLock(ctx, "partition-7", redlock.TTL(5*time.Second))
	if err != nil {
		return
	}
	defer lock.Unlock(ctx)
	for step := 0; step < 10; step++ {
		if lock.TTL() < 2*time.Second {
			if err := lock.Extend(ctx, 5*time.Second); errors.Is(err, redlock.ErrNotHeld) {
				return // lost: stop working
			}
		}
		// ... one bounded step of work ...
	}
}
