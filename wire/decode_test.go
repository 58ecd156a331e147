package wire

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

const okDesc = `{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000}`

// Each case was accepted by the service before (encoding/json matches names in any case,
// keeps the last of two members, turns bad UTF-8 into U+FFFD) or named a path without its
// array index; each is now refused with the full path.
func TestTheDecoderIsAsStrictAsTheAPISays(t *testing.T) {
	for _, tc := range []struct {
		name, body, err string
	}{
		{"a member name in another case is unknown", `{"descriptors":[{"Key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			"descriptors[0].Key: unknown field"},
		{"a top-level name in another case is unknown", `{"Descriptors":[` + okDesc + `]}`, "Descriptors: unknown field"},
		{"a duplicate descriptor member is refused", `{"descriptors":[{"key":"k","key":"j","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			"descriptors[0].key: given twice"},
		{"a duplicate descriptors member is refused", `{"descriptors":[` + okDesc + `],"descriptors":[` + okDesc + `]}`, "descriptors: given twice"},
		{"a duplicate now_us is refused", `{"now_us":1,"now_us":2,"descriptors":[` + okDesc + `]}`, "now_us: given twice"},
		{"a type error names the array index", `{"descriptors":[` + okDesc + `,{"key":"k","algorithm":"token_bucket","quota":"10","window_ms":1000}]}`,
			"descriptors[1].quota: want an integer, got a string"},
		{"a fraction names the array index", `{"descriptors":[` + okDesc + `,` + okDesc + `,{"key":"k","algorithm":"token_bucket","quota":1.5,"window_ms":1000}]}`,
			"descriptors[2].quota: want an integer between -2^63 and 2^63-1, got 1.5"},
		{"a descriptor that is not an object names its index", `{"descriptors":[` + okDesc + `,null]}`, "descriptors[1]: want an object, got null"},
		{"a raw 0xff byte in a key is refused", `{"descriptors":[{"key":"a` + "\xff" + `","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			"descriptors[0].key: not valid UTF-8 (byte 0xff at offset 25)"},
		{"an overlong slash in a key is refused", `{"descriptors":[{"key":"` + "\xc0\xaf" + `","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			"descriptors[0].key: not valid UTF-8 (byte 0xc0 at offset 24)"},
		{"a surrogate encoded in UTF-8 is refused", `{"descriptors":[{"key":"` + "\xed\xa0\x80" + `","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			"descriptors[0].key: not valid UTF-8 (byte 0xed at offset 24)"},
		{"a lone high surrogate escape is refused", `{"descriptors":[{"key":"a\ud800","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			`descriptors[0].key: lone surrogate escape \ud800`},
		{"a lone low surrogate escape is refused", `{"descriptors":[{"key":"\udc00b","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			`descriptors[0].key: lone surrogate escape \udc00`},
		{"a high surrogate before a non-surrogate escape is refused", `{"descriptors":[{"key":"\ud800\u0041","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			`descriptors[0].key: lone surrogate escape \ud800`},
		{"a bad byte in a member name is refused", `{"descriptors":[{"k` + "\xff" + `":"k"}]}`,
			"descriptors[0]: a member name: not valid UTF-8 (byte 0xff at offset 19)"},
		{"an escaped C1 control character in a key is refused", `{"descriptors":[{"key":"a\u0085","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			"descriptors[0].key: contains a control character"},
		{"an escaped NUL in a key is refused", `{"descriptors":[{"key":"\u0000","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`,
			"descriptors[0].key: contains a control character"},
		{"a 65th descriptor is refused", `{"descriptors":[` + strings.Repeat(okDesc+",", 64) + okDesc + `]}`, "descriptors: more than 64 descriptors"},
		{"a missing key is named", `{"descriptors":[{"algorithm":"token_bucket","quota":10,"window_ms":1000}]}`, "descriptors[0].key: required"},
		{"a trailing comma is a syntax error", `{"descriptors":[` + okDesc + `],}`, "body: invalid JSON at offset 84: want a member name"},
		{"trailing data is refused", `{"descriptors":[` + okDesc + `]} {}`, "body: trailing data after the JSON object"},
		{"an empty body is refused", ` `, "body: empty; want a JSON object"},
		{"an array body is refused", `[]`, "body: want a JSON object, got an array"},
		{"a truncated body is refused", `{"descriptors":[{"key":"k`, "body: truncated JSON"},
		{"a number with a leading zero is a syntax error", `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":010,"window_ms":1000}]}`,
			"body: invalid JSON at offset 63: a number with a leading zero"},
		{"a number beyond int64 is refused", `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":9223372036854775808,"window_ms":1000}]}`,
			"descriptors[0].quota: want an integer between -2^63 and 2^63-1, got 9223372036854775808"},
		{"client time is refused unless allowed", `{"now_us":1,"descriptors":[` + okDesc + `]}`, "now_us: not accepted: the service uses its store's clock (client time is for tests)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req Request
			err := DecodeRequest([]byte(tc.body), DecodeOptions{}, &req)
			require.Error(t, err)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.err, err.Error())
		})
	}
}

// Distinct keys that are not valid UTF-8 used to become the same U+FFFD string and share one
// counter; they are refused now, and valid escapes decode to what they mean.
func TestDistinctInvalidKeysNeverShareACounter(t *testing.T) {
	for _, key := range []string{"\xff", "\xfe", `\ud800`, `\udbff`} {
		var req Request
		body := `{"descriptors":[{"key":"` + key + `","algorithm":"fixed_window","quota":1,"window_ms":1000}]}`
		assert.Error(t, DecodeRequest([]byte(body), DecodeOptions{}, &req), "%q", key)
	}
	var req Request
	body := `{"now_us":7,"descriptors":[{"key":"\ud83d\ude00 \u00e9\"\\\/\b","algorithm":"fixed_window","quota":1,"window_ms":1000,"cost":1}]}`
	err := DecodeRequest([]byte(body), DecodeOptions{AllowClientTime: true}, &req)
	require.Error(t, err, "\\b is a control character")
	body = strings.Replace(body, `\b`, ``, 1)
	require.NoError(t, DecodeRequest([]byte(body), DecodeOptions{AllowClientTime: true}, &req))
	assert.Equal(t, "😀 é\"\\/", req.Descriptors[0].Key)
	assert.Equal(t, Request{Descriptors: []Descriptor{{Key: "😀 é\"\\/", Limit: algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1, Window: time.Second}, Cost: 1}}, NowUs: 7, HasNow: true}, req)
}

// The answer decoder skips members a later v1 adds, and refuses what no service sends.
func TestTheAnswerDecoderSkipsNewMembersAndRefusesBrokenAnswers(t *testing.T) {
	const d = `{"allowed":true,"limit":1,"remaining":0,"reset_ms":1,"retry_after_ms":0}`
	_, got, err := DecodeAnswer([]byte(`{"v":[{"a":"\u00e9"},null,true,-1.5e3],"allowed":true,"decisions":[{"policy":"x","allowed":true,"limit":1}]}`), 1, nil)
	require.NoError(t, err)
	assert.Equal(t, []Decision{{Allowed: true, Limit: 1}}, got)
	for _, tc := range []struct{ name, body, err string }{
		{"fewer decisions than descriptors", `{"allowed":true,"decisions":[` + d + `]}`, "decisions: 1 decisions for 2 descriptors"},
		{"a string where a number belongs", `{"allowed":true,"decisions":[` + d + `,{"allowed":true,"limit":"1"}]}`, "decisions[1].limit: want an integer, got a string"},
		{"a member given twice", `{"allowed":true,"allowed":false,"decisions":[]}`, "allowed: given twice"},
		{"no allowed", `{"decisions":[` + d + `,` + d + `]}`, "body: want allowed and decisions"},
		{"an error body", `{"error":"store unavailable"}`, "body: want allowed and decisions"},
		{"truncated", `{"allowed":true,"decisions":[` + d, "body: truncated JSON"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			_, _, err := DecodeAnswer([]byte(tc.body), 2, nil)
			require.Error(t, err)
			assert.Equal(t, tc.err, err.Error())
		})
	}
}

func TestErrorBodiesAreJSONWhateverTheMessage(t *testing.T) {
	assert.Equal(t, `{"error":"a \"b\" \\ \u000a\u007f é"}`+"\n", string(AppendError(nil, "a \"b\" \\ \n\x7f é")))
}
