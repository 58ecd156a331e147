package rlsconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// peerMetadata reads a metadata mapping the way envoyproxy/ratelimit does (src/config,
// parseMetadata at v1.4 and main): yaml.v2 decodes it into a map[string]interface{}, the keys
// of the mappings below it are turned into strings with %v, and structpb.NewStruct converts
// the result. It is the oracle of the differential tests.
func peerMetadata(data []byte) (*structpb.Struct, error) {
	var m map[string]interface{}
	if err := yamlv2.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	for k, v := range m {
		m[k] = peerConvert(v)
	}
	return structpb.NewStruct(m)
}

func peerConvert(v interface{}) interface{} {
	switch v := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(v))
		for k, e := range v {
			out[fmt.Sprintf("%v", k)] = peerConvert(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(v))
		for i, e := range v {
			out[i] = peerConvert(e)
		}
		return out
	}
	return v
}

// ourMetadata reads data, one YAML document, as a descriptor's metadata field.
func ourMetadata(data []byte) (Metadata, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		n = doc.Content[0]
	}
	p := &parser{file: "f.yaml"}
	n, err := p.resolve(n, "metadata")
	if err != nil {
		return nil, err
	}
	return p.metadata(n, "metadata")
}

// asText renders metadata with its types (strings quoted, numbers not, maps in key order, NaN
// and the infinities as Go writes them), "map[string]interface {}(nil)" when there is none.
func asText(s *structpb.Struct) string {
	if len(s.GetFields()) == 0 {
		return fmt.Sprintf("%#v", map[string]any(nil))
	}
	return fmt.Sprintf("%#v", s.AsMap())
}

// ourText renders m as asText does, through the Struct it becomes.
func ourText(t *testing.T, m Metadata) string {
	t.Helper()
	s, err := structpb.NewStruct(m)
	require.NoError(t, err, "Metadata holds the JSON data model only")
	return asText(s)
}

func TestMetadataIsReadAsEnvoyproxyRatelimitReadsIt(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"a nested mapping becomes a nested Struct (the peer's test/config/metadata.yaml)",
			"service_with_quota:\n  name: service_2\n", `{"service_with_quota":{"name":"service_2"}}`},
		{"numbers are numbers however they are written, and a google.protobuf.Value holds them as doubles",
			"a: 1\nb: -2.5\nc: 0x1F\nd: 1_000\ne: 017\nf: 1e3\ng: .5\nh: +7\ni: 12345678901234567890\nj: 0o17\nk: 08\n",
			`{"a":1,"b":-2.5,"c":31,"d":1000,"e":15,"f":1000,"g":0.5,"h":7,"i":12345678901234567000,"j":15,"k":8}`},
		{"YAML 1.1's booleans are booleans: yes, no, on, off, y and n in their cases",
			"a: yes\nb: No\nc: ON\nd: off\ne: y\nf: N\ng: True\nh: FALSE\n",
			`{"a":true,"b":false,"c":true,"d":false,"e":true,"f":false,"g":true,"h":false}`},
		{"null, ~ and an empty value are null", "a: null\nb: ~\nc:\nd: NULL\n", `{"a":null,"b":null,"c":null,"d":null}`},
		{"quoted and block scalars stay strings",
			"a: \"yes\"\nb: '1'\nc: |-\n  two\n  lines\nd: >-\n  folded\n  text\n",
			`{"a":"yes","b":"1","c":"two\nlines","d":"folded text"}`},
		{"a date, a time and anything else stay the text written",
			"a: 2026-05-23\nb: 2026-05-23T10:00:00Z\nc: 1:20\nd: 1e400\ne: nan\nf: _1\ng: 0x\n",
			`{"a":"2026-05-23","b":"2026-05-23T10:00:00Z","c":"1:20","d":"1e400","e":"nan","f":"_1","g":"0x"}`},
		{"lists keep their order and each element its type",
			"l: [1, a, true, null, [2, [3]], {k: v}]\n", `{"l":[1,"a",true,null,[2,[3]],{"k":"v"}]}`},
		{"an explicit tag is obeyed: !!str, !!float, !!int on a quoted number, !!binary",
			"a: !!str 1\nb: !!float 2\nc: !!int \"3\"\nd: !!binary aGVsbG8=\ne: !custom x\nf: !!null ''\n",
			`{"a":"1","b":2,"c":3,"d":"hello","e":"x","f":null}`},
		{"the metadata's own keys are taken as written",
			"yes: a\n1.0: b\n0x10: c\n\"q\": d\n", `{"yes":"a","1.0":"b","0x10":"c","q":"d"}`},
		{"the keys below are their values in Go's %v form, as the peer converts them",
			"m: {yes: a, 1.0: b, 0x10: c, 1e21: d, 12345678901234567890: e, .inf: f}\n",
			`{"m":{"true":"a","1":"b","16":"c","1e+21":"d","12345678901234567890":"e","+Inf":"f"}}`},
		{"a merge key merges its mapping, and a key written after it wins",
			"base: &b {p: 1, q: 2}\nm:\n  <<: *b\n  q: 3\n", `{"base":{"p":1,"q":2},"m":{"p":1,"q":3}}`},
		{"a merge key written after a key wins over it, as in yaml.v2",
			"base: &b {p: 1, q: 2}\nm:\n  q: 3\n  <<: *b\n", `{"base":{"p":1,"q":2},"m":{"p":1,"q":2}}`},
		{"a merge of a list of mappings lets the earlier ones win",
			"a: &a {p: 1}\nb: &b {p: 2, q: 2}\nm: {<<: [*a, *b]}\n", `{"a":{"p":1},"b":{"p":2,"q":2},"m":{"p":1,"q":2}}`},
		{"a merge key in the metadata's own mapping keeps its keys as written",
			"<<: {yes: 1}\nz: 2\n", `{"yes":1,"z":2}`},
		{"an alias is a copy of its anchor", "a: &x [1, {k: v}]\nb: *x\n", `{"a":[1,{"k":"v"}],"b":[1,{"k":"v"}]}`},
		{"a quoted << is an ordinary key", "'<<': {a: 1}\n", `{"<<":{"a":1}}`},
		{"empty metadata is none", "{}\n", `null`},
		{"a key y below the top is the boolean true, as YAML 1.1 has it", "m: {y: 1, n: 2}\n", `{"m":{"true":1,"false":2}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ourMetadata([]byte(tc.yaml))
			require.NoError(t, err)
			got, err := json.Marshal(m)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(got))
			peer, err := peerMetadata([]byte(tc.yaml))
			require.NoError(t, err, "the peer reads it too")
			assert.Equal(t, asText(peer), ourText(t, m), "the peer's reading")
		})
	}
}

// Metadata that envoyproxy/ratelimit refuses is refused, with the field named; so is, where
// peerAccepts says so, metadata whose reading by the peer depends on chance (keys that collide),
// silently drops a key (duplicates), or that Envoy could not parse (too deep).
func TestMetadataRefusalsNameTheField(t *testing.T) {
	deep := strings.Repeat("{a: ", 20) + "1" + strings.Repeat("}", 20)
	var big strings.Builder
	big.WriteString("l: [")
	for i := range maxMetadataValues {
		fmt.Fprintf(&big, "%d, ", i)
	}
	big.WriteString("]\n")
	for _, tc := range []struct {
		name, yaml, want string
		peerAccepts      bool
	}{
		{"metadata that is not a mapping is refused", "[a]\n", `f.yaml:1:1: metadata: want a mapping, got a list`, false},
		{"a list as a key is refused", "m: {[a]: 1}\n", `f.yaml:1:5: metadata.m: a key must be a scalar, got a list`, false},
		{"an explicit tag that does not fit the value is refused", "a: !!int x\n", `f.yaml:1:4: metadata.a: cannot decode !!str "x" as a !!int`, false},
		{"!!binary that is not base64 is refused", "a: !!binary '%%'\n", `f.yaml:1:4: metadata.a: !!binary value contains invalid base64 data`, false},
		{"!!binary that is not UTF-8 is refused", "a: !!binary /w==\n", `f.yaml:1:4: metadata.a: !!binary value is not UTF-8 text`, false},
		{"a merge of a scalar is refused", "m: {<<: 1}\n", `f.yaml:1:9: metadata.m.<<: want a mapping or a list of mappings to merge, got int "1"`, false},
		{"a duplicate key is refused (the peer keeps the last)", "a: 1\nb: 2\na: 3\n", `f.yaml:3:1: metadata.a: duplicate key (first on line 1)`, true},
		{"keys that become the same string are refused (the peer keeps one at random)", "m:\n  1: a\n  \"1\": b\n", `f.yaml:3:3: metadata.m.1: duplicate key (first on line 2)`, true},
		{"a null key is refused (the peer names it \"\" or \"<nil>\")", "m: {~: 1}\n", `f.yaml:1:5: metadata.m: a key must not be null`, true},
		{"metadata nested deeper than 20 levels is refused", "m: " + deep + "\n",
			`metadata.m.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a: nested deeper than 20 levels`, true},
		{"metadata of more than 4096 values is refused", big.String(), `metadata.l[4095]: metadata of more than 4096 values`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ourMetadata([]byte(tc.yaml))
			require.Error(t, err)
			var e *Error
			require.True(t, errors.As(err, &e), "an *Error: %v", err)
			assert.Contains(t, err.Error(), tc.want)
			_, perr := peerMetadata([]byte(tc.yaml))
			assert.Equal(t, tc.peerAccepts, perr == nil, "the peer's reading: %v", perr)
		})
	}
}

func TestMetadataNestedTwentyLevelsDeepIsRead(t *testing.T) {
	deepest := "m: " + strings.Repeat("{a: ", 18) + "[1]" + strings.Repeat("}", 18) + "\n" // 1 + 1 + 18 levels
	m, err := ourMetadata([]byte(deepest))
	require.NoError(t, err)
	peer, err := peerMetadata([]byte(deepest))
	require.NoError(t, err)
	assert.Equal(t, asText(peer), ourText(t, m))
	_, err = ourMetadata([]byte(strings.Replace(deepest, "[1]", "[[1]]", 1)))
	assert.ErrorContains(t, err, "nested deeper than 20 levels")
}

func TestInfinitiesAndNaNAreTheSpecialDoubles(t *testing.T) {
	m, err := ourMetadata([]byte("a: .inf\nb: -.Inf\nc: .NaN\n"))
	require.NoError(t, err)
	assert.True(t, math.IsInf(m["a"].(float64), 1))
	assert.True(t, math.IsInf(m["b"].(float64), -1))
	assert.True(t, math.IsNaN(m["c"].(float64)))
	peer, err := peerMetadata([]byte("a: .inf\nb: -.Inf\nc: .NaN\n"))
	require.NoError(t, err)
	assert.Equal(t, asText(peer), ourText(t, m))
}

func TestMetadataIsOnTheMatchedRule(t *testing.T) {
	c, err := Load([]File{{"m.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {team: a, n: 1}\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {}\n")}})
	require.NoError(t, err)
	r, ok := match(c, "d", entries("k", "value"))
	require.True(t, ok)
	assert.Equal(t, Metadata{"team": "a", "n": float64(1)}, r.Metadata)
	r, ok = match(c, "d", entries("j", "x"))
	require.True(t, ok)
	assert.Nil(t, r.Metadata, "empty metadata is none")
}

// nonSpecificTag finds the non-specific tag "!" before a scalar: yaml.v2 reads the scalar as a
// string, yaml.v3 (which meshlimit parses with) drops the tag and resolves it, and its Node does
// not tell.
var nonSpecificTag = regexp.MustCompile(`(^|[\s\[{,:?-])!([\s,\]}]|$)`)

// FuzzMetadataMatchesThePeer reads arbitrary YAML as metadata both ways: where the peer reads
// it, meshlimit reads the same Struct or refuses it for one of the reasons the peer does not
// have; where the peer refuses it, so does meshlimit. Input that yaml.v3 cannot parse at all
// is left out: the loader refuses such a file, and yaml.v2 sometimes reads a document without
// looking at what follows it.
func FuzzMetadataMatchesThePeer(f *testing.F) {
	for _, s := range []string{
		"a: 1\nb: [yes, no, ~, 1.5, 0x1F, '2']\nc: {d: {e: f}}\n",
		"base: &b {x: 1}\nm: {<<: *b, y: 2}\n",
		"m: {1: a, 2.5: b, true: c}\n",
		"a: !!binary aGk=\nb: !!float 3\n",
		"a: .inf\nb: 2026-01-02\nc: 1_0\n",
	} {
		f.Add([]byte(s))
	}
	ours := []string{"duplicate key", "a key must not be null", "nested deeper than", "metadata of more than"}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<12 || nonSpecificTag.Match(data) {
			return
		}
		peer, perr := peerMetadata(data)
		m, err := ourMetadata(data)
		if e := (*Error)(nil); err != nil && !errors.As(err, &e) {
			return // YAML that yaml.v3 cannot parse (yaml.v2 may stop before the error): the whole file is refused
		}
		switch {
		case perr != nil && err == nil:
			t.Fatalf("the peer refuses it (%v), meshlimit reads %v", perr, m)
		case perr == nil && err != nil:
			for _, r := range ours {
				if strings.Contains(err.Error(), r) {
					return
				}
			}
			t.Fatalf("the peer reads %v, meshlimit refuses it: %v", peer, err)
		case err == nil:
			if got, want := ourText(t, m), asText(peer); got != want {
				t.Fatalf("meshlimit reads %s, the peer %s", got, want)
			}
		}
	})
}
