package redisstore

import (
	"context"
	"crypto/tls"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/storetest"
)

// openStore returns a Store of cfg, closed when the test ends.
func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// sentinelConfig is the Config of a store on the Sentinel set s made with sc, over TLS with tc
// when it is not nil.
func sentinelConfig(s *redistest.Sentinels, sc redistest.SentinelConfig, tc *tls.Config) Config {
	return Config{
		Addrs: s.Addrs(), Username: sc.User, Password: sc.Password, TLS: tc,
		Sentinel: Sentinel{MasterSet: redistest.MasterName, Username: sc.SentinelUser, Password: sc.SentinelPassword, TLS: tc},
	}
}

// The Redis store keeps the contract over TLS (with a client certificate) and through Sentinel
// (ACL users on the master and on the sentinels, every connection over TLS).
func TestTheRedisStoreKeepsTheStoreContractOverTLSAndThroughSentinel(t *testing.T) {
	t.Parallel()
	pki := redistest.NewPKI(t)
	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		rs := redistest.StartTLS(t, redistest.TLS{PKI: pki, AuthClients: true})
		storetest.Run(t, func(t *testing.T) service.Store {
			return openStore(t, Config{Addrs: []string{rs.Addr()}, TLS: pki.ClientConfig()})
		})
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		sc := redistest.SentinelConfig{User: "meshlimit", Password: "pw", SentinelUser: "watcher", SentinelPassword: "spw", TLS: pki}
		set := redistest.StartSentinel(t, sc)
		storetest.Run(t, func(t *testing.T) service.Store { return openStore(t, sentinelConfig(set, sc, pki.ClientConfig())) })
	})
}

// A Sentinel store that cannot authenticate, or whose master set the sentinels do not monitor,
// fails to start, and says which.
func TestASentinelStoreThatCannotReachItsMasterFailsToStartSayingWhy(t *testing.T) {
	t.Parallel()
	sc := redistest.SentinelConfig{Password: "pw", SentinelPassword: "spw"}
	set := redistest.StartSentinel(t, sc)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"a wrong sentinel password", func(c *Config) { c.Sentinel.Password = "nope" }, []string{`sentinel master set "meshlimit"`, "WRONGPASS"}},
		{"a wrong master password", func(c *Config) { c.Password = "nope" }, []string{`sentinel master set "meshlimit"`, "WRONGPASS"}},
		{"an unknown master set", func(c *Config) { c.Sentinel.MasterSet = "other" }, []string{`sentinel master set "other"`, "No such master with that name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sentinelConfig(set, sc, nil)
			tc.edit(&cfg)
			_, err := New(cfg)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

// After a Sentinel failover the store decides on the new master without a restart, and the
// counts the replica had received before the failover are kept.
func TestTheStoreFollowsASentinelFailoverKeepingReplicatedCounts(t *testing.T) {
	t.Parallel()
	sc := redistest.SentinelConfig{Password: "pw"}
	set := redistest.StartSentinel(t, sc)
	s := openStore(t, sentinelConfig(set, sc, nil))
	ctx := context.Background()
	req := service.Request{Key: "before the failover", Limit: algorithms.Limit{Kind: algorithms.SlidingLog, Quota: 10, Window: 400 * 24 * time.Hour}, Cost: 3}
	d, err := s.Decide(ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(7), d.Remaining)
	oldMaster, replica := set.Master(), set.Replica()
	acked, err := oldMaster.Do("WAIT", "1", "60000")
	require.NoError(t, err)
	require.Equal(t, "1", acked, "the replica has the count")
	assert.Equal(t, []string{oldMaster.Addr()}, slices.Collect(maps.Keys(s.client.Nodes())))

	switched := set.WatchSwitch()
	set.Failover()
	select {
	case addr := <-switched:
		require.Equal(t, replica.Addr(), addr)
	case <-time.After(2 * time.Minute):
		t.Fatal("no +switch-master within 2 minutes")
	}
	// The client switches on the +switch-master of the sentinel it subscribed to, which may come
	// after the one the test saw: until then its writes go to the old master, which takes them
	// until the sentinels make it a replica (and they are lost then).
	redistest.WaitFor(t, time.Minute, "the store on the new master", func() bool {
		return slices.Equal([]string{replica.Addr()}, slices.Collect(maps.Keys(s.client.Nodes())))
	})
	req.Cost = 1
	redistest.WaitFor(t, time.Minute, "a decision on the new master", func() bool {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		d, err = s.Decide(dctx, req)
		return err == nil
	})
	assert.Equal(t, int64(6), d.Remaining, "the 3 units charged before the failover are kept")
	redistest.WaitFor(t, time.Minute, "ready on the new master", func() bool { return s.Ping(ctx) == nil })
}

// The Redis store keeps the contract on Valkey, which speaks Redis's protocol and runs its Lua
// (skipped where valkey-server is not installed: Debian 12 has no package of it).
func TestTheRedisStoreKeepsTheStoreContractOnValkey(t *testing.T) {
	t.Parallel()
	vs := redistest.StartValkey(t)
	storetest.Run(t, func(t *testing.T) service.Store { return openStore(t, Config{Addrs: []string{vs.Addr()}}) })
}
