package rules

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// The fields of the objects decodeAll decodes, and the errors it records.

// addAt records err from a nested decoder at path, re-rooting nested field errors.
func (s *shapeChecker) addAt(path string, err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			s.addAt(path, e)
		}
		return
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		s.fail(joinPath(path, fe.Path), "%s", fe.Msg)
		return
	}
	s.fail(path, "%v", err)
}

func joinPath(base, rel string) string {
	switch {
	case rel == "":
		return base
	case base == "":
		return rel
	case rel[0] == '[':
		return base + rel
	}
	return base + "." + rel
}

// object decodes a JSON object into v, a struct: exact field names, no duplicates.
func (s *shapeChecker) object(data []byte, v reflect.Value, path string) bool {
	if data[0] != '{' {
		s.fail(path, "want an object, got %s", jsonKind(data))
		return false
	}
	t := v.Type()
	s.eachMember(data, path, func(key string, raw []byte) {
		p := joinPath(path, key)
		i := fieldIndex(t, key)
		if i < 0 {
			s.unknownField(path, key, fieldNames(t))
			return
		}
		if f := v.Field(i); !s.check(raw, f, p) {
			s.unsure = append(s.unsure, p)
			if isObject(f.Type()) {
				s.zero(f)
			}
		}
	})
	return true
}

// fieldName is the JSON name of the struct field f, or "" when it has none.
func fieldName(f reflect.StructField) string {
	name, _, _ := strings.Cut(jsonTag(f.Tag), ",")
	if !f.IsExported() || name == "-" {
		return ""
	}
	return name
}

// jsonTag is the value of the json key of tag, as tag.Get("json") returns it for the plain tags of
// the configuration types (no escapes in the value), without the strconv.Unquote that Get runs.
func jsonTag(tag reflect.StructTag) string {
	for t := string(tag); t != ""; {
		i := strings.Index(t, `json:"`)
		if i < 0 {
			return ""
		}
		if i > 0 && t[i-1] != ' ' {
			t = t[i+len(`json:"`):]
			continue
		}
		v := t[i+len(`json:"`):]
		if j := strings.IndexByte(v, '"'); j >= 0 {
			return v[:j]
		}
		return ""
	}
	return ""
}

// fieldIndex is the index of the field of the struct type t named key in JSON, or -1.
func fieldIndex(t reflect.Type, key string) int {
	for i := 0; i < t.NumField(); i++ {
		if name := fieldName(t.Field(i)); name != "" && name == key {
			return i
		}
	}
	return -1
}

// fieldNames are the JSON names of the fields of the struct type t, sorted.
func fieldNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if name := fieldName(t.Field(i)); name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// unknownField records an unknown field of the object at path, with the known field nearest to
// it, if one is near: the value was meant for that field, so compilation's errors about it (it is
// required, say) are follow-ons.
func (s *shapeChecker) unknownField(path, key string, names []string) {
	p := joinPath(path, echoText(key))
	s.unsure = append(s.unsure, p)
	if near := nearestName(key, names); near != "" {
		s.fail(p, "unknown field (known fields: %s); did you mean %q?", strings.Join(names, ", "), near)
		s.unsure = append(s.unsure, joinPath(path, near))
		return
	}
	s.fail(p, "unknown field (known fields: %s)", strings.Join(names, ", "))
}

// nearestName returns the name in names that key most likely misspells (the same but for case,
// or within a third of its length in edits), or "".
func nearestName(key string, names []string) string {
	best, bestD := "", len(key)/3+1
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return n
		}
		if abs(len(key)-len(n)) >= bestD {
			continue // the distance is at least the difference in length: a long key is near nothing
		}
		if d := editDistance(key, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func abs(n int) int { return max(n, -n) }

// editDistance is the Levenshtein distance of a and b (short field names only).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// eachMember calls f for each member of the valid JSON object data, in order; it records
// duplicate names and leaves the later copies out.
func (s *shapeChecker) eachMember(data []byte, path string, f func(key string, raw []byte)) {
	seen := map[string]bool{}
	eachRawMember(data, func(key string, raw []byte) {
		if seen[key] {
			s.fail(joinPath(path, echoText(key)), "duplicate field")
			return
		}
		seen[key] = true
		f(key, raw)
	})
}

// failure is the *FieldError at path.
func failure(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, bounded(args)...)}
}
