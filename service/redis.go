package service

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
)

//go:embed lua/*.lua
var luaFS embed.FS

// RedisConfig configures a RedisStore.
type RedisConfig struct {
	// Addrs lists host:port seeds: one address for a standalone Redis, or some nodes of a
	// Redis Cluster (the client discovers the others and routes each key to its slot).
	Addrs []string
	// Username and Password authenticate with Redis AUTH when set.
	Username, Password string
	// KeyPrefix starts every key (default "ml:"); it may not hold "{" or "}". A descriptor's
	// state key is KeyPrefix + "{" + tag + "}:" + algorithm + ":" + key, where tag is the
	// FNV-1a hash of the key in 16 hex digits: the hash tag keeps every algorithm's key of a
	// descriptor in one Redis Cluster slot, and since it is a hash, no byte of the key ("}"
	// included) can choose the slot.
	KeyPrefix string
	// DialTimeout bounds connecting to a node (default 1s). Requests are bounded by their
	// context, never by this.
	DialTimeout time.Duration
	// FlushDelay lets the client wait up to this long to gather concurrent commands into one
	// socket write (fewer syscalls for the service and for Redis under load, a little more
	// latency; a lone command is never delayed). 0 writes at once. cmd/meshlimit-service uses
	// DefaultFlushDelay; see BENCHMARKS.md.
	FlushDelay time.Duration
}

// DefaultFlushDelay is the RedisConfig.FlushDelay of cmd/meshlimit-service: measured on a
// loopback Redis at 64 connections, it cuts the CPU per decision by about a sixth (more
// scripts per Redis read) and adds at most this much latency per batch.
const DefaultFlushDelay = 100 * time.Microsecond

// RedisStore is a Store backed by Redis, standalone or Cluster. Each decision is one EVALSHA
// of the algorithm's Lua script (lua/*.lua), which reads the state, decides with the same
// integer arithmetic as package algorithms, writes the state back with a PEXPIRE of
// Limit.TTL, and takes the time from Redis TIME. The client pipelines concurrent calls over a
// few connections and reloads a script that Redis reports missing (NOSCRIPT). CountWindow's
// counters need no script (countWindow): they are timed by an estimate of Redis TIME that
// the store keeps, re-reading TIME every second until Close.
type RedisStore struct {
	client  rueidis.Client
	prefix  string
	scripts [len(algorithms.Kinds) + 1]*rueidis.Lua // indexed by Kind
	permit  [numPermitOps]*rueidis.Lua              // acquire, renew, release
	settle  [len(algorithms.Kinds) + 1]*rueidis.Lua // indexed by Kind, for the kinds that settle
	sources []string                                // every script's Lua from index 1, for SCRIPT LOAD
	health  redisHealth
	clock   redisClock    // Redis TIME estimated locally, for CountWindow's counters
	done    chan struct{} // closed by Close: stops the clock's syncs
	closed  sync.Once
}

// NewRedisStore connects to Redis and returns a RedisStore. It fails if no address in
// cfg.Addrs answers.
func NewRedisStore(cfg RedisConfig) (*RedisStore, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("service: redis: no address")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "ml:"
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		return nil, fmt.Errorf("service: redis: key prefix %q: may not hold { or } (they would change the hash tag)", cfg.KeyPrefix)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = time.Second
	}
	s := &RedisStore{prefix: cfg.KeyPrefix, sources: make([]string, len(algorithms.Kinds)+1)}
	for _, k := range algorithms.Kinds {
		src, err := Script(k)
		if err != nil {
			return nil, err
		}
		s.scripts[k], s.sources[k] = rueidis.NewLuaScript(src), src
	}
	if err := s.loadPermitScripts(); err != nil {
		return nil, err
	}
	if err := s.loadSettleScripts(); err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:   cfg.Addrs,
		Username:      cfg.Username,
		Password:      cfg.Password,
		DisableCache:  true, // no client-side caching: every decision must reach Redis
		Dialer:        net.Dialer{Timeout: cfg.DialTimeout},
		MaxFlushDelay: cfg.FlushDelay,
	})
	if err != nil {
		return nil, fmt.Errorf("service: redis: %w", err)
	}
	s.client = c
	// Load the scripts now, so that the first checks of a new replica need no NOSCRIPT round
	// trip; a failure is not fatal: readiness (Ping) loads them before the replica takes traffic.
	ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.DialTimeout)
	defer cancel()
	_ = s.loadScripts(ctx)
	_ = s.syncClock(ctx) // until it succeeds, the local clock (re-synced every second)
	s.done = make(chan struct{})
	go s.keepClockSynced(s.done)
	return s, nil
}

// Script returns the Lua source that decides kind: lua/lib.lua followed by the algorithm's
// body (token and leaky bucket share lua/gcra_state.lua and lua/gcra.lua, selected by a
// one-line prefix).
func Script(kind algorithms.Kind) (string, error) {
	switch kind {
	case algorithms.TokenBucket:
		return composeScript("local LEAKY = false\n", "lib.lua", "gcra_state.lua", "gcra.lua")
	case algorithms.LeakyBucket:
		return composeScript("local LEAKY = true\n", "lib.lua", "gcra_state.lua", "gcra.lua")
	case algorithms.FixedWindow, algorithms.SlidingLog, algorithms.SlidingWindow:
		return composeScript("", "lib.lua", kind.String()+".lua")
	}
	return "", fmt.Errorf("service: no script for %v", kind)
}

// composeScript returns prefix followed by the named files of lua/.
func composeScript(prefix string, files ...string) (string, error) {
	var b strings.Builder
	b.WriteString(prefix)
	for _, f := range files {
		src, err := luaFS.ReadFile("lua/" + f)
		if err != nil {
			return "", err
		}
		b.Write(src)
	}
	return b.String(), nil
}

// Key returns the Redis key that holds the state of req (see RedisConfig.KeyPrefix).
func (s *RedisStore) Key(req Request) string { return s.key(req.Limit.Kind.String(), req.Key) }

// key returns the Redis key of key under kind (an algorithm, or wire.Concurrency).
func (s *RedisStore) key(kind, key string) string { return s.keyAt(kind, -1, key) }

// keyAt returns KeyPrefix + "{" + tag + "}:" + kind + ":" + key, with ":" + at after kind
// when at >= 0, in one allocation.
func (s *RedisStore) keyAt(kind string, at int64, key string) string {
	n := len(s.prefix) + 20 + len(kind) + len(key) // prefix, {16 hex digits}, two ':'
	if at >= 0 {
		n += 21 // up to 20 digits and a ':'
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	h := fnv.String(key)
	for shift := 60; shift >= 0; shift -= 4 {
		b.WriteByte("0123456789abcdef"[h>>uint(shift)&0xf])
	}
	b.WriteString("}:")
	b.WriteString(kind)
	b.WriteByte(':')
	if at >= 0 {
		var num [20]byte
		b.Write(strconv.AppendInt(num[:0], at, 10))
		b.WriteByte(':')
	}
	b.WriteString(key)
	return b.String()
}

// Decide implements Store.
func (s *RedisStore) Decide(ctx context.Context, req Request) (algorithms.Decision, error) {
	if err := req.validate(); err != nil {
		return algorithms.Decision{}, err
	}
	ttl := (req.Limit.TTL() + time.Millisecond - 1) / time.Millisecond
	return s.decide(ctx, req, int64(ttl))
}

// decide runs req's script with the given PEXPIRE in milliseconds.
func (s *RedisStore) decide(ctx context.Context, req Request, ttlMs int64) (algorithms.Decision, error) {
	l := req.Limit
	args := limitArgs(l, req.Cost, ttlMs, req.Now)
	v, err := s.scripts[l.Kind].Exec(ctx, s.client, []string{s.Key(req)}, args).AsIntSlice()
	if err != nil {
		return algorithms.Decision{}, s.redisErr(err)
	}
	if len(v) != 5 {
		return algorithms.Decision{}, fmt.Errorf("service: redis: script returned %d values, want 5", len(v))
	}
	d := algorithms.Decision{
		Allowed:    v[0] == 1,
		Limit:      l.Quota,
		Remaining:  v[1],
		Reset:      time.Duration(v[2]) * time.Microsecond,
		RetryAfter: time.Duration(v[3]) * time.Microsecond,
		Delay:      time.Duration(v[4]) * time.Microsecond,
	}
	if v[3] < 0 {
		d.RetryAfter = algorithms.RetryNever
	}
	return d, nil
}

// redisErr wraps an error of a script call: ErrStoreFull for a write refused for lack of
// memory (counted for Ping).
func (s *RedisStore) redisErr(err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "OOM ") {
		s.health.oom.Add(1)
		return fmt.Errorf("%w: %v", ErrStoreFull, err)
	}
	return fmt.Errorf("service: redis: %w", err)
}

// Close implements Store.
func (s *RedisStore) Close() error {
	s.closed.Do(func() {
		close(s.done)
		s.client.Close()
	})
	return nil
}

// limitArgs are the arguments every decision and settle script starts with: the limit's quota,
// window (µs) and burst, the amount (a cost, or a settle's delta), the PEXPIRE in milliseconds
// (at least 1) and now_us (empty: Redis TIME).
func limitArgs(l algorithms.Limit, amount, ttlMs int64, now time.Time) []string {
	return []string{
		strconv.FormatInt(l.Quota, 10),
		strconv.FormatInt(int64(l.Window/time.Microsecond), 10),
		strconv.FormatInt(l.Burst, 10),
		strconv.FormatInt(amount, 10),
		strconv.FormatInt(max(ttlMs, 1), 10),
		nowArg(now),
	}
}
