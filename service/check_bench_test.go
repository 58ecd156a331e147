package service_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshlimit/meshlimit/service"
)

// benchCheck is one /v1/check of a descriptor that always passes, with a traceparent (read only
// when tracing is on).
const benchCheck = `{"descriptors":[{"key":"meshlimit/per-user/1f/alice","algorithm":"token_bucket","quota":1000000000,"window_ms":1000}]}`

// BenchmarkACheck measures one /v1/check through the handler on the memory store, without the
// network, with the handler's default: tracing off (BenchmarkACheckTraced has it on).
func BenchmarkACheck(b *testing.B) {
	benchmarkChecks(b, newTestHandler(b, service.Config{}))
}

func benchmarkChecks(b *testing.B, h *service.Handler) {
	r := httptest.NewRequest("POST", "/v1/check", nil)
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	body := strings.NewReader(benchCheck)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		body.Reset(benchCheck)
		r.Body, r.ContentLength = noClose{body}, int64(len(benchCheck))
		w.Body.Reset()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}

type noClose struct{ *strings.Reader }

func (noClose) Close() error { return nil }
