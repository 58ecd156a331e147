package sfv

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The values ParseList returns: a bare item is an int64 (Integer), a float64 (Decimal), a String,
// a Token, a []byte (Byte Sequence) or a bool (Boolean).
type (
	// String is an sf-string, unquoted.
	String string
	// Token is an sf-token.
	Token string
	// Param is one parameter: its key and its bare item (true when the parameter has no value).
	Param struct {
		Key   string
		Value any
	}
	// Member is one member of a List or an Inner List.
	Member struct {
		Value  any // a bare item, or []Member for an inner list
		Params []Param
	}
)

type parser struct {
	s string
	i int
}

// ParseList parses field as an RFC 9651 List (§4.2.1), strictly: it refuses what a conforming
// parser refuses, and also a parameter given twice (RFC 9651 keeps the last; a field meshlimit
// writes never repeats one).
func ParseList(field string) ([]Member, error) {
	p := &parser{s: strings.TrimLeft(field, " ")}
	p.s = strings.TrimRight(p.s, " ")
	var out []Member
	if p.s == "" {
		return nil, nil
	}
	for {
		m, err := p.member()
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		p.ows()
		if p.i == len(p.s) {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("at %d: want ',' after a member, got %q", p.i, p.s[p.i])
		}
		p.i++
		p.ows()
		if p.i == len(p.s) {
			return nil, errors.New("trailing comma")
		}
	}
}

func (p *parser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) member() (Member, error) {
	if p.i < len(p.s) && p.s[p.i] == '(' {
		p.i++
		var inner []Member
		for {
			for p.i < len(p.s) && p.s[p.i] == ' ' {
				p.i++
			}
			if p.i < len(p.s) && p.s[p.i] == ')' {
				p.i++
				params, err := p.params()
				return Member{Value: inner, Params: params}, err
			}
			v, err := p.bareItem()
			if err != nil {
				return Member{}, err
			}
			params, err := p.params()
			if err != nil {
				return Member{}, err
			}
			inner = append(inner, Member{Value: v, Params: params})
			if p.i < len(p.s) && p.s[p.i] != ' ' && p.s[p.i] != ')' {
				return Member{}, fmt.Errorf("at %d: bad inner list", p.i)
			}
		}
	}
	v, err := p.bareItem()
	if err != nil {
		return Member{}, err
	}
	params, err := p.params()
	return Member{Value: v, Params: params}, err
}

func (p *parser) params() ([]Param, error) {
	var out []Param
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		for p.i < len(p.s) && p.s[p.i] == ' ' {
			p.i++
		}
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		for _, q := range out {
			if q.Key == key {
				return nil, fmt.Errorf("duplicate parameter %q", key) // RFC 9651 overwrites; we forbid it
			}
		}
		out = append(out, Param{Key: key, Value: v})
	}
	return out, nil
}

func (p *parser) key() (string, error) {
	start := p.i
	if p.i >= len(p.s) || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
		return "", fmt.Errorf("at %d: bad key", p.i)
	}
	for p.i < len(p.s) && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= '0' && p.s[p.i] <= '9' || strings.IndexByte("_-.*", p.s[p.i]) >= 0) {
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *parser) bareItem() (any, error) {
	if p.i >= len(p.s) {
		return nil, errors.New("missing item")
	}
	c := p.s[p.i]
	switch {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		p.i++
		var b strings.Builder
		for p.i < len(p.s) {
			c := p.s[p.i]
			p.i++
			switch {
			case c == '\\':
				if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
					return nil, errors.New("bad escape in string")
				}
				b.WriteByte(p.s[p.i])
				p.i++
			case c == '"':
				return String(b.String()), nil
			case c < 0x20 || c > 0x7e:
				return nil, fmt.Errorf("byte %#x in string", c)
			default:
				b.WriteByte(c)
			}
		}
		return nil, errors.New("unterminated string")
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		start := p.i
		for p.i < len(p.s) && isTchar(p.s[p.i]) {
			p.i++
		}
		return Token(p.s[start:p.i]), nil
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, errors.New("unterminated byte sequence")
		}
		b, err := base64.StdEncoding.DecodeString(p.s[p.i+1 : p.i+1+end])
		p.i += end + 2
		return b, err
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, errors.New("bad boolean")
	}
	return nil, fmt.Errorf("at %d: unexpected %q", p.i, c)
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '.' && dot < 0 {
			dot = digits
		} else if c < '0' || c > '9' {
			break
		}
		digits++
		p.i++
	}
	text := p.s[start:p.i]
	if dot < 0 {
		if digits == 0 || digits > 15 {
			return nil, fmt.Errorf("bad integer %q", text)
		}
		n, err := strconv.ParseInt(text, 10, 64)
		return n, err
	}
	if dot > 12 || digits-dot-1 < 1 || digits-dot-1 > 3 {
		return nil, fmt.Errorf("bad decimal %q", text)
	}
	return strconv.ParseFloat(text, 64)
}

// Policy is one member of a RateLimit-Policy or RateLimit field: a policy name, its integer
// parameters, its quota unit (the qu parameter, "" when absent) and its partition key (the pk
// parameter, nil when absent).
type Policy struct {
	Name         string
	Params       map[string]int64
	Unit         string
	PartitionKey []byte
}

// quotaUnits are the qu values of the draft's RateLimit Quota Units registry.
var quotaUnits = map[String]bool{"requests": true, "content-bytes": true, "concurrent-requests": true}

// ParsePolicies parses a RateLimit-Policy or RateLimit field strictly: every member must be an
// sf-string whose parameters are non-negative integers, except qu (an sf-string naming a registered
// quota unit) and pk (a non-empty Byte Sequence).
func ParsePolicies(field string) ([]Policy, error) {
	members, err := ParseList(field)
	if err != nil {
		return nil, fmt.Errorf("field %q is not an RFC 9651 List: %w", field, err)
	}
	var out []Policy
	for _, m := range members {
		name, ok := m.Value.(String)
		if !ok {
			return nil, fmt.Errorf("member %v of %q is not an sf-string", m.Value, field)
		}
		p := Policy{Name: string(name), Params: map[string]int64{}}
		for _, kv := range m.Params {
			switch kv.Key {
			case "qu":
				u, ok := kv.Value.(String)
				if !ok || !quotaUnits[u] {
					return nil, fmt.Errorf("parameter qu of %q is not a registered quota unit", field)
				}
				p.Unit = string(u)
				continue
			case "pk":
				b, ok := kv.Value.([]byte)
				if !ok || len(b) == 0 {
					return nil, fmt.Errorf("parameter pk of %q is not a non-empty Byte Sequence", field)
				}
				p.PartitionKey = b
				continue
			}
			n, ok := kv.Value.(int64)
			if !ok || n < 0 {
				return nil, fmt.Errorf("parameter %s of %q is not a non-negative integer", kv.Key, field)
			}
			p.Params[kv.Key] = n
		}
		out = append(out, p)
	}
	return out, nil
}

// isTchar reports whether c may appear in an sf-token after its first character: an RFC 9110 tchar,
// ':' or '/'.
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
