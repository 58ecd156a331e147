package rlsconfig

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// yaml11Words are the plain scalars that YAML 1.1 (yaml.v2, which envoyproxy/ratelimit reads
// its files with) resolves by name: booleans, null, and the special floats.
var yaml11Words = func() map[string]any {
	m := make(map[string]any)
	add := func(v any, words ...string) {
		for _, w := range words {
			m[w] = v
		}
	}
	add(true, "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")
	add(false, "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")
	add(nil, "", "~", "null", "Null", "NULL")
	add(math.NaN(), ".nan", ".NaN", ".NAN")
	add(math.Inf(1), ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")
	add(math.Inf(-1), "-.inf", "-.Inf", "-.INF")
	return m
}()

// yaml11Float is the decimal float syntax of YAML 1.1 that yaml.v2 accepts.
var yaml11Float = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// yaml11 resolves a plain scalar as yaml.v2 does and returns its value and tag: nil (!!null), a
// bool (!!bool), an int64 or, past it, a uint64 (!!int), a float64 (!!float), or the text
// itself (!!str, or !!timestamp for a date, which yaml.v2 also leaves a string). Integers may be
// written with '_' anywhere and in Go's base prefixes (0x, 0o, 0b, and a leading 0 for octal);
// a number too large for 64 bits that reads as a decimal float is one, unless it overflows a
// float64, in which case it stays a string.
func yaml11(s string) (any, string) {
	if s != "" && strings.IndexByte("yYnNtTfFoO~.+-0123456789", s[0]) < 0 {
		return s, "!!str"
	}
	if v, ok := yaml11Words[s]; ok {
		switch v.(type) {
		case nil:
			return nil, "!!null"
		case bool:
			return v, "!!bool"
		}
		return v, "!!float"
	}
	switch c := s[0]; {
	case c == '.':
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f, "!!float"
		}
	case c == '+' || c == '-' || c >= '0' && c <= '9':
		if isTimestamp(s) {
			return s, "!!timestamp"
		}
		plain := strings.ReplaceAll(s, "_", "")
		if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return i, "!!int"
		}
		if u, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return u, "!!int"
		}
		if yaml11Float.MatchString(plain) {
			if f, err := strconv.ParseFloat(plain, 64); err == nil {
				return f, "!!float"
			}
		}
	}
	return s, "!!str"
}

// timestampLayouts are the timestamps yaml.v2 recognizes.
var timestampLayouts = []string{"2006-1-2T15:4:5.999999999Z07:00", "2006-1-2t15:4:5.999999999Z07:00", "2006-1-2 15:4:5.999999999", "2006-1-2"}

// isTimestamp reports whether s is a timestamp for yaml.v2: four digits, '-', then one of
// timestampLayouts.
func isTimestamp(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i != 4 || i == len(s) || s[i] != '-' {
		return false
	}
	for _, l := range timestampLayouts {
		if _, err := time.Parse(l, s); err == nil {
			return true
		}
	}
	return false
}
