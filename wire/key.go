package wire

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/meshlimit/meshlimit/internal/fnv"
)

// Key is the identity of one descriptor as the filter composes it: the plugin, the rule, the
// fingerprint of the limit's definition and the request's key value, so that different
// plugins, rules and limit definitions never share a counter in the service. It is written
// "<plugin>/<rule>/<fingerprint in base 36>/<value>".
//
// A part that the service would refuse (not UTF-8, a control character) or that is longer
// than its bound (MaxPluginBytes, MaxRuleBytes, MaxValueBytes) is written as "#" and two
// FNV-1a hashes in hex (of the part, and of the part and a NUL), which keep distinct values apart; so every key the encoder writes is
// one the service accepts, at most MaxKeyBytes long.
type Key struct {
	Plugin      string
	Rule        string
	Fingerprint uint64
	Value       string
}

// AppendKey appends the descriptor key of k as the service reads it (the encoders write it
// escaped for JSON): at most MaxKeyBytes bytes that CheckKey accepts, whatever k holds. It does
// not allocate when b has room.
func AppendKey(b []byte, k Key) []byte { return appendKeyText(b, k, false) }

// appendKey appends k, escaped for the inside of a JSON string.
func appendKey(b []byte, k Key) []byte { return appendKeyText(b, k, true) }

func appendKeyText(b []byte, k Key, json bool) []byte {
	b = appendPartText(b, k.Plugin, MaxPluginBytes, json)
	b = append(b, '/')
	b = appendPartText(b, k.Rule, MaxRuleBytes, json)
	b = append(b, '/')
	b = strconv.AppendUint(b, k.Fingerprint, 36)
	b = append(b, '/')
	return appendPartText(b, k.Value, MaxValueBytes, json)
}

// appendPart appends s as is (JSON-escaped) when it is clean text of at most limit bytes,
// and its hashed form otherwise.
func appendPart(b []byte, s string, limit int) []byte { return appendPartText(b, s, limit, true) }

func appendPartText(b []byte, s string, limit int, json bool) []byte {
	if len(s) > limit || !cleanText(s) {
		return appendHashed(b, s)
	}
	if !json {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return b
}

// appendHashed appends the hashed form of a part: "#" and two FNV-1a hashes in hex, of s and
// of s and a NUL (at most hashedBytes).
func appendHashed(b []byte, s string) []byte {
	h := fnv.String(s)
	b = append(b, '#')
	b = strconv.AppendUint(b, h, 16)
	b = append(b, '-')
	return strconv.AppendUint(b, fnv.AddString(h, "\x00"), 16)
}

// cleanText reports whether s is valid UTF-8 without control characters (C0, DEL, C1): the
// text a key may hold.
func cleanText(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r >= 0x80 && r < 0xa0 {
			return false
		}
		i += size
	}
	return true
}

// CheckKey reports what is wrong with a descriptor key, or nil: a key is 1 to maxBytes bytes
// of valid UTF-8 without control characters (C0, DEL, C1).
func CheckKey(k string, maxBytes int) error {
	switch {
	case k == "":
		return errors.New("required")
	case len(k) > maxBytes:
		return errors.New(strconv.Itoa(len(k)) + " bytes, at most " + strconv.Itoa(maxBytes) + " allowed")
	case cleanText(k):
		return nil
	case !utf8.ValidString(k):
		return errors.New("not valid UTF-8")
	default:
		return errors.New("contains a control character")
	}
}
