package rls

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// minuteStart is the start of a minute (a multiple of 60 s since the epoch).
var minuteStart = time.Unix(1_700_000_040, 0)

// fixture is a Server on a real gRPC connection over 127.0.0.1, with a settable clock and a
// swappable configuration.
type fixture struct {
	t      *testing.T
	client pb.RateLimitServiceClient
	conn   *grpc.ClientConn
	srv    *Server
	mu     sync.Mutex
	now    time.Time
	rules  *rlsconfig.Config
}

func newFixture(t *testing.T, store service.Store, headers HeaderMode) *fixture {
	t.Helper()
	return newFixtureOf(t, Config{Store: store, Headers: headers})
}

// newFixtureOf is newFixture with the Server's Config cfg, its Timeout, Rules and Now the
// fixture's.
func newFixtureOf(t *testing.T, cfg Config) *fixture {
	t.Helper()
	f := &fixture{t: t, now: minuteStart, rules: goodRules(t)}
	cfg.Timeout = 2 * time.Second
	cfg.Rules = func() *rlsconfig.Config { f.mu.Lock(); defer f.mu.Unlock(); return f.rules }
	cfg.Now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	var err error
	f.srv, err = NewServer(cfg)
	require.NoError(t, err)
	g := NewGRPCServer(f.srv, GRPCOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	f.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { f.conn.Close() })
	f.client = pb.NewRateLimitServiceClient(f.conn)
	return f
}

// goodRules is the configuration of ../rlsconfig/testdata/good.
func goodRules(t testing.TB) *rlsconfig.Config {
	t.Helper()
	files, err := rlsconfig.ReadDir("../rlsconfig/testdata/good")
	require.NoError(t, err)
	rules, err := rlsconfig.Load(files)
	require.NoError(t, err)
	return rules
}

func memoryStore(t *testing.T) service.Store {
	s := memstore.New(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

func (f *fixture) setNow(t time.Time) { f.mu.Lock(); f.now = t; f.mu.Unlock() }

func (f *fixture) setRules(c *rlsconfig.Config) { f.mu.Lock(); f.rules = c; f.mu.Unlock() }

func (f *fixture) call(req *pb.RateLimitRequest) *pb.RateLimitResponse {
	f.t.Helper()
	resp, err := f.client.ShouldRateLimit(context.Background(), req)
	require.NoError(f.t, err)
	require.Len(f.t, resp.GetStatuses(), len(req.GetDescriptors()))
	return resp
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlext.RateLimitDescriptor {
	d := &rlext.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlext.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func req(domain string, ds ...*rlext.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

func withHits(d *rlext.RateLimitDescriptor, n uint64) *rlext.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withOverride(d *rlext.RateLimitDescriptor, rpu uint32, u typev3.RateLimitUnit) *rlext.RateLimitDescriptor {
	d.Limit = &rlext.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: u}
	return d
}

// st summarizes a status: code, limit (0 when none shown), remaining, reset seconds (-1 when
// none shown).
type st struct {
	code      pb.RateLimitResponse_Code
	limit     uint32
	remaining uint32
	reset     int64
}

func summarize(s *pb.RateLimitResponse_DescriptorStatus) st {
	out := st{code: s.GetCode(), limit: s.GetCurrentLimit().GetRequestsPerUnit(), remaining: s.GetLimitRemaining(), reset: -1}
	if s.GetDurationUntilReset() != nil {
		out.reset = s.GetDurationUntilReset().GetSeconds()
	}
	return out
}

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

func TestProtocolOverGRPC(t *testing.T) {
	for _, tc := range []struct {
		name string
		reqs []*pb.RateLimitRequest
		want []st // statuses of the last request
		code pb.RateLimitResponse_Code
	}{
		{"a descriptor within its limit is OK with what remains and the time to the window's end",
			[]*pb.RateLimitRequest{req("mongo_cps", desc("database", "users"))},
			[]st{{ok, 500, 499, 1}}, ok},
		{"a descriptor that matches nothing is OK with no limit and remaining 0",
			[]*pb.RateLimitRequest{req("mongo_cps", desc("database", "nope"))},
			[]st{{ok, 0, 0, -1}}, ok},
		{"a domain that is not configured is OK with no limit",
			[]*pb.RateLimitRequest{req("nope", desc("database", "users"))},
			[]st{{ok, 0, 0, -1}}, ok},
		{"a placeholder without a limit is OK with no limit",
			[]*pb.RateLimitRequest{req("messaging", desc("message_type", "marketing"))},
			[]st{{ok, 0, 0, -1}}, ok},
		{"the count over the limit is OVER_LIMIT with remaining 0",
			[]*pb.RateLimitRequest{req("internal", withHits(desc("azure", "x"), 100)), req("internal", desc("azure", "x"))},
			[]st{{over, 100, 0, 60}}, over},
		{"requests_per_unit 0 always denies",
			[]*pb.RateLimitRequest{req("edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))},
			[]st{{over, 0, 0, 1}}, over},
		{"unlimited is OK with remaining 4294967295 and no limit or reset",
			[]*pb.RateLimitRequest{req("internal", desc("ldap", "x"))},
			[]st{{ok, 0, 4294967295, -1}}, ok},
		{"shadow mode is OK with remaining 0 once over and the overall code stays OK",
			[]*pb.RateLimitRequest{req("example6", withHits(desc("service", "auth", "user", "user-a"), 10)), req("example6", desc("service", "auth", "user", "user-a"))},
			[]st{{ok, 10, 0, 1}}, ok},
		{"every descriptor is charged even when another is over the limit",
			[]*pb.RateLimitRequest{
				req("edge_proxy_per_ip", desc("remote_address", "50.0.0.5"), desc("remote_address", "1.2.3.4")),
				req("edge_proxy_per_ip", desc("remote_address", "50.0.0.5"), desc("remote_address", "1.2.3.4"))},
			[]st{{over, 0, 0, 1}, {ok, 10, 8, 1}}, over},
		{"the same descriptor twice is charged twice, in order",
			[]*pb.RateLimitRequest{req("internal", desc("azure", "x"), desc("azure", "x"))},
			[]st{{ok, 100, 99, 60}, {ok, 100, 98, 60}}, ok},
		{"a request's hits_addend charges every descriptor",
			[]*pb.RateLimitRequest{{Domain: "internal", HitsAddend: 7, Descriptors: []*rlext.RateLimitDescriptor{desc("azure", "x")}}},
			[]st{{ok, 100, 93, 60}}, ok},
		{"a descriptor's hits_addend overrides the request's",
			[]*pb.RateLimitRequest{{Domain: "internal", HitsAddend: 7, Descriptors: []*rlext.RateLimitDescriptor{withHits(desc("azure", "x"), 2)}}},
			[]st{{ok, 100, 98, 60}}, ok},
		{"a descriptor's hits_addend 0 checks without charging",
			[]*pb.RateLimitRequest{req("internal", withHits(desc("azure", "x"), 3)), req("internal", withHits(desc("azure", "x"), 0)), req("internal", withHits(desc("azure", "x"), 0))},
			[]st{{ok, 100, 97, 60}}, ok},
		{"a key-only rule counts each value sent apart",
			[]*pb.RateLimitRequest{req("edge_proxy_per_ip", withHits(desc("remote_address", "1.1.1.1"), 10)), req("edge_proxy_per_ip", desc("remote_address", "2.2.2.2"))},
			[]st{{ok, 10, 9, 1}}, ok},
		{"an override replaces the lookup, even where nothing matches, with no name",
			[]*pb.RateLimitRequest{req("mongo_cps", withOverride(desc("anything", "x"), 2, typev3.RateLimitUnit_MINUTE))},
			[]st{{ok, 2, 1, 60}}, ok},
		{"an override replaces an unlimited rule",
			[]*pb.RateLimitRequest{req("internal", withOverride(desc("ldap", "x"), 1, typev3.RateLimitUnit_HOUR)), req("internal", withOverride(desc("ldap", "x"), 1, typev3.RateLimitUnit_HOUR))},
			[]st{{over, 1, 0, 3600 - minuteStart.Unix()%3600}}, over},
		{"an override is never shadow",
			[]*pb.RateLimitRequest{req("example6", withOverride(desc("service", "auth", "user", "user-a"), 0, typev3.RateLimitUnit_SECOND))},
			[]st{{over, 0, 0, 1}}, over},
		{"an override in a domain that is not configured gives no limit",
			[]*pb.RateLimitRequest{req("nope", withOverride(desc("a", "b"), 1, typev3.RateLimitUnit_SECOND))},
			[]st{{ok, 0, 0, -1}}, ok},
		{"an override with the configured unit shares the configured limit's counter",
			[]*pb.RateLimitRequest{req("mongo_cps", withHits(desc("database", "users"), 2)), req("mongo_cps", withOverride(desc("database", "users"), 3, typev3.RateLimitUnit_SECOND))},
			[]st{{ok, 3, 0, 1}}, ok},
		{"an override with another unit counts apart",
			[]*pb.RateLimitRequest{req("mongo_cps", withHits(desc("database", "users"), 2)), req("mongo_cps", withOverride(desc("database", "users"), 3, typev3.RateLimitUnit_MINUTE))},
			[]st{{ok, 3, 2, 60}}, ok},
		{"a named limit alone applies",
			[]*pb.RateLimitRequest{req("example7", desc("key_1", "value_1", "user", "bkthomps"))},
			[]st{{ok, 5, 4, 1}}, ok},
		{"a matched replaces drops the named limit from the whole request, uncounted",
			[]*pb.RateLimitRequest{
				req("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")),
				req("example7", desc("key_1", "value_1", "user", "bkthomps"))},
			[]st{{ok, 5, 4, 1}}, ok},
		{"the replacing limit applies where the replaced one would have",
			[]*pb.RateLimitRequest{req("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps"))},
			[]st{{ok, 0, 0, -1}, {ok, 10, 9, 1}}, ok},
		{"a wildcard value counts each value sent apart",
			[]*pb.RateLimitRequest{req("example9", withHits(desc("key1", "value1"), 20)), req("example9", desc("key1", "value2"))},
			[]st{{ok, 20, 19, 60}}, ok},
		{"share_threshold makes every value its wildcard matches count together",
			[]*pb.RateLimitRequest{
				req("example11", withHits(desc("files", "files/a.pdf"), 5)), req("example11", withHits(desc("files", "files/b.csv"), 5)),
				req("example11", desc("files", "files/c.txt"))},
			[]st{{over, 10, 0, 3600 - minuteStart.Unix()%3600}}, over},
		{"without share_threshold each value a wildcard matches counts apart",
			[]*pb.RateLimitRequest{req("example11", withHits(desc("files_no_share", "files_no_share/a.pdf"), 10)), req("example11", desc("files_no_share", "files_no_share/b.csv"))},
			[]st{{ok, 10, 9, 3600 - minuteStart.Unix()%3600}}, ok},
		{"a parent level's share_threshold shares the counter of its child's limit",
			[]*pb.RateLimitRequest{req("example11", withHits(desc("route", "api/v1", "method", "GET"), 60)), req("example11", desc("route", "api/v2", "method", "GET"))},
			[]st{{over, 60, 0, 60}}, over},
		{"a quota-mode descriptor over its limit does not deny while another quota one is within",
			[]*pb.RateLimitRequest{req("quota", withHits(desc("plan", "small"), 2)), req("quota", desc("plan", "small"), desc("plan", "large"))},
			[]st{{over, 2, 0, 3600 - minuteStart.Unix()%3600}, {ok, 100, 99, 3600 - minuteStart.Unix()%3600}}, ok},
		{"a request whose quota-mode descriptors are all over is denied",
			[]*pb.RateLimitRequest{req("quota", withHits(desc("plan", "small"), 2)), req("quota", desc("plan", "small"), desc("user", "u"))},
			[]st{{over, 2, 0, 3600 - minuteStart.Unix()%3600}, {ok, 50, 49, 3600 - minuteStart.Unix()%3600}}, over},
		{"meshlimit's algorithm extension does not count a denied request",
			[]*pb.RateLimitRequest{
				req("units", withHits(desc("algo", "sliding"), 3)), req("units", desc("algo", "sliding")), req("units", desc("algo", "sliding"))},
			[]st{{over, 3, 0, 120}}, over},
		{"week, month and year windows are 7, 30 and 365 days from the epoch",
			[]*pb.RateLimitRequest{req("units", desc("u", "w"), desc("u", "mo"), desc("u", "y"))},
			[]st{
				{ok, 1, 0, 7*86400 - minuteStart.Unix()%(7*86400)},
				{ok, 1, 0, 30*86400 - minuteStart.Unix()%(30*86400)},
				{ok, 1, 0, 365*86400 - minuteStart.Unix()%(365*86400)}}, ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, memoryStore(t), HeadersOff)
			var resp *pb.RateLimitResponse
			for _, r := range tc.reqs {
				resp = f.call(r)
			}
			got := make([]st, len(resp.GetStatuses()))
			for i, s := range resp.GetStatuses() {
				got[i] = summarize(s)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.code, resp.GetOverallCode())
			assert.Empty(t, resp.GetResponseHeadersToAdd(), "headers are off by default")
		})
	}
}

func TestBadRequestsAreErrors(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersOff)
	for _, tc := range []struct {
		name string
		req  *pb.RateLimitRequest
		want string
	}{
		{"an empty domain is an error", req("", desc("a", "b")), "domain: must not be empty"},
		{"a request without descriptors is an error", req("mongo_cps"), "descriptors: must not be empty"},
		{"an override with an unknown unit is an error", req("mongo_cps", withOverride(desc("a", "b"), 1, typev3.RateLimitUnit_UNKNOWN)), "descriptors[0].limit.unit: unknown unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client.ShouldRateLimit(context.Background(), tc.req)
			require.Error(t, err)
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), tc.want)
		})
	}
}

func TestWindowsAreAlignedToTheEpoch(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersOff)
	f.setNow(minuteStart.Add(59*time.Second + 900*time.Millisecond))
	s := f.call(req("internal", withHits(desc("azure", "x"), 100))).GetStatuses()[0]
	assert.Equal(t, st{ok, 100, 0, 1}, summarize(s), "a tenth of a second before the minute: 1 s to reset, in whole seconds")
	f.setNow(minuteStart.Add(time.Minute))
	s = f.call(req("internal", desc("azure", "x"))).GetStatuses()[0]
	assert.Equal(t, st{ok, 100, 99, 60}, summarize(s), "a new minute, a new count")
}

func TestCountersSurviveAReloadThatChangesTheLimit(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersOff)
	f.call(req("internal", withHits(desc("azure", "x"), 60)))
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "internal.yaml", Data: []byte(
		"domain: internal\ndescriptors:\n  - key: azure\n    rate_limit: {unit: minute, requests_per_unit: 50}\n")}})
	require.NoError(t, err)
	f.mu.Lock()
	f.rules = c
	f.mu.Unlock()
	s := f.call(req("internal", desc("azure", "x"))).GetStatuses()[0]
	assert.Equal(t, st{over, 50, 0, 60}, summarize(s), "61 counted under a limit now of 50")
}

func TestHealthCheckingAnswersServing(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersOff)
	h := healthpb.NewHealthClient(f.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus(), svc)
	}
}

func TestAStoreThatDoesNotAnswerIsUnavailableNotOK(t *testing.T) {
	s := memoryStore(t)
	f := newFixture(t, failingStore{s}, HeadersOff)
	_, err := f.client.ShouldRateLimit(context.Background(), req("mongo_cps", desc("database", "users")))
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	resp := f.call(req("mongo_cps", desc("database", "nope")))
	assert.Equal(t, ok, resp.GetOverallCode(), "a request that needs no counter does not touch the store")
}

// failingStore fails every decision and every count.
type failingStore struct{ service.Store }

func (failingStore) Decide(context.Context, service.Request) (algorithms.Decision, error) {
	return algorithms.Decision{}, errors.New("store down")
}

func (failingStore) CountWindow(context.Context, service.CountRequest) (int64, time.Duration, error) {
	return 0, 0, errors.New("store down")
}
