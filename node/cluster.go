package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// Master is one master of a Redis Cluster and the hash slots it serves.
type Master struct {
	Endpoint Endpoint // the seed's credentials and TLS, the master's host and port
	ID       string   // the cluster's node id
	Slots    []SlotRange
}

// ErrNotCluster is ClusterMasters' error for a server that is not a
// cluster node (cluster mode off).
var ErrNotCluster = errors.New("not a Redis Cluster node")

// ClusterMasters asks the cluster node at seed for the cluster's masters
// and their slots (CLUSTER SLOTS), within ctx's deadline, on a connection
// of its own. The masters come in the order of their first slot; each
// keeps seed's credentials, TLS and database, with the host and port the
// cluster announces (the seed's host where it announces none). Errors:
// ErrNotCluster, node.Error kinds as for any call (unreachable, auth).
func ClusterMasters(ctx context.Context, seed Endpoint, opts Options) ([]Master, error) {
	c, err := dialOnce(ctx, seed, opts)
	if err != nil {
		return nil, Fail(seed.Addr(), "cluster slots", redigoKind(err), err)
	}
	defer c.Close()
	reply, err := redis.DoContext(c, ctx, "CLUSTER", "SLOTS")
	var re redis.Error
	if errors.As(err, &re) && strings.Contains(strings.ToLower(re.Error()), "cluster support disabled") {
		return nil, fmt.Errorf("node %s: %w", seed.Addr(), ErrNotCluster)
	}
	if err != nil {
		return nil, Fail(seed.Addr(), "cluster slots", redigoKind(err), err)
	}
	return parseClusterSlots(reply, seed)
}

// parseClusterSlots reads CLUSTER SLOTS: an array of [first, last,
// [host, port, id, ...] of the master, replicas...].
func parseClusterSlots(reply any, seed Endpoint) ([]Master, error) {
	rows, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("node %s: CLUSTER SLOTS: %w: %T", seed.Addr(), ErrProtocol, reply)
	}
	bad := func(why string) error {
		return fmt.Errorf("node %s: CLUSTER SLOTS: %w: %s", seed.Addr(), ErrProtocol, why)
	}
	var out []Master
	at := map[string]int{} // a master's index in out, by id (or address)
	for _, row := range rows {
		r, ok := row.([]any)
		if !ok || len(r) < 3 {
			return nil, bad("a row is not [first, last, master, ...]")
		}
		first, ok1 := r[0].(int64)
		last, ok2 := r[1].(int64)
		m, ok3 := r[2].([]any)
		if !ok1 || !ok2 || !ok3 || len(m) < 2 || first < 0 || last < first || last >= Slots {
			return nil, bad("a row's slots or master")
		}
		host, _ := str(m[0])
		port, ok := m[1].(int64)
		if !ok || port <= 0 {
			return nil, bad("a master's port")
		}
		id := ""
		if len(m) > 2 {
			id, _ = str(m[2])
		}
		ep := seed
		if host != "" && host != "?" {
			ep.Host = host
		}
		ep.Port = int(port)
		k := id
		if k == "" {
			k = ep.Addr()
		}
		i, seen := at[k]
		if !seen {
			i = len(out)
			at[k] = i
			out = append(out, Master{Endpoint: ep, ID: id})
		}
		out[i].Slots = append(out[i].Slots, SlotRange{int(first), int(last)})
	}
	for i := range out {
		slices.SortFunc(out[i].Slots, func(a, b SlotRange) int { return a.First - b.First })
	}
	slices.SortFunc(out, func(a, b Master) int { return a.Slots[0].First - b.Slots[0].First })
	return out, nil
}

func str(v any) (string, bool) {
	switch s := v.(type) {
	case []byte:
		return string(s), true
	case string:
		return s, true
	case int64:
		return strconv.FormatInt(s, 10), true
	}
	return "", false
}

// MasterOf returns the master in masters that serves slot, and false if
// none does (a slot no master serves).
func MasterOf(masters []Master, slot int) (Master, bool) {
	for _, m := range masters {
		for _, r := range m.Slots {
			if slot >= r.First && slot <= r.Last {
				return m, true
			}
		}
	}
	return Master{}, false
}

// ClusterRecord reads key on the master of masters that serves its slot,
// within ctx's deadline, on a connection of its own. With a value other
// than "", a key that holds none is set to it first (SET NX, no expiry):
// the value returned is then value or the one an earlier call stored,
// so that every caller reads the same. An absent key reads "". Errors
// are a call's (node.Error); a MOVED reply (the slot changed hands since masters was read)
// is an error too.
func ClusterRecord(ctx context.Context, masters []Master, key, value string, opts Options) (string, error) {
	m, ok := MasterOf(masters, Slot(key))
	if !ok {
		return "", fmt.Errorf("node: cluster: no master serves the slot of %q", key)
	}
	addr := m.Endpoint.Addr()
	c, err := dialOnce(ctx, m.Endpoint, opts)
	if err != nil {
		return "", Fail(addr, "cluster record", redigoKind(err), err)
	}
	defer c.Close()
	if value != "" {
		if _, err := redis.DoContext(c, ctx, "SET", key, value, "NX"); err != nil {
			return "", Fail(addr, "cluster record", redigoKind(err), err)
		}
	}
	v, err := redis.String(redis.DoContext(c, ctx, "GET", key))
	switch {
	case errors.Is(err, redis.ErrNil):
		return "", nil
	case err != nil:
		return "", Fail(addr, "cluster record", redigoKind(err), err)
	}
	return v, nil
}

// HasShardChannels reports whether every master that answers within ctx
// has shard channels (SPUBLISH, Redis 7 and later; COMMAND INFO), so
// that a cluster client may set Options.ShardChannels; false when none
// answers. A master that does not answer is not counted: it cannot run
// the client's scripts either until it does.
func HasShardChannels(ctx context.Context, masters []Endpoint, opts Options) bool {
	answered := false
	for _, ep := range masters {
		c, err := dialOnce(ctx, ep, opts)
		if err != nil {
			continue
		}
		info, err := redis.Values(redis.DoContext(c, ctx, "COMMAND", "INFO", "SPUBLISH"))
		c.Close()
		if err != nil {
			continue
		}
		if len(info) != 1 || info[0] == nil {
			return false
		}
		answered = true
	}
	return answered
}

// dialOnce opens a connection of its own to ep within ctx, for a
// cluster read at dial time (the topology, the placement record, shard
// channels); the caller closes it.
func dialOnce(ctx context.Context, ep Endpoint, opts Options) (redis.Conn, error) {
	dialOpts, netDial := dialOptions(ep, opts.withDefaults())
	dialOpts = append(dialOpts, redis.DialContextFunc(netDial))
	return redis.DialContext(ctx, "tcp", ep.Addr(), dialOpts...)
}
