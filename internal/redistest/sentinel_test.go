package redistest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestASentinelFailoverPromotesTheReplicaAndSaysSo(t *testing.T) {
	s := StartSentinel(t, SentinelConfig{Password: "pw", SentinelPassword: "spw"})
	oldMaster, oldReplica := s.Master(), s.Replica()
	require.NotSame(t, oldMaster, oldReplica)
	_, err := oldMaster.Do("SET", "k", "v")
	require.NoError(t, err)

	switched := s.WatchSwitch()
	s.Failover()
	select {
	case addr := <-switched:
		assert.Equal(t, oldReplica.Addr(), addr, "+switch-master names the replica")
	case <-time.After(clusterPatience):
		t.Fatalf("no +switch-master within %v", clusterPatience)
	}
	assert.Same(t, oldReplica, s.Master())
	WaitFor(t, clusterPatience, "the new master says it is one", func() bool {
		info, err := oldReplica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "role:master")
	})
	v, err := oldReplica.Do("GET", "k")
	require.NoError(t, err)
	assert.Equal(t, "v", v, "the replica had the write")
}

func TestASentinelSetWithoutItsPasswordsIsRefused(t *testing.T) {
	s := StartSentinel(t, SentinelConfig{User: "ml", Password: "pw", SentinelUser: "su", SentinelPassword: "spw"})
	_, err := Do(s.Sentinels[0].Addr(), "SENTINEL", "MASTERS")
	assert.ErrorContains(t, err, "NOAUTH", "the sentinel wants its user")
	_, err = Do(s.Master().Addr(), "PING")
	assert.ErrorContains(t, err, "NOAUTH", "the master wants its user")
	v, err := s.Master().Strings("ACL", "WHOAMI")
	require.NoError(t, err)
	assert.Equal(t, []string{"ml"}, v)
}
