package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// crc16 is Redis Cluster's CRC16 (XMODEM), what an attacker computes offline.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotOf is the Cluster slot of a Redis key of s: that of its hash tag.
func slotOf(s *Store, key string) uint16 {
	k := s.key("fixed_window", key)
	return crc16(k[len(s.prefix)+1:len(s.prefix)+17]) % 16384
}

// pinned searches offline, as an attacker would with the unkeyed tag (it needs no secret), for
// n keys of one rule whose counters share one Cluster slot.
func pinned(n int) []string {
	unkeyed := &Store{prefix: "ml:"}
	bySlot := map[uint16][]string{}
	for i := 0; ; i++ {
		k := "plugin/rule/fp/user-" + strconv.Itoa(i)
		sl := slotOf(unkeyed, k)
		if bySlot[sl] = append(bySlot[sl], k); len(bySlot[sl]) == n {
			return bySlot[sl]
		}
	}
}

// The hash tag was FNV-1a of the key, unkeyed: 100 keys pinned to one slot took a second of
// offline search, so a client could load one Cluster node with a rule's counters. With a
// TagKey the tag is SipHash under the deployment's secret: the keys found offline spread over
// the masters like any others, and two replicas with the same TagKey name every key alike.
func TestKeysSearchedOfflineForOneSlotSpreadWithAKeyedTag(t *testing.T) {
	t.Parallel()
	keys := pinned(30)
	nodes := redistest.StartCluster(t)
	unkeyed, err := New(Config{Addrs: []string{nodes[0].Addr()}})
	require.NoError(t, err)
	t.Cleanup(func() { unkeyed.Close() })
	for _, k := range keys { // the attack works on the unkeyed tag: Redis puts them all in one slot
		assert.Equal(t, keySlot(t, nodes[0], unkeyed.key("fixed_window", keys[0])), keySlot(t, nodes[0], unkeyed.key("fixed_window", k)))
	}

	keyed, err := New(Config{Addrs: []string{nodes[0].Addr()}, TagKey: "deployment secret"})
	require.NoError(t, err)
	t.Cleanup(func() { keyed.Close() })
	other, err := New(Config{Addrs: []string{nodes[0].Addr()}, TagKey: "deployment secret"})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Hour}
	slots := map[uint16]bool{}
	for _, k := range keys {
		_, err := keyed.Decide(ctx, service.Request{Key: k, Limit: l, Cost: 1})
		require.NoError(t, err)
		slots[slotOf(keyed, k)] = true
		assert.Equal(t, keyed.stateKey(l.Kind, k), other.stateKey(l.Kind, k), "replicas with one TagKey agree")
	}
	for _, n := range nodes {
		size, err := n.Do("DBSIZE")
		require.NoError(t, err)
		c, _ := strconv.Atoi(size)
		t.Logf("node %s: %d of %d keys pinned to one slot offline", n.Addr(), c, len(keys))
		assert.Less(t, c, len(keys), "no node holds them all")
	}
	assert.Greater(t, len(slots), len(keys)/2, "the keys have their own slots")
	third, err := New(Config{Addrs: []string{nodes[0].Addr()}, TagKey: "another deployment"})
	require.NoError(t, err)
	t.Cleanup(func() { third.Close() })
	assert.NotEqual(t, keyed.stateKey(l.Kind, keys[0]), third.stateKey(l.Kind, keys[0]), "the tag depends on the secret")
}
