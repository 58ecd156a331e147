package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// decodeStrict decodes data into v, a pointer to a configuration type, and returns every shape
// error (unknown or duplicate fields, wrong types) joined, or nil. v is filled only when there is
// none. The nested decoders of the union types (a key part, a cost) use it.
func decodeStrict(data []byte, v any) error {
	d := decodeAll(data, v)
	return joinErrors(d.errs)
}

// decoded is what decodeAll found in a document.
type decoded struct {
	// errs are the shape errors, each a *FieldError, at most maxErrors.
	errs []error
	// unsure are the paths of the values decodeAll could not take as written: a value of the
	// wrong shape (left out, or decoded as its zero value), an unknown field and the known field
	// it is nearest to. Compilation's errors about them are follow-ons (see followOn).
	unsure []string
	// decoded is false when v holds nothing: data is not JSON.
	decoded bool
}

// decodeAll decodes data into v, a pointer to a configuration type, strictly: names match
// exactly (unlike encoding/json's case-insensitive matching), unknown and duplicate fields and
// wrong types are errors, with a *FieldError for each that names its field relative to v. Unlike
// decodeStrict it decodes the rest of the document all the same: a value of the wrong shape is
// left out (an element of an array, or a field that is an object, decodes as its zero value, so
// that indices and the presence of objects stay as written), an unknown field is dropped, and a
// duplicate field keeps its first value. Valid JSON is required: otherwise v holds nothing.
func decodeAll(data []byte, v any) decoded {
	if !json.Valid(data) {
		return decoded{errs: []error{syntaxError(data)}}
	}
	t := reflect.TypeOf(v).Elem()
	var s shapeChecker
	s.check(data, t, "")
	if len(s.errs) > 0 {
		// Walk again, writing the document without what does not fit.
		s = shapeChecker{out: &bytes.Buffer{}}
		if !s.check(data, t, "") {
			s.write(zeroJSON(t))
			s.unsure = append(s.unsure, "")
		}
		data = s.out.Bytes()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		s.errs = append(s.errs, &FieldError{Msg: err.Error()}) // unreachable after the shape check
		return decoded{errs: s.errs}
	}
	return decoded{errs: s.errs, unsure: s.unsure, decoded: true}
}

// joinErrors returns nil, the one error, or errs joined.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

// syntaxError describes why data is not valid JSON, with a line and column.
func syntaxError(data []byte) error {
	var x any
	err := json.Unmarshal(data, &x)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:se.Offset], []byte("\n"))
		col := int(se.Offset) - bytes.LastIndexByte(data[:se.Offset], '\n') - 1
		return &FieldError{Msg: fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, se)}
	}
	if err == nil {
		err = errors.New("unexpected data")
	}
	return &FieldError{Msg: "invalid JSON: " + err.Error()}
}

// shapeChecker walks a JSON value alongside a Go type and records a *FieldError for each
// mismatch. It only reads values that json.Valid accepted. With out set, it also writes the value
// to out without what does not fit the type (see decodeAll).
type shapeChecker struct {
	errs   []error
	unsure []string
	out    *bytes.Buffer
}

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

func (s *shapeChecker) fail(path, format string, args ...any) {
	if len(s.errs) < maxErrors {
		s.errs = append(s.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
}

func (s *shapeChecker) write(b []byte) {
	if s.out != nil {
		s.out.Write(b)
	}
}

// truncate drops what was written since mark, the length of out before.
func (s *shapeChecker) truncate(mark int) {
	if s.out != nil {
		s.out.Truncate(mark)
	}
}

func (s *shapeChecker) mark() int {
	if s.out == nil {
		return 0
	}
	return s.out.Len()
}

// check checks data against t and writes it; it reports false, writing nothing, when data as a
// whole does not fit t (a nested value that does not fit is left out inside it).
func (s *shapeChecker) check(data []byte, t reflect.Type, path string) bool {
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		s.write(data)
		return true // null means absent, as in a protobuf Struct
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		u := reflect.New(t).Interface().(json.Unmarshaler)
		if err := u.UnmarshalJSON(data); err != nil {
			s.addAt(path, err)
			return false
		}
		s.write(data)
		return true
	}
	switch t.Kind() {
	case reflect.Pointer:
		return s.check(data, t.Elem(), path)
	case reflect.Struct:
		return s.object(data, t, path)
	case reflect.Slice:
		return s.array(data, t, path)
	case reflect.Map:
		if data[0] != '{' {
			s.fail(path, "want an object, got %s", jsonKind(data))
			return false
		}
		s.write([]byte{'{'})
		s.eachMember(data, path, func(key string, raw []byte, mark int) {
			p := path + "[" + strconv.Quote(key) + "]"
			if !s.check(raw, t.Elem(), p) {
				s.truncate(mark)
				s.unsure = append(s.unsure, p)
			}
		})
		s.write([]byte{'}'})
		return true
	case reflect.String:
		if data[0] != '"' {
			s.fail(path, "want a string, got %s", jsonKind(data))
			return false
		}
	case reflect.Bool:
		if data[0] != 't' && data[0] != 'f' {
			s.fail(path, "want true or false, got %s", jsonKind(data))
			return false
		}
	default:
		s.fail(path, "unsupported configuration type %s", t)
		return false
	}
	s.write(data)
	return true
}

// array checks a JSON array against the slice type t. An element that does not fit is written as
// the zero value of its type, so that the indices of the others stay as written.
func (s *shapeChecker) array(data []byte, t reflect.Type, path string) bool {
	if data[0] != '[' {
		s.fail(path, "want an array, got %s", jsonKind(data))
		return false
	}
	var items []json.RawMessage
	_ = json.Unmarshal(data, &items) // valid JSON array: cannot fail
	s.write([]byte{'['})
	for i, it := range items {
		if i > 0 {
			s.write([]byte{','})
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		if !s.check(it, t.Elem(), p) {
			s.write(zeroJSON(t.Elem()))
			s.unsure = append(s.unsure, p)
		}
	}
	s.write([]byte{']'})
	return true
}

// zeroJSON is the JSON that decodes as the zero value of t (an object for a pointer to a struct).
func zeroJSON(t reflect.Type) []byte {
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return []byte("null")
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return []byte("{}")
	case reflect.Pointer:
		return zeroJSON(t.Elem())
	case reflect.Slice:
		return []byte("[]")
	case reflect.String:
		return []byte(`""`)
	case reflect.Bool:
		return []byte("false")
	}
	return []byte("null")
}

// isObject reports whether t decodes from a JSON object of fields (a struct or a pointer to one,
// without an unmarshaler of its own): a field of such a type that does not fit is decoded as an
// empty object, so that compilation sees that it is present.
func isObject(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

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

// object checks a JSON object against the struct type t: exact field names, no duplicates.
func (s *shapeChecker) object(data []byte, t reflect.Type, path string) bool {
	if data[0] != '{' {
		s.fail(path, "want an object, got %s", jsonKind(data))
		return false
	}
	fields := map[string]reflect.Type{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
		names = append(names, name)
	}
	sort.Strings(names)
	s.write([]byte{'{'})
	s.eachMember(data, path, func(key string, raw []byte, mark int) {
		p := joinPath(path, key)
		ft, ok := fields[key]
		if !ok {
			s.truncate(mark)
			s.unknownField(path, key, names)
			return
		}
		if !s.check(raw, ft, p) {
			s.truncate(mark)
			s.unsure = append(s.unsure, p)
			if isObject(ft) {
				s.write(s.memberPrefix(key))
				s.write([]byte("{}"))
			}
		}
	})
	s.write([]byte{'}'})
	return true
}

// unknownField records an unknown field of the object at path, with the known field nearest to
// it, if one is near: the value was meant for that field, so compilation's errors about it (it is
// required, say) are follow-ons.
func (s *shapeChecker) unknownField(path, key string, names []string) {
	p := joinPath(path, key)
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
		if d := editDistance(key, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

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

// eachMember calls f for each member of the valid JSON object data, in order, with its name
// and value already written (when writing) and mark, the length of out before them; it records
// duplicate names and leaves the later copies out.
func (s *shapeChecker) eachMember(data []byte, path string, f func(key string, raw []byte, mark int)) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // '{'
		s.fail(path, "%v", err)
		return
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			s.fail(path, "%v", err)
			return
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			s.fail(joinPath(path, key), "%v", err)
			return
		}
		if seen[key] {
			s.fail(joinPath(path, key), "duplicate field")
			continue
		}
		seen[key] = true
		mark := s.mark()
		s.write(s.memberPrefix(key))
		f(key, raw, mark)
	}
}

// memberPrefix is what precedes a member's value in out: a comma unless it is the object's first
// (out then ends with its '{'), its name and a colon.
func (s *shapeChecker) memberPrefix(key string) []byte {
	if s.out == nil {
		return nil
	}
	name, _ := json.Marshal(key)
	if b := s.out.Bytes(); b[len(b)-1] != '{' {
		return append(append([]byte{','}, name...), ':')
	}
	return append(name, ':')
}
