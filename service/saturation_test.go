package service_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
)

// saturate sends check requests from conns keep-alive connections, as fast as they go, for d, each for
// one of keys random descriptor keys, and returns how many were answered and how many were not 200.
func saturate(t *testing.T, url string, conns, keys int, d time.Duration) (answered, failed int64) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			var body bytes.Buffer
			for time.Now().Before(deadline) {
				body.Reset()
				fmt.Fprintf(&body, `{"descriptors":[{"key":"sat/%d","algorithm":"token_bucket","quota":50,"window_ms":1000}]}`, rng.IntN(keys))
				resp, err := client.Post(url, "application/json", &body)
				if err != nil {
					bad.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					bad.Add(1)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return ok.Load() + bad.Load(), bad.Load()
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// saturateStore serves a handler on store and saturates it; every request must be answered 200 and the
// heap in use may not grow by more than 64 MiB. It returns the requests answered and the heap in use
// before and after.
func saturateStore(t *testing.T, store service.Store, conns, keys int, d time.Duration) (answered int64, before, after uint64) {
	t.Helper()
	h, err := service.NewHandler(service.Config{Store: store, Timeout: time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	before = heapInUse()
	answered, failed := saturate(t, srv.URL+"/v1/check", conns, keys, d)
	after = heapInUse()
	assert.Zero(t, failed, "%d of %d requests failed", failed, answered)
	assert.Less(t, after, before+64<<20, "heap in use grew from %d to %d bytes", before, after)
	return answered, before, after
}

// TestSaturationCausesNoErrorsAndBoundedMemory loads the service as fast as 32 connections go, for
// a bounded time, with far more distinct keys than the memory store may hold: every request must be
// answered 200, and the memory stays bounded (by MaxKeys in memory, by TTLs in Redis).
func TestSaturationCausesNoErrorsAndBoundedMemory(t *testing.T) {
	const conns, keys, maxKeys = 32, 200_000, 5_000
	d := 2 * time.Second
	if testing.Short() {
		d = 500 * time.Millisecond
	}
	t.Run("memory store", func(t *testing.T) {
		store := memstore.New(memstore.Config{MaxKeys: maxKeys})
		defer store.Close()
		answered, before, after := saturateStore(t, store, conns, keys, d)
		held := store.Stats().Keys
		assert.LessOrEqual(t, held, maxKeys, "the store never holds more than MaxKeys")
		t.Logf("memory store: %d requests in %v, 0 errors, %d keys held, heap in use %d → %d KiB", answered, d, held, before>>10, after>>10)
	})
	t.Run("redis store", func(t *testing.T) {
		redis := redistest.Start(t)
		store := newRedisStore(t, redis.Addr())
		answered, before, after := saturateStore(t, store, conns, keys, d)
		n, err := redis.Do("DBSIZE")
		require.NoError(t, err)
		dbsize, _ := strconv.Atoi(n)
		assert.LessOrEqual(t, dbsize, keys, "one key per descriptor key at most")
		key, err := redis.Do("RANDOMKEY")
		require.NoError(t, err)
		if key != "" { // a key is left: it must expire
			ttl, err := redis.Do("PTTL", key)
			require.NoError(t, err)
			if ttl != "-2" { // not expired since
				ms, _ := strconv.Atoi(ttl)
				assert.Positive(t, ms, "every key (%s) has a TTL, so idle keys leave Redis", key)
			}
		}
		t.Logf("redis store: %d requests in %v, 0 errors, %d keys in Redis, heap in use %d → %d KiB", answered, d, dbsize, before>>10, after>>10)
	})
}
