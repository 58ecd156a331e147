package rlsconfig

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Metadata is a descriptor's metadata: the YAML mapping of its metadata field, read as
// envoyproxy/ratelimit reads it into a google.protobuf.Struct (see the package documentation).
// Its values are those of the Struct's JSON data model: nil, bool, float64, string, []any and
// map[string]any of these. A loaded Config's Metadata is never modified, and must not be.
type Metadata map[string]any

const (
	// maxMetadataValues bounds the values (scalars, lists and mappings) of one descriptor's
	// metadata, aliases counted each time they are used: each is sent in every answer that
	// returns the metadata.
	maxMetadataValues = 4096
	// maxMetadataDepth bounds the nesting of lists and mappings in metadata. Envoy parses a
	// message nested at most 100 levels deep (protobuf's default recursion limit), and each
	// level of a Struct costs it three (Struct, map entry, Value) below the answer's own.
	maxMetadataDepth = 20
)

// metaReader reads one descriptor's metadata.
type metaReader struct {
	p    *parser
	left int // values still allowed
}

// metadata parses the metadata mapping n at path; nil when it is null or empty.
func (p *parser) metadata(n *yaml.Node, path string) (Metadata, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errAt(n, path, "want a mapping, got %s", kindName(n))
	}
	r := &metaReader{p: p, left: maxMetadataValues}
	m := make(map[string]any, len(n.Content)/2)
	if err := r.mapping(n, path, m, true, 1); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// mapping reads the entries of the mapping n into out, as yaml.v2 decodes a mapping into a Go
// map: in order, a merge key (<<) writing the entries of its mapping, or of its list of
// mappings with the earlier ones winning, over what out holds, and a key written twice in n
// itself refused. top tells the metadata's own mapping, whose keys are taken as written, from
// the mappings below it, whose keys are their values in Go's %v form (yes: becomes "true").
func (r *metaReader) mapping(n *yaml.Node, path string, out map[string]any, top bool, depth int) error {
	if depth > maxMetadataDepth {
		return r.p.errAt(n, path, "nested deeper than %d levels", maxMetadataDepth)
	}
	lines := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, err := r.p.resolve(n.Content[i], path)
		if err != nil {
			return err
		}
		if isMergeKey(kn) {
			if err := r.merge(n.Content[i+1], path+".<<", out, top, depth); err != nil {
				return err
			}
			continue
		}
		k, err := r.key(kn, path, top)
		if err != nil {
			return err
		}
		kp := path + "." + k
		if line, dup := lines[k]; dup {
			return r.p.errAt(kn, kp, "duplicate key (first on line %d)", line)
		}
		lines[k] = kn.Line
		if out[k], err = r.value(n.Content[i+1], kp, depth); err != nil {
			return err
		}
	}
	return nil
}

// isMergeKey reports whether n is the merge key: a plain << or one tagged !!merge.
func isMergeKey(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && (n.Style == 0 || n.Tag == "!!merge")
}

// merge writes into out the mapping n, or each mapping of the list n from the last to the
// first.
func (r *metaReader) merge(n *yaml.Node, path string, out map[string]any, top bool, depth int) error {
	n, err := r.p.resolve(n, path)
	if err != nil {
		return err
	}
	switch n.Kind {
	case yaml.MappingNode:
		return r.mapping(n, path, out, top, depth)
	case yaml.SequenceNode:
		for i := len(n.Content) - 1; i >= 0; i-- {
			ip := path + "[" + strconv.Itoa(i) + "]"
			m, err := r.p.resolve(n.Content[i], ip)
			if err != nil {
				return err
			}
			if m.Kind != yaml.MappingNode {
				return r.p.errAt(m, ip, "want a mapping to merge, got %s", kindName(m))
			}
			if err := r.mapping(m, ip, out, top, depth); err != nil {
				return err
			}
		}
		return nil
	}
	return r.p.errAt(n, path, "want a mapping or a list of mappings to merge, got %s", kindName(n))
}

// key returns the key kn of a mapping: as written in the metadata's own mapping, and below it
// the %v form of its value, as envoyproxy/ratelimit converts the keys of nested mappings.
func (r *metaReader) key(kn *yaml.Node, path string, top bool) (string, error) {
	if kn.Kind != yaml.ScalarNode {
		return "", r.p.errAt(kn, path, "a key must be a scalar, got %s", kindName(kn))
	}
	v, err := r.scalar(kn, path)
	if err != nil {
		return "", err
	}
	switch {
	case v == nil:
		return "", r.p.errAt(kn, path, "a key must not be null")
	case top && kn.Tag != "!!binary":
		return kn.Value, nil
	}
	return fmt.Sprint(v), nil
}

// value reads one value at depth (of the mapping holding it) as the JSON data model.
func (r *metaReader) value(n *yaml.Node, path string, depth int) (any, error) {
	n, err := r.p.resolve(n, path)
	if err != nil {
		return nil, err
	}
	if r.left--; r.left < 0 {
		return nil, r.p.errAt(n, path, "metadata of more than %d values (aliases count each time they are used)", maxMetadataValues)
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		return m, r.mapping(n, path, m, false, depth+1)
	case yaml.SequenceNode:
		if depth+1 > maxMetadataDepth {
			return nil, r.p.errAt(n, path, "nested deeper than %d levels", maxMetadataDepth)
		}
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			if l[i], err = r.value(c, path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return nil, err
			}
		}
		return l, nil
	}
	v, err := r.scalar(n, path)
	return asJSON(v), err
}

// asJSON turns a YAML 1.1 scalar into the JSON data model: every number a float64, as
// google.protobuf.Value holds it.
func asJSON(v any) any {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case uint64:
		return float64(v)
	}
	return v
}

// scalar returns the value of a scalar as yaml.v2 decodes it into an interface{}: a quoted or
// block scalar is a string, a plain one resolved by YAML 1.1's rules (yaml11), one with an
// explicit tag read as that tag says; a timestamp stays the string written.
func (r *metaReader) scalar(n *yaml.Node, path string) (any, error) {
	if n.Style&yaml.TaggedStyle != 0 {
		return r.tagged(n, path)
	}
	if n.Style != 0 {
		return n.Value, nil
	}
	v, _ := yaml11(n.Value)
	return v, nil
}

// tagged returns the value of a scalar with an explicit tag. !!str is the text, !!binary its
// base64 decoded, and !!null, !!bool, !!int, !!float and !!timestamp are resolved as a plain
// scalar that must then be of that kind (an int is a float too); any other tag is a string.
func (r *metaReader) tagged(n *yaml.Node, path string) (any, error) {
	switch n.Tag {
	case "!!binary":
		b, err := base64.StdEncoding.DecodeString(n.Value)
		if err != nil {
			return nil, r.p.errAt(n, path, "!!binary value contains invalid base64 data")
		}
		if !utf8.Valid(b) {
			return nil, r.p.errAt(n, path, "!!binary value is not UTF-8 text (a google.protobuf.Struct holds only text)")
		}
		return string(b), nil
	case "!!null", "!!bool", "!!int", "!!float", "!!timestamp":
		v, tag := yaml11(n.Value)
		switch {
		case tag == n.Tag:
			return v, nil
		case n.Tag == "!!float" && tag == "!!int":
			return asJSON(v), nil
		}
		return nil, r.p.errAt(n, path, "cannot decode %s %q as a %s", tag, n.Value, n.Tag)
	}
	return n.Value, nil
}
