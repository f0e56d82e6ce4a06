package redlock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
)

// Defaults. Each option's comment repeats the one it governs.
const (
	DefaultTTL         = 10 * time.Second
	DefaultDriftFactor = 0.01
	DefaultExtendAfter = 1.0 / 3
)

// config is everything an Option can set; a Client keeps one and every
// Lock call works on a copy that its options may change.
type config struct {
	ttl         time.Duration
	driftFactor float64
	nodeTimeout time.Duration // 0: derived from ttl, see timeout
	retry       RetryStrategy
	maxWait     time.Duration // Lock gives up after this long; 0: no limit
	quorum      int           // 0: majority; checked against N in newClient
	copies      int           // DialCluster's copies per lock (WithCopies); 0: its default
	prefix      string
	logger      *slog.Logger
	clock       clock.Clock
	nodeOptions node.Options
	keep        keepPolicy
	hooks       Hooks
	breaker     Breaker
	quiet       bool // release notifications off
	mode             // the kind of hold (mode.go); WithFencing sets fenced for a client or a call
	// only names the last option applied that configures a client as a
	// whole; a Lock, TryLock or Do call refuses such an option.
	only string
}

// keepPolicy is how KeepAlive keeps a lock (see the options that set it).
type keepPolicy struct {
	extendAfter float64       // share of the TTL after the last success
	margin      time.Duration // the job context ends this long before Until
	maxHold     time.Duration // 0: no bound
}

func defaults() config {
	return config{
		ttl:         DefaultTTL,
		driftFactor: DefaultDriftFactor,
		retry:       DefaultRetry(),
		logger:      slog.New(slog.DiscardHandler),
		clock:       clock.Real{},
		keep:        keepPolicy{extendAfter: DefaultExtendAfter},
	}
}

// Option configures a Client in New or Dial, where it sets the default
// for every lock, or one Lock, TryLock or Do call, where it overrides the
// client's setting for that call only. Options that configure the client
// as a whole (its nodes, quorum, clock, logger, hooks, breaker, key
// prefix, notifications) say so; given to a single call they make it
// fail with ErrInvalid.
type Option func(*config)

// clientOnly marks an option that configures the client as a whole.
func clientOnly(name string, set func(*config)) Option {
	return func(c *config) {
		set(c)
		c.only = name
	}
}

// WithTTL sets how long a lock lives on the nodes unless extended.
// Default 10s (DefaultTTL). Unless a node timeout is set, the per-node
// timeout is derived from it. Must be a whole number of milliseconds
// (Redis' PX unit) and long enough that a lock taken with it can ever be
// valid: above its drift allowance (TTL×factor + 2ms, see
// WithDriftFactor) plus 1ms, the floor this package counts for a node
// call (Redis' expiry precision). That is TTL×(1−factor) > 3ms: at
// least 4ms with the default drift factor, and never more than 7ms. A
// shorter TTL is ErrInvalid, at New and Dial and for one call, and
// nothing is sent.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithDriftFactor sets the share of the TTL given up for clock drift
// between the client and the nodes: validity = TTL − elapsed − (TTL×factor
// + 2ms). Default 0.01 (DefaultDriftFactor). Must be in [0, 0.5). Raise it
// if node clocks may run faster than the client's by more than that share
// over one TTL.
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// WithNodeTimeout bounds each command on each node: connecting, writing
// and reading. Default: per node, adapted to its measured round trips
// (smoothed round trip plus four deviations, doubled after a timeout whose
// reply came in late), never below TTL/200 clamped to [20ms, 250ms] (50ms
// for the default 10s TTL, 20ms for 2s; a TTL under 80ms gets a quarter
// of it) and never above TTL/20 (at most 1s). A set value is used as is,
// for every node. A
// node slower than this counts as failed for that call. 0 picks the
// default (so a config value left unset can be passed as is); otherwise
// it must be > 0 and below the TTL. Nodes made by Dial apply it also
// when it is above their own node.Options.Timeout; nodes given to New
// bound each call by the sooner of it and their own timeout.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// WithRetry sets the strategy Lock (and Do) use between attempts. Default
// DefaultRetry(): exponential backoff with full jitter from 10ms to
// 500ms, as many attempts as it takes (release notifications cut the
// waits short). TryLock never retries.
func WithRetry(s RetryStrategy) Option { return func(c *config) { c.retry = s } }

// WithMaxWait bounds how long Lock (and Do) wait for the lock: once d has
// passed since the call began, the first attempt that fails ends it with
// ErrNotAcquired (a *QuorumError), and no retry delay runs past d. A
// waiter behind a lock that keeps moving between other holders is not
// failed by a count of attempts, only by this limit, its context or its
// retry strategy. Default 0: no limit; the context bounds the wait.
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }

// WithQuorum requires q nodes instead of a majority. Default: N/2+1 of the
// configured nodes; 0 picks the default. Otherwise q must be in
// [N/2+1, N]: a smaller quorum would let two clients hold the lock at
// once.
func WithQuorum(q int) Option { return clientOnly("WithQuorum", func(c *config) { c.quorum = q }) }

// WithKeyPrefix is prepended to every key given to Lock and TryLock.
// Default "" (none). Lock.Key returns the key with the prefix.
func WithKeyPrefix(p string) Option {
	return clientOnly("WithKeyPrefix", func(c *config) { c.prefix = p })
}

// WithLogger sets where the client logs: a warning for an even node count,
// debug lines for failed attempts and late clean-ups. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return clientOnly("WithLogger", func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// WithClock sets the client's time source. Default clock.Real (monotonic).
// Tests and drift experiments inject a clock.Fake or a skewed clock.
func WithClock(clk clock.Clock) Option {
	return clientOnly("WithClock", func(c *config) {
		if clk != nil {
			c.clock = clk
		}
	})
}

// WithNodeOptions sets how nodes made by Dial connect (timeouts, TLS,
// one shared connection per node or a pool). Default: node.Options{}
// (see its fields). New ignores it.
func WithNodeOptions(o node.Options) Option {
	return clientOnly("WithNodeOptions", func(c *config) { c.nodeOptions = o })
}

// WithFencing makes locks carry a fencing token, (*Lock).Fence: a number
// that is larger for every later grant of the same key, by any client,
// for storage to reject writes of a holder that outlived its lock. Given
// to New or Dial, every lock of the client is fenced; given to one call,
// that lock. Default off. It costs a second round trip to the nodes in
// the acquire (none for a waiter the holder's release grants the lock
// to, with the fence it proposed: docs/FENCING.md), and the nodes keep a
// counter per key (node.FenceKey) for a day after its last grant. Every node must implement node.Fencer (the
// redigo nodes of Dial do).
func WithFencing() Option { return func(c *config) { c.fenced = true } }

// WithExtendAfter sets when KeepAlive extends the lock: once this share
// of the TTL has passed since the last successful acquire or extend.
// Default 1/3 (DefaultExtendAfter), as etcd sessions and Redisson's
// watchdog: two more tries fit in the validity if one fails. Must be in
// (0, 1).
func WithExtendAfter(share float64) Option {
	return func(c *config) { c.keep.extendAfter = share }
}

// WithLostMargin makes KeepAlive end the job context this long before
// Until() when no extend has succeeded in time, so that the job can wind
// down while the lock still holds. Default 0: the context ends at Until(),
// the end of the validity (which already allows for clock drift). Must be
// >= 0 and below the TTL.
func WithLostMargin(d time.Duration) Option { return func(c *config) { c.keep.margin = d } }

// WithMaxHold bounds how long KeepAlive keeps the lock, counted from the
// start of the acquisition: past it, no more extends are sent and the job
// context ends with ErrLost. Default 0: no bound. The Redlock description
// asks to bound extensions so that a stuck job cannot hold a lock forever.
func WithMaxHold(d time.Duration) Option { return func(c *config) { c.keep.maxHold = d } }

// timeout returns the per-node timeout in force.
func (c *config) timeout() time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
	}
	return defaultNodeTimeout(c.ttl)
}

// maxTimeout is the longest a node's call may take: the node timeout when
// one is set; otherwise the bound of the adaptive timeouts (see rto.go), a
// twentieth of the TTL, at most 1s, and never below the default.
func (c *config) maxTimeout() time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
	}
	return max(c.timeout(), min(c.ttl/20, time.Second))
}

// check validates everything but the node list.
func (c *config) check() error {
	if c.driftFactor < 0 || c.driftFactor >= 0.5 || c.driftFactor != c.driftFactor {
		return fmt.Errorf("%w: drift factor must be in [0, 0.5), got %v", ErrInvalid, c.driftFactor)
	}
	if err := checkTTL(c.ttl, c.driftFactor); err != nil {
		return err
	}
	switch {
	case c.nodeTimeout < 0:
		return fmt.Errorf("%w: node timeout must be > 0 (or 0 for the default), got %v", ErrInvalid, c.nodeTimeout)
	case c.quorum < 0:
		return fmt.Errorf("%w: quorum must be > 0 (or 0 for the default, a majority), got %d", ErrInvalid, c.quorum)
	case c.timeout() >= c.ttl:
		return fmt.Errorf("%w: node timeout %v must be below the TTL %v", ErrInvalid, c.timeout(), c.ttl)
	case c.retry == nil:
		return fmt.Errorf("%w: nil retry strategy", ErrInvalid)
	case c.maxWait < 0:
		return fmt.Errorf("%w: negative max wait %v", ErrInvalid, c.maxWait)
	case !(c.keep.extendAfter > 0 && c.keep.extendAfter < 1):
		return fmt.Errorf("%w: ExtendAfter must be in (0, 1), got %v", ErrInvalid, c.keep.extendAfter)
	case c.keep.margin < 0 || c.keep.margin >= c.ttl:
		return fmt.Errorf("%w: LostMargin %v must be in [0, TTL %v)", ErrInvalid, c.keep.margin, c.ttl)
	case c.keep.maxHold < 0:
		return fmt.Errorf("%w: MaxHold must be >= 0, got %v", ErrInvalid, c.keep.maxHold)
	}
	return nil
}

// nodeCallFloor is the least time this package counts for a round of
// node calls when it decides whether a TTL can ever give a lock: Redis
// expires keys to the millisecond, and no round trip to a node is free.
const nodeCallFloor = time.Millisecond

// checkTTL accepts a TTL in whole milliseconds that can give a positive
// validity with drift factor f: Redis takes PX in milliseconds, and a
// TTL rounded down on its way to the node would make keys expire before
// the validity computed from it; a TTL within its drift allowance plus
// nodeCallFloor would be refused by every attempt after writing its keys.
func checkTTL(ttl time.Duration, f float64) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: TTL must be > 0, got %v", ErrInvalid, ttl)
	case ttl%time.Millisecond != 0:
		return fmt.Errorf("%w: TTL must be a whole number of milliseconds (Redis PX), got %v", ErrInvalid, ttl)
	case clock.Validity(ttl, nodeCallFloor, f) <= 0:
		return fmt.Errorf("%w: TTL %v can never be valid: it must exceed its drift allowance %v plus %v for the node calls (at least %v with drift factor %v)",
			ErrInvalid, ttl, clock.Drift(ttl, f), nodeCallFloor, minTTL(f), f)
	}
	return nil
}

// minTTL is the shortest TTL checkTTL accepts with drift factor f (f in
// [0, 0.5): at most 7ms, as TTL×(1−f) > 3ms).
func minTTL(f float64) time.Duration {
	ttl := time.Millisecond
	for clock.Validity(ttl, nodeCallFloor, f) <= 0 {
		ttl += time.Millisecond
	}
	return ttl
}

// defaultNodeTimeout is the node timeout for ttl when none is set: TTL/200
// (the Redlock description suggests 5-50ms for 10s), at least 20ms —
// below that, a loaded host's scheduling delays alone fail calls, and a
// failed release blocks the lock for everyone until the TTL — but at most
// a quarter of a TTL under 80ms, and at most 250ms.
func defaultNodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/200, min(20*time.Millisecond, ttl/4)), 250*time.Millisecond)
}
