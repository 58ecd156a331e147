package service

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// startCluster starts three cluster-enabled redis-servers on loopback, joins them as a
// Redis Cluster of three masters and waits until every node reports cluster_state:ok.
func startCluster(t *testing.T) []*redisServer {
	t.Helper()
	requireRedisServer(t)
	nodes := make([]*redisServer, 3)
	addrs := make([]string, 3)
	for i := range nodes {
		r := &redisServer{t: t, port: freePort(t, true), dir: t.TempDir()}
		r.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}
		r.start()
		t.Cleanup(r.stop)
		nodes[i], addrs[i] = r, r.addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	for _, n := range nodes {
		waitFor(t, 15*time.Second, "cluster_state:ok on "+n.addr(), func() bool {
			info, err := n.do("CLUSTER", "INFO")
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	return nodes
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	s := newRedisStore(t, nodes[0].addr()) // one seed: the client discovers the others
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
		size, err := n.do("DBSIZE")
		require.NoError(t, err)
		c, _ := strconv.Atoi(size)
		assert.Positive(t, c, "node %s holds keys", n.addr())
		total += c
		t.Logf("node %s: %d keys", n.addr(), c)
	}
	assert.Equal(t, keys*len(algorithms.Kinds), total)

	// The hash tag puts every algorithm's key of one descriptor in one slot.
	slot := func(k algorithms.Kind) string {
		v, err := nodes[0].do("CLUSTER", "KEYSLOT", s.Key(Request{Key: "tenant-7", Limit: algorithms.Limit{Kind: k}}))
		require.NoError(t, err)
		return v
	}
	for _, k := range algorithms.Kinds {
		assert.Equal(t, slot(algorithms.TokenBucket), slot(k), "%v", k)
	}
}
