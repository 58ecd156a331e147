package rlsconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a configuration error: where it is and what is wrong.
type Error struct {
	// File is the file's base name; Line and Column (1-based) locate the value at fault, 0
	// when unknown.
	File         string
	Line, Column int
	// Field is the path of the field at fault ("descriptors[0].rate_limit.unit"), "" for the
	// file as a whole.
	Field  string
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line) + ":" + strconv.Itoa(e.Column))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// File is one configuration file: its base name and contents.
type File struct {
	Name string
	Data []byte
}

const (
	// maxNodes bounds the YAML nodes one file may make the loader visit (aliases count each
	// time they are followed), so that a small file cannot expand without bound.
	maxNodes = 1 << 20
	// maxDepth bounds the nesting of descriptors.
	maxDepth = 64
)

// Load builds a Config from files, whole or not at all: if any file is bad, it returns the
// errors of every bad file (each an *Error, joined) and no Config.
func Load(files []File) (*Config, error) {
	files = append([]File(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	c := &Config{domains: make(map[string]*node)}
	from := make(map[string]string) // domain -> file
	var errs []error
	for _, f := range files {
		domain, root, line, err := parseFile(f.Name, f.Data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := from[domain]; dup {
			errs = append(errs, &Error{File: f.Name, Line: line, Column: 9, Field: "domain",
				Reason: fmt.Sprintf("duplicate domain %q (also in %s)", domain, prev)})
			continue
		}
		from[domain], c.domains[domain] = f.Name, root
		c.files = append(c.files, f.Name)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// ReadDir reads the configuration files of dir: every regular *.yaml or *.yml file not
// starting with '.' (Kubernetes ConfigMap volumes keep their bookkeeping in dot-files).
func ReadDir(dir string) ([]File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range ents {
		if !isConfigName(e.Name()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			continue // a dangling link or a directory named *.yaml
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: e.Name(), Data: data})
	}
	return files, nil
}

func isConfigName(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// parser holds the state of one file's parse.
type parser struct {
	file  string
	nodes int
}

func (p *parser) errAt(n *yaml.Node, field, format string, args ...any) *Error {
	e := &Error{File: p.file, Field: field, Reason: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// parseFile parses one file into its domain and descriptor tree; line is the domain's line.
func parseFile(name string, data []byte) (domain string, root *node, line int, err error) {
	p := &parser{file: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return "", nil, 0, p.errAt(nil, "", "empty file: want a domain and descriptors")
		}
		return "", nil, 0, p.errAt(nil, "", "%v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return "", nil, 0, p.errAt(&extra, "", "want one YAML document, found more")
	}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	root = &node{}
	var domainNode, descs *yaml.Node
	err = p.fields(top, "", rootFields, func(k string, v *yaml.Node, path string) error {
		switch k {
		case "domain":
			domainNode = v
			domain, err = p.str(v, path)
			return err
		default:
			descs = v
			return nil
		}
	})
	if err != nil {
		return "", nil, 0, err
	}
	if domain == "" {
		at := domainNode
		if at == nil {
			at = top
		}
		return "", nil, 0, p.errAt(at, "domain", "required, and must not be empty")
	}
	if err := p.descriptors(descs, "descriptors", root, domain, 0); err != nil {
		return "", nil, 0, err
	}
	root.rule.Path = domain
	return domain, root, domainNode.Line, nil
}

var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	rateLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm"}
	replacesFields  = []string{"name"}
)

// resolve follows aliases and counts the node against the file's budget.
func (p *parser) resolve(n *yaml.Node, path string) (*yaml.Node, error) {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if p.nodes++; p.nodes > maxNodes {
		return nil, p.errAt(n, path, "too many YAML nodes (aliases expand to more than %d)", maxNodes)
	}
	return n, nil
}

// fields calls f for each field of the mapping n, in order, rejecting unknown and duplicate
// fields. A null n is an empty mapping.
func (p *parser) fields(n *yaml.Node, path string, allowed []string, f func(k string, v *yaml.Node, path string) error) error {
	n, err := p.resolve(n, path)
	if err != nil || n == nil || isNull(n) {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return p.errAt(n, path, "want a mapping, got %s", kindName(n))
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		k := kn.Value
		fp := k
		if path != "" {
			fp = path + "." + k
		}
		if kn.Kind != yaml.ScalarNode || !contains(allowed, k) {
			return p.errAt(kn, fp, "unknown field (want one of %s)", strings.Join(allowed, ", "))
		}
		if line, dup := seen[k]; dup {
			return p.errAt(kn, fp, "duplicate field (first on line %d)", line)
		}
		seen[k] = kn.Line
		if vn, err = p.resolve(vn, fp); err != nil {
			return err
		}
		if err := f(k, vn, fp); err != nil {
			return err
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return strings.TrimPrefix(n.Tag, "!!") + " " + strconv.Quote(n.Value)
	}
	return "a document"
}

// str reads a scalar as a string (numbers and booleans as written).
func (p *parser) str(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return "", p.errAt(n, path, "want a string, got %s", kindName(n))
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, path string) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		return false, p.errAt(n, path, "want true or false, got %s", kindName(n))
	}
	return b, nil
}

func (p *parser) uint32(n *yaml.Node, path string) (uint32, error) {
	var v uint64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v > 1<<32-1 {
		return 0, p.errAt(n, path, "want an integer between 0 and 4294967295, got %s", kindName(n))
	}
	return uint32(v), nil
}
