package redlock_test

import (
	"context"
	"database/sql"
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
	lock, err := client.TryLock(ctx, "partition-7", redlock.WithTTL(5*time.Second))
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

// ExampleClient_Do runs a job that may outlive the TTL: Do keeps the lock
// alive while the job runs and cancels the job's context as soon as the
// lock can no longer be proven held.
func ExampleClient_Do() {
	client, err := redlock.Dial([]string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	err = client.Do(context.Background(), "nightly-report", func(ctx context.Context) error {
		for batch := 0; batch < 1000; batch++ {
			if err := ctx.Err(); err != nil {
				return err // the lock is lost (context.Cause wraps redlock.ErrLost)
			}
			// ... one batch, passing ctx to every call that takes one ...
		}
		return nil
	})
	if errors.Is(err, redlock.ErrLost) {
		log.Printf("stopped: the lock was lost: %v", err)
	}
}

// ExampleLock_KeepAlive is Do by hand, for a job that must run between
// taking the lock and starting to work (say, reading a checkpoint).
func ExampleLock_KeepAlive() {
	client, err := redlock.Dial([]string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lock, err := client.Lock(context.Background(), "consumer/partition-7")
	if err != nil {
		log.Fatal(err)
	}
	job, stop := lock.KeepAlive(context.Background())
	defer func() {
		stop()
		_ = lock.Unlock(context.Background())
	}()
	select {
	case <-job.Done(): // lost, or the parent context ended
		log.Printf("stop consuming: %v", context.Cause(job))
	case <-time.After(time.Minute): // stands for the work
	}
}

// ExampleLock_Fence checks the fencing token where the data is: the row
// remembers the largest fence that wrote it, and a write with a smaller
// one (from a holder that paused past its lock while another took it)
// changes nothing.
func ExampleLock_Fence() {
	client, err := redlock.Dial([]string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"},
		redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	lock, err := client.Lock(ctx, "account/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(ctx)
	var db *sql.DB // your database
	if db == nil {
		return
	}
	// ... a GC pause or a SIGSTOP here can outlast the lock ...
	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET balance = $1, fence = $2 WHERE id = 42 AND fence <= $2`, 100, lock.Fence())
	if err != nil {
		log.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		log.Print("refused: a later holder of the lock has written")
	}
}

// ExampleElection keeps one instance of a scheduler active: each
// instance campaigns, works while it leads, and stamps what it writes
// with its term, which storage should check against the largest it has
// seen. Resign (or the client's Close) hands over at once.
func ExampleElection() {
	client, err := redlock.Dial([]string{
		"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
		"redis://127.0.0.1:7004", "redis://127.0.0.1:7005",
	}, redlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	election, err := client.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	lead, err := election.Campaign(ctx, "host-a:8080") // waits its turn
	if err != nil {
		log.Fatal(err)
	}
	defer lead.Resign(context.Background())
	fmt.Println("leading, term", lead.Term())

	// Work until the term ends: lead.Context() is cancelled as soon as
	// the leadership can no longer be proven held.
	select {
	case <-lead.Context().Done():
		log.Printf("term %d ended: %v", lead.Term(), lead.Err())
	case <-time.After(time.Minute):
	}

	// Anyone can ask who leads, or follow every change.
	if who, err := election.Leader(ctx); err == nil {
		fmt.Println("leader:", who.Value, "term", who.Term)
	}
}
