package history

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/quorumlock/redlock/quorum"
)

// lockKeys are the history's lock keys: the exclusive key, the
// read/write key and the semaphore's slots.
func (h *history) lockKeys() []string {
	keys := []string{h.prefix + "x", h.prefix + "rw"}
	for i := range h.cfg.Permits {
		keys = append(keys, fmt.Sprintf("%ss:permit:%d", h.prefix, i))
	}
	return keys
}

// checkFree is the Release oracle: every lock key must be absent on a
// majority of the nodes within NodeTimeout plus RoundTrip (the bound)
// of now (the faults have stopped, the holders unlocked, late commands
// ran), or of the last node call of the clients that timed out since
// with no fault injected, whichever is later (see deadline). A
// violation names the slowest direct read of a node the check made and
// the calls that timed out: on a saturated machine the nodes
// themselves may answer later than the round trip allowed, which a
// trace cannot tell from a bug otherwise.
func (h *history) checkFree(res *Result) {
	start := time.Now()
	bound := h.cfg.NodeTimeout + h.cfg.RoundTrip
	need := quorum.Majority(h.nodes.Size())
	var slowest time.Duration
	for _, k := range h.lockKeys() {
		for {
			free, held, took, err := h.freeOn(k)
			slowest = max(slowest, took)
			if err != nil {
				// A node restarting (a real restart, see
				// torture's restart test) cannot be read: it is not
				// counted free, and the next look may find it up.
				held = err.Error()
			}
			now := time.Now()
			if free >= need {
				res.Extended = res.Extended || now.After(start.Add(bound))
				break
			}
			if now.After(h.deadline(start, bound)) {
				res.Violations[Release] = append(res.Violations[Release],
					fmt.Sprintf("%s free on %d nodes (majority %d) %v after the faults stopped and the holders unlocked (bound %v; slowest direct read meanwhile %v; %s): %s",
						k, free, need, now.Sub(start).Round(time.Millisecond), bound, slowest.Round(time.Millisecond), h.slowCalls(), held))
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	res.SlowCalls = h.slow()
}

// deadline is when the Release oracle gives up on a key: bound after
// start, or bound after the last node call of the clients that timed
// out since with no fault injected (faultnode.State.LastSlow), but
// never more than 2×bound after start. A node that did not answer
// within its timeout is a fault, one the machine injected: the release
// it lost is the library's to finish, and the promise (a lost release
// is finished within a node timeout and a round trip) counts from the
// last such loss. A node slow for longer than one more bound fails the
// oracle all the same.
func (h *history) deadline(start time.Time, bound time.Duration) time.Time {
	last := start
	for _, st := range h.states {
		if t := st.LastSlow(); t.After(last) {
			last = t
		}
	}
	if last.After(start.Add(bound)) {
		last = start.Add(bound)
	}
	return last.Add(bound)
}

// slowCalls says how many of the clients' node calls timed out since
// the faults stopped, no fault injected: the nodes, or the machine,
// were slower than the node timeout, and what the oracle finds then may
// be the machine's (a saturated two-core machine runs the five nodes,
// the clients and the harness), not the library's.
func (h *history) slowCalls() string {
	n := h.slow()
	if n == 0 {
		return "no node call timed out since"
	}
	return fmt.Sprintf("%d node calls timed out since, no fault injected", n)
}

// slow sums the node calls that timed out since the faults stopped, no
// fault injected (faultnode.State.Slow).
func (h *history) slow() int64 {
	var n int64
	for _, st := range h.states {
		n += st.Slow()
	}
	return n
}

// freeOn counts the nodes where key is absent, describes the others, and
// returns the longest of its reads.
func (h *history) freeOn(key string) (int, string, time.Duration, error) {
	free := 0
	var held []string
	var slowest time.Duration
	for i := range h.nodes.Size() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		info, err := h.nodes.Direct(i).Inspect(ctx, key)
		slowest = max(slowest, time.Since(start))
		cancel()
		if err != nil {
			held = append(held, fmt.Sprintf("node %d unreadable (%v)", i, err))
			continue
		}
		if info.Token == "" {
			free++
		} else {
			held = append(held, fmt.Sprintf("node %d=%q (ttl %v)", i, info.Token, info.TTL))
		}
	}
	return free, strings.Join(held, ", "), slowest, nil
}

// unreadable counts a node the harness could not read or clean (down for
// a real restart): not the library's failure, nor the harness'.
func (h *history) unreadable(res *Result) {
	harnessMu.Lock()
	res.Unreadable++
	harnessMu.Unlock()
}

// checkLeftovers is the Leftover oracle: after every client closed, the
// nodes hold no key of the history's but fence counters and tombstones
// that expire within Config.TombMax (counted in Result.Tombstones).
func (h *history) checkLeftovers(res *Result) {
	tombMax := h.cfg.TombMax
	if tombMax == 0 {
		tombMax = 2*time.Second + h.cfg.NodeTimeout
	}
	for i := range h.nodes.Size() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		keys, err := h.nodes.Direct(i).Keys(ctx, h.prefix+"*")
		cancel()
		if err != nil {
			h.unreadable(res) // a node down has nothing left
			continue
		}
		var left []string
		for _, k := range keys {
			if strings.HasSuffix(k, ":fence") {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			v, _ := h.nodes.Direct(i).Command(ctx, "GET", k)
			ttl, _ := h.nodes.Direct(i).Command(ctx, "PTTL", k)
			if b, ok := v.([]byte); ok {
				v = string(b)
			} else if all, err := h.nodes.Direct(i).Command(ctx, "HGETALL", k); err == nil {
				// A queue (a hash): its entries say whose it is.
				if fs, ok := all.([]any); ok {
					var kv []string
					for _, f := range fs {
						if b, ok := f.([]byte); ok {
							kv = append(kv, string(b))
						}
					}
					v = "{" + strings.Join(kv, " ") + "}"
				}
			}
			cancel()
			ms, _ := ttl.(int64)
			if ms == -2 {
				continue // expired between KEYS and PTTL
			}
			if strings.Contains(k, ":dead:") && ms >= 0 && time.Duration(ms)*time.Millisecond <= tombMax {
				res.Tombstones++
				continue
			}
			left = append(left, fmt.Sprintf("%s=%v (pttl %v)", k, v, ttl))
		}
		if len(left) > 0 {
			res.Violations[Leftover] = append(res.Violations[Leftover], fmt.Sprintf("node %d after Close: %s", i, strings.Join(left, " ")))
		}
	}
}

// del deletes the history's keys on node i, fence counters too: a
// restart without persistence loses them (the nodes then seed them from
// their clocks again).
func (h *history) del(ctx context.Context, i int) error {
	keys, err := h.nodes.Direct(i).Keys(ctx, h.prefix+"*")
	if err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := h.nodes.Direct(i).Command(ctx, "DEL", k); err != nil {
			return err
		}
	}
	return nil
}

// cleanup deletes every key of the history on every node, so that the
// next history and the package's leftover check start clean.
func (h *history) cleanup(res *Result) {
	for i := range h.nodes.Size() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.del(ctx, i); err != nil {
			// A node down for a restart without persistence comes
			// back empty.
			h.unreadable(res)
		}
		cancel()
	}
}
