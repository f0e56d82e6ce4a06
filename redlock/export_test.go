package redlock

// Waiting returns how many Lock calls of c wait in its local queue for
// key (turnstile), for tests that need the queue to last.
func Waiting(c *Client, key string) int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if q := c.queues[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}
