package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// RedisCluster is one local Redis Cluster for the tests of DialCluster:
// masters and replicas as redis-server processes on loopback (cluster
// mode on), the slots spread evenly over the masters. Its nodes are a
// Processes backend: Kill, Stop and Start fault them.
type RedisCluster struct {
	*Processes
	Masters, Replicas int
	// Spares are nodes started in cluster mode but not joined (the
	// last ones): AddMaster joins one as an empty master.
	Spares int
	added  []int // spares joined as masters
}

// StartRedisCluster starts masters masters and replicas replicas per
// master (nodes 0..masters-1 are the masters, then each master's
// replicas in turn), spreads the slots evenly over the masters (CLUSTER
// ADDSLOTSRANGE, MEET, REPLICATE: built by hand, so that a cluster of
// fewer than three masters can be made too), and waits until every node
// reports the cluster ok. It needs redis-server 7 or later.
func StartRedisCluster(ctx context.Context, masters, replicas int) (*RedisCluster, error) {
	return StartRedisClusterWithSpares(ctx, masters, replicas, 0)
}

// StartRedisClusterWithSpares is StartRedisCluster with spares more
// nodes, in cluster mode but outside the cluster (nodes after the
// replicas), for AddMaster.
func StartRedisClusterWithSpares(ctx context.Context, masters, replicas, spares int) (*RedisCluster, error) {
	n := masters*(1+replicas) + spares
	p, err := StartProcesses(ctx, Options{Nodes: n, NodeArgs: func(int) []string {
		// Without full coverage required, the masters that are up
		// keep serving their slots while one is down: a lock's other
		// copies stay usable (docs/CLUSTER.md).
		return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"}
	}})
	if err != nil {
		return nil, err
	}
	rc := &RedisCluster{Processes: p, Masters: masters, Replicas: replicas, Spares: spares}
	if err := rc.build(ctx); err != nil {
		_ = p.Close()
		return nil, err
	}
	return rc, nil
}

// build assigns the slots, joins the nodes and makes the replicas.
func (rc *RedisCluster) build(ctx context.Context) error {
	n := rc.Size() - rc.Spares
	ids := make([]string, n)
	for i := range n {
		a := rc.Admin(i)
		v, err := a.Command(ctx, "CLUSTER", "MYID")
		if err == nil {
			// Distinct config epochs, as redis-cli --cluster create sets
			// them: before the node knows any other.
			_, err = a.Command(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1)
		}
		if i < rc.Masters && err == nil {
			first, last := i*Slots/rc.Masters, (i+1)*Slots/rc.Masters-1
			_, err = a.Command(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last)
		}
		if i > 0 && err == nil {
			_, port, _ := splitPort(rc.Upstream(0))
			_, err = a.Command(ctx, "CLUSTER", "MEET", "127.0.0.1", port)
		}
		a.Close()
		if err != nil {
			return fmt.Errorf("cluster: node %s: %w", rc.Upstream(i), err)
		}
		b, _ := v.([]byte)
		ids[i] = string(b)
	}
	for i := rc.Masters; i < n; i++ {
		master := (i - rc.Masters) % rc.Masters
		if err := rc.replicate(ctx, i, ids[master]); err != nil {
			return err
		}
	}
	for i := range n {
		if err := rc.WaitOK(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// replicate makes node i a replica of the master with id, once node i
// knows that master (MEET takes a moment to spread), and waits until its
// link to the master is up: a replica that never synced is too stale to
// be promoted.
func (rc *RedisCluster) replicate(ctx context.Context, i int, id string) error {
	a := rc.Admin(i)
	defer a.Close()
	deadline := time.Now().Add(30 * time.Second)
	replicating := false
	for {
		var err error
		if !replicating {
			_, err = a.Command(ctx, "CLUSTER", "REPLICATE", id)
			replicating = err == nil
		}
		if replicating {
			var v any
			if v, err = a.Command(ctx, "INFO", "replication"); err == nil {
				if b, _ := v.([]byte); strings.Contains(string(b), "master_link_status:up") {
					return nil
				}
				err = fmt.Errorf("link to the master not up yet")
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: node %s: replicate: %w", rc.Upstream(i), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// AddMaster joins spare node i (see StartRedisClusterWithSpares) to the
// cluster as a master without slots, as adding a node does (CLUSTER
// MEET), and waits until every master knows it and it reports the
// cluster ok. MoveSlot can then give it slots.
func (rc *RedisCluster) AddMaster(ctx context.Context, i int) error {
	if i < rc.Size()-rc.Spares || i >= rc.Size() {
		return fmt.Errorf("cluster: node %d is no spare", i)
	}
	a := rc.Admin(i)
	id, err := myID(ctx, a)
	if err == nil {
		_, err = a.Command(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1)
	}
	if err == nil {
		_, port, _ := splitPort(rc.Upstream(0))
		_, err = a.Command(ctx, "CLUSTER", "MEET", "127.0.0.1", port)
	}
	a.Close()
	if err != nil {
		return fmt.Errorf("cluster: add node %s: %w", rc.Upstream(i), err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range rc.masters() {
		b := rc.Admin(m)
		for {
			v, err := b.Command(ctx, "CLUSTER", "NODES")
			if s, _ := v.([]byte); err == nil && strings.Contains(string(s), id) {
				break
			}
			if time.Now().After(deadline) {
				b.Close()
				return fmt.Errorf("cluster: node %s does not know the added node", rc.Upstream(m))
			}
			time.Sleep(50 * time.Millisecond)
		}
		b.Close()
	}
	rc.added = append(rc.added, i)
	return rc.WaitOK(ctx, i)
}

// masters returns the indexes of the cluster's masters as built, and of
// those AddMaster added.
func (rc *RedisCluster) masters() []int {
	out := make([]int, 0, rc.Masters+len(rc.added))
	for i := range rc.Masters {
		out = append(out, i)
	}
	return append(out, rc.added...)
}

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// URL returns node i's URL.
func (rc *RedisCluster) URL(i int) string { return "redis://" + rc.Upstream(i) }

// WaitOK waits up to 30 s until node i says cluster_state:ok with every
// slot assigned and served.
func (rc *RedisCluster) WaitOK(ctx context.Context, i int) error {
	a := newAdmin(rc.Upstream(i), time.Second)
	defer a.Close()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		v, err := a.Command(ctx, "CLUSTER", "INFO")
		if b, ok := v.([]byte); ok && err == nil {
			last = string(b)
			if strings.Contains(last, "cluster_state:ok") && strings.Contains(last, "cluster_slots_ok:16384") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster: node %s not ok within 30s: %s", rc.Upstream(i), lastLines(last, 3))
}

// Role returns node i's role ("master" or "slave") as it reports it.
func (rc *RedisCluster) Role(ctx context.Context, i int) (string, error) {
	a := newAdmin(rc.Upstream(i), time.Second)
	defer a.Close()
	v, err := a.Command(ctx, "ROLE")
	if err != nil {
		return "", err
	}
	if r, ok := v.([]any); ok && len(r) > 0 {
		if b, ok := r[0].([]byte); ok {
			return string(b), nil
		}
	}
	return "", fmt.Errorf("cluster: ROLE of %s: unexpected reply %v", rc.Upstream(i), v)
}

// Admin returns a direct connection to node i (close it).
func (rc *RedisCluster) Admin(i int) *Admin { return newAdmin(rc.Upstream(i), 2*time.Second) }

// MoveSlot moves a hash slot and its keys from master from to master to
// (nodes of rc), as a resharding does: BeginMoveSlot, then
// FinishMoveSlot.
func (rc *RedisCluster) MoveSlot(ctx context.Context, slot, from, to int) error {
	if err := rc.BeginMoveSlot(ctx, slot, from, to); err != nil {
		return err
	}
	return rc.FinishMoveSlot(ctx, slot, from, to)
}

// BeginMoveSlot marks a hash slot IMPORTING on master to and MIGRATING
// on master from: from then answers ASK for a command whose keys it does
// not hold.
func (rc *RedisCluster) BeginMoveSlot(ctx context.Context, slot, from, to int) error {
	src, dst := rc.Admin(from), rc.Admin(to)
	defer src.Close()
	defer dst.Close()
	srcID, err := myID(ctx, src)
	if err != nil {
		return err
	}
	dstID, err := myID(ctx, dst)
	if err != nil {
		return err
	}
	if _, err := dst.Command(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID); err != nil {
		return fmt.Errorf("cluster: importing slot %d: %w", slot, err)
	}
	if _, err := src.Command(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID); err != nil {
		return fmt.Errorf("cluster: migrating slot %d: %w", slot, err)
	}
	return nil
}

// myID returns the cluster node id of a's node.
func myID(ctx context.Context, a *Admin) (string, error) {
	v, err := a.Command(ctx, "CLUSTER", "MYID")
	b, _ := v.([]byte)
	return string(b), err
}

// FinishMoveSlot ends what BeginMoveSlot began: MigrateSlotKeys, then
// the slot's new owner told to every master.
func (rc *RedisCluster) FinishMoveSlot(ctx context.Context, slot, from, to int) error {
	if err := rc.MigrateSlotKeys(ctx, slot, from, to); err != nil {
		return err
	}
	dst := rc.Admin(to)
	dstID, err := myID(ctx, dst)
	dst.Close()
	if err != nil {
		return err
	}
	for _, i := range rc.masters() {
		a := rc.Admin(i)
		_, err := a.Command(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
		a.Close()
		if err != nil {
			return fmt.Errorf("cluster: slot %d to its new node, on %s: %w", slot, rc.Upstream(i), err)
		}
	}
	return nil
}

// MigrateSlotKeys moves the keys of a slot that BeginMoveSlot marked from
// master from to master to (MIGRATE), the slot still from's: a command
// on from for keys it no longer holds is answered ASK.
func (rc *RedisCluster) MigrateSlotKeys(ctx context.Context, slot, from, to int) error {
	src := rc.Admin(from)
	defer src.Close()
	host, port, _ := splitPort(rc.Upstream(to))
	for {
		v, err := src.Command(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 100)
		if err != nil {
			return err
		}
		ks, _ := v.([]any)
		if len(ks) == 0 {
			break
		}
		args := []any{host, port, "", 0, 5000, "KEYS"}
		args = append(args, ks...)
		if _, err := src.Command(ctx, "MIGRATE", args...); err != nil {
			return fmt.Errorf("cluster: migrate slot %d: %w", slot, err)
		}
	}
	return nil
}
