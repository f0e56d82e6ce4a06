package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/quorumlock/redlock/redlock"
)

// The election pass (issue 45) measures this library's elections against
// its own locks in the same run, on the direct nodes: a Campaign of an
// idle election against a fenced Lock, the handover after Resign against
// a lock's handoff between two clients, and Observe's delay after a
// change. Its scenario id for -scenarios is "election".

// electionRes is the election pass' outcome.
type electionRes struct {
	samples int
	// Uncontended: the call alone (Campaign, Lock with fencing), one
	// goroutine, a distinct name per cycle, the two interleaved.
	campaign, fencedLock hist
	// Handover: from the holder's Resign (Unlock) call to the waiter's
	// Campaign (Lock) returning, two clients taking turns.
	handover, lockHandoff, fencedHandoff hist
	// Observe: from Proclaim's return to the observer's receipt.
	observe hist
	misses  int // Proclaims Observe did not report within a second
}

// electionPass runs the pass on urls.
func (b *bench) electionPass(urls []string) (*electionRes, error) {
	r := &electionRes{samples: 200}
	if b.p.quick {
		r.samples = 50
	}
	ca, err := b.ourClient(urls)
	if err != nil {
		return nil, err
	}
	defer ca.Close()
	cb, err := b.ourClient(urls)
	if err != nil {
		return nil, err
	}
	defer cb.Close()
	if err := b.electionIdle(ca, r); err != nil {
		return nil, err
	}
	if err := b.electionHandover(ca, cb, r); err != nil {
		return nil, err
	}
	return r, b.electionObserve(ca, cb, r)
}

// electionIdle: Campaign+Resign and fenced Lock+Unlock, alternating,
// each on a name of its own; only the Campaign and the Lock are timed.
func (b *bench) electionIdle(c *redlock.Client, r *electionRes) error {
	ctx := b.ctx
	for i := range r.samples + 20 { // the first 20: warm-up
		e, err := c.Election(fmt.Sprintf("bench:elect:idle:%d:%d", time.Now().UnixNano(), i))
		if err != nil {
			return err
		}
		t0 := time.Now()
		ld, err := e.Campaign(ctx, "v")
		d := time.Since(t0)
		if err != nil {
			return err
		}
		if err := ld.Resign(ctx); err != nil {
			return err
		}
		key := fmt.Sprintf("bench:elect:lock:%d:%d", time.Now().UnixNano(), i)
		t0 = time.Now()
		l, err := c.Lock(ctx, key, redlock.WithFencing())
		dl := time.Since(t0)
		if err != nil {
			return err
		}
		if err := l.Unlock(ctx); err != nil {
			return err
		}
		if i >= 20 {
			r.campaign.add(d)
			r.fencedLock.add(dl)
		}
	}
	return b.dropFences("bench:elect:*")
}

// electionHandover: two clients take turns leading one election (and
// holding one lock, fenced and not): the one that leads resigns once the
// other is waiting in line; timed from the Resign (Unlock) call to the
// other's Campaign (Lock) returning.
func (b *bench) electionHandover(ca, cb *redlock.Client, r *electionRes) error {
	name := fmt.Sprintf("bench:elect:handover:%d", time.Now().UnixNano())
	es, err := elections(name, ca, cb)
	if err != nil {
		return err
	}
	type held struct {
		release func() error
	}
	// turns takes n turns between two takers; take(j) blocks until j
	// holds, and returns what releases it.
	turns := func(take func(j int) (held, error), h *hist) error {
		cur, err := take(0)
		if err != nil {
			return err
		}
		for i := range r.samples + 10 {
			j := (i + 1) % 2
			got := make(chan held, 1)
			errc := make(chan error, 1)
			go func() {
				n, err := take(j)
				if err != nil {
					errc <- err
					return
				}
				got <- n
			}()
			time.Sleep(2 * time.Millisecond) // the other is in line
			t0 := time.Now()
			if err := cur.release(); err != nil {
				return err
			}
			select {
			case cur = <-got:
			case err := <-errc:
				return err
			}
			if i >= 10 {
				h.add(time.Since(t0))
			}
		}
		return cur.release()
	}
	ctx := b.ctx
	if err := turns(func(j int) (held, error) {
		ld, err := es[j].Campaign(ctx, "v")
		if err != nil {
			return held{}, err
		}
		return held{func() error { return ld.Resign(ctx) }}, nil
	}, &r.handover); err != nil {
		return err
	}
	cs := [2]*redlock.Client{ca, cb}
	for _, fenced := range []bool{false, true} {
		var opts []redlock.Option
		h := &r.lockHandoff
		if fenced {
			opts, h = []redlock.Option{redlock.WithFencing()}, &r.fencedHandoff
		}
		key := fmt.Sprintf("%s:lock:%v", name, fenced)
		if err := turns(func(j int) (held, error) {
			l, err := cs[j].Lock(ctx, key, opts...)
			if err != nil {
				return held{}, err
			}
			return held{func() error { return l.Unlock(ctx) }}, nil
		}, h); err != nil {
			return err
		}
	}
	return b.dropFences("bench:elect:*")
}

// electionObserve: one client leads and proclaims a new value every
// 20 ms; another observes. Timed from Proclaim's return to the receipt.
func (b *bench) electionObserve(ca, cb *redlock.Client, r *electionRes) error {
	name := fmt.Sprintf("bench:elect:observe:%d", time.Now().UnixNano())
	es, err := elections(name, ca, cb)
	if err != nil {
		return err
	}
	ea, eb := es[0], es[1]
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	ld, err := ea.Campaign(ctx, "0")
	if err != nil {
		return err
	}
	seen := eb.Observe(ctx)
	for l := range seen { // the current leader first
		if l.Value == "0" {
			break
		}
	}
	for i := 1; i <= r.samples; i++ {
		v := fmt.Sprint(i)
		if err := ld.Proclaim(ctx, v); err != nil {
			return err
		}
		t0 := time.Now()
		timeout := time.After(time.Second)
	wait:
		for {
			select {
			case l := <-seen:
				if l.Value == v {
					r.observe.add(time.Since(t0))
					break wait
				}
			case <-timeout:
				r.misses++
				break wait
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := ld.Resign(context.Background()); err != nil {
		return err
	}
	cancel()
	for range seen {
	}
	return b.dropFences("bench:elect:*")
}

// dropFences deletes the fence counters the pass left (they outlive the
// locks by design).
func (b *bench) dropFences(pattern string) error {
	return b.delKeys(pattern + ":fence")
}

// renderElection writes the election pass' section of the report.
func renderElection(sb *strings.Builder, r *electionRes) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	w("## Elections (issue 45)\n\n")
	w("This library alone (contender A's set-up), all five nodes reached directly; %d samples per row. Campaign: the call alone, on an idle election, against a fenced `Lock` on a free key (the two alternating). Handover: from the leader's `Resign` (a holder's `Unlock`) to the waiting candidate's `Campaign` (`Lock`) returning, two clients taking turns, the waiter in line 2 ms before. Observe: from `Proclaim`'s return to the observer's receipt, a `Proclaim` every 20 ms.\n\n", r.samples)
	w("| row | p50 | p99 | against | ratio of p50s | target |\n|---|---|---|---|---|---|\n")
	ratio := func(a, b *hist) float64 { return float64(a.q(0.5)) / float64(b.q(0.5)) }
	w("| Campaign, idle | %s | %s | fenced Lock %s / %s | %.2f× | %s (≤ 1.10×) |\n", fmtDur(r.campaign.q(0.5)), fmtDur(r.campaign.q(0.99)),
		fmtDur(r.fencedLock.q(0.5)), fmtDur(r.fencedLock.q(0.99)), ratio(&r.campaign, &r.fencedLock), passMiss(ratio(&r.campaign, &r.fencedLock) <= 1.10))
	w("| handover after Resign | %s | %s | lock handoff %s / %s | %.2f× | %s (≤ 1.20×) |\n", fmtDur(r.handover.q(0.5)), fmtDur(r.handover.q(0.99)),
		fmtDur(r.lockHandoff.q(0.5)), fmtDur(r.lockHandoff.q(0.99)), ratio(&r.handover, &r.lockHandoff), passMiss(ratio(&r.handover, &r.lockHandoff) <= 1.20))
	w("| (the same against a fenced lock's handoff) | | | %s / %s | %.2f× | – |\n",
		fmtDur(r.fencedHandoff.q(0.5)), fmtDur(r.fencedHandoff.q(0.99)), ratio(&r.handover, &r.fencedHandoff))
	w("| Observe after a Proclaim | %s | %s | – | – | %s (p99 ≤ 50 ms; %d of %d not seen within 1 s) |\n\n", fmtDur(r.observe.q(0.5)), fmtDur(r.observe.q(0.99)),
		passMiss(r.observe.q(0.99) <= 50*time.Millisecond && r.misses == 0), r.misses, r.samples)
}

// elections returns the election name of each client.
func elections(name string, cs ...*redlock.Client) ([]*redlock.Election, error) {
	es := make([]*redlock.Election, len(cs))
	for i, c := range cs {
		var err error
		if es[i], err = c.Election(name); err != nil {
			return nil, err
		}
	}
	return es, nil
}

// delKeys deletes the keys matching pattern on every node.
func (b *bench) delKeys(pattern string) error {
	for i := range b.cl.Size() {
		keys, err := b.cl.Direct(i).Keys(b.ctx, pattern)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := b.cl.Direct(i).Command(b.ctx, "DEL", k); err != nil {
				return err
			}
		}
	}
	return nil
}
