package service_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// FuzzTheCheckEndpoint sends bodies to /v1/check, on a memory store, with and without client
// time allowed: the handler never panics and answers 200 or 400; a 400 is a JSON error naming
// the field at fault ("field: reason", wire.FieldError); a 200 has one decision per descriptor
// and, without the permission, never comes from a body that sets now_us. What the strict
// decoder accepts is fuzzed further, against encoding/json, by wire.FuzzDecodeRequest.
func FuzzTheCheckEndpoint(f *testing.F) {
	for _, seed := range []string{
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":100,"window_ms":1000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"leaky_bucket","quota":7,"window_ms":1013,"burst":20,"cost":3}],"now_us":1800000000000000}`,
		`{"descriptors":[{"key":"a","algorithm":"fixed_window","quota":1,"window_ms":1},{"key":"b","algorithm":"sliding_log","quota":10000,"window_ms":34560000000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"sliding_window","quota":1000000000000,"window_ms":1000,"cost":1000000000000}]}`,
		// Bounds just outside: each must be refused.
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":34560000000,"burst":2}]}`,
		`{"descriptors":[{"key":"k","algorithm":"sliding_log","quota":10001,"window_ms":1000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1,"window_ms":1000,"burst":1}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1e3,"window_ms":1000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1,"window_ms":1000}],"now_us":-1}`,
		`{"descriptors":null}`, `{"descriptors":{}}`, `[]`, `null`, ``, `{`, `{"descriptors":[]}{}`,
		`{"descriptors":[{"key":"\u0000","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"key":"\xff","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"key":"\ud800","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"Key":"k","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"key":"k","key":"k","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"key":"k","algorithm":"concurrency","quota":2,"permit":"a","lease_ms":1000}],"release":[{"key":"k","permit":"b"}]}`,
		`{"settle":[{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000,"delta":-5,"age_ms":30}]}`,
	} {
		f.Add([]byte(seed), true)
	}
	handlers := map[bool]*service.Handler{
		false: newTestHandler(f, service.Config{}),
		true:  newTestHandler(f, service.Config{Parse: wire.DecodeOptions{AllowClientTime: true}}),
	}
	f.Fuzz(func(t *testing.T, body []byte, allowTime bool) {
		if len(body) > wire.MaxBodyBytes {
			return
		}
		code, answer := serve(handlers[allowTime], http.MethodPost, wire.Path, string(body))
		switch code {
		case http.StatusBadRequest:
			var e struct{ Error string }
			if err := json.Unmarshal([]byte(answer), &e); err != nil {
				t.Fatalf("400 %q is not a JSON error: %v", answer, err)
			}
			if field, reason, ok := strings.Cut(e.Error, ": "); !ok || field == "" || reason == "" {
				t.Fatalf("400 %q does not name a field", answer)
			}
		case http.StatusOK:
			var req wire.Request
			if err := wire.DecodeRequest(body, wire.DecodeOptions{AllowClientTime: true}, &req); err != nil {
				t.Fatalf("200 to a body the decoder refuses: %v", err)
			}
			if req.HasNow && !allowTime {
				t.Fatal("accepted client time without permission")
			}
			if _, err := wire.DecodeFullAnswer([]byte(answer), len(req.Descriptors), nil); err != nil {
				t.Fatalf("200 %q for %d descriptors: %v", answer, len(req.Descriptors), err)
			}
		default:
			t.Fatalf("%d %s", code, answer)
		}
	})
}
