package service

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	s := newRedisStore(t, nodes[0].Addr()) // one seed: the client discovers the others
	ctx := context.Background()
	require.NoError(t, s.Ping(ctx))

	const keys = 60
	for _, k := range algorithms.Kinds {
		l := algorithms.Limit{Kind: k, Quota: 2, Window: time.Hour}
		for i := range keys {
			req := Request{Key: fmt.Sprintf("tenant-%d", i), Limit: l, Cost: 1}
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

	// The hash tag puts every algorithm's key of one descriptor in one slot.
	slot := func(k algorithms.Kind) string {
		v, err := nodes[0].Do("CLUSTER", "KEYSLOT", s.Key(Request{Key: "tenant-7", Limit: algorithms.Limit{Kind: k}}))
		require.NoError(t, err)
		return v
	}
	for _, k := range algorithms.Kinds {
		assert.Equal(t, slot(algorithms.TokenBucket), slot(k), "%v", k)
	}
}
