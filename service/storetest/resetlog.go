package storetest

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/service"
)

// testResetLog checks the reset log: positions from its origin, filtered by prefix, in pages,
// bounded to the last service.ResetLogSize entries.
func testResetLog(t *testing.T, s service.Store) {
	ctx := context.Background()
	read := func(since uint64, prefix string, max int) service.ResetPage {
		t.Helper()
		p, err := s.ReadResets(ctx, since, prefix, max)
		require.NoError(t, err)
		return p
	}
	appendN := func(plugin string, n int) uint64 {
		t.Helper()
		keys := make([]string, n)
		for i := range keys {
			keys[i] = plugin + "/login/7/user-" + strconv.Itoa(i)
		}
		seq, err := s.AppendResets(ctx, keys)
		require.NoError(t, err)
		return seq
	}
	t.Run("a log never written to is at its origin, 1, and holds nothing", func(t *testing.T) {
		assert.Equal(t, service.ResetPage{Latest: 1, Oldest: 2}, read(0, "", 10))
	})
	t.Run("entries of a prefix come in order, in pages", func(t *testing.T) {
		appendN("ns.q", 3)
		latest := appendN("ns.p", 5)
		p := read(1, "ns.p/", 3)
		assert.Equal(t, latest, p.Latest)
		require.Len(t, p.Entries, 3)
		assert.True(t, p.More)
		assert.Equal(t, []uint64{latest - 4, latest - 3, latest - 2}, []uint64{p.Entries[0].Seq, p.Entries[1].Seq, p.Entries[2].Seq})
		assert.Equal(t, "ns.p/login/7/user-0", p.Entries[0].Key)
		rest := read(p.Entries[2].Seq, "ns.p/", 3)
		assert.Len(t, rest.Entries, 2)
		assert.False(t, rest.More)
		assert.Empty(t, read(1, "ns.p/", 0).Entries, "max 0 reads the bounds only")
	})
	t.Run("the log keeps only the last 1024 resets", func(t *testing.T) {
		latest := appendN("ns.p", 3*service.ResetLogSize/2)
		p := read(1, "ns.p/", 2*service.ResetLogSize)
		assert.Equal(t, latest, p.Latest)
		assert.Equal(t, latest-service.ResetLogSize+1, p.Oldest)
		require.Len(t, p.Entries, service.ResetLogSize)
		assert.Equal(t, "ns.p/login/7/user-"+strconv.Itoa(service.ResetLogSize/2), p.Entries[0].Key)
		for i, e := range p.Entries {
			assert.Equal(t, p.Oldest+uint64(i), e.Seq)
		}
	})
}
