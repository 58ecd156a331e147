package observability

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	dashboardFile  = "grafana/meshlimit.json"
	rulesFile      = "prometheus/meshlimit.rules.yaml"
	rulesTestsFile = "prometheus/meshlimit.rules.test.yaml"
)

// query is one PromQL expression of a shipped file, where it is, and who uses it as
// docs/observability.md names them: "Panel title", `AlertName`, $variable, or a recording
// rule's name.
type query struct{ where, expr, user string }

func readDashboard(t testing.TB) Dashboard {
	t.Helper()
	d, err := ReadDashboard(dashboardFile)
	require.NoError(t, err)
	return d
}

// labelValues is Grafana's variable query label_values(<selector>, <label>), which is not PromQL.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// dashboardQueries returns every expression of the dashboard: its panels' targets and its
// query variables (the selector of a label_values).
func dashboardQueries(t testing.TB, d Dashboard) []query {
	t.Helper()
	var qs []query
	for _, p := range d.AllPanels() {
		for _, tg := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("%s: panel %q, target %s", dashboardFile, p.Title, tg.RefID), tg.Expr, `"` + p.Title + `"`})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		qs = append(qs, query{fmt.Sprintf("%s: variable %s", dashboardFile, v.Name), q, "$" + v.Name})
	}
	return qs
}

// ruleGroups is a Prometheus rules file.
type ruleGroups struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Record, Alert, Expr string
		}
	}
}

func readRules(t testing.TB) ruleGroups {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var r ruleGroups
	require.NoError(t, yaml.Unmarshal(b, &r))
	return r
}

// ruleQueries returns the expression of every rule, and the series the recording rules define
// with the labels their expressions name.
func ruleQueries(r ruleGroups) (qs []query, recorded map[string][]string) {
	recorded = map[string][]string{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			name, user := rule.Alert, "`"+rule.Alert+"`"
			if rule.Record != "" {
				user = rule.Record
				name = rule.Record
				sel, _ := Scan(rule.Expr)
				recorded[name] = append(sel.Labels, "") // non-nil: recorded
			}
			qs = append(qs, query{fmt.Sprintf("%s: group %s, rule %s", rulesFile, g.Name, name), rule.Expr, user})
		}
	}
	return qs, recorded
}

// alertTestSeries returns the input series of the rules' unit tests, as selectors.
func alertTestSeries(t testing.TB) []query {
	t.Helper()
	b, err := os.ReadFile(rulesTestsFile)
	require.NoError(t, err)
	var doc struct {
		Tests []struct {
			Name        string
			InputSeries []struct{ Series string } `yaml:"input_series"`
		}
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	var qs []query
	for _, tc := range doc.Tests {
		for _, in := range tc.InputSeries {
			qs = append(qs, query{fmt.Sprintf("%s: test %q", rulesTestsFile, tc.Name), in.Series, ""})
		}
	}
	return qs
}

// promtool runs promtool, which `make test` installs (scripts/need promtool:prometheus).
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is not on the PATH: run make test, which installs it, or apt-get install prometheus")
	out, err := exec.Command(path, args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

func TestTheRulesPassPromtool(t *testing.T) {
	out := promtool(t, "check", "rules", rulesFile)
	assert.Contains(t, out, "SUCCESS")
}

// The rules' unit tests (promtool test rules) give each alert series shaped as the code exports
// them and check that it fires when it should, with its labels and text, and not before.
func TestTheAlertsFireWhenTheyShould(t *testing.T) {
	assert.Contains(t, promtool(t, "test", "rules", rulesTestsFile), "SUCCESS")
}

// Grafana substitutes its variables before Prometheus sees a query; promtool checks the
// dashboard's expressions with typical values in their place, as recording rules.
func TestTheDashboardsQueriesParse(t *testing.T) {
	vars := strings.NewReplacer("$__rate_interval", "5m", "$rule", ".*", "${datasource}", "prometheus")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, q := range dashboardQueries(t, readDashboard(t)) {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: vars.Replace(q.expr)})
	}
	doc := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}
	b, err := yaml.Marshal(doc)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	assert.Contains(t, promtool(t, "check", "rules", path), "SUCCESS")
}

// The dashboard takes its Prometheus from a variable, so that it imports into any Grafana; its
// panels fit Grafana's 24 columns without overlapping, and every one has an id of its own.
func TestTheDashboardIsPortable(t *testing.T) {
	d := readDashboard(t)
	assert.GreaterOrEqual(t, d.SchemaVersion, 39, "a current Grafana schema")
	assert.Equal(t, "meshlimit", d.UID)
	var hasDatasource bool
	for _, v := range d.Templating.List {
		hasDatasource = hasDatasource || v.Type == "datasource" && v.Name == "datasource"
	}
	assert.True(t, hasDatasource, "a datasource variable named datasource")
	const ds = `{"type":"prometheus","uid":"${datasource}"}`
	ids := map[int]string{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.AllPanels() {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		assert.True(t, g.Fits(), "panel %q: gridPos %+v outside the grid", p.Title, g)
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if prev, ok := taken[cell{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at column %d, row %d", prev, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		assert.JSONEq(t, ds, string(p.Datasource), "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			assert.JSONEq(t, ds, string(tg.Datasource), "panel %q, target %s", p.Title, tg.RefID)
			assert.NotEmpty(t, tg.Expr, "panel %q, target %s", p.Title, tg.RefID)
		}
	}
}
