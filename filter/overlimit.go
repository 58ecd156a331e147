package filter

import (
	"encoding/binary"
	"strconv"

	"github.com/meshlimit/meshlimit/internal/fnv"
)

// The over-limit cache: one table of blocked-until entries per rule, in shared data, so that every
// worker thread answers a key the service denied without calling it again until its Retry-After. A
// slot holds the key's fingerprint, the time until which it is blocked and the index of the limit that
// denied; writes are unconditional (cas 0): a lost entry only costs one more call.

const blockedEntrySize = 17

func (p *pluginContext) blockedSlot(it *globalItem) (key string, fp uint64) {
	fp = fnv.String(it.key) ^ it.rs.rule.Fingerprint()
	slot := fp % uint64(it.rs.rule.MaxKeys)
	return it.rs.blockedPrefix + strconv.FormatUint(slot, 36), fp
}

func (p *pluginContext) blocked(it *globalItem, now int64) (idx int, until int64, ok bool) {
	key, fp := p.blockedSlot(it)
	v, _, err := p.store.Get(key)
	if err != nil || len(v) != blockedEntrySize || binary.LittleEndian.Uint64(v) != fp {
		return 0, 0, false
	}
	until, idx = int64(binary.LittleEndian.Uint64(v[8:])), int(v[16])
	if until <= now || idx >= len(it.spec) {
		return 0, 0, false
	}
	return idx, until, true
}

func (p *pluginContext) block(it *globalItem, idx int, until int64) {
	key, fp := p.blockedSlot(it)
	var v [blockedEntrySize]byte
	binary.LittleEndian.PutUint64(v[:], fp)
	binary.LittleEndian.PutUint64(v[8:], uint64(until))
	v[16] = byte(idx)
	_ = p.store.Set(key, v[:], 0)
}
