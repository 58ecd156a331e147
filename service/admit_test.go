package service_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// tallyStore counts the store calls that reach it; with hold set, its first Release waits
// until the test closes the channel it hands over on hold.
type tallyStore struct {
	service.Store
	calls atomic.Int64
	hold  chan chan struct{}
	held  atomic.Bool
}

func (s *tallyStore) Decide(ctx context.Context, r service.Request) (algorithms.Decision, error) {
	s.calls.Add(1)
	return s.Store.Decide(ctx, r)
}

func (s *tallyStore) Settle(ctx context.Context, r service.SettleRequest) (int64, error) {
	s.calls.Add(1)
	return s.Store.Settle(ctx, r)
}

func (s *tallyStore) Acquire(ctx context.Context, r service.PermitRequest) (service.PermitResult, error) {
	s.calls.Add(1)
	return s.Store.Acquire(ctx, r)
}

func (s *tallyStore) Renew(ctx context.Context, r service.PermitRequest) (bool, error) {
	s.calls.Add(1)
	return s.Store.Renew(ctx, r)
}

func (s *tallyStore) Release(ctx context.Context, r service.PermitRequest) (bool, error) {
	s.calls.Add(1)
	if s.hold != nil && s.held.CompareAndSwap(false, true) {
		done := make(chan struct{})
		s.hold <- done
		<-done
	}
	return s.Store.Release(ctx, r)
}

// admitCheck is a check of every list: a release, a renewal, a settle and 16 descriptors (19
// units of work: past a gate of 16, which admits it as 16).
var admitCheck = `{"release":[{"key":"gpu","permit":"old"}],` +
	`"renew":[{"key":"gpu","permit":"kept","lease_ms":60000}],` +
	`"settle":[{"key":"tokens","algorithm":"token_bucket","quota":10,"window_ms":60000,"delta":-1}],` +
	`"descriptors":[` + sixteen + `]}`

var sixteen = func() string {
	s := ""
	for i := range 16 {
		if i > 0 {
			s += ","
		}
		s += `{"key":"rate/` + string(rune('a'+i)) + `","algorithm":"fixed_window","quota":5,"window_ms":60000}`
	}
	return s
}()

// admitFixture is a handler on a Gate of 16 units in front of a tallyStore on a real
// redis-server, which holds permits "old" and "kept" of key gpu.
func admitFixture(t *testing.T, hold chan chan struct{}) (*service.Handler, *service.Gate, *tallyStore) {
	t.Helper()
	redistest.Require(t)
	rs := redistest.Start(t)
	tally := &tallyStore{Store: newRedisStore(t, rs.Addr()), hold: hold}
	for _, p := range []string{"old", "kept"} {
		r, err := tally.Store.Acquire(context.Background(), service.PermitRequest{Key: "gpu", Permit: p, Limit: 2, Lease: time.Minute})
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	g := service.NewGate(tally, service.GateConfig{MaxWork: 16, StoreTimeout: time.Minute})
	return newTestHandler(t, service.Config{Store: g, Timeout: 50 * time.Millisecond}), g, tally
}

// held is the number of permits of key gpu held in the store.
func heldPermits(t *testing.T, s service.Store) int64 {
	r, err := s.Acquire(context.Background(), service.PermitRequest{Key: "gpu", Permit: "probe", Limit: 1, Lease: time.Minute})
	require.NoError(t, err)
	return r.Held - map[bool]int64{true: 1, false: 0}[r.Allowed]
}

func TestACheckWhoseListsTheGateCannotAdmitDoesNoStoreWorkAtAll(t *testing.T) {
	h, g, tally := admitFixture(t, nil)
	// 15 of the 16 units are taken: each list's calls would fit one by one, the whole check not.
	_, release, err := g.Admit(context.Background(), 15)
	require.NoError(t, err)
	defer release()
	code, body := serve(h, http.MethodPost, "/v1/check", admitCheck)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Zero(t, tally.calls.Load(), "no release, renewal, settle or descriptor reached the store")
	assert.Equal(t, int64(2), heldPermits(t, tally.Store), "the permit to release is still held")
	assert.Equal(t, int64(1), g.Stats().Overloaded, "one refusal: the whole check")
}

func TestARenewListRefusedIsRefusedBeforeAnyRenewalRuns(t *testing.T) {
	h, g, tally := admitFixture(t, nil)
	_, release, err := g.Admit(context.Background(), 15)
	require.NoError(t, err)
	defer release()
	code, body := serve(h, http.MethodPost, "/v1/check",
		`{"renew":[{"key":"gpu","permit":"kept","lease_ms":60000},{"key":"gpu","permit":"old","lease_ms":60000}]}`)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Zero(t, tally.calls.Load(), "not the first renewal either")
}

func TestACheckAdmittedWholeIsAnsweredWholeEvenWhenTheGateFillsBehindIt(t *testing.T) {
	hold := make(chan chan struct{})
	h, g, tally := admitFixture(t, hold)
	answered := make(chan string, 1)
	go func() {
		code, body := serve(h, http.MethodPost, "/v1/check", admitCheck)
		if code != http.StatusOK {
			body = http.StatusText(code) + ": " + body
		}
		answered <- body
	}()
	done := <-hold // the check was admitted whole: its release is at the store
	// Behind it, another request waits for room, and holds all of it until the check is answered.
	errc, over := make(chan error, 1), make(chan struct{})
	go func() {
		_, release, err := g.Admit(context.Background(), 16)
		<-over
		release()
		errc <- err
	}()
	waitQueued(g, 1)
	close(done)
	body := <-answered
	close(over)
	assert.Contains(t, body, `"renewed":1,"released":1`, "every list was done and answered")
	assert.Contains(t, body, `"settled":1`)
	assert.Contains(t, body, `{"allowed":true,"decisions":[`)
	assert.Equal(t, int64(1+1+1+16), tally.calls.Load(), "each of its calls reached the store once")
	require.NoError(t, <-errc, "the request behind it is admitted when the check is done")
	assert.Zero(t, g.Stats().Overloaded)
}
