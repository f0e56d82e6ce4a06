package node

import "context"

// Command runs any command on r's pool, for tests that must hold one of
// its connections (BLPOP) or reach its server the way the node does.
func (r *Redis) Command(ctx context.Context, cmd string, args ...any) (any, error) {
	return r.do(ctx, "command", cmd, args...)
}
