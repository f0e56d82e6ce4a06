package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// view is the demo's live log on one writer: setup notes, then one line
// per event stamped with the time since the workers started, and a status
// line every second. It tracks who holds the lock, for the status line.
// Safe for concurrent use; lines never interleave.
type view struct {
	mu     sync.Mutex
	out    io.Writer
	t0     time.Time // when the workers started; zero before
	holder int       // worker holding the lock now, 0 for none
}

func newView(out io.Writer) *view { return &view{out: out} }

// start sets the origin of the timestamps to now and returns it.
func (v *view) start() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.t0 = time.Now()
	return v.t0
}

// note prints an unstamped line (setup, summary).
func (v *view) note(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(v.out, format+"\n", args...)
}

// event prints a line stamped with the time since start.
func (v *view) event(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stamped(format, args...)
}

func (v *view) stamped(format string, args ...any) {
	fmt.Fprintf(v.out, "[%8.3fs] "+format+"\n", append([]any{time.Since(v.t0).Seconds()}, args...)...)
}

// granted reports that worker w got the lock after waiting for it, with
// valid left of its validity window.
func (v *view) granted(w int, valid, waited time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.holder = w
	v.stamped("worker %d holds the lock, valid %s (waited %s)", w, seconds(valid), ms(waited))
}

// releasing reports that worker w is done with its work and is about to
// unlock. It is printed before Unlock, so that it always comes before the
// next worker's grant.
func (v *view) releasing(w int, held time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.holder == w {
		v.holder = 0
	}
	v.stamped("worker %d releases the lock after %s of work", w, ms(held))
}

// status prints the one-line status: holder, grants per worker, which
// nodes answer PING (up, nil when unknown), acquire latency p50 so far.
func (v *view) status(s snapshot, up []bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	holder := "nobody holds it"
	if v.holder != 0 {
		holder = fmt.Sprintf("worker %d holds it", v.holder)
	}
	var grants []string
	for i, g := range s.grants {
		grants = append(grants, fmt.Sprintf("w%d=%d", i+1, g))
	}
	var nodes []string
	for i, ok := range up {
		state := "DOWN"
		if ok {
			state = "up"
		}
		nodes = append(nodes, fmt.Sprintf("%d:%s", i+1, state))
	}
	p50 := "-"
	if all := s.all(); len(all) > 0 {
		p50 = ms(percentile(all, 50))
	}
	v.stamped("status: %s | grants %s | nodes %s | acquire p50 %s",
		holder, strings.Join(grants, " "), strings.Join(nodes, " "), p50)
}

// ms formats d in milliseconds with a precision that suits its size:
// 0.4ms, 12ms, 1530ms.
func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds())
}

// seconds formats d as 1.86s.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.2fs", d.Seconds())
}
