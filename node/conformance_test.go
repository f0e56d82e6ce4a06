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
// node as configured by default: every command over one connection.
func TestConformance(t *testing.T) {
	nodetest.Run(t, factory(node.Options{}))
}

// TestConformancePooled runs it with a pooled connection per call
// (Options.Pooled).
func TestConformancePooled(t *testing.T) {
	nodetest.Run(t, factory(node.Options{Pooled: true}))
}

// factory makes redigo nodes with opts, for Server s.
func factory(opts node.Options) nodetest.Factory {
	return func(t *testing.T, s nodetest.Server) node.Node {
		host, port, err := net.SplitHostPort(s.Addr)
		require.NoError(t, err)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		ep := node.Endpoint{TLS: s.TLS != nil, Host: host, Port: p, Username: s.Username, Password: s.Password}
		opts.Timeout, opts.TLSConfig = s.Timeout, s.TLS
		return node.New(ep, opts)
	}
}
