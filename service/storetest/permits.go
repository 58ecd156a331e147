package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/service"
)

// testPermits checks the permits, on the store's clock given explicitly.
func testPermits(t *testing.T, s service.Store) {
	ctx := context.Background()
	t0 := time.UnixMicro(1_800_000_000_000_000)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	acquire := func(key, id string, now time.Time) service.PermitResult {
		t.Helper()
		r, err := s.Acquire(ctx, service.PermitRequest{Key: key, Permit: id, Limit: 2, Lease: time.Second, Now: now})
		require.NoError(t, err)
		return r
	}
	t.Run("at most the limit are held at once, and a release frees one", func(t *testing.T) {
		assert.Equal(t, service.PermitResult{Allowed: true, Held: 1}, acquire("bound", "a", at(0)))
		assert.Equal(t, service.PermitResult{Allowed: true, Held: 2}, acquire("bound", "b", at(0)))
		assert.Equal(t, service.PermitResult{Allowed: false, Held: 2}, acquire("bound", "c", at(0)))
		held, err := s.Release(ctx, service.PermitRequest{Key: "bound", Permit: "a"})
		require.NoError(t, err)
		assert.True(t, held)
		assert.Equal(t, service.PermitResult{Allowed: true, Held: 2}, acquire("bound", "c", at(0)))
	})
	t.Run("a retried acquire of a held permit is admitted and counted once", func(t *testing.T) {
		acquire("retry", "a", at(0))
		assert.Equal(t, service.PermitResult{Allowed: true, Held: 1}, acquire("retry", "a", at(time.Millisecond)))
		assert.Equal(t, service.PermitResult{Allowed: true, Held: 2}, acquire("retry", "b", at(time.Millisecond)))
	})
	t.Run("a permit neither renewed nor released is reclaimed at the end of its lease", func(t *testing.T) {
		acquire("lease", "a", at(0))
		acquire("lease", "b", at(500*time.Millisecond))
		assert.False(t, acquire("lease", "c", at(999*time.Millisecond)).Allowed, "a's lease has not ended")
		assert.Equal(t, service.PermitResult{Allowed: true, Held: 2, Reclaimed: 1}, acquire("lease", "c", at(time.Second)))
		renewed, err := s.Renew(ctx, service.PermitRequest{Key: "lease", Permit: "a", Lease: time.Second, Now: at(time.Second)})
		require.NoError(t, err)
		assert.False(t, renewed, "a reclaimed permit is not renewed: its slot is c's")
	})
	t.Run("a renewed permit outlives its first lease", func(t *testing.T) {
		acquire("renew", "a", at(0))
		renewed, err := s.Renew(ctx, service.PermitRequest{Key: "renew", Permit: "a", Lease: time.Second, Now: at(900 * time.Millisecond)})
		require.NoError(t, err)
		assert.True(t, renewed)
		acquire("renew", "b", at(1800*time.Millisecond))
		assert.Equal(t, service.PermitResult{Allowed: false, Held: 2}, acquire("renew", "c", at(1800*time.Millisecond)))
		assert.Equal(t, service.PermitResult{Allowed: true, Held: 2, Reclaimed: 1}, acquire("renew", "c", at(1900*time.Millisecond)))
	})
	t.Run("releasing a permit that is not held changes nothing", func(t *testing.T) {
		acquire("twice", "a", at(0))
		for i, want := range []bool{true, false} {
			held, err := s.Release(ctx, service.PermitRequest{Key: "twice", Permit: "a"})
			require.NoError(t, err)
			assert.Equal(t, want, held, "release %d", i)
		}
		held, err := s.Release(ctx, service.PermitRequest{Key: "never", Permit: "x"})
		require.NoError(t, err)
		assert.False(t, held)
	})
	t.Run("keys do not share permits", func(t *testing.T) {
		acquire("k1", "a", at(0))
		acquire("k1", "b", at(0))
		assert.True(t, acquire("k2", "a", at(0)).Allowed)
	})
	t.Run("a request without a key, an id, a lease or a limit is refused", func(t *testing.T) {
		_, err := s.Acquire(ctx, service.PermitRequest{Key: "k", Permit: "a", Limit: 1})
		assert.Error(t, err)
		_, err = s.Acquire(ctx, service.PermitRequest{Key: "k", Limit: 1, Lease: time.Second})
		assert.Error(t, err)
		_, err = s.Acquire(ctx, service.PermitRequest{Key: "k", Permit: "a", Lease: time.Second})
		assert.Error(t, err)
		_, err = s.Renew(ctx, service.PermitRequest{Key: "k", Permit: "a"})
		assert.Error(t, err)
		_, err = s.Release(ctx, service.PermitRequest{Permit: "a"})
		assert.Error(t, err)
	})
}
