package rules

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
)

// decodeStrict decodes data into v, a pointer to a configuration type, and returns every shape
// error (unknown or duplicate fields, wrong types) joined, or nil. v is filled only when there is
// none. The nested decoders of the union types (a key part, a cost) use it.
func decodeStrict(data []byte, v any) error {
	tmp := reflect.New(reflect.TypeOf(v).Elem())
	d := decodeAll(data, tmp.Interface())
	if len(d.errs) > 0 {
		return joinErrors(d.errs)
	}
	reflect.ValueOf(v).Elem().Set(tmp.Elem())
	return nil
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
//
// Values decode as encoding/json decodes them (null leaves a value unset, or calls a value
// type's UnmarshalJSON with null; an empty array or object is an empty slice or map, not nil),
// but with the small reader of jsonsyntax.go and jsonwalk.go, in one pass: encoding/json's
// decoder is most of the code a cold start would otherwise compile.
func decodeAll(data []byte, v any) decoded {
	if off, msg, ok := checkSyntax(data); !ok {
		return decoded{errs: []error{syntaxError(data, off, msg)}}
	}
	var s shapeChecker
	rv := reflect.ValueOf(v).Elem()
	if !s.check(data, rv, "") {
		s.zero(rv)
		s.unsure = append(s.unsure, "")
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

// syntaxError describes why data is not valid JSON (checkSyntax's offset and message), with a
// line and column.
func syntaxError(data []byte, off int, msg string) error {
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(data[:off], '\n')
	return &FieldError{Msg: "invalid JSON at line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + ": " + msg}
}

// unmarshaler is a configuration type that decodes itself (a union such as a key part, or an
// optional integer): encoding/json's Unmarshaler, which these types also satisfy.
type unmarshaler interface{ UnmarshalJSON([]byte) error }

// selfDecoding are the configuration types whose pointer is an unmarshaler (a test keeps the list
// whole): a list, because reflect.PointerTo and Implements on every value decoded would cost the
// cold start reflect's type-lookup code.
var selfDecoding = [...]reflect.Type{
	reflect.TypeFor[optInt](), reflect.TypeFor[keyPartJSON](), reflect.TypeFor[costJSON](), reflect.TypeFor[propertyJSON](),
}

// decodesItself reports whether a value of type t decodes with its own UnmarshalJSON.
func decodesItself(t reflect.Type) bool {
	for _, s := range selfDecoding {
		if s == t {
			return true
		}
	}
	return false
}

// shapeChecker decodes a JSON value that checkSyntax accepted into a reflect.Value of a
// configuration type, recording a *FieldError for each mismatch.
type shapeChecker struct {
	errs   []error
	unsure []string
}

func (s *shapeChecker) fail(path, format string, args ...any) {
	if len(s.errs) < maxErrors {
		s.errs = append(s.errs, failure(path, format, args...))
	}
}

// check decodes data into v, a settable zero value, and reports false, leaving v as it was, when
// data as a whole does not fit v's type (a nested value that does not fit is left out inside it).
func (s *shapeChecker) check(data []byte, v reflect.Value, path string) bool {
	data = trimJSONSpace(data)
	t := v.Type()
	if data[0] == 'n' { // null means absent, as in a protobuf Struct
		s.null(v)
		return true
	}
	if decodesItself(t) {
		u := reflect.New(t)
		if err := u.Interface().(unmarshaler).UnmarshalJSON(data); err != nil {
			s.addAt(path, err)
			return false
		}
		v.Set(u.Elem())
		return true
	}
	switch t.Kind() {
	case reflect.Pointer:
		e := reflect.New(t.Elem())
		if !s.check(data, e.Elem(), path) {
			return false
		}
		v.Set(e)
		return true
	case reflect.Struct:
		return s.object(data, v, path)
	case reflect.Slice:
		return s.array(data, v, path)
	case reflect.Map:
		return s.mapping(data, v, path)
	case reflect.String:
		if data[0] != '"' {
			s.fail(path, "want a string, got %s", jsonKind(data))
			return false
		}
		v.SetString(unquoteJSON(data))
	case reflect.Bool:
		if data[0] != 't' && data[0] != 'f' {
			s.fail(path, "want true or false, got %s", jsonKind(data))
			return false
		}
		v.SetBool(data[0] == 't')
	default:
		s.fail(path, "unsupported configuration type %s", t)
		return false
	}
	return true
}

// null decodes JSON null into v as encoding/json does: a value type that decodes itself is
// handed null; anything else keeps (or, for a pointer, a slice or a map, gets) its zero value.
func (s *shapeChecker) null(v reflect.Value) {
	if t := v.Type(); t.Kind() != reflect.Pointer && decodesItself(t) {
		u := reflect.New(t)
		if u.Interface().(unmarshaler).UnmarshalJSON([]byte("null")) == nil {
			v.Set(u.Elem())
		}
		return
	}
	v.SetZero()
}

// zero sets v to what a value of its type that does not fit decodes as: an empty object for a
// struct or a pointer to one, an empty slice or map, or the zero value.
func (s *shapeChecker) zero(v reflect.Value) {
	t := v.Type()
	if t.Kind() == reflect.Pointer && !decodesItself(t) && !decodesItself(t.Elem()) {
		e := reflect.New(t.Elem())
		s.zero(e.Elem())
		v.Set(e)
		return
	}
	switch {
	case decodesItself(t):
		s.null(v)
	case t.Kind() == reflect.Slice:
		v.Set(reflect.MakeSlice(t, 0, 0))
	case t.Kind() == reflect.Map:
		v.Set(reflect.MakeMap(t))
	default:
		v.SetZero()
	}
}

// array decodes a JSON array into v, a slice. An element that does not fit decodes as the zero
// value of its type (see zero), so that the indices of the others stay as written.
func (s *shapeChecker) array(data []byte, v reflect.Value, path string) bool {
	if data[0] != '[' {
		s.fail(path, "want an array, got %s", jsonKind(data))
		return false
	}
	var items [][]byte
	eachRawElement(data, func(raw []byte) { items = append(items, raw) })
	out := reflect.MakeSlice(v.Type(), len(items), len(items))
	for i, it := range items {
		p := path + "[" + strconv.Itoa(i) + "]"
		if e := out.Index(i); !s.check(it, e, p) {
			s.zero(e)
			s.unsure = append(s.unsure, p)
		}
	}
	v.Set(out)
	return true
}

// mapping decodes a JSON object into v, a map with string keys; a member that does not fit is
// left out.
func (s *shapeChecker) mapping(data []byte, v reflect.Value, path string) bool {
	if data[0] != '{' {
		s.fail(path, "want an object, got %s", jsonKind(data))
		return false
	}
	t := v.Type()
	out := reflect.MakeMap(t)
	s.eachMember(data, path, func(key string, raw []byte) {
		p := path + "[" + quoteInput(key) + "]"
		e := reflect.New(t.Elem()).Elem()
		if !s.check(raw, e, p) {
			s.unsure = append(s.unsure, p)
			return
		}
		out.SetMapIndex(reflect.ValueOf(key).Convert(t.Key()), e)
	})
	v.Set(out)
	return true
}

// isObject reports whether t decodes from a JSON object of fields (a struct or a pointer to one,
// without an unmarshaler of its own): a field of such a type that does not fit is decoded as an
// empty object, so that compilation sees that it is present.
func isObject(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && !decodesItself(t)
}
