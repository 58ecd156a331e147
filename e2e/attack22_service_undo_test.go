package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/redisstore"
)

func a22Post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	r, err := http.Post(url+"/v1/check", "application/json", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

func a22Admits(t *testing.T, url, desc string, n int) (admitted int) {
	for range n {
		code, b := a22Post(t, url, `{"descriptors":[`+desc+`]}`)
		require.Equal(t, 200, code, b)
		var a struct{ Allowed bool }
		require.NoError(t, json.Unmarshal([]byte(b), &a))
		if a.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestAttackServiceUndoProbe: what the service does with undo entries no admission justifies: a
// huge undo on an exhausted key, an undo on a fresh key, the same undo replayed.
func TestAnUndoNoAdmissionJustifiesNeverLeavesACounterFullerThanFresh(t *testing.T) {
	stores := map[string]func(t *testing.T) service.Store{
		"memstore": func(t *testing.T) service.Store {
			clock := envoyhost.NewClock(epoch)
			s := memstore.New(memstore.Config{SweepInterval: -1, Clock: clock.Now})
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"redis": func(t *testing.T) service.Store {
			r := redistest.Start(t)
			s, err := redisstore.New(redisstore.Config{Addrs: []string{r.Addr()}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for _, st := range []string{"memstore", "redis"} {
		for _, alg := range []string{"token_bucket", "fixed_window", "sliding_log", "sliding_window"} {
			t.Run(st+"/"+alg, func(t *testing.T) {
				h, err := service.NewHandler(service.Config{Store: stores[st](t), Timeout: time.Second})
				require.NoError(t, err)
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				lim := func(key string) string {
					return fmt.Sprintf(`"key":%q,"algorithm":%q,"quota":5,"window_ms":600000`, key, alg)
				}
				undo := func(key string, delta int64) (int, string) {
					return a22Post(t, srv.URL, `{"settle":[{`+lim(key)+fmt.Sprintf(`,"undo":true,"delta":%d,"age_ms":0}]}`, delta))
				}
				// 1. exhausted key, one huge undo
				first := a22Admits(t, srv.URL, `{`+lim("k1")+`}`, 5)
				c, b := undo("k1", -1_000_000)
				huge := a22Admits(t, srv.URL, `{`+lim("k1")+`}`, 50)
				// 2. fresh key, undo first
				c2, b2 := undo("k2", -1_000_000)
				fresh := a22Admits(t, srv.URL, `{`+lim("k2")+`}`, 50)
				// 3. one admission, its undo replayed 10 times, then as many as admitted
				a22Admits(t, srv.URL, `{`+lim("k3")+`}`, 5)
				for range 10 {
					undo("k3", -1)
				}
				replay := a22Admits(t, srv.URL, `{`+lim("k3")+`}`, 50)
				t.Logf("%s %s: exhausted %d/5, huge undo (%d %s) then %d of 50 admitted; fresh-key undo (%d %s) then %d of 50; 10 replayed undos then %d of 50 (quota 5)",
					st, alg, first, c, b, huge, c2, b2, fresh, replay)
				assert.LessOrEqual(t, huge, 5)
				assert.LessOrEqual(t, fresh, 5)
				assert.LessOrEqual(t, replay, 5)
			})
		}
	}
}
