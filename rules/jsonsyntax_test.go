package rules

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The configuration's JSON reader stands in for encoding/json: these tests hold it to what
// encoding/json accepts and decodes.

var syntaxCases = []struct{ name, doc string }{
	{"an empty object is valid", `{}`},
	{"whitespace around the value is valid", " \t\r\n{\"a\": [1, -2.5e+3, true, false, null]}\n"},
	{"escapes and surrogate pairs are valid", `{"a": "\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}`},
	{"a lone surrogate escape is valid", `"\ud800x"`},
	{"bytes that are not UTF-8 are valid", "\"\xff\xfe\""},
	{"an empty document is not", ``},
	{"trailing data is not", `{} {}`},
	{"a trailing comma in an object is not", `{"a": 1,}`},
	{"a trailing comma in an array is not", `[1,]`},
	{"a leading zero is not", `01`},
	{"a fraction without digits is not", `1.`},
	{"an exponent without digits is not", `1e+`},
	{"a bare minus is not", `-`},
	{"numbers of any magnitude are valid, as encoding/json reads them", `[1e-996, 1E400, 1e999999999999999999999, -0.0e-0, 99.99999999999999999, 9223372036854775808]`},
	{"a plus sign is not", `+1`},
	{"a hexadecimal number is not", `0x10`},
	{"a fraction without an integer part is not", `.5`},
	{"a point before the exponent is not", `1.e5`},
	{"Infinity and NaN are not", `[Infinity, NaN]`},
	{"an unquoted name is not", `{a: 1}`},
	{"a missing colon is not", `{"a" 1}`},
	{"a control character in a string is not", "\"a\tb\""},
	{"an unknown escape is not", `"\x"`},
	{"a short unicode escape is not", `"\u12"`},
	{"an unterminated string is not", `"abc`},
	{"an unclosed array is not", `[1, 2`},
	{"a misspelt literal is not", `[nul]`},
	{"a single quote is not", `'a'`},
	{"nesting deeper than encoding/json's limit is not", strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)},
	{"nesting at encoding/json's limit is valid", strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth)},
}

func TestTheConfigReaderAcceptsWhatEncodingJSONAccepts(t *testing.T) {
	for _, tc := range syntaxCases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, ok := checkSyntax([]byte(tc.doc))
			assert.Equal(t, json.Valid([]byte(tc.doc)), ok)
		})
	}
}

func TestASyntaxErrorNamesTheLineAndColumnOfTheByteAtFault(t *testing.T) {
	lines := errorLines(t, "{\"rules\": [\n  {\"name\": x}]}")
	assert.Equal(t, []string{`: invalid JSON at line 2, column 12: invalid character 'x' looking for beginning of value`}, lines)
}

func TestTheConfigReaderDecodesStringsAsEncodingJSONDoes(t *testing.T) {
	for _, lit := range []string{`""`, `"plain"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`,
		`"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `"\ud83d\ud83d\ude00"`, "\"\xff\xe2\x82\"", "\"\xed\xa0\x80\"", `"é中"`} {
		var want string
		require.NoError(t, json.Unmarshal([]byte(lit), &want), lit)
		assert.Equal(t, want, unquoteJSON([]byte(lit)), lit)
	}
}

func TestValidConfigurationsDecodeAsWithEncodingJSON(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "config", "valid", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		t.Run(filepath.Base(file), func(t *testing.T) { assertDecodesAsEncodingJSON(t, data) })
	}
	for _, doc := range []string{
		`{"rules": [], "shedders": [], "response": {"headers": {}}}`,
		`{"rules": null, "enforce": null, "global": null, "max_keys": null, "response": null}`,
		`{"rules": [{"name": "a", "key": ["client_ip", {"header": "x"}, {"property": ["a", "b.c"]}], "cost": 3, "limits": [{"rate": "1/s", "burst": 1e1}]}]}`,
	} {
		assertDecodesAsEncodingJSON(t, []byte(doc))
	}
}

// assertDecodesAsEncodingJSON checks that data, a document without shape errors, decodes into
// the same configJSON with the reader as with encoding/json.
func assertDecodesAsEncodingJSON(t *testing.T, data []byte) {
	t.Helper()
	var got, want configJSON
	d := decodeAll(data, &got)
	require.Empty(t, d.errs)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&want))
	assert.True(t, reflect.DeepEqual(want, got), "decoded\n%#v\nwant\n%#v", got, want)
}

// FuzzTheConfigReaderMatchesEncodingJSON checks the reader against encoding/json: the same
// documents are valid, and one without shape errors decodes into the same configJSON.
func FuzzTheConfigReaderMatchesEncodingJSON(f *testing.F) {
	for _, tc := range syntaxCases {
		f.Add([]byte(tc.doc))
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "config", "valid", "*.json"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		if _, _, ok := checkSyntax(data); ok != json.Valid(data) {
			t.Fatalf("checkSyntax says %v, json.Valid %v", ok, !ok)
		}
		var got, want configJSON
		if d := decodeAll(data, &got); !d.decoded || len(d.errs) > 0 {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("the reader took a document encoding/json refuses: %v", err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("decoded %#v, encoding/json %#v", got, want)
		}
	})
}

func TestEveryConfigurationFieldKeepsItsJSONNameAndItsDecoder(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		if seen[ty] {
			return
		}
		seen[ty] = true
		assert.Equal(t, reflect.PointerTo(ty).Implements(reflect.TypeFor[unmarshaler]()), decodesItself(ty),
			"%s: selfDecoding lists exactly the types with an UnmarshalJSON", ty)
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			walk(ty.Elem())
		case reflect.Struct:
			for i := 0; i < ty.NumField(); i++ {
				f := ty.Field(i)
				assert.Equal(t, f.Tag.Get("json"), jsonTag(f.Tag), "%s.%s", ty, f.Name)
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[configJSON]())
	for _, ty := range selfDecoding {
		walk(ty)
	}
	assert.Greater(t, len(seen), 40, "the configuration's types")
	for _, tag := range []reflect.StructTag{`json:"a,omitempty"`, `yaml:"x" json:"b"`, `xjson:"c"`, `xjson:"c" json:"d"`, ``, `json:"e`} {
		assert.Equal(t, tag.Get("json"), jsonTag(tag), "%s", tag)
	}
}
