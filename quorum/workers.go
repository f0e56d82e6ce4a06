package quorum

import (
	"sync"
	"sync/atomic"
	"time"
)

// A round's calls run on the package's workers: goroutines that, after a
// call, wait up to workerIdle for the next one before they end. A reused
// goroutine keeps the stack its calls grew. A goroutine per call started
// on a small stack and grew it (runtime.newstack: a copy each time it
// doubles) on every call: a node call goes deep (the driver, the socket
// write), deeper than a new goroutine's stack, which the runtime sizes
// after the average parked goroutine. On a serial lock+unlock against
// five local nodes that growth was 8.7 % of the client's CPU (see
// docs/PERFORMANCE.md).
//
// workerIdle is short, so that the workers of a burst do not outlive it
// by much (a client's Close does not wait for them: they hold nothing of
// it once their call has returned).
const workerIdle = 100 * time.Millisecond

// worker is one reusable goroutine: next hands it a job while it is
// idle; state says whether it is (see spawn and loop).
type worker struct {
	state atomic.Int32
	next  chan job
}

const (
	busy int32 = iota
	idle
	gone
)

// job is node i's call of round r.
type job struct {
	r *Round
	i int
}

// idleWorkers holds workers waiting for a job (and some that have ended
// since: spawn skips them). A sync.Pool: per-P, no lock shared by every
// caller; a worker it drops at a GC ends at its idle timeout.
var idleWorkers sync.Pool

// spawn runs node i's call of r on an idle worker, or on a new one.
func spawn(r *Round, i int) {
	for {
		w, _ := idleWorkers.Get().(*worker)
		if w == nil {
			break
		}
		if w.state.CompareAndSwap(idle, busy) {
			w.next <- job{r, i} // buffered: w takes it at once or when its timer fires
			return
		}
	}
	w := &worker{next: make(chan job, 1)}
	go w.loop(job{r, i})
}

// loop runs j, then each job it is handed within workerIdle of the last.
func (w *worker) loop(j job) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		j.r.run(j.i)
		j = job{}
		w.state.Store(idle)
		idleWorkers.Put(w)
		t.Reset(workerIdle)
		select {
		case j = <-w.next:
		case <-t.C:
			if w.state.CompareAndSwap(idle, gone) {
				return
			}
			j = <-w.next // taken by spawn as the timer fired
		}
	}
}
