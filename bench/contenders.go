package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsredigo "github.com/go-redsync/redsync/v4/redis/redigo"
	"github.com/gomodule/redigo/redis"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// worker is one goroutine's handle on a contender: Lock takes a key with
// the contender's normal retrying Lock, Unlock releases what Lock took.
// A worker is used by one goroutine only, so it can keep the held lock in a
// field instead of allocating a handle per cycle.
type worker interface {
	Lock(ctx context.Context, key string) error
	Unlock(ctx context.Context) error
}

// contender is one lock client under test.
type contender struct {
	id        string // A, B, C, D, E
	name      string
	newWorker func() worker
	close     func() error
}

// setup is what every contender shares.
type setup struct {
	ttl         time.Duration // lock TTL, 10s
	pool        int           // MaxIdle = MaxActive per node
	sockTimeout time.Duration // redigo dial/read/write timeout (node.Options.Timeout default)
	rawTimeout  time.Duration // per-call deadline of the raw floor (= our default node timeout)
	nodeTimeout time.Duration // A's and E's WithNodeTimeout; 0 = derived from the TTL
	checkIdle   time.Duration // A's node.Options.CheckIdle; 0 = the library's default (100ms)
	pooled      bool          // A's node.Options.Pooled: a pooled connection per call (for diagnosis)
	// goredisCtxTimeout turns E's ContextTimeoutEnabled on: go-redis then
	// bounds reads and writes by each call's deadline (and drops the
	// connection of a reply that missed it) instead of the nodes bounding
	// calls from goroutines of their own.
	goredisCtxTimeout bool
	// stats, when set, gives A counting hooks (redlock.WithHooks): node
	// calls by node and outcome, breaker changes. Nil in the direct pass,
	// which measures the library as configured by default.
	stats *ourStats
}

func hostPort(u string) string { return strings.TrimPrefix(u, "redis://") }

// contenderIDs are the contenders, in the order of every result slice
// (res, per, ds ...): A first; the floor, D, at floorIdx.
var contenderIDs = []string{"A", "B", "C", "D", "E"}

// floorIdx is the raw floor's (D's) index in contenderIDs and in every
// result slice: the contender every ratio is relative to.
var floorIdx = slices.Index(contenderIDs, "D")

// makeContender returns a fresh instance of contender id (own pools, no
// connection yet).
func makeContender(id string, urls []string, s setup) (*contender, error) {
	switch id {
	case "A":
		return newOurs(urls, s)
	case "B":
		return newRedsync(urls, s, false), nil
	case "C":
		return newRedsync(urls, s, true), nil
	case "D":
		return newRaw(urls, s)
	case "E":
		return newOursGoredis(urls, s)
	}
	return nil, fmt.Errorf("no contender %q", id)
}

func makeContenders(urls []string, s setup) ([]*contender, error) {
	var out []*contender
	for _, id := range contenderIDs {
		c, err := makeContender(id, urls, s)
		if err != nil {
			for _, o := range out {
				_ = o.close()
			}
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// primeScripts runs one lock+unlock cycle of every contender on urls.
func (b *bench) primeScripts(urls []string) error {
	cons, err := makeContenders(urls, b.p.setup)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cons {
			_ = c.close()
		}
	}()
	for _, c := range cons {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		w := c.newWorker()
		err := w.Lock(ctx, "bench:prime:"+c.id)
		if err == nil {
			err = w.Unlock(ctx)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", c.id, err)
		}
	}
	return nil
}

// --- A: this library -------------------------------------------------------

type ourWorker struct {
	c *redlock.Client
	l *redlock.Lock
}

func (w *ourWorker) Lock(ctx context.Context, key string) error {
	l, err := w.c.Lock(ctx, key)
	w.l = l
	return err
}

func (w *ourWorker) Unlock(ctx context.Context) error {
	err := w.l.Unlock(ctx)
	w.l = nil
	return err
}

// maxNodes bounds the node indices ourStats keeps.
const maxNodes = 8

// ourStats counts, through A's hooks, what its node calls did and how its
// per-node circuit breakers moved. The hooks are an atomic add each: one
// NodeCall per node per command, one Breaker per change of state.
type ourStats struct {
	ok, timeout, skipped, other [maxNodes]atomic.Int64 // node calls by outcome
	opened, closed              [maxNodes]atomic.Int64 // breaker changes to open / to closed
}

// callStats is a snapshot of ourStats for one node.
type callStats struct {
	ok, timeout, skipped, other int64
	opened, closed              int64
}

func (c callStats) sub(o callStats) callStats {
	return callStats{c.ok - o.ok, c.timeout - o.timeout, c.skipped - o.skipped, c.other - o.other, c.opened - o.opened, c.closed - o.closed}
}

func (s *ourStats) node(i int) callStats {
	if s == nil || i < 0 || i >= maxNodes {
		return callStats{}
	}
	return callStats{s.ok[i].Load(), s.timeout[i].Load(), s.skipped[i].Load(), s.other[i].Load(), s.opened[i].Load(), s.closed[i].Load()}
}

func (s *ourStats) hooks() redlock.Hooks {
	return redlock.Hooks{
		NodeCall: func(ci redlock.NodeCallInfo) {
			if ci.Node < 0 || ci.Node >= maxNodes {
				return
			}
			switch {
			case ci.Err == nil:
				s.ok[ci.Node].Add(1)
			case errors.Is(ci.Err, node.ErrCircuitOpen):
				s.skipped[ci.Node].Add(1)
			case errors.Is(ci.Err, node.ErrTimeout):
				s.timeout[ci.Node].Add(1)
			default:
				s.other[ci.Node].Add(1)
			}
		},
		Breaker: func(bc redlock.BreakerChange) {
			if bc.Node < 0 || bc.Node >= maxNodes {
				return
			}
			switch bc.To {
			case redlock.BreakerOpen:
				s.opened[bc.Node].Add(1)
			case redlock.BreakerClosed:
				s.closed[bc.Node].Add(1)
			}
		},
	}
}

func newOurs(urls []string, s setup) (*contender, error) {
	opts := []redlock.Option{
		redlock.WithTTL(s.ttl),
		redlock.WithNodeOptions(node.Options{MaxIdle: s.pool, MaxActive: s.pool, Timeout: s.sockTimeout, CheckIdle: s.checkIdle, Pooled: s.pooled}),
	}
	if s.stats != nil {
		opts = append(opts, redlock.WithHooks(s.stats.hooks()))
	}
	if s.nodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(s.nodeTimeout))
	}
	c, err := redlock.Dial(urls, opts...)
	if err != nil {
		return nil, err
	}
	return &contender{
		id: "A", name: "quorumlock/redlock",
		newWorker: func() worker { return &ourWorker{c: c} },
		close:     c.Close,
	}, nil
}

// --- E: this library over go-redis nodes ----------------------------------

// newOursGoredis is A with goredis nodes over go-redis clients in place of
// the library's redigo nodes, set up like A's as far as go-redis allows:
// the same pool size and socket timeouts, the node timeout bounding calls
// without a deadline, every command sent once (redigo retries nothing:
// MaxRetries -1) and every dial tried once, no round trip on a new
// connection beyond HELLO (DisableIdentity, maintenance notifications
// off). ContextTimeoutEnabled stays off (go-redis' default, unless
// -goredis-ctx-timeout): the nodes bound each call from a goroutine and
// go-redis reads a late reply in the background and keeps the connection,
// as A's nodes do; with it, go-redis closes the connection of every reply
// that misses its deadline. go-redis has no CheckIdle: it checks an idle
// connection by a non-blocking read of its socket instead of a PING. With
// stats set, E gets counting hooks of its own, so that it pays what A
// pays for them.
func newOursGoredis(urls []string, s setup) (*contender, error) {
	clients := make([]goredislib.UniversalClient, len(urls))
	closeClients := func() error {
		var errs []error
		for _, c := range clients {
			if c != nil {
				errs = append(errs, c.Close())
			}
		}
		return errors.Join(errs...)
	}
	nodes := make([]node.Node, len(urls))
	for i, u := range urls {
		c := goredislib.NewClient(&goredislib.Options{
			Addr:                  hostPort(u),
			PoolSize:              s.pool,
			MaxIdleConns:          s.pool,
			ConnMaxIdleTime:       5 * time.Minute,
			DialTimeout:           s.sockTimeout,
			ReadTimeout:           s.sockTimeout,
			WriteTimeout:          s.sockTimeout,
			ContextTimeoutEnabled: s.goredisCtxTimeout,
			MaxRetries:            -1,
			DialerRetries:         1,
			DisableIdentity:       true,
			MaintNotificationsConfig: &maintnotifications.Config{
				Mode: maintnotifications.ModeDisabled,
			},
		})
		clients[i] = c
		nodes[i] = goredis.NewWithOptions(c, goredis.Options{Timeout: s.sockTimeout})
	}
	opts := []redlock.Option{redlock.WithTTL(s.ttl)}
	if s.stats != nil {
		opts = append(opts, redlock.WithHooks(new(ourStats).hooks()))
	}
	if s.nodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(s.nodeTimeout))
	}
	c, err := redlock.New(nodes, opts...)
	if err != nil {
		_ = closeClients()
		return nil, err
	}
	return &contender{
		id: "E", name: "quorumlock/redlock over go-redis",
		newWorker: func() worker { return &ourWorker{c: c} },
		close: func() error {
			err := c.Close() // first: it waits for the calls still running
			return errors.Join(err, closeClients())
		},
	}, nil
}

// --- B, C: go-redsync with its redigo driver -------------------------------

// redigoPool is the pool every redigo-based contender uses: the same sizes
// and socket timeouts as node.Redis builds for A.
func redigoPool(addr string, s setup) *redis.Pool {
	return &redis.Pool{
		MaxIdle:     s.pool,
		MaxActive:   s.pool,
		IdleTimeout: 5 * time.Minute,
		Wait:        true,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr,
				redis.DialConnectTimeout(s.sockTimeout),
				redis.DialReadTimeout(s.sockTimeout),
				redis.DialWriteTimeout(s.sockTimeout))
		},
	}
}

var errNotUnlocked = errors.New("redsync: unlock did not reach a quorum")

type redsyncWorker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
	m    *redsync.Mutex
}

func (w *redsyncWorker) Lock(ctx context.Context, key string) error {
	m := w.rs.NewMutex(key, w.opts...)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	w.m = m
	return nil
}

func (w *redsyncWorker) Unlock(ctx context.Context) error {
	ok, err := w.m.UnlockContext(ctx)
	w.m = nil
	if err == nil && !ok {
		err = errNotUnlocked
	}
	return err
}

func newRedsync(urls []string, s setup, failFast bool) *contender {
	pools := make([]*redis.Pool, len(urls))
	rp := make([]rsredis.Pool, len(urls))
	for i, u := range urls {
		pools[i] = redigoPool(hostPort(u), s)
		rp[i] = rsredigo.NewPool(pools[i])
	}
	rs := redsync.New(rp...)
	// Default options except the TTL (redsync's default expiry is 8s).
	opts := []redsync.Option{redsync.WithExpiry(s.ttl)}
	id, name := "B", "go-redsync (default)"
	if failFast {
		opts = append(opts, redsync.WithFailFast(true))
		id, name = "C", "go-redsync (WithFailFast)"
	}
	return &contender{
		id: id, name: name,
		newWorker: func() worker { return &redsyncWorker{rs: rs, opts: opts} },
		close:     func() error { return closePools(pools) },
	}
}

func closePools(pools []*redis.Pool) error {
	var errs []error
	for _, p := range pools {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// --- D: the raw floor ------------------------------------------------------

const releaseSrc = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`

var releaseSHA = redis.NewScript(1, releaseSrc).Hash()

// raw is the least a Redlock client can do: SET NX PX to every node in
// parallel, return at a majority; compare-and-delete by EVALSHA in
// parallel, return at a majority; one context and one deadline per
// fan-out, DoWithTimeout per call. Calls still running when the majority
// is in finish in the background within the deadline. It checks validity
// (TTL - elapsed - drift) like a real client, rolls back a failed attempt
// and retries with the same backoff as A's default (full jitter, 10ms to
// 500ms, 32 attempts), but does no late clean-up and keeps no per-node
// report.
type raw struct {
	pools   []*redis.Pool
	tags    []string // per node, a hash tag put before the key (a cluster's copies placed by hand); nil: none
	quorum  int
	timeout time.Duration
	ttl     time.Duration
	ttlMS   int64
	bg      sync.WaitGroup
}

type fan struct {
	ch     chan bool
	left   atomic.Int32
	cancel context.CancelFunc
}

func newRaw(urls []string, s setup) (*contender, error) {
	r := &raw{quorum: len(urls)/2 + 1, timeout: s.rawTimeout, ttl: s.ttl, ttlMS: s.ttl.Milliseconds()}
	// No network here (a node may be blackholed): the script is loaded
	// once per node by the harness, and EVAL stands in on NOSCRIPT.
	for _, u := range urls {
		r.pools = append(r.pools, redigoPool(hostPort(u), s))
	}
	return &contender{
		id: "D", name: "raw floor (redigo)",
		newWorker: func() worker { return &rawWorker{r: r} },
		close: func() error {
			r.bg.Wait()
			return closePools(r.pools)
		},
	}, nil
}

func (r *raw) fanout(release bool, key, token string) int {
	n := len(r.pools)
	f := &fan{ch: make(chan bool, n)}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	f.cancel = cancel
	f.left.Store(int32(n))
	r.bg.Add(n)
	for i := range r.pools {
		go r.call(ctx, f, i, release, key, token)
	}
	ok, bad := 0, 0
	for ok < r.quorum && bad <= n-r.quorum {
		if <-f.ch {
			ok++
		} else {
			bad++
		}
	}
	return ok
}

func (r *raw) call(ctx context.Context, f *fan, i int, release bool, key, token string) {
	defer r.bg.Done()
	ok := r.one(ctx, i, release, key, token)
	if f.left.Add(-1) == 0 {
		f.cancel()
	}
	f.ch <- ok
}

func (r *raw) one(ctx context.Context, i int, release bool, key, token string) bool {
	if r.tags != nil {
		key = r.tags[i] + key
	}
	conn, err := r.pools[i].GetContext(ctx)
	if err != nil {
		return false
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	left := time.Until(dl)
	if left <= 0 {
		return false
	}
	if !release {
		v, err := redis.DoWithTimeout(conn, left, "SET", key, token, "NX", "PX", r.ttlMS)
		return err == nil && v == "OK"
	}
	v, err := redis.DoWithTimeout(conn, left, "EVALSHA", releaseSHA, 1, key, token)
	if e, ok := err.(redis.Error); ok && strings.HasPrefix(string(e), "NOSCRIPT") {
		v, err = redis.DoWithTimeout(conn, time.Until(dl), "EVAL", releaseSrc, 1, key, token)
	}
	return err == nil && v == int64(1)
}

type rawWorker struct {
	r          *raw
	key, token string
}

var errRawNotAcquired = errors.New("raw: lock not acquired")

func (w *rawWorker) Lock(ctx context.Context, key string) error {
	r := w.r
	for attempt := 1; ; attempt++ {
		token := newToken()
		start := time.Now()
		ok := r.fanout(false, key, token)
		validity := r.ttl - time.Since(start) - (r.ttl/100 + 2*time.Millisecond)
		if ok >= r.quorum && validity > 0 {
			w.key, w.token = key, token
			return nil
		}
		r.fanout(true, key, token) // roll back
		if attempt >= 32 {
			return errRawNotAcquired
		}
		ceil := min(10*time.Millisecond<<(attempt-1), 500*time.Millisecond)
		t := time.NewTimer(time.Duration(mrand.Int64N(int64(ceil) + 1)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

var errRawNotReleased = errors.New("raw: unlock did not reach a quorum")

func (w *rawWorker) Unlock(ctx context.Context) error {
	if w.r.fanout(true, w.key, w.token) < w.r.quorum {
		return errRawNotReleased
	}
	return nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
