package rls

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// countingStore counts the store calls made through it.
type countingStore struct {
	service.Store
	calls atomic.Int64
}

func (c *countingStore) Decide(ctx context.Context, r service.Request) (algorithms.Decision, error) {
	c.calls.Add(1)
	return c.Store.Decide(ctx, r)
}

func (c *countingStore) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	c.calls.Add(1)
	return c.Store.CountWindow(ctx, r)
}

// manyDescriptors returns n descriptors that each match edge_proxy_per_ip's rule, each its own
// counter (as the attack sent them).
func manyDescriptors(n int) []*rlext.RateLimitDescriptor {
	ds := make([]*rlext.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc("remote_address", fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255))
	}
	return ds
}

// processCPU is the CPU time the process has used (user and system).
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The attack: 80,000 descriptors in one ShouldRateLimit cost 20 s of service CPU. Now
// the call is refused before anything is counted: by its size (2.3 MiB is past MaxMessage,
// RESOURCE_EXHAUSTED from the length prefix), and, made small enough to fit (80,000 empty
// descriptors), by its count (INVALID_ARGUMENT). The assertions are on the work done (store
// calls, the status): the process CPU of each call, client included, is logged as a figure,
// not asserted, since it depends on the machine.
func TestACallWithEightyThousandDescriptorsIsRefusedWithoutCountingAnything(t *testing.T) {
	store := &countingStore{Store: memoryStore(t)}
	f := newFixture(t, store, HeadersOff)
	big := req("edge_proxy_per_ip", manyDescriptors(80_000)...)
	small := req("edge_proxy_per_ip", make([]*rlext.RateLimitDescriptor, 80_000)...)
	for i := range small.Descriptors {
		small.Descriptors[i] = desc()
	}
	for _, tc := range []struct {
		name string
		r    *pb.RateLimitRequest
		code codes.Code
		msg  string
	}{
		{"a 2.3 MiB message is refused by its size", big, codes.ResourceExhausted, "larger than max"},
		{"80,000 empty descriptors are refused by their count", small, codes.InvalidArgument, "descriptors: 80000, more than the 64 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := processCPU(t)
			_, err := f.client.ShouldRateLimit(context.Background(), tc.r)
			t.Logf("process CPU of the refused call (client and server): %v", processCPU(t)-before)
			require.Error(t, err)
			assert.Equal(t, tc.code, status.Code(err), err)
			assert.Contains(t, status.Convert(err).Message(), tc.msg)
		})
	}
	assert.Zero(t, store.calls.Load(), "store calls")
}

func TestARequestPastTheBoundsIsRefusedOnEveryFront(t *testing.T) {
	store := &countingStore{Store: memoryStore(t)}
	f := newFixture(t, store, HeadersOff)
	wide := desc()
	for i := range DefaultMaxEntries + 1 {
		wide.Entries = append(wide.Entries, desc("remote_address", fmt.Sprint(i)).Entries...)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /json", f.srv.JSONHandler())
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	for _, tc := range []struct {
		name string
		r    *pb.RateLimitRequest
		msg  string
	}{
		{"65 descriptors are one too many", req("edge_proxy_per_ip", manyDescriptors(65)...), "descriptors: 65, more than the 64 allowed"},
		{"a descriptor of 65 entries is one too wide", req("edge_proxy_per_ip", desc("remote_address", "a"), wide), "descriptors[1].entries: 65, more than the 64 allowed"},
	} {
		t.Run(tc.name+" over gRPC", func(t *testing.T) {
			_, err := f.client.ShouldRateLimit(context.Background(), tc.r)
			assert.Equal(t, codes.InvalidArgument, status.Code(err), err)
			assert.Contains(t, status.Convert(err).Message(), tc.msg)
		})
		t.Run(tc.name+" on /json", func(t *testing.T) {
			body, err := protojson.Marshal(tc.r)
			require.NoError(t, err)
			resp, err := http.Post(ts.URL+"/json", "application/json", strings.NewReader(string(body)))
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			assert.Contains(t, string(b), tc.msg)
		})
	}
	assert.Zero(t, store.calls.Load(), "store calls")
	resp := f.call(req("edge_proxy_per_ip", manyDescriptors(DefaultMaxDescriptors)...))
	assert.Len(t, resp.GetStatuses(), DefaultMaxDescriptors, "64 descriptors are still decided")
}

func TestAJSONBodyLargerThanTheMessageBoundIsRefused(t *testing.T) {
	store := &countingStore{Store: memoryStore(t)}
	f := newFixture(t, store, HeadersOff)
	w := httptest.NewRecorder()
	body := `{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"` + strings.Repeat("u", MaxMessage) + `"}]}]}`
	f.srv.JSONHandler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), "body: larger than 256 KiB")
	assert.Zero(t, store.calls.Load(), "store calls")
}
