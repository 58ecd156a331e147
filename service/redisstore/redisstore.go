// Package redisstore is a service.Store on Redis, standalone or Cluster, so that every service
// replica counts against the same state. Each operation on a descriptor's state is one EVALSHA
// of a Lua script (lua/*.lua: one per algorithm, a transcription of the algorithms package's
// integer formulas that computes identical decisions; one per settling algorithm; three for
// permits; two for the reset log), called through an auto-pipelining client. Window counters
// need no script: INCRBY and PEXPIRE NX. It is the only package of the module that imports the
// Redis client (internal/depcheck).
package redisstore

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
	"github.com/meshlimit/meshlimit/internal/siphash"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

var _ service.Store = (*Store)(nil)

// Config configures a Store.
type Config struct {
	// Addrs lists host:port seeds: one address for a standalone Redis, or some nodes of a
	// Redis Cluster (the client discovers the others and routes each key to its slot), or,
	// with Sentinel.MasterSet, some of the sentinels that monitor the master.
	Addrs []string
	// Username and Password authenticate with Redis AUTH when set (with Sentinel: to the
	// master, whichever node it is).
	Username, Password string
	// TLS, when not nil, is the TLS configuration of every connection to a Redis node: the
	// nodes of a Cluster, or the master that the sentinels name. nil: plain TCP.
	TLS *tls.Config
	// TLSSource, when not nil (TLS must then be set too), is called for every new connection
	// to a node and its result used in place of TLS: so certificates and CAs rotated on disk
	// are used from the next connection on, without a restart (tls.go).
	TLSSource func() *tls.Config
	// Sentinel, when its MasterSet is set, reaches Redis through Redis Sentinel (connect.go).
	Sentinel Sentinel
	// KeyPrefix starts every key (default "ml:"); it may not hold "{" or "}". A descriptor's
	// state key is KeyPrefix + "{" + tag + "}:" + algorithm + ":" + key, where tag is the
	// FNV-1a hash (or, with TagKey, the keyed hash) of the key in 16 hex digits: the hash tag keeps every algorithm's key of a
	// descriptor in one Redis Cluster slot, and since it is a hash, no byte of the key ("}"
	// included) can choose the slot.
	KeyPrefix string
	// TagKey, when set, keys the hash tag: the tag is then SipHash-2-4 of the key under a key
	// derived from TagKey (SHA-256), so that without it no one can search offline for keys that
	// share a Cluster slot and pin a rule's counters to one node. Give every replica of a
	// deployment the same TagKey (the replicas must agree on every key's name); empty keeps the
	// unkeyed FNV-1a tag. Setting or changing it renames every key: counters start afresh once.
	TagKey string
	// DialTimeout bounds connecting to a node (default 1s). Requests are bounded by their
	// context, never by this.
	DialTimeout time.Duration
	// FlushDelay lets the client wait up to this long to gather concurrent commands into one
	// socket write (fewer syscalls for the service and for Redis under load, a little more
	// latency; a lone command is never delayed). 0 writes at once. cmd/meshlimit-service uses
	// DefaultFlushDelay; see service/BENCHMARKS.md.
	FlushDelay time.Duration
}

// DefaultFlushDelay is the Config.FlushDelay of cmd/meshlimit-service: measured on a loopback
// Redis at 64 connections, it cuts the CPU per decision by about a sixth (more scripts per
// Redis read) and adds at most this much latency per batch.
const DefaultFlushDelay = 100 * time.Microsecond

// Store is a service.Store backed by Redis. Each decision is one EVALSHA of the algorithm's
// script, which reads the state, decides with the same integer arithmetic as package
// algorithms, writes the state back with a PEXPIRE of Limit.TTL, and takes the time from Redis
// TIME. The client pipelines concurrent calls over a few connections and reloads a script that
// Redis reports missing (NOSCRIPT). Window counters need no script (counter.go): they are
// timed by an estimate of Redis TIME that the store keeps, re-reading TIME every second until
// Close.
type Store struct {
	client  rueidis.Client
	prefix  string
	tagKey  *[2]uint64 // nil: the unkeyed FNV-1a tag
	scripts scripts
	health  health
	clock   clock         // Redis TIME estimated locally, for the window counters
	done    chan struct{} // closed by Close: stops the clock's syncs
	closed  sync.Once
}

// New connects to Redis and returns a Store. It fails if no address in cfg.Addrs answers.
func New(cfg Config) (*Store, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("redisstore: no address")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "ml:"
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		return nil, fmt.Errorf("redisstore: key prefix %q: may not hold { or } (they would change the hash tag)", cfg.KeyPrefix)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = time.Second
	}
	sc, err := newScripts()
	if err != nil {
		return nil, err
	}
	c, err := connect(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{client: c, prefix: cfg.KeyPrefix, tagKey: tagKeyOf(cfg.TagKey), scripts: sc, done: make(chan struct{})}
	// Load the scripts now, so that the first checks of a new replica need no NOSCRIPT round
	// trip; a failure is not fatal: readiness (Ping) loads them before the replica takes traffic.
	ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.DialTimeout)
	defer cancel()
	_ = s.loadScripts(ctx)
	_ = s.syncClock(ctx) // until it succeeds, the local clock (re-synced every second)
	go s.keepClockSynced(s.done)
	return s, nil
}

// key returns the Redis key of key under kind (an algorithm, or wire.Concurrency).
func (s *Store) key(kind, key string) string { return s.keyAt(kind, -1, key) }

// keyAt returns KeyPrefix + "{" + tag + "}:" + kind + ":" + key, with ":" + at after kind
// when at >= 0, in one allocation.
func (s *Store) keyAt(kind string, at int64, key string) string {
	var b strings.Builder
	b.Grow(s.keyLen(kind, at, key))
	s.writeKey(&b, kind, at, key)
	return b.String()
}

// keyLen bounds the length of the key that keyAt returns.
func (s *Store) keyLen(kind string, at int64, key string) int {
	n := len(s.prefix) + 20 + len(kind) + len(key) // prefix, {16 hex digits}, two ':'
	if at >= 0 {
		n += 21 // up to 20 digits and a ':'
	}
	return n
}

// writeKey writes to b the key that keyAt returns.
func (s *Store) writeKey(b *strings.Builder, kind string, at int64, key string) {
	b.WriteString(s.prefix)
	b.WriteByte('{')
	h := s.tag(key)
	for shift := 60; shift >= 0; shift -= 4 {
		b.WriteByte("0123456789abcdef"[h>>uint(shift)&0xf])
	}
	b.WriteString("}:")
	b.WriteString(kind)
	b.WriteByte(':')
	if at >= 0 {
		writeInt(b, at)
		b.WriteByte(':')
	}
	b.WriteString(key)
}

// writeInt writes v's decimal digits to b.
func writeInt(b *strings.Builder, v int64) {
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], v, 10))
}

// tagKeyOf derives the SipHash key of a Config.TagKey; nil for none.
func tagKeyOf(secret string) *[2]uint64 {
	if secret == "" {
		return nil
	}
	sum := sha256.Sum256([]byte("meshlimit redis hash tag\x00" + secret))
	return &[2]uint64{binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])}
}

// tag is the hash of key that names its Cluster slot: keyed SipHash-2-4 with a TagKey, else
// FNV-1a.
func (s *Store) tag(key string) uint64 {
	if s.tagKey == nil {
		return fnv.String(key)
	}
	return siphash.SumBytes64(s.tagKey[0], s.tagKey[1], []byte(key))
}

// stateKey returns the Redis key that holds the state of key under limit kind k.
func (s *Store) stateKey(k algorithms.Kind, key string) string { return s.key(stateKind(k), key) }

// ringLogKind names the sliding log's keys since its state became the ring form
// (lua/sliding_log_index.lua). A service of an earlier version reads a sliding log's key as
// text and starts afresh on anything else, so were both forms kept under one key, every decision
// of an older replica during a rolling upgrade would wipe the log the newer ones keep: a limit
// open without bound for as long as the rollout lasts. Under a name of their own the two
// versions count apart, so while both run a key admits at most twice its quota in a window, and
// the upgrade starts each sliding log afresh once.
const ringLogKind = "sliding_log_ring"

// stateKind returns the kind's part of its state keys.
func stateKind(k algorithms.Kind) string {
	if k == algorithms.SlidingLog {
		return ringLogKind
	}
	return k.String()
}

// Decide implements service.Store.
func (s *Store) Decide(ctx context.Context, req service.Request) (algorithms.Decision, error) {
	if err := req.Validate(); err != nil {
		return algorithms.Decision{}, err
	}
	return s.decide(ctx, req, pexpireMs(req.Limit.TTL()))
}

// decide runs req's script with the given PEXPIRE in milliseconds.
func (s *Store) decide(ctx context.Context, req service.Request, ttlMs int64) (algorithms.Decision, error) {
	l := req.Limit
	args := scriptArgs(make([]string, 0, scriptArgCount), l, req.Cost, ttlMs, req.Now, "")
	keys := []string{s.stateKey(l.Kind, req.Key)}
	v, err := s.scripts.decide[l.Kind].Exec(ctx, s.client, keys, args).AsIntSlice()
	if err != nil {
		if err = s.redisErr(err); !errors.Is(err, service.ErrStoreFull) {
			return algorithms.Decision{}, err
		}
		// Redis is full: an existing key is still decided exactly; a new one is refused.
		if v, err = s.scripts.full[l.Kind].Exec(ctx, s.client, keys, args).AsIntSlice(); err != nil {
			return algorithms.Decision{}, s.redisErr(err)
		}
	}
	return decision(l, v)
}

// decision is the Decision of limit l that a decision script returned as v: lua/lib.lua's six
// values, then the script's now (µs), the decision's At.
func decision(l algorithms.Limit, v []int64) (algorithms.Decision, error) {
	if len(v) != 7 {
		return algorithms.Decision{}, fmt.Errorf("redisstore: script returned %d values, want 7", len(v))
	}
	d := algorithms.Decision{
		Allowed:    v[0] == 1,
		Limit:      l.Quota,
		Remaining:  v[1],
		Reset:      time.Duration(v[2]) * time.Microsecond,
		RetryAfter: time.Duration(v[3]) * time.Microsecond,
		Delay:      time.Duration(v[4]) * time.Microsecond,
		// The effective window, computed by the script as algorithms.Decide does.
		EffectiveWindow: time.Duration(v[5]) * time.Microsecond,
		At:              v[6] * int64(time.Microsecond),
	}
	if v[3] < 0 {
		d.RetryAfter = algorithms.RetryNever
	}
	return d, nil
}

// redisErr wraps an error of a call: service.ErrStoreFull for a write refused for lack of
// memory (counted for Ping).
func (s *Store) redisErr(err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "OOM ") {
		s.health.oom.Add(1)
		return fmt.Errorf("%w: %v", service.ErrStoreFull, err)
	}
	return fmt.Errorf("redisstore: %w", err)
}

// Close implements service.Store.
func (s *Store) Close() error {
	s.closed.Do(func() {
		close(s.done)
		s.client.Close()
	})
	return nil
}

// pexpireMs is d in whole milliseconds, rounded up: the PEXPIRE of a state that lives d.
func pexpireMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// scriptArgs appends to args the nine arguments of a decision or settle script (lua/lib.lua):
// the limit's quota, window (µs) and burst, the amount (a cost, or a settle's delta), the
// PEXPIRE in milliseconds (at least 1), now_us (empty: Redis TIME), age (empty for a decision),
// and the calendar unit and offset (µs) that the fixed-window scripts read ("0", "0" for a
// rolling window).
func scriptArgs(args []string, l algorithms.Limit, amount, ttlMs int64, now time.Time, age string) []string {
	c := l.Calendar
	return append(args,
		strconv.FormatInt(l.Quota, 10),
		strconv.FormatInt(int64(l.Window/time.Microsecond), 10),
		strconv.FormatInt(l.Burst, 10),
		strconv.FormatInt(amount, 10),
		strconv.FormatInt(max(ttlMs, 1), 10),
		nowArg(now),
		age,
		strconv.Itoa(int(c.Unit)),
		strconv.FormatInt(int64(c.Offset/time.Microsecond), 10),
	)
}

// scriptArgCount is the number of arguments scriptArgs appends.
const scriptArgCount = 9

// nowArg is the now_us argument of a script: empty (Redis TIME) for the zero Time.
func nowArg(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(clampUs(t), 10)
}

// clampUs is t in unix µs, within the times the algorithms represent (0 to wire.MaxTimeUs).
func clampUs(t time.Time) int64 { return min(max(t.UnixMicro(), 0), wire.MaxTimeUs) }
