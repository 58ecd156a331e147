package rules

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// MaxRegexProgram bounds the size of a compiled regex, counted as the instructions of its
// regexp/syntax program (anchors included), like Envoy's re2.max_program_size (100 RE2
// instructions by default). Go's instruction count runs somewhat above RE2's for the same
// expression, so the bound is 200: "/api/v[0-9]+/(users|orders)/[0-9a-f-]{36}" needs about 70,
// while counted repetitions of repetitions, such as ".*(?:.?){1000}" (over 2,000), are refused.
// A match costs at most the program size per input byte, and the input is bounded by
// MaxRegexInput.
const MaxRegexProgram = 200

// compileRegex compiles re anchored at both ends, refusing a program larger than
// MaxRegexProgram.
func compileRegex(re string) (*regexp.Regexp, error) {
	anchored := `^(?:` + re + `)$`
	n, err := regexProgramSize(anchored)
	if err != nil {
		return nil, err
	}
	if n > MaxRegexProgram {
		return nil, fmt.Errorf("%q compiles to %d instructions: at most %d are allowed (like Envoy's re2.max_program_size); simplify counted repetitions such as {n,m}", re, n, MaxRegexProgram)
	}
	return regexp.Compile(anchored)
}

// regexProgramSize returns the number of instructions of the compiled program of re, as
// package regexp builds it (parsed with Perl flags, simplified, compiled).
func regexProgramSize(re string) (int, error) {
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}

// maskBits returns the prefix length set in o, or def when unset. Every value is a prefix
// length: 0 is refused, since a /0 key puts every client into one bucket (a rule without the
// client_ip part does that explicitly), and the address length (32 or 128) keeps the whole
// address.
func (v *validator) maskBits(path string, o optInt, def, bits int64) int {
	if !o.Set {
		return int(def)
	}
	if o.Value < 1 || o.Value > bits {
		v.failf(path, "%d out of range: want a prefix length from 1 to %d (%d keeps the whole address)", o.Value, bits, bits)
		return int(def)
	}
	return int(o.Value)
}

// pathValue checks a compiled path match: exact and prefix values start with "/" and are
// already normalized (a value that normalization would change could never match), and
// ignore_case applies to exact and prefix only.
func (v *validator) pathValue(path string, m *stringMatch, ignoreCase bool) {
	switch m.kind {
	case matchExact, matchPrefix:
		m.ignoreCase = ignoreCase
		if !strings.HasPrefix(m.value, "/") {
			v.failf(path, "%q must start with \"/\"", m.value)
			return
		}
		norm := string(AppendNormalizedPath(nil, m.value))
		if norm != m.value {
			v.failf(path, "%q never matches: paths are matched in normalized form; write %q", m.value, norm)
		}
	case matchRegex:
		if ignoreCase {
			v.failf(path+".ignore_case", "only exact and prefix take ignore_case; start the regex with (?i) instead")
		}
	}
}

// checkNormalizedPart reports an override part of a path or host key part that is not written
// the way the key holds it (normalized path; lower-case host without port and trailing dot):
// such an override could never match.
func checkNormalizedPart(idx int, p *keyPart, part string) error {
	var want string
	switch p.kind {
	case keyPath:
		want = string(AppendNormalizedPath(nil, part))
	case keyHost:
		want = strings.ToLower(hostName(part))
	default:
		return nil
	}
	if want != part {
		return fmt.Errorf("part %d (%s) %q never matches: the key holds %q", idx+1, p.kind, part, want)
	}
	return nil
}
