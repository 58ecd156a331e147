package rls

import (
	"io"
	"net/http"
	"strconv"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/tracing"
)

// maxJSONBody bounds a /json request body.
const maxJSONBody = MaxMessage

// JSONHandler serves envoyproxy/ratelimit's /json endpoint: a POST whose body is a
// RateLimitRequest in protobuf's JSON mapping (lowerCamelCase or the proto's snake_case
// names, enums by name, 64-bit integers as strings or numbers; an unknown field is an error),
// answered with the RateLimitResponse in canonical JSON: 200 when OK, 429 when OVER_LIMIT.
// A body that does not decode, and a request without domain or descriptors, get 400 with
// the reason; a store that does not answer in time gets 503 (envoyproxy/ratelimit answers
// 400 there too).
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, sp := s.cfg.Tracer.StartHTTP(r.Context(), tracing.FrontJSON, r.Header)
		td := tracing.Decision{Outcome: tracing.OutcomeInvalid}
		code := s.writeJSON(w, r, sp.Recording(), &td)
		s.cfg.Metrics.request(frontJSON, strconv.Itoa(code), time.Since(start))
		td.HTTPStatus = code
		sp.End(td)
	})
}

// writeJSON answers one /json request and returns the status it wrote.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, traced bool, td *tracing.Decision) int {
	resp, err := s.serveJSON(r, traced, td)
	if err != nil {
		code := http.StatusServiceUnavailable
		if status.Code(err) == codes.InvalidArgument {
			code = http.StatusBadRequest
		}
		http.Error(w, status.Convert(err).Message(), code)
		return code
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	code := http.StatusOK
	if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	w.WriteHeader(code)
	_, _ = w.Write(out)
	return code
}

// serveJSON decodes the request and decides it; decoding errors are InvalidArgument.
func (s *Server) serveJSON(r *http.Request, traced bool, td *tracing.Decision) (*pb.RateLimitResponse, error) {
	body, err := readJSONBody(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "body: "+err.Error())
	}
	if len(body) > maxJSONBody {
		return nil, status.Error(codes.InvalidArgument, "body: larger than 256 KiB")
	}
	// A body past the bounds is refused before protojson allocates its descriptors.
	if err := jsonBounds(body, s.cfg.MaxDescriptors, s.cfg.MaxEntries); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		return nil, status.Error(codes.InvalidArgument, "body: "+err.Error())
	}
	return s.decide(service.WithFlow(r.Context(), r.RemoteAddr), &req, traced, td)
}

// readJSONBody reads the body of r, up to one byte more than maxJSONBody (which tells a larger
// one): into one slice of its Content-Length when it declares one within the bound (a body of
// 256 KiB costs its size, not io.ReadAll's growth, twice it), else as io.ReadAll reads.
func readJSONBody(r *http.Request) ([]byte, error) {
	body := io.LimitReader(r.Body, maxJSONBody+1)
	n := r.ContentLength
	if n <= 0 || n > maxJSONBody {
		return io.ReadAll(body)
	}
	b := make([]byte, n+1) // +1: a body past its length is read, and then refused as larger
	got, err := io.ReadFull(body, b)
	if int64(got) == n && err == io.ErrUnexpectedEOF {
		err = nil // the body ended at its length
	}
	return b[:got], err
}
