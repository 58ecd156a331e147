package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// During a rolling upgrade a service of the earlier version keeps its sliding logs in the text
// form under "sliding_log" keys and starts afresh on anything else it finds there. The ring lives
// under a kind of its own, so neither version's decisions wipe the other's log: the older
// replica's log is left byte for byte, and the newer one's count survives the older one's writes.
func TestAnOlderReplicasSlidingLogAndTheRingNeverWipeEachOther(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.SlidingLog, Quota: 3, Window: time.Hour}
	oldKey := s.key(algorithms.SlidingLog.String(), "k")
	require.NotEqual(t, oldKey, s.stateKey(l.Kind, "k"))

	now := time.Now().UnixMicro()
	older := "123 100 1" // what the earlier version wrote: clock 123, one unit at 100
	_, err := rs.Do("SET", oldKey, older)
	require.NoError(t, err)
	for i := range 4 {
		d, err := s.Decide(ctx, service.Request{Key: "k", Limit: l, Cost: 1, Now: time.UnixMicro(now + int64(i))})
		require.NoError(t, err)
		assert.Equal(t, i < 3, d.Allowed, "decision %d counts only the ring's own units", i)
		got, err := rs.Do("GET", oldKey)
		require.NoError(t, err)
		assert.Equal(t, older, got, "the older replica's log is untouched")
	}
	_, err = rs.Do("SET", oldKey, "garbage the older replica would write afresh")
	require.NoError(t, err)
	d, err := s.Decide(ctx, service.Request{Key: "k", Limit: l, Cost: 1, Now: time.UnixMicro(now + 10)})
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the ring's count survives whatever the older replica writes")
}
