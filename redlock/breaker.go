package redlock

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/node"
)

// Breaker configures the circuit breaker a client keeps for each node.
// It counts a node's calls that fail in a way that can only mean the node
// is down or cut off (a timeout, a refused or reset connection) from the
// first such failure on, together with the calls that succeed meanwhile;
// the count starts over once the successes outnumber the failures or
// Window passes without a failure. When Failures of them are counted and
// the failures are at least as many as the successes, the node is
// skipped: its calls fail at once with node.ErrCircuitOpen, with no
// goroutine, timer or connection attempt, and count as failures in the
// quorum, as the calls they replace would have. So a node that fails most
// of its calls is skipped even when some succeed in between (a flapping
// link), and a busy node's occasional timeouts among many answers never
// open it. After a cooldown one probe call is let through; its success
// closes the breaker, its failure opens it again for twice the cooldown,
// up to MaxCooldown. An answer ("taken", "absent") or a refusal that
// retrying cannot change (bad credentials, TLS, not Redis) never counts as
// a failure, nor does a timeout of a node that is slow but answering: one
// whose late replies came in within the last two node timeouts
// (node.LateAnswerer; the redigo node tells). A lock whose commands never
// reached a skipped node is not released there either: it has no key to
// release. A lock that did send a command there before the breaker opened
// (or whose acquire is the probe) still sends its release, once; a
// release or Leave that failed there is finished in the background past
// the breaker, one call at a time per node at most every node timeout
// while the node looks down (see finishQueued),
// and the first the node answers closes the breaker (the node is back):
// otherwise its key would block the lock for a whole cooldown after the
// node came back. Safety does not change: a skipped node is a failed
// node. The zero value of
// each field picks the default in its comment.
type Breaker struct {
	// Failures is how many failures open the breaker. Default 3;
	// negative disables the breaker.
	Failures int
	// Window is how long the breaker remembers failures after the last
	// one. Default 10s.
	Window time.Duration
	// Span: failures that end within Span of the last one counted count
	// once towards Failures (though each counts against the successes).
	// Calls that time out together — everything in flight when this
	// process stalled (GC, a busy two-core host) or the node hiccupped
	// once — end within moments of each other and so do not open the
	// breaker on their own; a node that is down keeps failing and does,
	// after (Failures-1)*Span. Default twice the client's node timeout
	// (100ms for the default 10s TTL), since one burst of timeouts ends
	// within about one node timeout; negative: every failure counts.
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
	if b.Window <= 0 {
		b.Window = 10 * time.Second
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
	fails    int           // closed: down-failures since the count started; 0: no count
	oks      int           // successes since then
	counted  int           // failures counted towards cfg.Failures (Span apart)
	last     time.Time     // when the last failure ended
	lastSpan time.Time     // when the last counted one ended
	cooldown time.Duration // of the current or next open period
	reopen   time.Time     // open: when a probe may go
	gen      uint64        // counts state changes; results of older calls are dropped

	// quiet is gen+1 while the breaker is closed with no failure
	// counted, else 0; written under mu, read without it: a healthy
	// node's calls are let through and their successes recorded
	// without the lock or the clock (see quick and quickDone).
	quiet atomic.Uint64
}

func newBreaker(cfg Breaker) *breaker {
	cfg = cfg.withDefaults()
	b := &breaker{cfg: cfg, cooldown: cfg.Cooldown}
	b.quiet.Store(1)
	return b
}

// quick is allow for a quiet breaker: ok and the generation, without the
// lock or the time; ok false means ask allow.
func (b *breaker) quick() (ok bool, gen uint64) {
	if q := b.quiet.Load(); q != 0 {
		return true, q - 1
	}
	return false, 0
}

// quickDone reports whether a success of a call let through at gen
// changes nothing: the breaker is still quiet, at gen. Otherwise ask done.
func (b *breaker) quickDone(gen uint64) bool { return b.quiet.Load() == gen+1 }

// settle updates quiet after a change; the caller holds b.mu.
func (b *breaker) settle() {
	if b.state == BreakerClosed && b.fails == 0 {
		b.quiet.Store(b.gen + 1)
	} else {
		b.quiet.Store(0)
	}
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
	defer b.settle()
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
	defer b.settle()
	t.from = b.state
	if gen == b.gen {
		switch {
		case !down:
			if b.fails > 0 {
				if b.oks++; b.oks > b.fails {
					b.fails = 0
				}
			}
			if b.state == BreakerHalfOpen {
				b.close()
			}
		case b.state == BreakerHalfOpen:
			b.cooldown = min(2*b.cooldown, b.cfg.MaxCooldown)
			b.open(now)
		case b.trips(now):
			b.open(now)
		}
	}
	t.to = b.state
	return t
}

// trips counts a down-failure that ended at now while closed and reports
// whether the breaker opens.
func (b *breaker) trips(now time.Time) bool {
	if b.fails == 0 || now.Sub(b.last) > b.cfg.Window {
		b.fails, b.oks, b.counted = 0, 0, 0
	}
	b.fails++
	b.last = now
	if b.counted == 0 || now.Sub(b.lastSpan) >= b.cfg.Span {
		b.counted++
		b.lastSpan = now
	}
	return b.counted >= b.cfg.Failures && b.fails >= b.oks
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
	defer b.settle()
	t.from = b.state
	if gen == b.gen && b.state == BreakerHalfOpen {
		b.reopen = now
		b.setState(BreakerOpen)
	}
	t.to = b.state
	return t
}

// answered records that the node answered a call that allow did not let
// through (a background repair, see Client.repaired): an open or
// half-open breaker closes, as after a probe that succeeded, its
// cooldown back at the start.
func (b *breaker) answered() (t transition) {
	if b == nil {
		return t
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.settle()
	t.from = b.state
	if b.state != BreakerClosed {
		b.close()
	}
	t.to = b.state
	return t
}

// close closes the breaker after the node answered a probe, or a call
// past it (answered): no failure counted, the cooldown back at the start.
func (b *breaker) close() {
	b.fails = 0
	b.cooldown = b.cfg.Cooldown
	b.setState(BreakerClosed)
}

func (b *breaker) open(now time.Time) {
	b.fails = 0
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
