package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// The cluster pass (issue 46) runs on a local Redis Cluster of three
// masters with a replica each (redis-server processes): this library's
// DialCluster client against the raw floor on the same three masters,
// its copies placed by hand (the same hash tags), uncontended cycles
// interleaved; then one goroutine locks and unlocks while master 0 is
// killed and its replica promoted. Between the two, two clients hand a
// key to each other, announcing on shard channels or with PUBLISH. Its
// scenario id for -scenarios is "cluster".

// clusterNodeTimeout is the test cluster's cluster-node-timeout
// (cluster.StartRedisCluster).
const clusterNodeTimeout = time.Second

// clusterRes is the cluster pass' outcome.
type clusterRes struct {
	rounds, perRound int
	ours, floor      hist      // one Lock+Unlock cycle, all rounds
	ratios           []float64 // per round: ours' median over the floor's
	// The control: three independent masters, Dial against the floor.
	plainOurs, plainFloor hist
	plainRatios           []float64
	// The kill: the longest time between two Locks that returned a lock,
	// from the kill on, and the Lock calls that failed.
	gap            time.Duration
	gapAt          time.Duration // when the longest gap ended, from the kill
	cycles, failed int
	promoted       time.Duration // from the kill to the replica's promotion
	// Handoffs between two clients on one key, announced on shard
	// channels (SPUBLISH, the default here) or with PUBLISH, rounds
	// interleaved: sections per second and the six servers' CPU per
	// section, per round.
	shardRate, classicRate []float64
	shardCPU, classicCPU   []float64 // µs of node CPU per section
}

// clusterPass runs the pass.
func (b *bench) clusterPass() (*clusterRes, error) {
	r := &clusterRes{rounds: b.p.rounds, perRound: 200}
	if b.p.quick {
		r.perRound = 50
	}
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	rc, err := cluster.StartRedisCluster(ctx, 3, 1)
	cancel()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	s := b.p.setup
	seeds := make([]string, rc.Size())
	for i := range seeds {
		seeds[i] = rc.URL(i)
	}
	c, err := redlock.DialCluster(seeds, redlock.WithTTL(s.ttl),
		redlock.WithNodeOptions(node.Options{MaxIdle: s.pool, MaxActive: s.pool, Timeout: s.sockTimeout, CheckIdle: s.checkIdle, Pooled: s.pooled}))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// The floor on the same masters, each copy under master i's tag.
	floor := &raw{quorum: rc.Masters/2 + 1, timeout: s.rawTimeout, ttl: s.ttl, ttlMS: s.ttl.Milliseconds()}
	for i := range rc.Masters {
		first, last := i*16384/rc.Masters, (i+1)*16384/rc.Masters-1
		floor.pools = append(floor.pools, redigoPool(rc.Upstream(i), s))
		floor.tags = append(floor.tags, "{"+node.TagFor([]node.SlotRange{{First: first, Last: last}})+"}")
	}
	defer func() {
		floor.bg.Wait()
		_ = closePools(floor.pools)
	}()
	fw := &rawWorker{r: floor}
	if err := b.interleave(c, fw, r.rounds, r.perRound, &r.ours, &r.floor, &r.ratios); err != nil {
		return nil, err
	}
	if err := b.clusterHandoffs(rc, seeds, r); err != nil {
		return nil, err
	}
	// The control: the same on three independent masters (no cluster),
	// this library's Dial client against the floor without tags.
	pctx, pcancel := context.WithTimeout(b.ctx, time.Minute)
	plain, err := cluster.StartProcesses(pctx, cluster.Options{Nodes: 3})
	pcancel()
	if err != nil {
		return nil, err
	}
	defer plain.Close()
	purls := make([]string, 3)
	for i := range purls {
		purls[i] = "redis://" + plain.Upstream(i)
	}
	pc, err := b.ourClient(purls)
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	pfloor := &raw{quorum: 2, timeout: s.rawTimeout, ttl: s.ttl, ttlMS: s.ttl.Milliseconds()}
	for i := range purls {
		pfloor.pools = append(pfloor.pools, redigoPool(plain.Upstream(i), s))
	}
	defer func() {
		pfloor.bg.Wait()
		_ = closePools(pfloor.pools)
	}()
	if err := b.interleave(pc, &rawWorker{r: pfloor}, r.rounds, r.perRound, &r.plainOurs, &r.plainFloor, &r.plainRatios); err != nil {
		return nil, err
	}
	return r, b.clusterKill(rc, c, r)
}

// clusterHandoffs: two clients (one goroutine each) take one key in
// turns for a second per round, their copies announcing releases on
// shard channels or with PUBLISH (node.Options.ShardChannels, the
// copies made as DialCluster makes them), the two kinds alternating
// which goes first; per round, sections per second and the cluster's
// CPU per section (INFO cpu of all six servers).
func (b *bench) clusterHandoffs(rc *cluster.RedisCluster, seeds []string, r *clusterRes) error {
	s := b.p.setup
	copies, err := redlock.ClusterCopies(seeds)
	if err != nil {
		return err
	}
	known := make([]node.Endpoint, len(copies))
	for i, cp := range copies {
		known[i] = cp.Master
	}
	dial := func(shard bool) (*redlock.Client, error) {
		opts := node.Options{MaxIdle: s.pool, MaxActive: s.pool, Timeout: s.sockTimeout, ShardChannels: shard}
		return redlock.NewCluster(seeds, func(cp redlock.Copy) node.Node {
			return node.FollowSlot(cp.Master, cp.Tag, known, opts)
		}, redlock.WithTTL(s.ttl))
	}
	per := time.Second
	if b.p.quick {
		per = 300 * time.Millisecond
	}
	run := func(round int, shard bool) (rate, cpu float64, err error) {
		var cs []*redlock.Client
		defer func() {
			for _, c := range cs {
				_ = c.Close()
			}
		}()
		for range 2 {
			c, err := dial(shard)
			if err != nil {
				return 0, 0, err
			}
			cs = append(cs, c)
		}
		key := fmt.Sprintf("bench:cluster:hot:%d:%v", round, shard)
		cpu0, err := clusterCPU(rc)
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		end := start.Add(per)
		counts := make(chan int, len(cs))
		for _, c := range cs {
			go func() {
				n := 0
				for time.Now().Before(end) && b.ctx.Err() == nil {
					lctx, cancel := context.WithDeadline(b.ctx, end.Add(time.Second))
					l, err := c.Lock(lctx, key)
					cancel()
					if err != nil {
						continue
					}
					n++
					_ = l.Unlock(b.ctx)
				}
				counts <- n
			}()
		}
		n := 0
		for range cs {
			n += <-counts
		}
		took := time.Since(start)
		cpu1, err := clusterCPU(rc)
		if err != nil || n == 0 {
			return 0, 0, err
		}
		return float64(n) / took.Seconds(), (cpu1 - cpu0) / float64(n) * 1e6, nil
	}
	for round := range max(r.rounds/2, 2) {
		for _, shard := range []bool{round%2 == 0, round%2 != 0} {
			rate, cpu, err := run(round, shard)
			if err != nil {
				return err
			}
			if shard {
				r.shardRate, r.shardCPU = append(r.shardRate, rate), append(r.shardCPU, cpu)
			} else {
				r.classicRate, r.classicCPU = append(r.classicRate, rate), append(r.classicCPU, cpu)
			}
		}
	}
	return nil
}

// clusterCPU sums used_cpu_user and used_cpu_sys (seconds) over rc's
// servers, masters and replicas.
func clusterCPU(rc *cluster.RedisCluster) (float64, error) {
	sum := 0.0
	for i := range rc.Size() {
		a := rc.Admin(i)
		v, err := a.Command(context.Background(), "INFO", "cpu")
		a.Close()
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(fmt.Sprintf("%s", v), "\n") {
			for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
					f, _ := strconv.ParseFloat(rest, 64)
					sum += f
				}
			}
		}
	}
	return sum, nil
}

// clusterKill: one goroutine locks and unlocks distinct keys for 6 s;
// master 0 is killed after one.
func (b *bench) clusterKill(rc *cluster.RedisCluster, c *redlock.Client, r *clusterRes) error {
	ctx := b.ctx
	end := time.Now().Add(6 * time.Second)
	killAt := time.Now().Add(time.Second)
	killed := false
	var last, killTime time.Time
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		if !killed && time.Now().After(killAt) {
			if err := rc.Kill(ctx, 0); err != nil {
				return err
			}
			killed, last = true, time.Now()
			killTime = last
			go func(at time.Time) {
				for time.Since(at) < 30*time.Second {
					if role, err := rc.Role(ctx, 3); err == nil && role == "master" {
						r.promoted = time.Since(at)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}(last)
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := c.Lock(lctx, fmt.Sprintf("bench:cluster:kill:%d", i))
		cancel()
		if !killed {
			if err == nil {
				_ = l.Unlock(ctx)
			}
			continue
		}
		r.cycles++
		if err != nil {
			r.failed++
			continue
		}
		now := time.Now()
		if now.Sub(last) > r.gap {
			r.gap, r.gapAt = now.Sub(last), now.Sub(killTime)
		}
		last = now
		_ = l.Unlock(ctx)
	}
	time.Sleep(100 * time.Millisecond) // the promotion watcher's last look
	return nil
}

// renderCluster writes the cluster pass' section of the report.
func renderCluster(sb *strings.Builder, r *clusterRes) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	w("## Redis Cluster (issue 46)\n\n")
	w("A local Redis Cluster of three masters with a replica each (redis-server processes, cluster-node-timeout %v). Uncontended: one goroutine, a distinct key per cycle, this library's `DialCluster` client (contender A's set-up) and the raw floor on the same three masters, its keys under the same hash tags (copies placed by hand), cycle by cycle alternating who goes first; %d rounds of %d cycles each, the ratio of the medians per round, and the median of those. Handoffs: two clients of one goroutine each take one key in turns for a second per round, their copies announcing on shard channels (`SPUBLISH`/`SSUBSCRIBE`, what `DialCluster` picks on Redis 7) or with `PUBLISH`, the two alternating which goes first; node CPU is the six servers' `used_cpu_user + sys` (`INFO cpu`) per section. Kill: one goroutine locks and unlocks for 5 s after master 0 is killed.\n\n",
		clusterNodeTimeout, r.rounds, r.perRound)
	rs := slices.Clone(r.ratios)
	slices.Sort(rs)
	ratio := median(r.ratios)
	w("| row | p50 | p99 | against (floor) | ratio | target |\n|---|---|---|---|---|---|\n")
	w("| Lock+Unlock, 3 masters | %s | %s | %s / %s | %.2f× (rounds %.2f–%.2f) | %s (≤ 1.05×) |\n",
		fmtDur(r.ours.q(0.5)), fmtDur(r.ours.q(0.99)), fmtDur(r.floor.q(0.5)), fmtDur(r.floor.q(0.99)),
		ratio, rs[0], rs[len(rs)-1], passMiss(ratio <= 1.05))
	prs := slices.Clone(r.plainRatios)
	slices.Sort(prs)
	w("| (control: Dial on 3 independent masters) | %s | %s | %s / %s | %.2f× (rounds %.2f–%.2f) | – |\n",
		fmtDur(r.plainOurs.q(0.5)), fmtDur(r.plainOurs.q(0.99)), fmtDur(r.plainFloor.q(0.5)), fmtDur(r.plainFloor.q(0.99)),
		median(r.plainRatios), prs[0], prs[len(prs)-1])
	if len(r.shardRate) > 0 {
		rate, cpu := median(r.shardRate)/median(r.classicRate), median(r.shardCPU)/median(r.classicCPU)
		w("| handoffs, 2 clients on one key: shard channels (default) vs PUBLISH | %.0f vs %.0f sections/s (%.2f×) | | node CPU %.0fµs vs %.0fµs per section (%.2f×) | medians of %d rounds each | – |\n",
			median(r.shardRate), median(r.classicRate), rate, median(r.shardCPU), median(r.classicCPU), cpu, len(r.shardRate))
	}
	w("| master 0 killed | longest gap %s (ended %s after the kill) | | %d Locks, %d failed; replica promoted after %s | – | %s (gap ≤ the cluster's node timeout, %v) |\n\n",
		fmtDur(r.gap), fmtDur(r.gapAt), r.cycles, r.failed, fmtDur(r.promoted), passMiss(r.gap <= clusterNodeTimeout), clusterNodeTimeout)
}

// interleave runs rounds of n uncontended cycles of c and of the floor
// fw, a distinct key per cycle, cycle by cycle alternating who goes
// first, after a warm-up; it adds each cycle to ours and floor and each
// round's ratio of medians to ratios.
func (b *bench) interleave(c *redlock.Client, fw *rawWorker, rounds, n int, ours, floor *hist, ratios *[]float64) error {
	seq := 0
	cycle := func(lock func(string) error, unlock func() error) (time.Duration, error) {
		seq++
		key := fmt.Sprintf("bench:cluster:%d", seq)
		t0 := time.Now()
		if err := lock(key); err != nil {
			return 0, err
		}
		if err := unlock(); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	var l *redlock.Lock
	oursLock := func(k string) (err error) { l, err = c.Lock(b.ctx, k); return err }
	oursUnlock := func() error { return l.Unlock(b.ctx) }
	floorLock := func(k string) error { return fw.Lock(b.ctx, k) }
	floorUnlock := func() error { return fw.Unlock(b.ctx) }
	for range 50 { // warm-up: connections, scripts
		if _, err := cycle(oursLock, oursUnlock); err != nil {
			return err
		}
		if _, err := cycle(floorLock, floorUnlock); err != nil {
			return err
		}
	}
	for round := range rounds {
		var o, f []time.Duration
		for i := range n {
			swap := (i+round)%2 == 1 // the floor first
			first, firstU, second, secondU := oursLock, oursUnlock, floorLock, floorUnlock
			if swap {
				first, firstU, second, secondU = floorLock, floorUnlock, oursLock, oursUnlock
			}
			d1, err := cycle(first, firstU)
			if err != nil {
				return err
			}
			d2, err := cycle(second, secondU)
			if err != nil {
				return err
			}
			if swap {
				d1, d2 = d2, d1
			}
			o, f = append(o, d1), append(f, d2)
			ours.add(d1)
			floor.add(d2)
		}
		*ratios = append(*ratios, float64(medianDur(o))/float64(medianDur(f)))
	}
	return nil
}
