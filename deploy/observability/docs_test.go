package observability

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docRow is one row of the summary table of docs/observability.md.
type docRow struct {
	family, typ   string
	labels, users []string
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	userToken  = regexp.MustCompile("\"[^\"]+\"|`[^`]+`|\\$[A-Za-z_]+")
)

// summaryTable reads the table of docs/observability.md whose header starts with "| series".
func summaryTable(t *testing.T) []docRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "observability.md"))
	require.NoError(t, err)
	var rows []docRow
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| series "):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "| "):
			cells := strings.Split(strings.Trim(line, "| "), " | ")
			require.Len(t, cells, 5, "docs/observability.md: a row of the summary table has 5 cells: %s", line)
			m := backticked.FindStringSubmatch(cells[0])
			require.NotNil(t, m, "docs/observability.md: the first cell names the series in backticks: %s", line)
			r := docRow{family: m[1], typ: cells[1]}
			for _, l := range backticked.FindAllStringSubmatch(cells[2], -1) {
				r.labels = append(r.labels, l[1])
			}
			r.users = userToken.FindAllString(cells[4], -1)
			slices.Sort(r.labels)
			slices.Sort(r.users)
			rows = append(rows, r)
		case in:
			return rows
		}
	}
	return rows
}

// users returns, for every series, who queries it: panels, variables and alerts, an alert
// counting as a user of what its recording rules query.
func users(t *testing.T) map[string][]string {
	t.Helper()
	rq, recorded := ruleQueries(readRules(t))
	inputs := map[string][]string{} // recorded series -> the series its rule selects
	for _, q := range rq {
		if recorded[q.user] != nil {
			sel, err := Scan(q.expr)
			require.NoError(t, err)
			inputs[q.user] = sel.Metrics
		}
	}
	out := map[string][]string{}
	for _, q := range append(dashboardQueries(t, readDashboard(t)), rq...) {
		if recorded[q.user] != nil {
			continue
		}
		sel, err := Scan(q.expr)
		require.NoError(t, err)
		for _, n := range sel.Metrics {
			for _, s := range append([]string{n}, inputs[n]...) {
				if !slices.Contains(out[s], q.user) {
					out[s] = append(out[s], q.user)
				}
			}
		}
	}
	return out
}

// The summary table of docs/observability.md lists every series family meshlimit exports, with
// its type and labels as the code exports them, and the panels and alerts that use it.
func TestTheDocumentedSeriesAreTheExportedOnes(t *testing.T) {
	all := sharedSeries(t)
	use := users(t)
	want := map[string]docRow{}
	for name, e := range all {
		if !strings.HasPrefix(e.family, "meshlimit_") && e.family != "up" {
			continue // the Go runtime's and the process's collectors
		}
		r := want[e.family]
		r.family, r.typ = e.family, e.typ
		for l := range e.labels {
			if l != "le" && !slices.Contains(r.labels, l) {
				r.labels = append(r.labels, l)
			}
		}
		for _, u := range use[name] {
			if !slices.Contains(r.users, u) {
				r.users = append(r.users, u)
			}
		}
		slices.Sort(r.labels)
		slices.Sort(r.users)
		want[e.family] = r
	}
	rows := summaryTable(t)
	require.NotEmpty(t, rows, "docs/observability.md has no table headed | series")
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.family] = true
		w, ok := want[r.family]
		if !ok {
			t.Errorf("docs/observability.md lists %s, which the code does not export", r.family)
			continue
		}
		assert.Equal(t, w.typ, r.typ, "%s: type", r.family)
		assert.Equal(t, w.labels, r.labels, "%s: labels", r.family)
		assert.Equal(t, w.users, r.users, "%s: used by", r.family)
	}
	for f := range want {
		assert.True(t, seen[f], "docs/observability.md does not list %s", f)
	}
}
