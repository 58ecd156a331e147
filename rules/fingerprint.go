package rules

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
)

// limitFingerprint hashes one limit's canonical form: algorithm, quota, window, the
// effective burst and, for a calendar window, its unit and offset (an unset burst and a burst equal to the quota hash alike).
func limitFingerprint(l algorithms.Limit) uint64 { return addLimit(fnv.Offset64, l) }

func addLimit(h uint64, l algorithms.Limit) uint64 {
	burst := l.Burst
	if burst == 0 {
		burst = l.Quota
	}
	var b [34]byte
	b[0] = byte(l.Kind)
	binary.BigEndian.PutUint64(b[1:], uint64(l.Quota))
	binary.BigEndian.PutUint64(b[9:], uint64(l.Window))
	binary.BigEndian.PutUint64(b[17:], uint64(burst))
	if c := l.Calendar; c.Unit != 0 { // a rolling limit hashes as before: its keys keep their state
		b[25] = byte(c.Unit)
		binary.BigEndian.PutUint64(b[26:], uint64(c.Offset))
		return fnv.AddBytes(h, b[:])
	}
	return fnv.AddBytes(h, b[:25])
}

// ruleFingerprint hashes the canonical form of what Rule.Fingerprint covers.
func ruleFingerprint(r *Rule) uint64 {
	h := fnv.AddString(fnv.Offset64, "meshlimit-rule-v1\x00")
	for _, l := range r.limits() {
		h = addLimit(h, l.Limit)
	}
	var b []byte
	b = append(b, 0xff) // end of limits
	for _, p := range r.key {
		b = append(b, byte(p.kind))
		b = strconv.AppendQuote(b, p.name)
		for _, s := range p.property {
			b = strconv.AppendQuote(b, s)
		}
		b = strconv.AppendInt(b, int64(p.trustedHops), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(p.v4Bits), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(p.v6Bits), 10)
		b = append(b, ';')
	}
	b = append(b, 0xfe)
	b = strconv.AppendInt(b, int64(r.MaxKeys), 10)
	return fnv.AddBytes(h, b)
}

// summarize is the one-line summary of c the filter logs on configure (without fmt, which the
// cold start would otherwise compile for it).
func summarize(c *Config) string {
	var b strings.Builder
	n := len(c.rules)
	b.WriteString(strconv.Itoa(n))
	if n == 1 {
		b.WriteString(" rule: ")
	} else {
		b.WriteString(" rules: ")
	}
	for i, r := range c.rules {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.Name + "(" + r.Scope.String() + ", " + strconv.Itoa(len(r.sets[0].Limits)) + " limit")
		if len(r.sets[0].Limits) != 1 {
			b.WriteByte('s')
		}
		if len(r.overrides) > 0 {
			b.WriteString(", " + strconv.Itoa(len(r.overrides)) + " override")
			if len(r.overrides) != 1 {
				b.WriteByte('s')
			}
		}
		if r.Shadow {
			b.WriteString(", shadow")
		}
		if m := r.messages; m != nil {
			b.WriteString(", messages " + m.Summary())
		}
		b.WriteByte(')')
	}
	b.WriteString("; enforce=" + strconv.FormatBool(c.Enforce) + "; headers=" + c.Response.headerSetNames())
	return b.String()
}
