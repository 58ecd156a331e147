package observability

import (
	"fmt"
	"slices"
)

// Selection is what an expression of PromQL names: the metrics it selects and the labels it
// matches on, groups by or joins on, each sorted, each once.
type Selection struct {
	Metrics []string
	Labels  []string
}

// Scan returns the Selection of an expression of PromQL as Grafana sends it ($variables
// allowed). Metrics are the identifiers that are neither functions nor aggregations (followed by
// "("), nor keywords, nor label names; labels are the names matched inside {…} (__name__ aside)
// and those listed after by, without, on, ignoring, group_left and group_right. Strings, ranges
// […], numbers and comments are skipped. It is a lexer, not a parser: it does not check that
// the expression is valid (promtool does), and a metric named only by a __name__ matcher is not
// seen. An unterminated string or an unbalanced bracket is an error.
func Scan(expr string) (Selection, error) {
	var sel Selection
	labelList := false // the next "(" opens a list of label names
	depth := 0         // parentheses open
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, i)
			if err != nil {
				return Selection{}, err
			}
			i = end
		case c == '{' || c == '[' || c == '(' && labelList:
			end, err := skipGroup(expr, i)
			if err != nil {
				return Selection{}, err
			}
			if c != '[' {
				sel.Labels = append(sel.Labels, labelsIn(expr[i+1:end-1], c == '{')...)
			}
			i, labelList = end, false
		case c == '(' || c == ')':
			if c == '(' {
				depth++
			} else if depth--; depth < 0 {
				return Selection{}, fmt.Errorf("promql: unbalanced ')' at offset %d", i)
			}
			i++
		case c == ']' || c == '}':
			return Selection{}, fmt.Errorf("promql: unbalanced %q at offset %d", c, i)
		case c == '#': // a comment runs to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '$': // a Grafana variable: $name or ${name}
			i = skipVariable(expr, i)
		case isDigit(c) || c == '.' && i+1 < len(expr) && isDigit(expr[i+1]):
			i = skipNumber(expr, i)
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdentChar(expr[i]) {
				i++
			}
			word := expr[start:i]
			next := nextByte(expr, i)
			switch {
			case groupingKeywords[word]:
				labelList = next == '(' // group_left may stand without a list
			case keywords[word], next == '(':
			default:
				sel.Metrics = append(sel.Metrics, word)
			}
		default:
			i++
		}
	}
	if depth != 0 {
		return Selection{}, fmt.Errorf("promql: %d unclosed '('", depth)
	}
	slices.Sort(sel.Metrics)
	slices.Sort(sel.Labels)
	sel.Metrics, sel.Labels = slices.Compact(sel.Metrics), slices.Compact(sel.Labels)
	return sel, nil
}

// labelsIn returns the label names in the inside of a {…} matcher list (matchers: the names
// followed by =, !=, =~ or !~) or of a (…) list of names; strings and variables are skipped.
func labelsIn(s string, matchers bool) []string {
	var out []string
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '"' || c == '\'' || c == '`':
			end, _ := skipString(s, i) // skipGroup has found it terminated
			i = end
		case c == '$':
			i = skipVariable(s, i)
		case isIdentStart(c):
			start := i
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
			if n := nextByte(s, i); (!matchers || n == '=' || n == '!') && s[start:i] != "__name__" {
				out = append(out, s[start:i])
			}
		default:
			i++
		}
	}
	return out
}

// groupingKeywords are followed by a list of label names in parentheses.
var groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// keywords are the other words of PromQL that are not metric names: operators, modifiers, the
// special float values, and the aggregations, which may be followed by "by (…)" before their "(".
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// skipString returns the index after the string literal that starts at i; a backslash escapes
// the next character except in a raw (`) string.
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("promql: unterminated string at offset %d", i)
}

// skipGroup returns the index after the bracket that closes the one at i, skipping strings and
// nested brackets of any kind.
func skipGroup(s string, i int) (int, error) {
	var open []byte
	for j := i; j < len(s); j++ {
		switch c := s[j]; c {
		case '"', '\'', '`':
			end, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case '(', '[', '{':
			open = append(open, c)
		case ')', ']', '}':
			if len(open) == 0 || open[len(open)-1] != opener(c) {
				return 0, fmt.Errorf("promql: unbalanced %q at offset %d", c, j)
			}
			open = open[:len(open)-1]
			if len(open) == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("promql: unclosed %q at offset %d", s[i], i)
}

// opener returns the bracket that c closes.
func opener(c byte) byte {
	switch c {
	case ')':
		return '('
	case ']':
		return '['
	}
	return '{'
}

// skipVariable returns the index after the Grafana variable ($name, ${name}) at i.
func skipVariable(s string, i int) int {
	i++
	if i < len(s) && s[i] == '{' {
		for i < len(s) && s[i] != '}' {
			i++
		}
		return min(i+1, len(s))
	}
	for i < len(s) && isIdentChar(s[i]) {
		i++
	}
	return i
}

// skipNumber skips a number or a duration: digits, letters (0x1f, 1e3, 5m, 1h30m), dots and the
// sign of an exponent.
func skipNumber(s string, i int) int {
	for i < len(s) {
		c := s[i]
		switch {
		case isIdentChar(c) || c == '.':
			i++
		case (c == '+' || c == '-') && (s[i-1] == 'e' || s[i-1] == 'E') && i+1 < len(s) && isDigit(s[i+1]):
			i++
		default:
			return i
		}
	}
	return i
}

// nextByte returns the first byte at or after i that is not white space, or 0.
func nextByte(s string, i int) byte {
	for ; i < len(s); i++ {
		if c := s[i]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
	}
	return 0
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }
