package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
	"github.com/meshlimit/meshlimit/service/tracing"
)

// Config configures a Server.
type Config struct {
	// Store keeps the counters; required.
	Store service.Store
	// Rules returns the configuration in force (a rlsconfig.Watcher's Config); required.
	Rules func() *rlsconfig.Config
	// Timeout bounds the whole of one request, from its bounds check to its answer (default
	// service.DefaultTimeout).
	Timeout time.Duration
	// MaxDescriptors and MaxEntries bound the descriptors of a request and the entries of a
	// descriptor (defaults DefaultMaxDescriptors, DefaultMaxEntries): a request past them is
	// refused with InvalidArgument before anything is matched or counted.
	MaxDescriptors, MaxEntries int
	// Headers selects the response headers to add (default none, as envoyproxy/ratelimit).
	Headers HeaderMode
	// DynamicMetadata returns envoyproxy/ratelimit's dynamic_metadata in every answer, with the
	// metadata of the rules that passed (its RESPONSE_DYNAMIC_METADATA; default off).
	DynamicMetadata bool
	// Now, when set, is the decision time passed to the store (tests); nil uses the store's
	// clock (Redis TIME), as production does.
	Now func() time.Time
	// Metrics, when non-nil, is where the server counts.
	Metrics *Metrics
	// Logger receives operational messages (default slog.Default()).
	Logger *slog.Logger
	// Tracer, when non-nil, starts a span per ShouldRateLimit and per /json request, a child of
	// the trace context the call carries (package tracing); nil is tracing off.
	Tracer *tracing.Tracer
}

// Server answers ShouldRateLimit. It is safe for concurrent use.
type Server struct {
	pb.UnimplementedRateLimitServiceServer
	cfg     Config
	scratch sync.Pool    // *scratch
	lastLog atomic.Int64 // unix ns of the last store error logged
}

type scratch struct {
	plans   []plan
	key     []byte
	counts  []service.CountRequest // a batch of window counts (countAll)
	ends    []int                  // where each count's key ends in key (countAll)
	results []service.CountResult
}

// NewServer returns a Server for cfg.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Rules == nil {
		return nil, errors.New("rls: Config.Store and Config.Rules are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = service.DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxDescriptors <= 0 {
		cfg.MaxDescriptors = DefaultMaxDescriptors
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	s := &Server{cfg: cfg}
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// ShouldRateLimit implements pb.RateLimitServiceServer. Errors are gRPC statuses:
// InvalidArgument for a request without domain or descriptors, past the bounds (MaxDescriptors,
// MaxEntries) or with an unknown override unit, DeadlineExceeded or Unavailable when the store
// does not answer in time. The Timeout bounds the whole call.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return s.shouldRateLimit(ctx, req, nil)
}

// shouldRateLimit is ShouldRateLimit of a request that its decoder refused (InvalidArgument)
// when refused is not nil.
func (s *Server) shouldRateLimit(ctx context.Context, req *pb.RateLimitRequest, refused error) (*pb.RateLimitResponse, error) {
	start := time.Now()
	_, sp := s.cfg.Tracer.StartGRPC(ctx)
	td := tracing.Decision{Outcome: tracing.OutcomeInvalid}
	var resp *pb.RateLimitResponse
	var err error
	if refused != nil {
		err = status.Error(codes.InvalidArgument, refused.Error())
	} else {
		resp, err = s.decide(ctx, req, sp.Recording(), &td)
	}
	code := status.Code(err)
	s.cfg.Metrics.request(frontGRPC, code.String(), time.Since(start))
	td.GRPCStatus = int(code)
	sp.End(td)
	return resp, err
}

// decide answers req. It fills td with what the decision span records, the store's time only
// when traced.
func (s *Server) decide(ctx context.Context, req *pb.RateLimitRequest, traced bool, td *tracing.Decision) (*pb.RateLimitResponse, error) {
	td.Domain, td.Descriptors = req.GetDomain(), len(req.GetDescriptors())
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "domain: must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "descriptors: must not be empty")
	}
	if err := s.checkBounds(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if p, ok := peer.FromContext(ctx); ok { // the gRPC connection is the flow a Gate shares fairly
		ctx = service.WithFlow(ctx, flowKey(p.Addr))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	sc := s.scratch.Get().(*scratch)
	defer s.scratch.Put(sc)
	rules := s.cfg.Rules()
	plans, err := makePlans(rules, req, sc.plans)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	sc.plans = plans
	var now time.Time
	if s.cfg.Now != nil {
		now = s.cfg.Now()
	}
	var storeStart time.Time
	if traced {
		storeStart = time.Now()
	}
	// The request's store calls are admitted whole, or refused, before the first of them.
	ctx, release, err := service.Admit(ctx, s.cfg.Store, countedWork(plans))
	var sts []*pb.RateLimitResponse_DescriptorStatus
	if err == nil {
		sts, err = s.decideAll(ctx, req, plans, now, sc)
	}
	release()
	if traced {
		td.Store = time.Since(storeStart)
	}
	if err != nil {
		err = s.storeError(ctx, err)
		td.Outcome, td.ErrorType, td.Err = tracing.OutcomeError, "store", err
		if status.Code(err) == codes.DeadlineExceeded {
			td.ErrorType = "timeout"
		}
		return nil, err
	}
	resp := &pb.RateLimitResponse{OverallCode: overallCode(sts, plans), Statuses: sts}
	td.Outcome = tracing.OutcomeAllowed
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		td.Outcome = tracing.OutcomeDenied
	}
	s.cfg.Metrics.decisions(rules, req, plans)
	resp.ResponseHeadersToAdd = s.cfg.Headers.headers(resp.Statuses, plans)
	if s.cfg.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, sts, plans)
	}
	return resp, nil
}

// countedWork is the store work of a request's plans, as a service.Gate counts it: one unit per
// counted descriptor.
func countedWork(plans []plan) int {
	n := 0
	for i := range plans {
		if plans[i].kind == planLimit {
			n++
		}
	}
	return n
}

// flowKey names a gRPC connection's flow by its remote address: the address itself when it is
// a *net.TCPAddr (gRPC gives every call of a connection the same one, and pointers compare
// without formatting a string per call), else its string.
func flowKey(a net.Addr) any {
	if t, ok := a.(*net.TCPAddr); ok {
		return t
	}
	return a.String()
}

// decideOne decides descriptor i of req by its plan p, its status in a.
func (s *Server) decideOne(ctx context.Context, req *pb.RateLimitRequest, i int, p *plan, now time.Time, sc *scratch, a *answer) (*pb.RateLimitResponse_DescriptorStatus, error) {
	if p.kind != planLimit {
		return a.static(p), nil
	}
	sc.key = appendKey(sc.key[:0], req.GetDomain(), req, i, p.limit.Unit, p.rule.Shared)
	return s.decideKey(ctx, string(sc.key), p, now, a)
}

// answer is the room of one descriptor's status: a request's are allocated together, one
// allocation for all of them (the answer is the gRPC response's, never reused).
type answer struct {
	st    pb.RateLimitResponse_DescriptorStatus
	limit pb.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// static is, in a, the status of a plan that counts nothing.
func (a *answer) static(p *plan) *pb.RateLimitResponse_DescriptorStatus {
	a.st.Code = pb.RateLimitResponse_OK
	if p.kind == planUnlimited {
		a.st.LimitRemaining = math.MaxUint32
	}
	return &a.st
}

// decideKey counts a planLimit descriptor under its counter key and returns its status.
func (s *Server) decideKey(ctx context.Context, key string, p *plan, now time.Time, a *answer) (*pb.RateLimitResponse_DescriptorStatus, error) {
	l := p.limit
	if l.Algorithm == 0 {
		start := time.Now()
		count, r, err := s.cfg.Store.CountWindow(ctx, service.CountRequest{Key: key, Window: l.Unit.Duration(), Hits: p.hits, Now: now})
		s.cfg.Metrics.store(time.Since(start))
		if err != nil {
			return nil, err
		}
		return s.countedStatus(p, service.CountResult{Count: count, Reset: r}, now, a), nil
	}
	var over bool
	var remaining int64
	var reset time.Duration
	if p.hits > 0 {
		limit := algorithms.Limit{Kind: l.Algorithm, Quota: int64(l.RequestsPerUnit), Window: l.Unit.Duration()}
		start := time.Now()
		d, err := s.cfg.Store.Decide(ctx, service.Request{Key: key, Now: now, Cost: p.hits, Limit: limit})
		s.cfg.Metrics.store(time.Since(start))
		if err != nil {
			return nil, err
		}
		over, remaining, reset = !d.Allowed, d.Remaining, d.Reset
		p.window = limit.EffectiveWindowOf(d)
	}
	return s.status(p, over, remaining, reset, now, a), nil
}

// countedStatus is, in a, the status of a fixed-window descriptor whose counter answered c.
func (s *Server) countedStatus(p *plan, c service.CountResult, now time.Time, a *answer) *pb.RateLimitResponse_DescriptorStatus {
	limit := int64(p.limit.RequestsPerUnit)
	return s.status(p, c.Count > limit, max(limit-c.Count, 0), c.Reset, now, a)
}

// status is, in a, the status of a planLimit descriptor decided over (or not) with remaining
// and reset (0: to the end of its unit's window); it records over in p.
func (s *Server) status(p *plan, over bool, remaining int64, reset time.Duration, now time.Time, a *answer) *pb.RateLimitResponse_DescriptorStatus {
	l := p.limit
	if reset <= 0 {
		reset = untilWindowEnd(l.Unit, s.clock(now))
	}
	a.limit.Name, a.limit.RequestsPerUnit, a.limit.Unit = l.Name, l.RequestsPerUnit, protoUnit(l.Unit)
	reset = (reset + time.Second - 1).Truncate(time.Second)
	a.reset.Seconds, a.reset.Nanos = int64(reset/time.Second), int32(reset%time.Second)
	st := &a.st
	st.Code, st.CurrentLimit, st.DurationUntilReset = pb.RateLimitResponse_OK, &a.limit, &a.reset
	st.LimitRemaining = uint32(min(remaining, math.MaxUint32))
	p.over = over
	if over {
		st.LimitRemaining = 0
		if !p.rule.ShadowMode {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	return st
}

// overallCode is OVER_LIMIT when a descriptor not in quota mode is over its limit, or when
// the request has quota-mode descriptors and every one of them is.
func overallCode(sts []*pb.RateLimitResponse_DescriptorStatus, plans []plan) pb.RateLimitResponse_Code {
	quota, quotaOver := 0, 0
	for i, st := range sts {
		over := st.GetCode() == pb.RateLimitResponse_OVER_LIMIT
		switch {
		case plans[i].kind == planLimit && plans[i].rule.QuotaMode:
			quota++
			if over {
				quotaOver++
			}
		case over:
			return pb.RateLimitResponse_OVER_LIMIT
		}
	}
	if quota > 0 && quota == quotaOver {
		return pb.RateLimitResponse_OVER_LIMIT
	}
	return pb.RateLimitResponse_OK
}

// storeError maps a store failure to a gRPC status and logs it, at most once a second so
// that an outage does not flood the log (the request metrics count every one).
func (s *Server) storeError(ctx context.Context, err error) error {
	now := time.Now().UnixNano()
	if last := s.lastLog.Load(); now-last >= int64(time.Second) && s.lastLog.CompareAndSwap(last, now) {
		s.cfg.Logger.Warn("rls: store unavailable", "err", err)
	}
	if s.cfg.Metrics.storeFailed(ctx, err) {
		return status.Error(codes.DeadlineExceeded, "store did not answer in time")
	}
	return status.Error(codes.Unavailable, "store unavailable")
}

// clock returns now, or the local time when now is zero.
func (s *Server) clock(now time.Time) time.Time {
	if now.IsZero() {
		return time.Now()
	}
	return now
}

// untilWindowEnd returns the time from now to the end of the epoch-aligned window of unit u,
// in whole seconds: the unit minus the seconds since the window started.
func untilWindowEnd(u rlsconfig.Unit, now time.Time) time.Duration {
	secs := int64(u.Duration() / time.Second)
	return time.Duration(secs-now.Unix()%secs) * time.Second
}

var protoUnits = [...]pb.RateLimitResponse_RateLimit_Unit{
	rlsconfig.Second: pb.RateLimitResponse_RateLimit_SECOND,
	rlsconfig.Minute: pb.RateLimitResponse_RateLimit_MINUTE,
	rlsconfig.Hour:   pb.RateLimitResponse_RateLimit_HOUR,
	rlsconfig.Day:    pb.RateLimitResponse_RateLimit_DAY,
	rlsconfig.Week:   pb.RateLimitResponse_RateLimit_WEEK,
	rlsconfig.Month:  pb.RateLimitResponse_RateLimit_MONTH,
	rlsconfig.Year:   pb.RateLimitResponse_RateLimit_YEAR,
}

func protoUnit(u rlsconfig.Unit) pb.RateLimitResponse_RateLimit_Unit {
	if !u.Valid() {
		return pb.RateLimitResponse_RateLimit_UNKNOWN
	}
	return protoUnits[u]
}
