package main

import (
	"bytes"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"
)

// goroutines returns the number of goroutines and how many of them belong
// to the in-process toxiproxies (a toxiproxy frame on their stack), not
// counting the idle workers of package quorum (goroutines that ran a node
// call and wait up to 100 ms for the next: they hold no call). The
// proxies run a few goroutines per open connection, so they grow and shrink
// with the clients' connection churn; they are reported apart.
//
// It reads the goroutine profile (debug=1: one record per distinct stack
// with its count), which the runtime collects with only a brief
// stop-the-world; runtime.Stack(all) stops the world for the whole dump,
// which with thousands of proxy goroutines stalled every client long enough
// to time out.
func goroutines() (total, proxy int) {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	// Records are separated by blank lines; each starts "N @ 0x...".
	for _, rec := range bytes.Split(buf.Bytes(), []byte("\n\n")) {
		if bytes.HasPrefix(rec, []byte("goroutine profile:")) {
			_, rec, _ = bytes.Cut(rec, []byte("\n"))
		}
		sp := bytes.IndexByte(rec, ' ')
		if sp <= 0 || !bytes.HasPrefix(rec[sp:], []byte(" @ ")) {
			continue
		}
		n, err := strconv.Atoi(string(rec[:sp]))
		if err != nil {
			continue
		}
		if bytes.Contains(rec, []byte("quorum.(*worker).loop")) && !bytes.Contains(rec, []byte("quorum.(*Round).run")) {
			continue // an idle worker of package quorum: no call, ends 100 ms after its last
		}
		total += n
		if bytes.Contains(rec, []byte("github.com/Shopify/toxiproxy")) {
			proxy += n
		}
	}
	return total, proxy
}

// settle waits until the goroutine count stops changing (three equal
// samples 50 ms apart) or max has passed.
func settle(max time.Duration) {
	deadline := time.Now().Add(max)
	last, same := -1, 0
	for time.Now().Before(deadline) {
		n := runtime.NumGoroutine()
		if n == last {
			same++
			if same >= 2 {
				return
			}
		} else {
			last, same = n, 0
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clientGoroutines returns the goroutines that are not the in-process
// proxies'.
func clientGoroutines() int {
	t, p := goroutines()
	return t - p
}

// quiet waits until the goroutine count has not changed over three
// samples 20 ms apart, or max has passed: what the previous contender
// left running (calls to a slow node, late replies) has ended.
func quiet(max time.Duration) {
	deadline := time.Now().Add(max)
	last, same := -1, 0
	for time.Now().Before(deadline) {
		n := runtime.NumGoroutine()
		if n == last {
			same++
			if same >= 2 {
				return
			}
		} else {
			last, same = n, 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}
