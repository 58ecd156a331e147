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

func decodeStrict(data []byte, v any) error {
	if !json.Valid(data) {
		return syntaxError(data)
	}
	var s shapeChecker
	s.check(data, reflect.TypeOf(v).Elem(), "")
	if len(s.errs) == 1 {
		return s.errs[0]
	} else if len(s.errs) > 1 {
		return errors.Join(s.errs...)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &FieldError{Msg: err.Error()} // unreachable after a clean shape check
	}
	return nil
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
// mismatch. It only reads values that json.Valid accepted.
type shapeChecker struct {
	errs []error
}

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

func (s *shapeChecker) fail(path, format string, args ...any) {
	if len(s.errs) < maxErrors {
		s.errs = append(s.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
}

func (s *shapeChecker) check(data []byte, t reflect.Type, path string) {
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		return // null means absent, as in a protobuf Struct
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		u := reflect.New(t).Interface().(json.Unmarshaler)
		if err := u.UnmarshalJSON(data); err != nil {
			s.addAt(path, err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		s.check(data, t.Elem(), path)
	case reflect.Struct:
		s.object(data, t, path)
	case reflect.Slice:
		if data[0] != '[' {
			s.fail(path, "want an array, got %s", jsonKind(data))
			return
		}
		var items []json.RawMessage
		_ = json.Unmarshal(data, &items) // valid JSON array: cannot fail
		for i, it := range items {
			s.check(it, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		}
	case reflect.Map:
		if data[0] != '{' {
			s.fail(path, "want an object, got %s", jsonKind(data))
			return
		}
		s.eachMember(data, path, func(key string, raw []byte) {
			s.check(raw, t.Elem(), path+"["+strconv.Quote(key)+"]")
		})
	case reflect.String:
		if data[0] != '"' {
			s.fail(path, "want a string, got %s", jsonKind(data))
		}
	case reflect.Bool:
		if data[0] != 't' && data[0] != 'f' {
			s.fail(path, "want true or false, got %s", jsonKind(data))
		}
	default:
		s.fail(path, "unsupported configuration type %s", t)
	}
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
func (s *shapeChecker) object(data []byte, t reflect.Type, path string) {
	if data[0] != '{' {
		s.fail(path, "want an object, got %s", jsonKind(data))
		return
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
	s.eachMember(data, path, func(key string, raw []byte) {
		ft, ok := fields[key]
		if !ok {
			s.fail(joinPath(path, key), "unknown field (known fields: %s)", strings.Join(names, ", "))
			return
		}
		s.check(raw, ft, joinPath(path, key))
	})
}

// eachMember calls f for each member of the valid JSON object data, in order, and records
// duplicate names.
func (s *shapeChecker) eachMember(data []byte, path string, f func(key string, raw []byte)) {
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
		f(key, raw)
	}
}
