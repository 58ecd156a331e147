package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// keySlot returns the Cluster slot of a Redis key, as node answers it.
func keySlot(t *testing.T, node *redistest.Server, key string) string {
	t.Helper()
	v, err := node.Do("CLUSTER", "KEYSLOT", key)
	require.NoError(t, err)
	return v
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t)
	s := newStore(t, nodes[0].Addr()) // one seed: the client discovers the others
	ctx := context.Background()
	require.NoError(t, s.Ping(ctx))

	const keys = 60
	now := time.Now() // one decision time: a fixed window of an hour cannot turn between the three
	for _, k := range algorithms.Kinds {
		l := algorithms.Limit{Kind: k, Quota: 2, Window: time.Hour}
		for i := range keys {
			req := service.Request{Key: fmt.Sprintf("tenant-%d", i), Limit: l, Cost: 1, Now: now}
			for j, want := range []bool{true, true, false} {
				d, err := s.Decide(ctx, req)
				require.NoError(t, err)
				require.Equal(t, want, d.Allowed, "%v key %d request %d", k, i, j)
			}
		}
	}
	total := 0
	for _, n := range nodes {
		size, err := n.Do("DBSIZE")
		require.NoError(t, err)
		c, _ := strconv.Atoi(size)
		assert.Positive(t, c, "node %s holds keys", n.Addr())
		total += c
		t.Logf("node %s: %d keys", n.Addr(), c)
	}
	assert.Equal(t, keys*len(algorithms.Kinds), total)

	// The hash tag puts every algorithm's key of one descriptor in one slot, and its window
	// counters and permits with them.
	slot := keySlot(t, nodes[0], s.stateKey(algorithms.TokenBucket, "tenant-7"))
	for _, k := range algorithms.Kinds {
		assert.Equal(t, slot, keySlot(t, nodes[0], s.stateKey(k, "tenant-7")), "%v", k)
	}
	assert.Equal(t, slot, keySlot(t, nodes[0], s.windowKey("tenant-7", 1_700_000_000_000_000)), "a window counter")
	assert.Equal(t, slot, keySlot(t, nodes[0], s.permitKey("tenant-7")), "the permits")
	logKeys := s.resetKeys()
	assert.Equal(t, keySlot(t, nodes[0], logKeys[0]), keySlot(t, nodes[0], logKeys[1]), "the reset log's two keys share a slot")
}

// A key's permits live in the Cluster slot of its counters (one hash tag), and every key's
// permits are bounded wherever its slot is.
func TestPermitsInARedisCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t)
	s := newStore(t, nodes[0].Addr())
	ctx := context.Background()
	for i := range 30 {
		key := fmt.Sprintf("tenant-%d}{x", i) // a brace in the key cannot choose the slot
		for j, want := range []bool{true, true, false} {
			r, err := s.Acquire(ctx, service.PermitRequest{Key: key, Permit: fmt.Sprint(j), Limit: 2, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, want, r.Allowed, "key %d permit %d", i, j)
		}
		held, err := s.Release(ctx, service.PermitRequest{Key: key, Permit: "0"})
		require.NoError(t, err)
		assert.True(t, held)
		renewed, err := s.Renew(ctx, service.PermitRequest{Key: key, Permit: "1", Lease: time.Minute})
		require.NoError(t, err)
		assert.True(t, renewed)
	}
	key := "tenant-7}{x"
	assert.Equal(t, keySlot(t, nodes[0], s.stateKey(algorithms.TokenBucket, key)), keySlot(t, nodes[0], s.permitKey(key)))
	// KEYS answers from the node's own slots: each node holds some of the 30 permit sets (one per
	// key), and together they hold them all.
	total := 0
	for _, n := range nodes {
		sets, err := n.Strings("KEYS", "ml:*:concurrency:*")
		require.NoError(t, err)
		t.Logf("node %s: %d permit sets", n.Addr(), len(sets))
		assert.NotEmpty(t, sets, "node %s holds permit sets", n.Addr())
		total += len(sets)
	}
	assert.Equal(t, 30, total, "one permit set per key, on the node of its slot")
}

// A key holding "}" used to end the Redis hash tag early ("ml:{rule/}x}:..." is slot of
// "rule/"), so a client could pin every counter of a rule to one Cluster node. The tag is now a
// hash of the whole key: such keys spread over the nodes like any others.
func TestKeysWithABraceSpreadOverTheClusterLikeAnyOthers(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t)
	s := newStore(t, nodes[0].Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Hour}
	const keys = 90
	for i := range keys {
		_, err := s.Decide(ctx, service.Request{Key: "plugin/rule/}" + strconv.Itoa(i) + "{x}", Limit: l, Cost: 1})
		require.NoError(t, err)
	}
	for _, n := range nodes {
		size, err := n.Do("DBSIZE")
		require.NoError(t, err)
		c, _ := strconv.Atoi(size)
		t.Logf("node %s: %d of %d keys", n.Addr(), c, keys)
		assert.Positive(t, c, "node %s holds some of the keys", n.Addr())
		assert.Less(t, c, keys, "no node holds them all")
	}
	assert.Regexp(t, `^ml:\{[0-9a-f]{16}\}:fixed_window:a\}b$`, s.stateKey(l.Kind, "a}b"))
}
