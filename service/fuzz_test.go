package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// FuzzDecodeCheckRequest checks that ParseCheckRequest never panics, that every error it
// returns for in-memory input is a *RequestError naming a field, and that everything it accepts
// is within the documented bounds.
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
	} {
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, allowTime bool) {
		if len(body) > defaultMaxBodyBytes {
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
		if n := len(c.Descriptors); n < 1 || n > defaultMaxDescriptors {
			t.Fatalf("accepted %d descriptors", n)
		}
		if !allowTime && !c.Now.IsZero() {
			t.Fatal("accepted client time without permission")
		}
		for i, d := range c.Descriptors {
			if err := d.Limit.Validate(); err != nil {
				t.Fatalf("descriptor %d: accepted an invalid limit %+v: %v", i, d.Limit, err)
			}
			if d.Key == "" || len(d.Key) > defaultMaxKeyBytes {
				t.Fatalf("descriptor %d: accepted key %q", i, d.Key)
			}
			if d.Cost < 1 || d.Cost > algorithms.MaxQuota {
				t.Fatalf("descriptor %d: accepted cost %d", i, d.Cost)
			}
		}
	})
}

// FuzzFastDecodeMatchesStrict checks that the handler's fast path (decodeCheckFast, then the
// shared validation) decides every body as ParseCheckRequest does: the same Check, or the same
// error, and that where the fast path decodes, it yields what encoding/json yields.
func FuzzFastDecodeMatchesStrict(f *testing.F) {
	for _, seed := range []string{
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":100,"window_ms":1000}]}`,
		` { "descriptors" : [ { "key" : "k" , "algorithm" : "leaky_bucket" , "quota" : 7 , "window_ms" : 1013 , "burst" : 20 , "cost" : 3 } ] , "now_us" : 1800000000000000 } ` + "\n",
		`{"now_us":1,"descriptors":[{"key":"a","algorithm":"fixed_window","quota":1,"window_ms":1},{"key":"b","algorithm":"sliding_log","quota":10000,"window_ms":34560000000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"sliding_window","quota":1000000000000,"window_ms":1000,"cost":1000000000000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":34560000000,"burst":2}]}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":-0,"window_ms":-1,"burst":-5}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1e3,"window_ms":1000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":01,"window_ms":1000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1.0,"window_ms":1000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1234567890123456789,"window_ms":1000}]}`,
		`{"descriptors":[{"key":"k","key":"j","algorithm":"gcra","quota":1,"window_ms":1000}]}`,
		`{"descriptors":[{"Key":"k","algorithm":"token_bucket","quota":1,"window_ms":1000}]}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":1000}],"descriptors":[{}]}`,
		`{"descriptors":[{}]}`, `{"descriptors":[]}`, `{}`, `{"descriptors":null}`, `{"descriptors":[null]}`,
		`{"descriptors":[{"key":"a\nb","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"key":"é","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":1}]} {}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":1}],}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":1},]}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":1}]`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":1,"unit":"s"}]}`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, allowTime bool) {
		if len(body) > defaultMaxBodyBytes {
			return
		}
		opts := ParseOptions{AllowClientTime: allowTime}.withDefaults()
		var fast CheckRequest
		if decodeCheckFast(body, &fast) {
			var strict CheckRequest
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&strict); err != nil {
				t.Fatalf("fast path decoded %q, encoding/json refuses it: %v", body, err)
			}
			if !reflect.DeepEqual(fast, strict) {
				t.Fatalf("decoded %q as %+v, encoding/json as %+v", body, fast, strict)
			}
		}
		want, wantErr := ParseCheckRequest(bytes.NewReader(body), opts)
		s := new(checkScratch)
		require.NoError(t, s.readBody(bytes.NewReader(body), int64(len(body))))
		for range 2 { // twice: with fresh and with reused buffers
			got, gotErr := s.parseCheck(opts)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got.Now, want.Now) ||
				!slices.Equal(got.Descriptors, want.Descriptors) {
				t.Fatalf("%q: fast path %+v, %v; strict %+v, %v", body, got, gotErr, want, wantErr)
			}
		}
		s.reset()
	})
}
