package service

import "time"

// Queued is the number of calls waiting in g's queue, for the tests to wait on.
func (g *Gate) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.adm.queue)
}

// StoreTime is the gate's measure of the time a descriptor spends at the store.
func (g *Gate) StoreTime() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.adm.storeTime()
}
