package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/node/nodetest"
)

// TestConformance runs the driver contract (node/nodetest) on goredis
// nodes in every mode: over clients that bound reads and writes by the
// context (ContextTimeoutEnabled) and over clients with go-redis'
// default, that do not, each speaking RESP3 and RESP2 (the scripts'
// replies must read the same). The clients dial once per attempt (DialerRetries 1, as the
// package comment advises): go-redis' default of five dials 100 ms apart,
// and its retries of the command, outlast the node timeout against a
// port where nothing listens, and the Unreachable check would see
// ErrTimeout instead of ErrUnreachable.
func TestConformance(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		nodetest.Run(t, func(t *testing.T, s nodetest.Server) node.Node {
			o := &redis.Options{
				Addr:                  s.Addr,
				Username:              s.Username,
				Password:              s.Password,
				TLSConfig:             s.TLS,
				ContextTimeoutEnabled: m.bounded,
				Protocol:              m.protocol,
				DialerRetries:         1,
			}
			if m.protocol == 2 {
				// Each command sent once: the node asks for grants
				// (see Retries in the package doc). The RESP3 modes
				// keep go-redis' default retries, and reservations.
				o.MaxRetries = -1
			}
			c := redis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
			n := goredis.NewWithOptions(c, goredis.Options{Timeout: s.Timeout})
			require.Equal(t, m.bounded, goredis.Bounded(n))
			return n
		})
	})
}
