// Package pluginconfig finds meshlimit plugin configurations in the files people deploy them
// with, and maps each field of a configuration back to its line in the file. It reads JSON and
// YAML (one document or several): a bare plugin configuration (an object with "rules"), an Istio
// WasmPlugin (spec.pluginConfig) or TrafficExtension (spec.wasm.pluginConfig), and an Envoy
// configuration (a bootstrap, a listener, an EnvoyFilter patch) whose envoy.filters.http.wasm
// filter carries the configuration as a google.protobuf.StringValue of JSON text. Each is handed
// over as the filter receives it: JSON bytes.
package pluginconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// wasmFilterType is the @type of Envoy's Wasm HTTP filter configuration.
const wasmFilterType = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"

// Config is one plugin configuration found in a file.
type Config struct {
	// Source says what holds the configuration: "the document", "pluginConfig of WasmPlugin
	// istio-system/meshlimit", "configuration of Envoy wasm filter meshlimit".
	Source string
	// JSON is the configuration as the filter receives it. It is empty for a WasmPlugin or a
	// wasm filter that sets none (the filter refuses that).
	JSON []byte
	// Line is the line of the file where the configuration starts (1 is the first).
	Line int

	lines map[string]int // field path, as rules.FieldError names it → line in the file
}

// LineOf returns the line of the field at path ("rules[0].limits[1].rate", as a
// rules.FieldError names it), or of the closest enclosing field the file places, or Line.
func (c *Config) LineOf(path string) int {
	for path = normalize(path); path != ""; path = parentPath(path) {
		if l, ok := c.lines[path]; ok {
			return l
		}
	}
	return c.Line
}

// parentPath drops the last element of a field path: "a.b[2]" → "a.b" → "a" → "".
func parentPath(p string) string {
	if i := strings.LastIndexAny(p, ".["); i >= 0 {
		return p[:i]
	}
	return ""
}

// ErrNone is returned by Find when a file that parses holds no plugin configuration.
var ErrNone = errors.New("no meshlimit configuration found: want a plugin configuration (an object with \"rules\", JSON or YAML), " +
	"an Istio WasmPlugin or TrafficExtension, or an Envoy configuration with an envoy.filters.http.wasm filter")

// Find returns every plugin configuration in data, in the order of the file, or ErrNone. A file
// that is neither JSON nor YAML is an error with its line, except a lone JSON object, which is
// handed over as it is for the configuration decoder to report.
func Find(data []byte) ([]Config, error) {
	docs, err := parse(data)
	if err != nil {
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
			return []Config{{Source: "the document", JSON: t, Line: 1}}, nil
		}
		return nil, err
	}
	var out []Config
	for _, d := range docs {
		cs, err := inDocument(d)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	if len(out) == 1 && out[0].Source == "the document" && len(docs) == 1 {
		// A JSON file goes to the decoder byte for byte, so that it reports what the filter
		// would (duplicate names, numbers as written).
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
			out[0].JSON = t
		}
	}
	if len(out) == 0 {
		return nil, ErrNone
	}
	return out, nil
}

// parse reads every YAML (or JSON) document of data.
func parse(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(n.Content) > 0 {
			docs = append(docs, n.Content[0])
		}
	}
}

// inDocument returns the configurations of one document.
func inDocument(root *yaml.Node) ([]Config, error) {
	switch kind := scalar(get(root, "kind")); kind {
	case "WasmPlugin", "TrafficExtension":
		spec := get(root, "spec")
		if kind == "TrafficExtension" {
			spec = get(spec, "wasm")
		}
		meta := get(root, "metadata")
		src := fmt.Sprintf("pluginConfig of %s %s", kind, qualified(scalar(get(meta, "namespace")), scalar(get(meta, "name"))))
		pc := get(spec, "pluginConfig")
		if pc == nil {
			return []Config{{Source: src, Line: root.Line}}, nil
		}
		c, err := fromNode(src, pc)
		return []Config{c}, err
	}
	if root.Kind == yaml.MappingNode && get(root, "rules") != nil {
		c, err := fromNode("the document", root)
		return []Config{c}, err
	}
	var out []Config
	var walkErr error
	walk(root, func(n *yaml.Node) {
		if walkErr == nil && scalar(get(n, "@type")) == wasmFilterType {
			c, err := fromWasmFilter(n)
			out, walkErr = append(out, c), err
		}
	})
	return out, walkErr
}

func qualified(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// fromWasmFilter reads the configuration of an Envoy Wasm filter (its typed_config).
func fromWasmFilter(n *yaml.Node) (Config, error) {
	cfg := get(n, "config")
	src := "configuration of Envoy wasm filter " + strconv.Quote(scalar(get(cfg, "name")))
	conf := get(cfg, "configuration")
	if conf == nil {
		return Config{Source: src, Line: n.Line}, nil
	}
	if t := scalar(get(conf, "@type")); t != "type.googleapis.com/google.protobuf.StringValue" {
		return Config{}, fmt.Errorf("line %d: %s: configuration is a %q: want a google.protobuf.StringValue holding the JSON", conf.Line, src, t)
	}
	v := get(conf, "value")
	if v == nil || v.Kind != yaml.ScalarNode {
		return Config{Source: src, Line: conf.Line}, nil
	}
	c := Config{Source: src, JSON: []byte(v.Value), Line: v.Line}
	// The JSON text is a document of its own: place its fields in the file. In a literal
	// block (value: |) its first line is the line after the indicator; in any other style the
	// text's lines are not the file's, and every field is placed at the value.
	offset := v.Line - 1
	if v.Style == yaml.LiteralStyle {
		offset = v.Line
	}
	var inner yaml.Node
	if yaml.Unmarshal(c.JSON, &inner) == nil && len(inner.Content) > 0 {
		c.lines = map[string]int{}
		index(inner.Content[0], "", c.lines)
		for p, l := range c.lines {
			if v.Style == yaml.LiteralStyle {
				c.lines[p] = l + offset
			} else {
				c.lines[p] = v.Line
			}
		}
	}
	return c, nil
}

// fromNode converts the configuration at n to JSON and places its fields.
func fromNode(src string, n *yaml.Node) (Config, error) {
	var buf bytes.Buffer
	if err := toJSON(&buf, n); err != nil {
		return Config{}, fmt.Errorf("%s: %w", src, err)
	}
	c := Config{Source: src, JSON: buf.Bytes(), Line: n.Line, lines: map[string]int{}}
	index(n, "", c.lines)
	return c, nil
}

// get returns the value of key in the mapping n, or nil.
func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// scalar returns the value of a scalar node, or "".
func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// walk calls f for every mapping in the tree at n, parents first.
func walk(n *yaml.Node, f func(*yaml.Node)) {
	if n.Kind == yaml.MappingNode {
		f(n)
	}
	for _, c := range n.Content {
		walk(c, f)
	}
}
