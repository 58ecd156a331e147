package rls

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// erringStore fails every decision and every count with err, or, for a nil err, when the
// request's context ends (a Redis that does not answer).
type erringStore struct {
	service.Store
	err error
}

func (s erringStore) fail(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s erringStore) Decide(ctx context.Context, _ service.Request) (algorithms.Decision, error) {
	return algorithms.Decision{}, s.fail(ctx)
}

func (s erringStore) CountWindow(ctx context.Context, _ service.CountRequest) (int64, time.Duration, error) {
	return 0, 0, s.fail(ctx)
}

// storeDurations is the number of store calls meshlimit_store_duration_seconds has observed.
func storeDurations(t *testing.T, sm *service.Metrics) uint64 {
	t.Helper()
	fams, err := sm.Registry().Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == "meshlimit_store_duration_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// A store failure or timeout on the RLS fronts (gRPC and /json) is counted on
// meshlimit_errors_total by kind, and every store call on meshlimit_store_duration_seconds: the
// series MeshlimitStoreUnavailable and the dashboard's store panels read, as for /v1/check.
func TestAStoreFailureOnTheRLSFrontsIsCountedWhereTheAlertsLook(t *testing.T) {
	for _, tc := range []struct {
		name, kind string
		err        error
		timeout    time.Duration // long where the store fails at once: the kind is not the deadline's
	}{
		{"a store that fails", "store", context.Canceled, time.Hour},
		{"a store that does not answer in time", "timeout", nil, time.Millisecond},
		{"a full store", "store_full", service.ErrStoreFull, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sm := service.NewMetrics()
			rules := goodRules(t)
			s, err := NewServer(Config{Store: erringStore{memoryStore(t), tc.err}, Rules: func() *rlsconfig.Config { return rules },
				Metrics: NewMetrics(sm), Timeout: tc.timeout, Now: func() time.Time { return minuteStart }})
			require.NoError(t, err)
			_, err = s.ShouldRateLimit(context.Background(), req("mongo_cps", desc("database", "users")))
			require.Error(t, err)
			rec := httptest.NewRecorder()
			s.JSONHandler().ServeHTTP(rec, httptest.NewRequest("POST", "/json",
				strings.NewReader(`{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`)))
			assert.NotEqual(t, http.StatusOK, rec.Code)

			assert.Equal(t, 2.0, counters(t, sm, "meshlimit_errors_total")["kind="+tc.kind], "one per front")
			assert.Equal(t, uint64(2), storeDurations(t, sm), "one store call per front")
		})
	}
}
