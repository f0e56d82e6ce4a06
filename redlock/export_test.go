package redlock

// Waiting returns how many Lock calls of c wait in its local queue for
// key (turnstile), for tests that need the queue to last.
func Waiting(c *Client, key string) int {
	c.lq.mu.Lock()
	defer c.lq.mu.Unlock()
	if q := c.lq.queues[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Line returns the key of s's line on the nodes (node.Key.Queue).
func Line(s *Semaphore) string { return s.queue }

// SemWaiting returns how many Acquire calls of s's client wait in its
// local queue for s.
func SemWaiting(s *Semaphore) int { return Waiting(s.c, s.local) }
