package wire

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyOf is the key a filter writes, as the service decodes it.
func keyOf(k Key) string { return string(AppendKey(nil, k)) }

// The filter's request of the reset log reaches the service with its plugin part exactly as its
// keys carry it, and its position.
func TestEveryResetsRequestFieldTheFilterSendsIsWhatTheServiceDecodes(t *testing.T) {
	for _, tc := range []struct {
		name, plugin string
		since        uint64
	}{
		{"a plain plugin name and no position", "ns.plugin", 0},
		{"a plugin name with quotes and a backslash", `p "q" \ é`, 41},
		{"a plugin name too long to be written as is", strings.Repeat("p", MaxPluginBytes+1), 1 << 40},
		{"a plugin name that is not UTF-8", "p\xff", 7},
		{"the largest position", "p", maxSeq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := AppendResetsRequest(nil, tc.plugin, tc.since)
			var req ResetsRequest
			require.NoError(t, DecodeResetsRequest(body, &req), "%s", body)
			assert.Equal(t, tc.since, req.Since)
			key := keyOf(Key{Plugin: tc.plugin, Rule: "r", Fingerprint: 9, Value: "v"})
			assert.Equal(t, req.Plugin+"/r/9/v", key, "the plugin part is the prefix of the plugin's keys")
		})
	}
}

// The service's answer reaches the filter with every entry and flag as sent.
func TestEveryResetsAnswerFieldTheServiceSendsIsWhatTheFilterDecodes(t *testing.T) {
	sent := ResetsAnswer{Seq: 1 << 50, More: true, Truncated: true, Resets: []Reset{
		{Seq: 1, Key: keyOf(Key{Plugin: "ns.p", Rule: "login", Fingerprint: 1<<64 - 1, Value: `alice "a" \ /x`})},
		{Seq: 2, Key: keyOf(Key{Plugin: "ns.p", Rule: "r", Fingerprint: 0, Value: "\xff"})},
		{Seq: 1 << 50, Key: "k"},
	}}
	body := AppendResetsAnswer(nil, &sent)
	got, err := DecodeResetsAnswer(body, make([]Reset, 0, 8))
	require.NoError(t, err, "%s", body)
	assert.Equal(t, sent, got)

	empty := ResetsAnswer{Seq: 3}
	got, err = DecodeResetsAnswer(AppendResetsAnswer(nil, &empty), nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), got.Seq)
	assert.Empty(t, got.Resets)
	assert.False(t, got.More || got.Truncated)

	var j struct {
		Seq    uint64 `json:"seq"`
		Resets []struct {
			Seq uint64 `json:"seq"`
			Key string `json:"key"`
		} `json:"resets"`
		More, Truncated bool
	}
	require.NoError(t, json.Unmarshal(body, &j), "encoding/json reads the answer too")
	assert.Equal(t, sent.Resets[0].Key, j.Resets[0].Key)
}

// A full page of the longest keys fits what the filter reads.
func TestTheLargestResetsAnswerIsBounded(t *testing.T) {
	a := ResetsAnswer{Seq: maxSeq}
	for i := range MaxResetsPerAnswer {
		a.Resets = append(a.Resets, Reset{Seq: maxSeq - MaxResetsPerAnswer + uint64(i) + 1, Key: strings.Repeat(`"`, MaxKeyBytes)})
	}
	body := AppendResetsAnswer(nil, &a)
	assert.Less(t, len(body), MaxAnswerBytes)
	got, err := DecodeResetsAnswer(body, nil)
	require.NoError(t, err)
	assert.Len(t, got.Resets, MaxResetsPerAnswer)
}

func TestABadResetsRequestIsRefusedNamingItsField(t *testing.T) {
	for _, tc := range []struct{ name, body, field, reason string }{
		{"an empty body", ``, "body", "empty"},
		{"an array", `[]`, "body", "want a JSON object"},
		{"a missing plugin", `{"since":3}`, "plugin", "required"},
		{"an empty plugin", `{"plugin":""}`, "plugin", "required"},
		{"a plugin that is a number", `{"plugin":3}`, "plugin", "want a string"},
		{"a plugin with a control character", `{"plugin":"a\u0001"}`, "plugin", "control character"},
		{"a plugin longer than its bound", `{"plugin":"` + strings.Repeat("p", MaxPluginBytes+1) + `"}`, "plugin", "at most"},
		{"a plugin given twice", `{"plugin":"a","plugin":"b"}`, "plugin", "given twice"},
		{"a since given twice", `{"plugin":"a","since":1,"since":2}`, "since", "given twice"},
		{"a negative since", `{"plugin":"a","since":-1}`, "since", "must be between 0 and"},
		{"a since beyond 2^63-1", `{"plugin":"a","since":9223372036854775808}`, "since", "want an integer"},
		{"a huge since", `{"plugin":"a","since":1e300}`, "since", "want an integer"},
		{"a fractional since", `{"plugin":"a","since":1.5}`, "since", "want an integer"},
		{"a since that is a string", `{"plugin":"a","since":"1"}`, "since", "want an integer"},
		{"an unknown member", `{"plugin":"a","Since":1}`, "Since", "unknown field"},
		{"trailing data", `{"plugin":"a"} {}`, "body", "trailing data"},
		{"a truncated body", `{"plugin":"a"`, "body", "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req ResetsRequest
			err := DecodeResetsRequest([]byte(tc.body), &req)
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, tc.field, fe.Field)
			assert.Contains(t, fe.Reason, tc.reason)
		})
	}
}

func TestABadResetsAnswerIsAnErrorNamingItsField(t *testing.T) {
	for _, tc := range []struct{ name, body, field, reason string }{
		{"an error body", `{"error":"store unavailable"}`, "body", "want seq and resets"},
		{"a missing resets list", `{"seq":3}`, "body", "want seq and resets"},
		{"a seq that is a string", `{"seq":"3","resets":[]}`, "seq", "want an integer"},
		{"a negative seq", `{"seq":-3,"resets":[]}`, "seq", "must be between"},
		{"a seq given twice", `{"seq":3,"seq":4,"resets":[]}`, "seq", "given twice"},
		{"a resets list given twice", `{"seq":3,"resets":[],"resets":[]}`, "resets", "given twice"},
		{"a resets object", `{"seq":3,"resets":{}}`, "resets", "want an array"},
		{"a more that is a number", `{"seq":3,"resets":[],"more":1}`, "more", "want a boolean"},
		{"a truncated given twice", `{"seq":3,"resets":[],"truncated":true,"truncated":true}`, "truncated", "given twice"},
		{"an entry without a key", `{"seq":3,"resets":[{"seq":1}]}`, "resets[0].key", "required"},
		{"an entry without a seq", `{"seq":3,"resets":[{"key":"k"}]}`, "resets[0].seq", "required"},
		{"an entry with an empty key", `{"seq":3,"resets":[{"seq":1,"key":""}]}`, "resets[0].key", "required"},
		{"an entry with a key too long", `{"seq":3,"resets":[{"seq":1,"key":"` + strings.Repeat("k", MaxKeyBytes+1) + `"}]}`, "resets[0].key", "at most"},
		{"an entry that is a string", `{"seq":3,"resets":["k"]}`, "resets[0]", "want an object"},
		{"entries out of order", `{"seq":3,"resets":[{"seq":2,"key":"a"},{"seq":2,"key":"b"}]}`, "resets[1].seq", "ascending"},
		{"an entry after the answer's seq", `{"seq":3,"resets":[{"seq":4,"key":"a"}]}`, "resets[0].seq", "after the answer's seq"},
		{"trailing data", `{"seq":3,"resets":[]}x`, "body", "trailing data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := DecodeResetsAnswer([]byte(tc.body), nil)
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, tc.field, fe.Field)
			assert.Contains(t, fe.Reason, tc.reason)
			assert.Empty(t, a.Resets, "a failed answer hands back no entries")
		})
	}
}

func TestAResetsAnswerWithMoreThanAPageOfEntriesIsAnError(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"seq":1000,"resets":[`)
	for i := range MaxResetsPerAnswer + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"seq":` + strconv.Itoa(i+1) + `,"key":"k"}`)
	}
	b.WriteString(`]}`)
	_, err := DecodeResetsAnswer([]byte(b.String()), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than 256")
}

func TestAResetsAnswerSkipsMembersOfALaterVersion(t *testing.T) {
	a, err := DecodeResetsAnswer([]byte(`{"future":{"x":[1,"y"]},"seq":5,"resets":[{"seq":5,"key":"p/r/1/v","by":"admin"}],"more":false}`), nil)
	require.NoError(t, err)
	assert.Equal(t, ResetsAnswer{Seq: 5, Resets: []Reset{{Seq: 5, Key: "p/r/1/v"}}}, a)
}

func TestParseKeySplitsTheKeysOfItsPluginOnly(t *testing.T) {
	long := strings.Repeat("p", MaxPluginBytes+1)
	for _, tc := range []struct {
		name, key, plugin, rule, value string
		fp                             uint64
		ok                             bool
	}{
		{"a key of the plugin", "ns.p/login/2n9c/alice", "ns.p", "login", "alice", 123456, true},
		{"a value holding slashes", "ns.p/r/0/a/b/c", "ns.p", "r", "a/b/c", 0, true},
		{"an empty value", "ns.p/r/1/", "ns.p", "r", "", 1, true},
		{"the largest fingerprint", "p/r/" + strconv.FormatUint(1<<64-1, 36) + "/v", "p", "r", "v", 1<<64 - 1, true},
		{"a hashed plugin", keyOf(Key{Plugin: long, Rule: "r", Fingerprint: 35, Value: "v"}), long, "r", "v", 35, true},
		{"a hashed rule", keyOf(Key{Plugin: "p", Rule: "r\x00", Fingerprint: 35, Value: "v"}), "p", string(appendPart(nil, "r\x00", MaxRuleBytes)), "v", 35, true},
		{"another plugin", "ns.q/r/1/v", "ns.p", "", "", 0, false},
		{"a plugin whose name extends ours", "ns.pp/r/1/v", "ns.p", "", "", 0, false},
		{"the hashed form of another long plugin", keyOf(Key{Plugin: long + "x", Rule: "r", Fingerprint: 1, Value: "v"}), long, "", "", 0, false},
		{"the raw form of a plugin written hashed", long + "/r/1/v", long, "", "", 0, false},
		{"an empty rule", "p//1/v", "p", "", "", 0, false},
		{"no fingerprint", "p/r", "p", "", "", 0, false},
		{"a fingerprint with an upper-case digit", "p/r/A/v", "p", "", "", 0, false},
		{"a fingerprint with a leading zero", "p/r/01/v", "p", "", "", 0, false},
		{"an empty fingerprint", "p/r//v", "p", "", "", 0, false},
		{"a fingerprint beyond a uint64", "p/r/3w5e11264sgsg/v", "p", "", "", 0, false},
		{"a fingerprint without the slash after it", "p/r/1", "p", "", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule, fp, value, ok := ParseKey(tc.key, tc.plugin)
			require.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.rule, rule)
			assert.Equal(t, tc.fp, fp)
			assert.Equal(t, tc.value, value)
		})
	}
}

// ParseKey undoes the key the filter writes, for any parts.
func TestParseKeyUndoesTheFilterKey(t *testing.T) {
	for _, k := range []Key{
		{Plugin: "ns.p", Rule: "login", Fingerprint: 77, Value: "a/b"},
		{Plugin: `q"\`, Rule: "r", Fingerprint: 1<<64 - 1, Value: "\u0085"},
		{Plugin: strings.Repeat("x", 300), Rule: "r", Fingerprint: 0, Value: strings.Repeat("v", 300)},
	} {
		rule, fp, value, ok := ParseKey(keyOf(k), k.Plugin)
		require.True(t, ok, "%+v", k)
		assert.Equal(t, k.Fingerprint, fp)
		assert.Equal(t, keyOf(Key{Plugin: "p", Rule: k.Rule, Fingerprint: k.Fingerprint, Value: k.Value}), "p/"+rule+"/"+strconv.FormatUint(fp, 36)+"/"+value)
	}
}

// The filter runs these on its tick: building the request and splitting keys do not allocate.
func TestEncodingAResetsRequestAndParsingAKeyDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 512)
	long := strings.Repeat("p", MaxPluginBytes+1)
	key := keyOf(Key{Plugin: long, Rule: "r", Fingerprint: 35, Value: "v"})
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		_ = AppendResetsRequest(buf[:0], "ns.p", 42)
		_ = AppendResetsRequest(buf[:0], long, 42)
		if _, _, _, ok := ParseKey("ns.p/r/2n9c/alice", "ns.p"); !ok {
			panic("not parsed")
		}
		if _, _, _, ok := ParseKey(key, long); !ok {
			panic("not parsed")
		}
	}))
}
