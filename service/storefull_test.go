package service_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// A flood of new keys that filled Redis (noeviction, maxmemory) was a global outage: every
// check, an existing key's too, got 503 store full, and /readyz failed on every replica at
// once, so the proxies fell to their failure_mode. Now a key Redis holds is still decided
// exactly while Redis refuses new writes (its script may run out of memory, updating the key
// in place, and refuses a key that does not exist); a new key gets 503 store full, counted and
// logged; and /readyz stays 200, since every replica shares the condition.
func TestExistingKeysAreDecidedExactlyWhileRedisIsFull(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	store := newRedisStore(t, rs.Addr())
	h := newTestHandler(t, service.Config{Store: store, Timeout: time.Second})
	ctx := context.Background()
	algos := []algorithms.Limit{
		{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Hour},
		{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Hour},
		{Kind: algorithms.SlidingWindow, Quota: 10, Window: time.Hour},
	}
	for _, l := range algos { // three clients charge 3 of 10 before the flood
		for range 3 {
			_, err := store.Decide(ctx, service.Request{Key: "existing/" + l.Kind.String(), Limit: l, Cost: 1})
			require.NoError(t, err)
		}
	}
	full := func() bool { return strings.Contains(infoOf(t, rs, "errorstats"), "errorstat_OOM:") }
	flood(t, store, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}, 200_000, full)
	require.True(t, full(), "Redis refused writes")
	// Once the flood stops, used_memory sits a few KB either side of maxmemory (client
	// buffers): lower maxmemory well under it, so that Redis stays full for the rest.
	_, err := rs.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(infoIntOf(t, rs, "used_memory")/2, 10))
	require.NoError(t, err)

	for _, l := range algos {
		for i := range 8 { // 3 used: 7 more are admitted, with exact remaining, then denied
			d, err := store.Decide(ctx, service.Request{Key: "existing/" + l.Kind.String(), Limit: l, Cost: 1})
			require.NoError(t, err, "%v decision %d", l.Kind, i)
			assert.Equal(t, i < 7, d.Allowed, "%v decision %d", l.Kind, i)
			if i < 7 {
				assert.Equal(t, int64(6-i), d.Remaining, "%v decision %d", l.Kind, i)
			}
		}
	}
	refused := 0
	for i := range 50 { // new keys: refused while Redis stays full
		code, body := serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"newcomer/`+strconv.Itoa(i)+`","algorithm":"fixed_window","quota":3,"window_ms":3600000}]}`)
		if code == http.StatusServiceUnavailable {
			assert.JSONEq(t, `{"error":"store full: Redis refuses writes for lack of memory"}`, body)
			refused++
		}
	}
	assert.Equal(t, 50, refused, "new keys refused")
	code, body := serve(h, "GET", "/readyz", "")
	assert.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "store full")
	_, metrics := serve(h, "GET", "/metrics", "")
	assert.Contains(t, metrics, `meshlimit_errors_total{kind="store_full"} `+strconv.Itoa(refused)+"\n")
}

// While Redis is full, a new client fell to its rule's failure_mode (allow by default): 43–47
// of 50 new clients failed open. With FullFallback, as cmd/meshlimit-service runs the Redis
// store, a new key is decided in the replica's memory: every new client is limited (by this
// replica's count), none fails open, and the fallbacks are counted.
func TestNewClientsWhileRedisIsFullAreLimitedInTheReplicasMemory(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	redis := newRedisStore(t, rs.Addr())
	store := &service.FullFallback{Store: redis, Local: newMemoryStore(t)}
	h := newTestHandler(t, service.Config{Store: store, Timeout: time.Second})
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}
	_, err := store.Decide(ctx, service.Request{Key: "existing", Limit: l, Cost: 3})
	require.NoError(t, err)
	full := func() bool { return strings.Contains(infoOf(t, rs, "errorstats"), "errorstat_OOM:") }
	flood(t, redis, l, 200_000, full)
	require.True(t, full(), "Redis refused writes")
	_, err = rs.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(infoIntOf(t, rs, "used_memory")/2, 10))
	require.NoError(t, err)

	const clients = 50
	failedOpen := 0
	for i := range clients {
		body := `{"descriptors":[{"key":"newcomer/` + strconv.Itoa(i) + `","algorithm":"fixed_window","quota":3,"window_ms":3600000}]}`
		for j := range 4 { // 3 admitted, the 4th denied: limited, not failed open
			code, answer := serve(h, "POST", "/v1/check", body)
			if code != http.StatusOK || decodeAnswer(t, answer).Allowed != (j < 3) {
				failedOpen++
				break
			}
		}
	}
	assert.Zero(t, failedOpen, "new clients not limited while Redis is full")
	d, err := store.Decide(ctx, service.Request{Key: "existing", Limit: l, Cost: 1})
	require.NoError(t, err)
	assert.False(t, d.Allowed, "an existing key is still Redis's: exhausted before, denied now")
	_, metrics := serve(h, "GET", "/metrics", "")
	assert.Contains(t, metrics, "meshlimit_store_full_fallbacks_total "+strconv.Itoa(clients*4)+"\n")
}

// A check of several descriptors goes to Redis as one script (service.BatchDecider); while
// Redis is full the script is refused before it writes, and FullFallback decides the
// descriptors one by one as it decides a single one: the key Redis holds in Redis, exactly, the
// new key in the replica's memory.
func TestABatchWhileRedisIsFullDecidesItsDescriptorsOneByOne(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	redis := newRedisStore(t, rs.Addr())
	store := &service.FullFallback{Store: redis, Local: newMemoryStore(t)}
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Hour}
	_, err := store.Decide(ctx, service.Request{Key: "held", Limit: l, Cost: 4})
	require.NoError(t, err)
	full := func() bool { return strings.Contains(infoOf(t, rs, "errorstats"), "errorstat_OOM:") }
	flood(t, redis, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}, 200_000, full)
	require.True(t, full(), "Redis refused writes")
	_, err = rs.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(infoIntOf(t, rs, "used_memory")/2, 10))
	require.NoError(t, err)

	reqs := []service.Request{{Key: "held", Limit: l, Cost: 1}, {Key: "newcomer", Limit: l, Cost: 3}, {Key: "held", Limit: l, Cost: 1}}
	out := make([]algorithms.Decision, len(reqs))
	n, err := service.DecideAll(ctx, store, reqs, out)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	assert.Equal(t, []bool{true, true, true}, []bool{out[0].Allowed, out[1].Allowed, out[2].Allowed})
	assert.Equal(t, []int64{5, 7, 4}, []int64{out[0].Remaining, out[1].Remaining, out[2].Remaining},
		"the held key is Redis's (10-4-1, then -1 more), the newcomer the replica's (10-3)")
	assert.Equal(t, int64(1), store.Stats().FullFallbacks, "the newcomer alone was decided in memory")
}
