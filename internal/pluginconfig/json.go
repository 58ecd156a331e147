package pluginconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxJSON bounds the JSON of one configuration, so that a few YAML aliases cannot expand to
// gigabytes (Envoy takes a few MiB at most anyway).
const maxJSON = 16 << 20

// toJSON writes the YAML value n as JSON, as Istio renders a pluginConfig (a protobuf Struct):
// mappings become objects with their keys in order (a repeated key stays repeated, for the
// configuration decoder to report), and scalars take the type YAML resolves them to.
func toJSON(buf *bytes.Buffer, n *yaml.Node) error {
	if buf.Len() > maxJSON {
		return fmt.Errorf("line %d: the configuration is larger than %d MiB once its aliases are expanded", n.Line, maxJSON>>20)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return toJSON(buf, n.Alias)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			buf.WriteString("null")
			return nil
		}
		return toJSON(buf, n.Content[0])
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a mapping key must be a string", k.Line)
			}
			if i > 0 {
				buf.WriteByte(',')
			}
			name, _ := json.Marshal(k.Value)
			buf.Write(name)
			buf.WriteByte(':')
			if err := toJSON(buf, n.Content[i+1]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := toJSON(buf, c); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		return scalarJSON(buf, n)
	}
	return nil
}

// scalarJSON writes a YAML scalar as the JSON value of its resolved type.
func scalarJSON(buf *bytes.Buffer, n *yaml.Node) error {
	var v any
	switch n.ShortTag() {
	case "!!str", "!!timestamp", "!!binary":
		v = n.Value
	default:
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("line %d: %q has no JSON form: %w", n.Line, n.Value, err)
	}
	buf.Write(b)
	return nil
}

// index records the line of every field and element under n, by its path: "a.b" for a field (or
// a map's key), "a[0]" for an element.
// An alias is not followed: its fields are placed at the alias.
func index(n *yaml.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			field := k.Value
			if path != "" {
				field = path + "." + k.Value
			}
			if _, seen := lines[field]; !seen {
				lines[field] = k.Line
			}
			index(n.Content[i+1], field, lines)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			lines[p] = c.Line
			index(c, p, lines)
		}
	}
}

// normalize writes a map key of a field path as a field: `a["b"]` is "a.b".
func normalize(path string) string {
	var b strings.Builder
	for {
		i := strings.Index(path, `["`)
		if i < 0 {
			b.WriteString(path)
			return b.String()
		}
		q, err := strconv.QuotedPrefix(path[i+1:])
		key, _ := strconv.Unquote(q)
		if err != nil || !strings.HasPrefix(path[i+1+len(q):], "]") {
			b.WriteString(path)
			return b.String()
		}
		b.WriteString(path[:i])
		b.WriteString("." + key)
		path = path[i+1+len(q)+1:]
	}
}
