package goredis

import (
	"time"

	"github.com/quorumlock/redlock/node"
)

// WatchDone returns a channel closed once the node's subscriber that served
// w has ended, every part of it: after the node's last watch stopped. w
// must come from a node of this package.
func WatchDone(w node.Watch) <-chan struct{} { return w.(*watch).run.done }

// Bounded reports whether n calls go-redis directly (its client has
// ContextTimeoutEnabled) rather than from a goroutine.
func Bounded(n node.Node) bool { return n.(*redisNode).bounded }

// SetWatchIdle sets how long a watch waits for a message before it pings,
// until the test ends. Only while no watch runs.
func SetWatchIdle(t interface{ Cleanup(func()) }, d time.Duration) {
	old := watchIdle
	watchIdle = d
	t.Cleanup(func() { watchIdle = old })
}
