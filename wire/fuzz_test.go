package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meshlimit/meshlimit/algorithms"
)

// jsonRequest is the request as encoding/json would read it (names in any case, the last of
// two members): looser than DecodeRequest, so everything DecodeRequest accepts it must read
// the same way.
type jsonRequest struct {
	Descriptors []struct {
		Key       string `json:"key"`
		Algorithm string `json:"algorithm"`
		Quota     int64  `json:"quota"`
		WindowMs  int64  `json:"window_ms"`
		Burst     int64  `json:"burst"`
		Cost      *int64 `json:"cost"`
		Permit    string `json:"permit"`
		LeaseMs   int64  `json:"lease_ms"`
	} `json:"descriptors"`
	Renew, Release []struct {
		Key     string `json:"key"`
		Permit  string `json:"permit"`
		LeaseMs int64  `json:"lease_ms"`
	}
	Settle []struct {
		Key       string `json:"key"`
		Algorithm string `json:"algorithm"`
		Quota     int64  `json:"quota"`
		WindowMs  int64  `json:"window_ms"`
		Burst     int64  `json:"burst"`
		Delta     int64  `json:"delta"`
		AgeMs     int64  `json:"age_ms"`
	} `json:"settle"`
	NowUs *int64 `json:"now_us"`
}

// FuzzDecodeRequest checks the strict decoder: it never panics, every error is a
// *FieldError naming a field, everything it accepts is within the documented bounds, and
// encoding/json reads what it accepts the same way.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":100,"window_ms":1000}]}`,
		`{"now_us":1800000000000000,"descriptors":[{"key":"k","algorithm":"leaky_bucket","quota":7,"window_ms":1013,"burst":20,"cost":3}]}`,
		`{"descriptors":[{"key":"a","algorithm":"fixed_window","quota":1,"window_ms":1},{"key":"b","algorithm":"sliding_log","quota":10000,"window_ms":34560000000}]}`,
		`{"descriptors":[{"key":"\ud83d\ude00\u00e9\"","algorithm":"sliding_window","quota":1000000000000,"window_ms":1000,"cost":1000000000000}]}`,
		`{"descriptors":[{"key":"\ud800","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"key":"` + "\xc0\xaf" + `","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"Key":"k","key":"k","algorithm":"token_bucket","quota":1,"window_ms":1}]}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1.0,"window_ms":1e3}]}`,
		`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":-0,"window_ms":-9223372036854775808}]}`,
		`{"descriptors":[{"key":"k","algorithm":"concurrency","quota":20,"permit":"a/1","lease_ms":10000}],"release":[{"key":"k","permit":"b"}]}`,
		`{"renew":[{"key":"k","permit":"a","lease_ms":100}]}`,
		`{"settle":[{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000,"burst":20,"delta":-5,"age_ms":30}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":10,"window_ms":1000,"cost":4}],"settle":[{"key":"k","algorithm":"fixed_window","quota":10,"window_ms":1000,"delta":3}]}`,
		`{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":10000,"calendar":"month","calendar_offset_min":-480}]}`,
		`{"settle":[{"key":"k","algorithm":"fixed_window","quota":10,"calendar":"week","window_ms":0,"delta":-2,"age_ms":5}]}`,
		`{"descriptors":[]}`, `{}`, `[]`, `null`, ``, `{`, `{"descriptors":[{}]} `, "\t{\"descriptors\" :[ ]}\n",
	} {
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, allowTime bool) {
		if len(body) > MaxBodyBytes {
			return
		}
		var req Request
		err := DecodeRequest(body, DecodeOptions{AllowClientTime: allowTime}, &req)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Reason == "" {
				t.Fatalf("error %v (%T) does not name a field", err, err)
			}
			return
		}
		checkAccepted(t, body, &req, allowTime)
	})
}

func checkAccepted(t *testing.T, body []byte, req *Request, allowTime bool) {
	if n := len(req.Descriptors) + len(req.Renew) + len(req.Release) + len(req.Settle); n < 1 || len(req.Descriptors) > MaxDescriptors || req.HasNow && !allowTime {
		t.Fatalf("accepted %d descriptors and permits, client time %v", n, req.HasNow)
	}
	var j jsonRequest
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&j); err != nil {
		t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
	}
	if len(j.Descriptors) != len(req.Descriptors) || (j.NowUs != nil) != req.HasNow || req.HasNow && *j.NowUs != req.NowUs ||
		len(j.Renew) != len(req.Renew) || len(j.Release) != len(req.Release) || len(j.Settle) != len(req.Settle) {
		t.Fatalf("%q: decoded %+v, encoding/json %+v", body, req, j)
	}
	checkPermitRefs(t, body, req, &j)
	checkSettles(t, body, req, &j)
	for i, d := range req.Descriptors {
		jd := j.Descriptors[i]
		cost := int64(1)
		if jd.Cost != nil {
			cost = *jd.Cost
		}
		if d.Permit != "" {
			checkPermit(t, body, d, jd.Key, jd.Algorithm, jd.Quota, jd.Permit, jd.LeaseMs, cost)
			continue
		}
		if d.Limit.Validate() != nil || CheckKey(d.Key, MaxKeyBytes) != nil || !utf8.ValidString(d.Key) || d.Cost < 1 || d.Cost > algorithms.MaxQuota {
			t.Fatalf("descriptor %d: accepted %+v", i, d)
		}
		if d.Key != jd.Key || d.Limit.Kind.String() != jd.Algorithm || d.Limit.Quota != jd.Quota ||
			d.Limit.Window != time.Duration(jd.WindowMs)*time.Millisecond || d.Limit.Burst != jd.Burst || d.Cost != cost {
			t.Fatalf("%q: descriptor %d decoded %+v, encoding/json %+v", body, i, d, jd)
		}
	}
}

// checkPermit checks an accepted permit descriptor against encoding/json's reading.
func checkPermit(t *testing.T, body []byte, d Descriptor, key, algorithm string, quota int64, permit string, leaseMs, cost int64) {
	if CheckKey(d.Key, MaxKeyBytes) != nil || CheckKey(d.Permit, MaxPermitBytes) != nil || d.Cost != 1 || d.Limit.Kind != 0 ||
		d.Limit.Quota < 1 || d.Limit.Quota > MaxConcurrency || d.Lease < MinLeaseMs*time.Millisecond || d.Lease > MaxLeaseMs*time.Millisecond {
		t.Fatalf("%q: accepted permit %+v", body, d)
	}
	if d.Key != key || algorithm != Concurrency || d.Limit.Quota != quota || d.Permit != permit || d.Lease != time.Duration(leaseMs)*time.Millisecond || cost != 1 {
		t.Fatalf("%q: permit decoded %+v, encoding/json %q %q %d %q %d", body, d, key, algorithm, quota, permit, leaseMs)
	}
}

// checkPermitRefs checks accepted renew and release lists against encoding/json's reading.
func checkPermitRefs(t *testing.T, body []byte, req *Request, j *jsonRequest) {
	for i, r := range req.Renew {
		if r.Key != j.Renew[i].Key || r.Permit != j.Renew[i].Permit || r.Lease != time.Duration(j.Renew[i].LeaseMs)*time.Millisecond || r.Lease < MinLeaseMs*time.Millisecond {
			t.Fatalf("%q: renew %d decoded %+v, encoding/json %+v", body, i, r, j.Renew[i])
		}
	}
	for i, r := range req.Release {
		if r.Key != j.Release[i].Key || r.Permit != j.Release[i].Permit || r.Lease != 0 || CheckKey(r.Permit, MaxPermitBytes) != nil {
			t.Fatalf("%q: release %d decoded %+v, encoding/json %+v", body, i, r, j.Release[i])
		}
	}
}

// FuzzDescriptorRoundTrip checks the contract on arbitrary parts: every valid limit and cost
// the filter encodes, with any plugin, rule and key value, the service decodes to the same
// limit and cost and to a key it accepts.
func FuzzDescriptorRoundTrip(f *testing.F) {
	f.Add("ns.plugin", "rule", uint64(42), "alice", uint8(1), int64(10), int64(1000), int64(20), int64(1))
	f.Add("p", "r", uint64(0), "\xff\u0085\"\\", uint8(4), int64(10000), int64(34560000000), int64(0), int64(1000000000000))
	f.Fuzz(func(t *testing.T, plugin, rule string, fp uint64, value string, kind uint8, quota, windowMs, burst, cost int64) {
		l := algorithms.Limit{Kind: algorithms.Kind(kind), Quota: quota, Window: time.Duration(windowMs) * time.Millisecond, Burst: burst}
		if windowMs <= 0 || windowMs > int64(algorithms.MaxWindow/time.Millisecond) || l.Validate() != nil || cost < 1 || cost > algorithms.MaxQuota {
			return
		}
		b := AppendRequestEnd(AppendDescriptor(AppendRequestStart(nil), 0, Key{Plugin: plugin, Rule: rule, Fingerprint: fp, Value: value}, l, cost))
		var req Request
		if err := DecodeRequest(b, DecodeOptions{}, &req); err != nil {
			t.Fatalf("the service refuses what the filter sent: %v\n%s", err, b)
		}
		if d := req.Descriptors[0]; d.Limit != l || d.Cost != cost {
			t.Fatalf("sent %+v cost %d, decoded %+v", l, cost, d)
		}
	})
}

// FuzzDecodeAnswer checks the filter's answer decoder: it never panics, and what it accepts
// the service's encoder writes back to an answer it decodes the same way.
func FuzzDecodeAnswer(f *testing.F) {
	for _, seed := range []string{
		`{"allowed":true,"decisions":[{"allowed":true,"limit":100,"remaining":42,"reset_ms":580,"retry_after_ms":0}]}`,
		`{"allowed":false,"decisions":[{"allowed":false,"limit":3,"remaining":0,"reset_ms":1,"retry_after_ms":-1,"delay_ms":4,"skipped":true,"x":{"y":["\u00e9",null]}}]}`,
		`{"error":"store unavailable"}`, `{"allowed":true,"decisions":[]}`, `[`, ``,
		`{"allowed":true,"decisions":[{"allowed":true,"limit":10,"remaining":5,"reset_ms":95000,"retry_after_ms":0,"effective_ms":40001}]}`,
		`{"allowed":true,"decisions":[],"settled":3}`, `{"allowed":true,"decisions":[],"renewed":1,"released":0,"settled":-2}`,
	} {
		f.Add([]byte(seed), 1)
	}
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		allowed, got, err := DecodeAnswer(body, n, nil)
		if err != nil {
			return
		}
		b := AppendAnswerStart(nil, allowed)
		for i, d := range got {
			if d.DelayMs < 0 {
				d.DelayMs = 0 // written only when positive
			}
			got[i] = d
			b = AppendDecision(b, i, d)
		}
		allowed2, got2, err := DecodeAnswer(AppendAnswerEnd(b), n, nil)
		if err != nil || allowed2 != allowed || len(got2) != len(got) {
			t.Fatalf("%q re-encoded as %q: %v", body, b, err)
		}
		for i := range got {
			if got[i] != got2[i] {
				t.Fatalf("decision %d: %+v, re-decoded %+v", i, got[i], got2[i])
			}
		}
	})
}

// checkSettles checks an accepted settle list against encoding/json's reading.
func checkSettles(t *testing.T, body []byte, req *Request, j *jsonRequest) {
	for i, s := range req.Settle {
		js := j.Settle[i]
		if s.Limit.Validate() != nil || !s.Limit.Kind.Settles() || CheckKey(s.Key, MaxKeyBytes) != nil || s.Delta == 0 ||
			s.Delta < -algorithms.MaxQuota || s.Delta > algorithms.MaxQuota || s.Age < 0 {
			t.Fatalf("%q: accepted settle %+v", body, s)
		}
		if s.Key != js.Key || s.Limit.Kind.String() != js.Algorithm || s.Limit.Quota != js.Quota || s.Limit.Burst != js.Burst ||
			s.Limit.Window != time.Duration(js.WindowMs)*time.Millisecond || s.Delta != js.Delta || s.Age != time.Duration(js.AgeMs)*time.Millisecond {
			t.Fatalf("%q: settle %d decoded %+v, encoding/json %+v", body, i, s, js)
		}
	}
}

// FuzzDecodeResetsRequest checks the service's decoder of reset log requests: it never panics,
// every error is a *FieldError naming a field, and what it accepts is within its bounds and
// what the filter's encoder writes for the same plugin part and position.
func FuzzDecodeResetsRequest(f *testing.F) {
	for _, seed := range []string{
		`{"plugin":"ns.p","since":41}`, `{"plugin":"p"}`, `{"since":1}`, `{"plugin":"a","since":-1}`,
		`{"plugin":"\u00e9\"","since":9223372036854775807}`, `{"plugin":"a","plugin":"b"}`, `{"plugin":"a"} x`, ``, `[`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req ResetsRequest
		if err := DecodeResetsRequest(body, &req); err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Reason == "" {
				t.Fatalf("error %v (%T) does not name a field", err, err)
			}
			return
		}
		if CheckKey(req.Plugin, MaxPluginBytes) != nil || req.Since > maxSeq {
			t.Fatalf("%q: accepted %+v", body, req)
		}
		var again ResetsRequest
		if err := DecodeResetsRequest(AppendResetsRequest(nil, req.Plugin, req.Since), &again); err != nil || again != req {
			t.Fatalf("%q: decoded %+v, re-encoded and decoded %+v (%v)", body, req, again, err)
		}
	})
}

// FuzzDecodeResetsAnswer checks the filter's decoder of reset log answers: it never panics,
// what it accepts is bounded and ordered, and the service's encoder writes it back to an answer
// it decodes the same way.
func FuzzDecodeResetsAnswer(f *testing.F) {
	for _, seed := range []string{
		`{"seq":43,"resets":[{"seq":42,"key":"p/r/1/v"},{"seq":43,"key":"p/r/2/\u00e9"}],"more":false,"truncated":false}`,
		`{"seq":0,"resets":[],"truncated":true,"x":[{"y":null}]}`, `{"error":"store unavailable"}`,
		`{"seq":3,"resets":[{"seq":4,"key":"k"}]}`, `{"seq":3,"resets":[{"seq":1}]}`, ``, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := DecodeResetsAnswer(body, nil)
		if err != nil {
			return
		}
		if len(a.Resets) > MaxResetsPerAnswer || a.Seq > maxSeq {
			t.Fatalf("%q: accepted %+v", body, a)
		}
		b := AppendResetsAnswer(nil, &a)
		again, err := DecodeResetsAnswer(b, nil)
		if err != nil || again.Seq != a.Seq || again.More != a.More || again.Truncated != a.Truncated || len(again.Resets) != len(a.Resets) {
			t.Fatalf("%q re-encoded as %q: %v", body, b, err)
		}
		for i := range a.Resets {
			if a.Resets[i] != again.Resets[i] {
				t.Fatalf("entry %d: %+v, re-decoded %+v", i, a.Resets[i], again.Resets[i])
			}
		}
	})
}
