package service

import (
	"errors"
	"strings"
	"testing"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// FuzzDecodeCheckRequest checks the service's strict decoder (ParseCheckRequest, which is
// wire.DecodeRequest): it never panics, every error it returns for in-memory input is a
// *RequestError naming a field, and everything it accepts is within the documented bounds.
// wire.FuzzDecodeRequest also compares what it accepts with encoding/json.
func FuzzDecodeCheckRequest(f *testing.F) {
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
	} {
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, allowTime bool) {
		if len(body) > wire.MaxBodyBytes {
			return
		}
		c, err := ParseCheckRequest(strings.NewReader(string(body)), ParseOptions{AllowClientTime: allowTime})
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || re.Field == "" || re.Reason == "" {
				t.Fatalf("error %v (%T) is not a *RequestError naming a field", err, err)
			}
			return
		}
		if n := len(c.Descriptors); n < 1 || n > wire.MaxDescriptors {
			t.Fatalf("accepted %d descriptors", n)
		}
		if !allowTime && !c.Now.IsZero() {
			t.Fatal("accepted client time without permission")
		}
		for i, d := range c.Descriptors {
			if err := d.Limit.Validate(); err != nil {
				t.Fatalf("descriptor %d: accepted an invalid limit %+v: %v", i, d.Limit, err)
			}
			if d.Key == "" || len(d.Key) > wire.MaxKeyBytes {
				t.Fatalf("descriptor %d: accepted key %q", i, d.Key)
			}
			if d.Cost < 1 || d.Cost > algorithms.MaxQuota {
				t.Fatalf("descriptor %d: accepted cost %d", i, d.Cost)
			}
		}
	})
}
