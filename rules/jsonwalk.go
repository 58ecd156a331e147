package rules

import (
	"unicode/utf16"
	"unicode/utf8"
)

// The walks below read only what checkSyntax accepted: they do not check again.

// trimJSONSpace returns b without leading and trailing JSON whitespace.
func trimJSONSpace(b []byte) []byte {
	for len(b) > 0 && isJSONSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isJSONSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// valueEnd returns the offset just past the valid JSON value that starts at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && !isJSONSpace(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
		i++
	}
	return i
}

// stringEnd returns the offset just past the string whose opening quote is at b[i].
func stringEnd(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipSpace returns the offset of the first byte at or after i that is not whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// eachRawMember calls f with the name and the value of each member of the valid object obj
// (without surrounding whitespace), in order.
func eachRawMember(obj []byte, f func(name string, raw []byte)) {
	for i := skipSpace(obj, 1); obj[i] != '}'; {
		end := stringEnd(obj, i)
		name := unquoteJSON(obj[i:end])
		i = skipSpace(obj, skipSpace(obj, end)+1) // past the colon
		end = valueEnd(obj, i)
		f(name, obj[i:end])
		if i = skipSpace(obj, end); obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
}

// eachRawElement calls f with each element of the valid array arr (without surrounding
// whitespace), in order.
func eachRawElement(arr []byte, f func(raw []byte)) {
	for i := skipSpace(arr, 1); arr[i] != ']'; {
		end := valueEnd(arr, i)
		f(arr[i:end])
		if i = skipSpace(arr, end); arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
}

// unquoteJSON decodes the valid JSON string literal lit as encoding/json does: a byte that is
// not UTF-8, and a \u escape of a lone surrogate, become U+FFFD.
func unquoteJSON(lit []byte) string {
	body := lit[1 : len(lit)-1]
	plain := true
	for _, c := range body {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(body)
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		switch c := body[i]; {
		case c == '\\':
			var r rune
			r, i = unescape(body, i)
			out = utf8.AppendRune(out, r)
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, body[i:i+size]...)
			}
			i += size
		}
	}
	return string(out)
}

// unescape decodes the escape at body[i] and returns its rune and the offset after it; a \u
// surrogate pair is one rune.
func unescape(body []byte, i int) (rune, int) {
	switch body[i+1] {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
		r := hex4(body[i+2:])
		if !utf16.IsSurrogate(r) {
			return r, i + 6
		}
		if i+12 <= len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
			if pair := utf16.DecodeRune(r, hex4(body[i+8:])); pair != utf8.RuneError {
				return pair, i + 12
			}
		}
		return utf8.RuneError, i + 6
	}
	return rune(body[i+1]), i + 2 // '"', '\\' or '/'
}

// hex4 is the value of the four hexadecimal digits that start b.
func hex4(b []byte) rune {
	return hexDigit(b[0])<<12 | hexDigit(b[1])<<8 | hexDigit(b[2])<<4 | hexDigit(b[3])
}
