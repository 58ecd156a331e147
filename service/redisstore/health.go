package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/service"
)

// errEvicting is wrapped by the readiness error of a Redis that evicted keys since the last
// probe: every evicted key is a counter that starts over, a fresh quota for its client.
var errEvicting = errors.New("redisstore: Redis evicts keys (each one a counter that starts over)")

// health is what Store.Ping compares from one probe to the next.
type health struct {
	oom     atomic.Int64 // writes refused with OOM, counted by decide
	evicted atomic.Int64 // keys evicted, summed over the growth of evicted_keys seen by Ping

	mu      sync.Mutex
	lastOOM int64            // oom at the last Ping
	nodes   map[string]int64 // evicted_keys of each node at the last Ping
}

// Ping implements service.Store: it reports whether the store can decide, for /readyz. Every node
// must answer PING and hold the scripts (Ping loads them where they are missing, as on a
// Redis that restarted, so that a ready replica's checks never pay a NOSCRIPT round trip); no
// node may be full (used_memory at or above maxmemory) or have evicted keys since the last
// Ping; and no write may have been refused for lack of memory since the last Ping.
func (s *Store) Ping(ctx context.Context) error {
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nodes == nil {
		h.nodes = map[string]int64{}
	}
	var errs errorList
	for addr, n := range s.client.Nodes() {
		if err := s.probe(ctx, addr, n); err != nil {
			errs = append(errs, fmt.Errorf("redis %s: %w", addr, err))
		}
	}
	oom := h.oom.Load()
	if d := oom - h.lastOOM; d > 0 {
		errs = append(errs, fmt.Errorf("%w: %d writes refused since the last probe", service.ErrStoreFull, d))
	}
	h.lastOOM = oom
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// errorList is several errors in one line, each of which errors.Is and errors.As see.
type errorList []error

func (l errorList) Error() string {
	s := make([]string, len(l))
	for i, err := range l {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (l errorList) Unwrap() []error { return l }

// Stats implements service.Store: the keys Redis evicted while this store watched (the growth
// of evicted_keys between two Pings); the keys it holds are Redis's to count.
func (s *Store) Stats() service.Stats {
	return service.Stats{Keys: -1, Evicted: s.health.evicted.Load()}
}

// probe checks one node; h.mu is held.
func (s *Store) probe(ctx context.Context, addr string, n rueidis.Client) error {
	if err := n.Do(ctx, n.B().Ping().Build()).Error(); err != nil {
		return err
	}
	if err := loadScriptsOn(ctx, n, s.scripts.sources); err != nil {
		return fmt.Errorf("loading the scripts: %w", err)
	}
	info, err := n.Do(ctx, n.B().Info().Build()).ToString()
	if err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	used, limit, evicted := infoInt(info, "used_memory"), infoInt(info, "maxmemory"), infoInt(info, "evicted_keys")
	prev, seen := s.health.nodes[addr]
	s.health.nodes[addr] = evicted
	if seen && evicted > prev {
		s.health.evicted.Add(evicted - prev)
		return fmt.Errorf("%w: %d keys since the last probe", errEvicting, evicted-prev)
	}
	if limit > 0 && used >= limit {
		return fmt.Errorf("%w: used_memory %d >= maxmemory %d", service.ErrStoreFull, used, limit)
	}
	return nil
}

// infoInt returns the integer field name of an INFO answer, or 0.
func infoInt(info, name string) int64 {
	i := strings.Index(info, "\n"+name+":")
	if i < 0 {
		return 0
	}
	v := info[i+len(name)+2:]
	if j := strings.IndexAny(v, "\r\n"); j >= 0 {
		v = v[:j]
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}
