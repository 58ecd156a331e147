package service

// Queued is the number of calls waiting in g's queue, for the tests to wait on.
func (g *Gate) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.adm.queue)
}
