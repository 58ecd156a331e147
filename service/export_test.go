package service

import "time"

// StoreTime is the gate's measure of the time a descriptor spends at the store.
func (g *Gate) StoreTime() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.adm.storeTime()
}
