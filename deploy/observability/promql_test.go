package observability

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScanFindsTheSelectedMetrics(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []string
	}{
		{"a bare name", `up`, []string{"up"}},
		{"a name with matchers and a range", `rate(meshlimit_rule_limited{meshlimit_rule=~"$rule"}[$__rate_interval])`, []string{"meshlimit_rule_limited"}},
		{"grouping labels are not names", `sum by (meshlimit_rule, le) (rate(a_bucket[5m]))`, []string{"a_bucket"}},
		{"grouping after the aggregation", `sum(rate(a[5m])) without (instance)`, []string{"a"}},
		{"vector matching lists are not names", `a * on (pod) group_left (rule) b`, []string{"a", "b"}},
		{"group_left may stand alone", `a * on (pod) group_left b`, []string{"a", "b"}},
		{"keywords and bool", `a > bool 0 and b or c unless d`, []string{"a", "b", "c", "d"}},
		{"offset and durations", `rate(a[1h30m] offset 5m) / 1e-3`, []string{"a"}},
		{"numbers are not names", `a > 0.5 * 0x1f + 1e3 + .5 + Inf`, []string{"a"}},
		{"strings are skipped", `label_replace(a, "dst", "$1", "src", "b(c)")`, []string{"a"}},
		{"a name with a colon (a recording rule)", `job:a:rate5m > 1`, []string{"job:a:rate5m"}},
		{"names are reported once, sorted", `b + a + b`, []string{"a", "b"}},
		{"a subquery", `max_over_time(rate(a[1m])[10m:1m])`, []string{"a"}},
		{"the @ modifier", `a @ start()`, []string{"a"}},
		{"a variable in a label list", `sum by ($group) (a)`, []string{"a"}},
		{"braced variables", `a{x="${v}"} > ${threshold}`, []string{"a"}},
		{"a comment", "a # b\n+ c", []string{"a", "c"}},
		{"a selector by __name__ only names nothing", `{__name__="a"}`, nil},
		{"a function name followed by space", `abs (a)`, []string{"a"}},
		{"an aggregation with its grouping first", `topk by (x) (3, a)`, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Scan(tc.expr)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Metrics)
		})
	}
}

func TestScanFindsTheLabelsMatchedGroupedAndJoinedOn(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []string
	}{
		{"matchers", `a{code=~"5..", front!="grpc", x="a=b", y!~"c"}`, []string{"code", "front", "x", "y"}},
		{"a matcher with a variable", `a{meshlimit_rule=~"$rule"}`, []string{"meshlimit_rule"}},
		{"__name__ is no label", `{__name__="a", job="j"}`, []string{"job"}},
		{"grouping", `sum by (le, front) (rate(a_bucket[5m])) / ignoring(code) b`, []string{"code", "front", "le"}},
		{"joins", `a * on (pod, ns) group_left (rule) b`, []string{"ns", "pod", "rule"}},
		{"a range is no label list", `rate(a[5m:1m])`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Scan(tc.expr)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Labels)
		})
	}
}

func TestScanRefusesAnUnterminatedExpression(t *testing.T) {
	for _, expr := range []string{`a{x="y}`, `rate(a[5m)`, `a{x="y"`, `sum by (x (a)`, `a]`, `(a`, `a)`, `a}`, `sum(rate(a[5m])`} {
		_, err := Scan(expr)
		assert.Error(t, err, expr)
	}
}

// FuzzScan checks that any input gives a selection or an error, never a panic, and that each
// name is a PromQL identifier that occurs in the input.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`sum by (a) (rate(b{c="d"}[5m]))`, `a * on(x) group_left b`, `"\"`, `${`, "`x`", `1e+`, `{[(`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		if len(expr) > 1<<12 {
			return
		}
		sel, err := Scan(expr)
		if err != nil {
			return
		}
		for _, n := range append(sel.Metrics, sel.Labels...) {
			if n == "" || !isIdentStart(n[0]) || !strings.Contains(expr, n) {
				t.Fatalf("Scan(%q) = %+v: %q is not an identifier of the input", expr, sel, n)
			}
		}
	})
}
