package node

import (
	"context"
	"time"
)

// Command runs any command on r's pool, for tests that must hold one of
// its connections (BLPOP) or reach its server the way the node does.
func (r *Redis) Command(ctx context.Context, cmd string, args ...any) (any, error) {
	return r.do(ctx, "command", cmd, args...)
}

// SetLinger sets how long r's channels stay subscribed after their last
// watch stops (see linger).
func (r *Redis) SetLinger(d time.Duration) {
	r.sub.mu.Lock()
	defer r.sub.mu.Unlock()
	r.sub.linger = d
}

// Lingering returns how many of r's channels are subscribed without
// watches.
func (r *Redis) Lingering() int {
	r.sub.mu.Lock()
	defer r.sub.mu.Unlock()
	return r.sub.lingering
}
