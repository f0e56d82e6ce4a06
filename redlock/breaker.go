package redlock

import (
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/node"
)

// Breaker configures the circuit breaker a client keeps for each node.
// After Failures calls in a row fail in a way that can only mean the node
// is down or cut off (a timeout, a refused or reset connection), over at
// least Span, the node is skipped: its calls fail at once with node.ErrCircuitOpen, with no
// goroutine, timer or connection attempt, and count as failures in the
// quorum, as the calls they replace would have. After a cooldown one
// probe call is let through; its success closes the breaker, its failure
// opens it again for twice the cooldown, up to MaxCooldown. An answer
// ("taken", "absent") or a refusal that retrying cannot change (bad
// credentials, TLS, not Redis) never counts as a failure, nor does a
// timeout of a node that is slow but answering: one whose late replies
// came in within the last two node timeouts (node.LateAnswerer; the
// redigo node tells). A lock whose
// commands never reached a skipped node is not released there either: it
// has no key to release. A lock that did send a command there before the
// breaker opened (or whose acquire is the probe) still sends its release,
// once. Safety does not change: a skipped node is a failed node. The zero
// value of each field picks the default in its comment.
type Breaker struct {
	// Failures is how many calls in a row must fail before the node is
	// skipped. Default 3; negative disables the breaker.
	Failures int
	// Span is how long the run of failures must last, from the first
	// failed call's end to the last's, before the node is skipped. Calls
	// that time out together — everything in flight when this process
	// stalled (GC, a busy two-core host) or the node hiccupped once —
	// end within moments of each other and so do not open the breaker
	// on their own; a node that is down keeps failing and does. Default
	// twice the client's node timeout (100ms for the default 10s TTL),
	// since one burst of timeouts ends within about one node timeout;
	// negative: no span, Failures alone decide.
	Span time.Duration
	// Cooldown is how long the node is skipped after the breaker opens,
	// before one probe call. Default 1s.
	Cooldown time.Duration
	// MaxCooldown caps the cooldown, which doubles with each failed
	// probe. Default 30s.
	MaxCooldown time.Duration
}

func (b Breaker) withDefaults() Breaker {
	if b.Failures == 0 {
		b.Failures = 3
	}
	if b.Cooldown <= 0 {
		b.Cooldown = time.Second
	}
	if b.MaxCooldown <= 0 {
		b.MaxCooldown = 30 * time.Second
	}
	b.MaxCooldown = max(b.MaxCooldown, b.Cooldown)
	return b
}

// BreakerState is the state of one node's circuit breaker.
type BreakerState uint8

const (
	// BreakerClosed: calls go to the node.
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls to the node fail at once.
	BreakerOpen
	// BreakerHalfOpen: one probe call is in flight; others fail at once.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	return [...]string{"closed", "open", "half-open"}[s]
}

// breaker is one node's circuit breaker. Its arithmetic takes the time
// as an argument, so it runs on the client's clock.
type breaker struct {
	cfg Breaker // with defaults; never changed

	mu       sync.Mutex // guards everything below; never held across I/O
	state    BreakerState
	failures int           // consecutive down-failures while closed
	first    time.Time     // when the first of them ended
	cooldown time.Duration // of the current or next open period
	reopen   time.Time     // open: when a probe may go
	gen      uint64        // counts state changes; results of older calls are dropped
}

func newBreaker(cfg Breaker) *breaker {
	cfg = cfg.withDefaults()
	return &breaker{cfg: cfg, cooldown: cfg.Cooldown}
}

// transition is a change of state that allow or done made, for hooks and
// logs; from == to means none.
type transition struct{ from, to BreakerState }

// allow reports whether a call may go to the node at now, and the
// generation to hand back to done. It moves an open breaker whose
// cooldown is over to half-open, letting this one call through as the
// probe.
func (b *breaker) allow(now time.Time) (ok bool, gen uint64, t transition) {
	if b == nil {
		return true, 0, t
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t.from = b.state
	switch b.state {
	case BreakerOpen:
		if now.Before(b.reopen) {
			return false, 0, transition{t.from, t.from}
		}
		b.setState(BreakerHalfOpen)
	case BreakerHalfOpen:
		return false, 0, transition{t.from, t.from}
	}
	t.to = b.state
	return true, b.gen, t
}

// done records the outcome of a call that allow let through: down means
// it failed in a way that says the node is down. A result from before the
// last change of state is ignored.
func (b *breaker) done(now time.Time, gen uint64, down bool) (t transition) {
	if b == nil {
		return t
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t.from = b.state
	if gen == b.gen {
		switch {
		case !down:
			b.failures = 0
			if b.state == BreakerHalfOpen {
				b.cooldown = b.cfg.Cooldown
				b.setState(BreakerClosed)
			}
		case b.state == BreakerHalfOpen:
			b.cooldown = min(2*b.cooldown, b.cfg.MaxCooldown)
			b.open(now)
		default:
			if b.failures++; b.failures == 1 {
				b.first = now
			}
			if b.failures >= b.cfg.Failures && now.Sub(b.first) >= b.cfg.Span {
				b.open(now)
			}
		}
	}
	t.to = b.state
	return t
}

// unsent records that a call allow let through was never sent (the
// node had not answered the lock's previous command): it says nothing of
// the node, so a run of failures goes on and a success is not implied.
// An unsent probe hands the probe on: the breaker is open again with its
// cooldown over, so that the next call probes.
func (b *breaker) unsent(now time.Time, gen uint64) (t transition) {
	if b == nil {
		return t
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t.from = b.state
	if gen == b.gen && b.state == BreakerHalfOpen {
		b.reopen = now
		b.setState(BreakerOpen)
	}
	t.to = b.state
	return t
}

func (b *breaker) open(now time.Time) {
	b.failures = 0
	b.reopen = now.Add(b.cooldown)
	b.setState(BreakerOpen)
}

func (b *breaker) setState(s BreakerState) {
	b.state = s
	b.gen++
}

// nodeDown reports whether err can only mean that the node is down or
// cut off: a timeout, a refused connection, a connection reset or closed
// under the call. A refusal the node answered (bad credentials, an error
// reply), a TLS or protocol failure, and a command that was not sent
// because the node had not answered the previous one (that earlier call
// counts for itself) do not.
func nodeDown(err error) bool {
	switch {
	case err == nil, errors.Is(err, errPrevPending):
		return false
	case errors.Is(err, node.ErrTimeout), errors.Is(err, node.ErrUnreachable),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}
