package rlsconfig

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/meshlimit/meshlimit/algorithms"
)

// descriptors parses the list n (the descriptors at path) into parent, whose metric path is
// parentPath.
func (p *parser) descriptors(n *yaml.Node, path string, parent *node, parentPath string, depth int) error {
	return p.descriptorsUnder(n, path, parent, parentPath, depth, false)
}

// descriptorsUnder is descriptors below a path on which a level sets value_to_metric (v2m).
func (p *parser) descriptorsUnder(n *yaml.Node, path string, parent *node, parentPath string, depth int, v2m bool) error {
	n, err := p.resolve(n, path)
	if err != nil || n == nil || isNull(n) {
		return err
	}
	if n.Kind != yaml.SequenceNode {
		return p.errAt(n, path, "want a list of descriptors, got %s", kindName(n))
	}
	if depth >= maxDepth {
		return p.errAt(n, path, "descriptors nested deeper than %d levels", maxDepth)
	}
	parent.exact = make(map[Entry]*node, len(n.Content))
	lines := make(map[Entry]int, len(n.Content))
	for i, item := range n.Content {
		ip := path + "[" + strconv.Itoa(i) + "]"
		if item, err = p.resolve(item, ip); err != nil {
			return err
		}
		child, e, err := p.descriptor(item, ip, parentPath, depth, v2m)
		if err != nil {
			return err
		}
		if line, dup := lines[e]; dup {
			return p.errAt(item, ip, "duplicate descriptor key %q value %q (first on line %d)", e.Key, e.Value, line)
		}
		lines[e] = item.Line
		parent.exact[e] = child
		if strings.Contains(e.Value, "*") {
			parent.wildcards = append(parent.wildcards, wildcard{key: e.Key, value: e.Value, parts: splitStar(e.Value), node: child})
		}
	}
	return nil
}

// descriptor parses one descriptor: its entry (key and value) and its node.
func (p *parser) descriptor(n *yaml.Node, path, parentPath string, depth int, v2m bool) (*node, Entry, error) {
	if n.Kind != yaml.MappingNode {
		return nil, Entry{}, p.errAt(n, path, "want a descriptor (a mapping with a key), got %s", kindName(n))
	}
	d := &node{}
	var e Entry
	var rl, children, shareNode *yaml.Node
	err := p.fields(n, path, descriptorFields, func(k string, v *yaml.Node, fp string) (err error) {
		switch k {
		case "key":
			e.Key, err = p.str(v, fp)
		case "value":
			e.Value, err = p.str(v, fp)
		case "rate_limit":
			rl = v
		case "descriptors":
			children = v
		case "shadow_mode":
			d.rule.ShadowMode, err = p.boolean(v, fp)
		case "detailed_metric":
			d.rule.DetailedMetric, err = p.boolean(v, fp)
		case "value_to_metric":
			d.v2m, err = p.boolean(v, fp)
		case "share_threshold":
			shareNode = v
			d.share, err = p.boolean(v, fp)
		case "quota_mode":
			d.rule.QuotaMode, err = p.boolean(v, fp)
		case "metadata":
			d.rule.Metadata, err = p.metadata(v, fp)
		}
		return err
	})
	if err != nil {
		return nil, Entry{}, err
	}
	if e.Key == "" {
		return nil, Entry{}, p.errAt(n, path+".key", "required, and must not be empty")
	}
	if d.share && !strings.Contains(e.Value, "*") {
		return nil, Entry{}, p.errAt(shareNode, path+".share_threshold", "only for a wildcard value (one with '*'), got %q", e.Value)
	}
	d.rule.Path = parentPath + "." + e.Key
	if e.Value != "" {
		d.rule.Path += "_" + e.Value
	}
	if rl != nil && !isNull(rl) {
		if d.rule.Limit, err = p.rateLimit(rl, path+".rate_limit"); err != nil {
			return nil, Entry{}, err
		}
	}
	d.rule.ValueToMetric = v2m || d.v2m
	if err := p.descriptorsUnder(children, path+".descriptors", d, d.rule.Path, depth+1, d.rule.ValueToMetric); err != nil {
		return nil, Entry{}, err
	}
	return d, e, nil
}

// rateLimit parses a rate_limit mapping.
func (p *parser) rateLimit(n *yaml.Node, path string) (*RateLimit, error) {
	r := &RateLimit{}
	var at rateLimitNodes
	unit := ""
	err := p.fields(n, path, rateLimitFields, func(k string, v *yaml.Node, fp string) (err error) {
		switch k {
		case "unit":
			at.unit = v
			unit, err = p.str(v, fp)
		case "requests_per_unit":
			at.rpu = v
			r.RequestsPerUnit, err = p.uint32(v, fp)
		case "unlimited":
			r.Unlimited, err = p.boolean(v, fp)
		case "name":
			r.Name, err = p.str(v, fp)
		case "replaces":
			r.Replaces, err = p.replaces(v, fp)
		case "algorithm":
			at.algorithm = v
			var s string
			if s, err = p.str(v, fp); err == nil {
				if r.Algorithm, err = algorithms.ParseKind(s); err != nil {
					err = p.errAt(v, fp, "unknown algorithm %q (want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)", s)
				}
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := p.checkRateLimit(r, unit, n, at, path); err != nil {
		return nil, err
	}
	return r, nil
}

// rateLimitNodes locates a rate_limit's fields for errors (nil when absent).
type rateLimitNodes struct{ unit, rpu, algorithm *yaml.Node }

// or returns n, or else def.
func or(n, def *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return def
}

// checkRateLimit checks the fields of a parsed rate_limit r (at n) together and sets its Unit.
func (p *parser) checkRateLimit(r *RateLimit, unit string, n *yaml.Node, at rateLimitNodes, path string) error {
	if r.Unlimited {
		switch {
		case unit != "":
			return p.errAt(at.unit, path+".unit", "must not be set when unlimited is true")
		case at.algorithm != nil:
			return p.errAt(at.algorithm, path+".algorithm", "must not be set when unlimited is true")
		}
	} else {
		u, ok := ParseUnit(unit)
		if !ok {
			return p.errAt(or(at.unit, n), path+".unit", "invalid unit %q (want second, minute, hour, day, week, month or year)", unit)
		}
		r.Unit = u
	}
	for _, name := range r.Replaces {
		if name == r.Name && name != "" {
			return p.errAt(n, path+".replaces", "must not name this limit itself (%q)", name)
		}
	}
	if r.Algorithm != 0 {
		l := algorithms.Limit{Kind: r.Algorithm, Quota: int64(r.RequestsPerUnit), Window: r.Unit.Duration()}
		if err := l.Validate(); err != nil {
			return p.errAt(or(at.rpu, n), path+".requests_per_unit", "invalid for algorithm %v: %v", r.Algorithm, err)
		}
	}
	return nil
}

// replaces parses a list of {name: ...}.
func (p *parser) replaces(n *yaml.Node, path string) ([]string, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errAt(n, path, "want a list of {name: ...}, got %s", kindName(n))
	}
	names := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		item, err := p.resolve(item, ip)
		if err != nil {
			return nil, err
		}
		if item.Kind != yaml.MappingNode {
			return nil, p.errAt(item, ip, "want {name: ...}, got %s", kindName(item))
		}
		name := ""
		err = p.fields(item, ip, replacesFields, func(_ string, v *yaml.Node, fp string) (err error) {
			name, err = p.str(v, fp)
			return err
		})
		if err != nil {
			return nil, err
		}
		if name == "" {
			return nil, p.errAt(item, ip+".name", "required, and must not be empty")
		}
		names = append(names, name)
	}
	return names, nil
}
