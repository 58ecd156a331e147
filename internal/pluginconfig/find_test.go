package pluginconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestYAMLScalarsBecomeTheJSONValuesIstioWouldPass(t *testing.T) {
	cs, err := Find([]byte("rules: []\nenforce: true\nmax_keys: 1000\nstatus: 4.29e2\nnone: null\nrate: 10/s\nquoted: \"100\"\nhex: 0x10\nlist: &l [a, b]\nagain: *l\n"))
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.JSONEq(t, `{"rules": [], "enforce": true, "max_keys": 1000, "status": 429, "none": null, "rate": "10/s",
		"quoted": "100", "hex": 16, "list": ["a", "b"], "again": ["a", "b"]}`, string(cs[0].JSON))
}

func TestAJSONFileIsHandedOverByteForByte(t *testing.T) {
	doc := "  {\"rules\": [], \"max_keys\": 1e3, \"enforce\": true, \"enforce\": false}\n"
	cs, err := Find([]byte(doc))
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.Equal(t, `{"rules": [], "max_keys": 1e3, "enforce": true, "enforce": false}`, string(cs[0].JSON))
}

func TestAYAMLMappingWithARepeatedKeyKeepsBothForTheDecoderToReport(t *testing.T) {
	cs, err := Find([]byte("rules: []\nenforce: true\nenforce: false\n"))
	require.NoError(t, err)
	assert.Equal(t, `{"rules":[],"enforce":true,"enforce":false}`, string(cs[0].JSON))
}

func TestLineOfPlacesFieldsElementsAndMapKeys(t *testing.T) {
	cs, err := Find([]byte(`kind: Service
---
kind: WasmPlugin
metadata: {name: m, namespace: ns}
spec:
  pluginConfig:
    response:
      headers:
        x-note: hi
    rules:
    - name: a
      limits:
      - rate: 1/s
`))
	require.NoError(t, err)
	require.Len(t, cs, 1)
	c := cs[0]
	assert.Equal(t, "pluginConfig of WasmPlugin ns/m", c.Source)
	assert.Equal(t, 7, c.Line)
	assert.Equal(t, 9, c.LineOf(`response.headers["x-note"]`))
	assert.Equal(t, 11, c.LineOf("rules[0]"))
	assert.Equal(t, 13, c.LineOf("rules[0].limits[0].rate"))
	assert.Equal(t, 13, c.LineOf("rules[0].limits[0].burst"), "an absent field is placed at its object")
	assert.Equal(t, 12, c.LineOf("rules[0].limits"))
	assert.Equal(t, 7, c.LineOf(""))
	assert.Equal(t, 7, c.LineOf("nowhere.at[3].all"))
}

func TestAnEnvoyWasmFilterIsFoundWhereverItIs(t *testing.T) {
	cs, err := Find([]byte(`static_resources:
  listeners:
  - filter_chains:
    - filters:
      - typed_config:
          http_filters:
          - typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: one
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: |
                    {
                      "rules": [{"name": "a",
                                 "limits": [{"rate": "1/s"}]}]
                    }
          - typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: two
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: '{"rules": []}'
          - typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config: {name: three}
`))
	require.NoError(t, err)
	require.Len(t, cs, 3)
	assert.Equal(t, `configuration of Envoy wasm filter "one"`, cs[0].Source)
	assert.True(t, json.Valid(cs[0].JSON))
	assert.Equal(t, 16, cs[0].LineOf("rules[0].limits[0].rate"), "a literal block's lines are the file's")
	assert.Equal(t, 15, cs[0].LineOf("rules[0].name"))
	assert.Equal(t, `{"rules": []}`, string(cs[1].JSON))
	assert.Equal(t, 24, cs[1].LineOf("rules"), "a quoted value places every field at itself")
	assert.Empty(t, cs[2].JSON, "no configuration: the filter refuses it")
}

func TestAWasmFilterConfigurationThatIsNotAStringValueIsAnError(t *testing.T) {
	_, err := Find([]byte(`typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
  config:
    name: m
    configuration:
      "@type": type.googleapis.com/google.protobuf.Struct
      value: {rules: []}
`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `line 6: configuration of Envoy wasm filter "m": configuration is a "type.googleapis.com/google.protobuf.Struct"`)
}

func TestATrafficExtensionsConfigurationIsUnderWasm(t *testing.T) {
	cs, err := Find([]byte("kind: TrafficExtension\nmetadata: {name: t}\nspec:\n  wasm:\n    pluginConfig: {rules: []}\n"))
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.Equal(t, "pluginConfig of TrafficExtension t", cs[0].Source)
	assert.Equal(t, `{"rules":[]}`, string(cs[0].JSON))
}

func TestAFileWithoutAConfigurationIsErrNone(t *testing.T) {
	for _, doc := range []string{"", "kind: Service\n", "- a\n- b\n", "# only a comment\n", "- rules: []\n"} {
		_, err := Find([]byte(doc))
		assert.True(t, errors.Is(err, ErrNone), "%q: %v", doc, err)
	}
}

func TestAValueWithoutAJSONFormIsAnErrorWithItsLine(t *testing.T) {
	_, err := Find([]byte("rules: []\nmax_keys: .inf\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 2")
}

func TestAYAMLAliasBombIsRefused(t *testing.T) {
	doc := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 'b'; i <= 'j'; i++ {
		prev := string(i - 1)
		doc += string(i) + ": &" + string(i) + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
	}
	_, err := Find([]byte(doc + "rules: *j\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "larger than 16 MiB once its aliases are expanded")
}

func FuzzFind(f *testing.F) {
	for _, s := range []string{"rules: []\n", `{"rules": [{"name": "a"}]}`, "kind: WasmPlugin\nspec: {pluginConfig: {rules: [1]}}\n",
		"a: &x [*x]\n", "{\"rules\": [", "- \"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		cs, err := Find(data)
		if err != nil || bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
			return // a JSON object is handed over as it is, valid or not
		}
		for _, c := range cs {
			// What Find converted from YAML is JSON; an Envoy filter's text is the user's.
			if len(c.JSON) > 0 && !strings.HasPrefix(c.Source, "configuration of Envoy") && !json.Valid(c.JSON) {
				t.Fatalf("%s: not JSON: %q", c.Source, c.JSON)
			}
			_ = c.LineOf("rules[0].limits[0].rate")
		}
	})
}
