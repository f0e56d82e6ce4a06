package node_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/node/nodetest"
)

// TestConformance runs the driver contract (node/nodetest) on the redigo
// node.
func TestConformance(t *testing.T) {
	nodetest.Run(t, func(t *testing.T, s nodetest.Server) node.Node {
		host, port, err := net.SplitHostPort(s.Addr)
		require.NoError(t, err)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		ep := node.Endpoint{TLS: s.TLS != nil, Host: host, Port: p, Username: s.Username, Password: s.Password}
		return node.New(ep, node.Options{Timeout: s.Timeout, TLSConfig: s.TLS})
	})
}
