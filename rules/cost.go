package rules

import (
	"fmt"

	"github.com/meshlimit/meshlimit/rules/body"
)

// Cost returns the number of quota units req consumes: the rule's constant cost, or the
// value of its cost header. Cost always returns a usable cost of at least 1. For a header
// cost, a missing header costs the configured default; a value above the configured max
// is charged max; and a value that is not a positive decimal integer costs the default and
// is also reported as a non-nil error, for the caller to log or count. A repeated cost header
// is charged its highest value, so a client cannot hide a cost behind a cheaper one.
func (r *Rule) Cost(req Request) (int64, error) {
	c := &r.cost
	if c.header == "" {
		return c.constant, nil
	}
	cost := int64(0)
	var err error
	for i := 0; ; i++ {
		v, ok := req.HeaderValue(c.header, i)
		if !ok {
			break
		}
		n, ok := parseCost(v)
		if !ok {
			n = c.def
			if err == nil {
				err = fmt.Errorf("filter: rule %q: cost header %q: invalid value %.32q: want a positive integer", r.Name, c.header, v)
			}
		}
		cost = max(cost, min(n, c.max))
	}
	if cost == 0 {
		return c.def, nil
	}
	return cost, err
}

// parseCost parses a positive decimal integer surrounded by optional spaces or tabs. It
// rejects signs, fractions and values that do not fit in 18 digits (see body.PlainInt).
func parseCost(s string) (int64, bool) {
	n, ok := body.PlainInt(trimOWS(s))
	return n, ok && n > 0
}
