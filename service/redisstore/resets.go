package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// The store's reset log lives in two keys that share the hash tag {resets}, so that one
// script reaches both in a Redis Cluster: KeyPrefix + "{resets}:seq", the last position, and
// KeyPrefix + "{resets}:log", a sorted set of the last service.ResetLogSize entries (score: position;
// member: "<position>:<key>", unique). A descriptor's key never collides with them: its hash
// tag is 16 hex digits. Neither expires: the log is bounded by its size (at most service.ResetLogSize ×
// (wire.MaxKeyBytes + 21) bytes of members), and under a volatile-* eviction policy Redis never
// evicts them. Their scripts are lua/resets_append.lua and lua/resets_read.lua.

// resetKeys returns the two keys of the reset log.
func (s *Store) resetKeys() []string {
	return []string{s.prefix + "{resets}:seq", s.prefix + "{resets}:log"}
}

// AppendResets implements service.Store: one script appends the keys and trims the log.
func (s *Store) AppendResets(ctx context.Context, keys []string) (uint64, error) {
	args := make([]string, 0, len(keys)+1)
	args = append(args, strconv.Itoa(service.ResetLogSize))
	args = append(args, keys...)
	seq, err := s.scripts.resets[0].Exec(ctx, s.client, s.resetKeys(), args).AsInt64()
	if err != nil {
		return 0, s.redisErr(err)
	}
	return uint64(seq), nil
}

// ReadResets implements service.Store.
func (s *Store) ReadResets(ctx context.Context, since uint64, prefix string, limit int) (service.ResetPage, error) {
	args := []string{strconv.FormatUint(since, 10), prefix, strconv.Itoa(max(limit, 0))}
	v, err := s.scripts.resets[1].Exec(ctx, s.client, s.resetKeys(), args).ToArray()
	if err != nil {
		return service.ResetPage{}, s.redisErr(err)
	}
	if len(v) < 3 || len(v)%2 != 1 {
		return service.ResetPage{}, fmt.Errorf("redisstore: resets_read.lua returned %d values", len(v))
	}
	var n [3]int64
	for i := range n {
		if n[i], err = v[i].AsInt64(); err != nil || n[i] < 0 {
			return service.ResetPage{}, fmt.Errorf("redisstore: resets_read.lua: value %d: not a position", i)
		}
	}
	p := service.ResetPage{Latest: uint64(n[0]), Oldest: uint64(n[1]), More: n[2] == 1}
	for i := 3; i+1 < len(v); i += 2 {
		seq, err := v[i].AsInt64()
		if err != nil || seq < 1 {
			return service.ResetPage{}, fmt.Errorf("redisstore: reset log: entry %d: not a position", len(p.Entries))
		}
		key, err := v[i+1].ToString()
		if err != nil || wire.CheckKey(key, wire.MaxKeyBytes) != nil {
			return service.ResetPage{}, fmt.Errorf("redisstore: reset log: entry %d: not a key", len(p.Entries))
		}
		p.Entries = append(p.Entries, wire.Reset{Seq: uint64(seq), Key: key})
	}
	return p, nil
}
