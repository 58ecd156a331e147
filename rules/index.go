package rules

import (
	"math/bits"
	"sort"
	"strings"
	"unsafe"
)

// ruleBits is a set of rule indices (rules[] holds at most maxRules).
type ruleBits [maxRules / 64]uint64

func (b *ruleBits) add(i int) { b[i>>6] |= 1 << (i & 63) }
func (b *ruleBits) or(o *ruleBits) {
	b[0], b[1], b[2], b[3] = b[0]|o[0], b[1]|o[1], b[2]|o[2], b[3]|o[3]
}
func (b *ruleBits) and(o *ruleBits) {
	b[0], b[1], b[2], b[3] = b[0]&o[0], b[1]&o[1], b[2]&o[2], b[3]&o[3]
}
func (b *ruleBits) meets(o *ruleBits) bool {
	return b[0]&o[0]|b[1]&o[1]|b[2]&o[2]|b[3]&o[3] != 0
}

// index finds the rules a request may match without evaluating the others. For each thing a match
// can narrow by (host, path, route name, method) it holds the rules that do not narrow by it (free)
// and, by value, those that do: a request's candidates are the rules that pass every dimension,
// which is never fewer than the rules that match it (Rule.Matches decides among the candidates, so
// the order and the result are those of a scan of every rule). A condition the index cannot hold
// (a regex, a header, a value that folds outside ASCII) leaves its rule free in that dimension.
type index struct {
	all    ruleBits
	host   hostIndex
	path   pathIndex
	route  valueIndex
	method valueIndex
}

// valueIndex narrows by a value compared whole: the route name (exactly) or the method (upper-cased).
type valueIndex struct {
	free, held ruleBits
	byValue    map[string]ruleBits
}

// hostIndex narrows by the request's host name (hostName, lower-case): exact names, and the
// "*.domain" patterns by the suffixes of the host that start at a dot.
type hostIndex struct {
	free, held    ruleBits
	exact, suffix map[string]ruleBits
}

// pathIndex narrows by the normalized path: exact values by the path without its trailing slash,
// prefixes by a search in their sorted list. With fold (some rule ignores case) values and path are
// compared lower-case, which only adds candidates to the rules that compare case.
type pathIndex struct {
	free, held ruleBits
	fold       bool
	exact      map[string]ruleBits
	prefixes   []pathPrefix // sorted by value
}

// pathPrefix is one distinct prefix value: within holds its rules and those of every shorter prefix
// of it in the list; parent is the index of the longest of these, or -1.
type pathPrefix struct {
	value  string
	within ruleBits
	parent int
}

// newIndex indexes rules (in configuration order) by their matches.
func newIndex(rules []*Rule) index {
	x := index{route: valueIndex{byValue: map[string]ruleBits{}}, method: valueIndex{byValue: map[string]ruleBits{}}}
	x.host.exact, x.host.suffix = map[string]ruleBits{}, map[string]ruleBits{}
	x.path.exact = map[string]ruleBits{}
	for _, r := range rules {
		x.path.fold = x.path.fold || r.match.path.ignoreCase && isASCII(r.match.path.value)
	}
	prefixes := map[string]ruleBits{}
	for i, r := range rules {
		m := &r.match
		x.all.add(i)
		x.route.addAll(i, m.routeNames, false)
		x.method.addAll(i, m.methods, true)
		x.host.addRule(i, m.hosts)
		x.path.addRule(i, &m.path, prefixes)
	}
	if len(prefixes) > 0 { // sort.Slice costs the cold start its compilation
		x.path.sortPrefixes(prefixes)
	}
	return x
}

// addAll indexes rule i under each of its values (upper-cased with upper: methods are tokens, in
// ASCII), or frees it when it has none.
func (v *valueIndex) addAll(i int, values []string, upper bool) {
	if len(values) == 0 {
		v.free.add(i)
		return
	}
	v.held.add(i)
	for _, s := range values {
		if upper {
			s = strings.ToUpper(s)
		}
		b := v.byValue[s]
		b.add(i)
		v.byValue[s] = b
	}
}

func (h *hostIndex) addRule(i int, patterns []hostPattern) {
	for _, p := range patterns {
		if p.any || !isASCII(p.value) {
			patterns = nil // every host, or a value that may fold to a request's: Matches decides
		}
	}
	if len(patterns) == 0 {
		h.free.add(i)
		return
	}
	h.held.add(i)
	for _, p := range patterns {
		to := h.exact
		if p.suffix {
			to = h.suffix
		}
		b := to[p.value]
		b.add(i)
		to[p.value] = b
	}
}

func (p *pathIndex) addRule(i int, m *stringMatch, prefixes map[string]ruleBits) {
	value := m.value
	if p.fold {
		value = lowerString(value)
	}
	to := p.exact
	switch {
	case m.kind == matchExact && (!m.ignoreCase || isASCII(m.value)):
		value = trimSlash(value)
	case m.kind == matchPrefix && (!m.ignoreCase || isASCII(m.value)):
		to = prefixes
	default: // no path condition, a regex, or a value that may fold to a request's: Matches decides
		p.free.add(i)
		return
	}
	p.held.add(i)
	b := to[value]
	b.add(i)
	to[value] = b
}

// sortPrefixes lists the distinct prefix values in order, each with the rules of its own prefixes.
func (p *pathIndex) sortPrefixes(prefixes map[string]ruleBits) {
	for v, b := range prefixes {
		p.prefixes = append(p.prefixes, pathPrefix{value: v, within: b, parent: -1})
	}
	sort.Slice(p.prefixes, func(i, j int) bool { return p.prefixes[i].value < p.prefixes[j].value })
	for i := range p.prefixes {
		e := &p.prefixes[i]
		for j := i - 1; j >= 0; j-- { // a prefix of e sorts before it; the nearest is the longest
			if strings.HasPrefix(e.value, p.prefixes[j].value) {
				e.parent = j
				e.within.or(&p.prefixes[j].within)
				break
			}
		}
	}
}

// Selection is the set of rules a request may match (Config.Select): every rule the request
// matches is in it, in configuration order. Its zero value is ready; one kept from request to
// request selects without allocating.
type Selection struct {
	bits ruleBits
	buf  []byte // a request value folded to one case
}

// Next returns the smallest index of a selected rule that is at least i, or -1.
func (s *Selection) Next(i int) int {
	for w := i >> 6; w < len(s.bits); w++ {
		word := s.bits[w]
		if w == i>>6 {
			word &^= 1<<(i&63) - 1
		}
		if word != 0 {
			return w<<6 + bits.TrailingZeros64(word)
		}
	}
	return -1
}

// Select puts into s the rules that req may match: a superset of those it matches, so a caller
// that runs Rule.Matches on each rule of s in order (Next) decides exactly what a scan of every
// rule decides. It reads only the request values that the rules still selected narrow by, and does
// not allocate once s has grown.
func (c *Config) Select(req Request, s *Selection) {
	x := &c.index
	s.bits = x.all
	if s.bits.meets(&x.host.held) {
		s.narrow(x.host.pass(req.Host(), &s.buf))
	}
	if s.bits.meets(&x.path.held) {
		s.narrow(x.path.pass(req.NormalizedPath(), &s.buf))
	}
	if s.bits.meets(&x.route.held) {
		s.narrow(x.route.pass(req.RouteName(), nil))
	}
	if s.bits.meets(&x.method.held) {
		s.narrow(x.method.pass(req.Method(), &s.buf))
	}
}

// narrow keeps in s the rules of pass, unless known is false (the value could not be looked up).
func (s *Selection) narrow(pass ruleBits, known bool) {
	if known {
		s.bits.and(&pass)
	}
}

// pass returns the rules that value lets through: the free ones and those indexed under value
// (upper-cased in buf when buf is not nil). known is false for a value that cannot be looked up.
func (v *valueIndex) pass(value string, buf *[]byte) (r ruleBits, known bool) {
	if buf != nil {
		if value, known = foldASCII(buf, value, true); !known {
			return r, false
		}
	}
	r = v.free
	if b, ok := v.byValue[value]; ok {
		r.or(&b)
	}
	return r, true
}

// pass returns the rules that the authority host lets through: the free ones and those with a
// pattern for its name.
func (h *hostIndex) pass(host string, buf *[]byte) (r ruleBits, known bool) {
	name, known := foldASCII(buf, hostName(host), false)
	if !known {
		return r, false
	}
	r = h.free
	if b, ok := h.exact[name]; ok {
		r.or(&b)
	}
	if len(h.suffix) > 0 {
		for i := 1; i < len(name); i++ {
			if name[i] != '.' {
				continue
			}
			if b, ok := h.suffix[name[i:]]; ok {
				r.or(&b)
			}
		}
	}
	return r, true
}

// pass returns the rules that the normalized path lets through: the free ones, the exact values
// equal to it (one trailing slash aside), the prefixes of it, and a prefix "p/" for the path p.
func (p *pathIndex) pass(path string, buf *[]byte) (r ruleBits, known bool) {
	if p.fold {
		if path, known = foldASCII(buf, path, false); !known {
			return r, false
		}
	}
	r = p.free
	if len(p.exact) > 0 {
		if b, ok := p.exact[trimSlash(path)]; ok {
			r.or(&b)
		}
	}
	ps := p.prefixes
	lo, hi := 0, len(ps) // the first value after path
	for lo < hi {
		if mid := int(uint(lo+hi) >> 1); ps[mid].value <= path {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if v := ps[lo:]; len(v) > 0 && len(v[0].value) == len(path)+1 && v[0].value[len(path)] == '/' && strings.HasPrefix(v[0].value, path) {
		r.or(&v[0].within) // the prefix "/api/" holds for "/api"
	}
	for j := lo - 1; j >= 0; j = ps[j].parent { // the longest prefix of path is an ancestor of ps[lo-1]
		if strings.HasPrefix(path, ps[j].value) {
			r.or(&ps[j].within)
			break
		}
	}
	return r, true
}

// foldByte returns c upper-cased (upper) or lower-cased, in ASCII.
func foldByte(c byte, upper bool) byte {
	switch {
	case upper && 'a' <= c && c <= 'z':
		return c - 'a' + 'A'
	case !upper && 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}

// lowerString returns s lower-cased in ASCII (other bytes unchanged).
func lowerString(s string) string {
	b := []byte(s)
	for i := range b {
		b[i] = foldByte(b[i], false)
	}
	return string(b)
}

// foldASCII returns s upper-cased (upper) or lower-cased: s itself when that changes nothing, else
// a copy in buf (valid until buf is used again). ok is false, and nothing is folded, when s holds a
// byte outside ASCII (strings.EqualFold folds some of those to ASCII letters).
func foldASCII(buf *[]byte, s string, upper bool) (folded string, ok bool) {
	changed := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return "", false
		}
		changed = changed || c != foldByte(c, upper)
	}
	if !changed {
		return s, true
	}
	b := (*buf)[:0]
	for i := 0; i < len(s); i++ {
		b = append(b, foldByte(s[i], upper))
	}
	*buf = b
	return unsafe.String(unsafe.SliceData(b), len(b)), true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
