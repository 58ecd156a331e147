package observability

import (
	"encoding/json"
	"fmt"
	"os"
)

// Dashboard is the part of a Grafana dashboard's JSON model that meshlimit's tests and
// cmd/mlplot read.
type Dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []Panel `json:"panels"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is one panel of a dashboard, or a row (Type "row"), whose Panels are set when it is
// collapsed.
type Panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    GridPos         `json:"gridPos"`
	Targets    []Target        `json:"targets"`
	Panels     []Panel         `json:"panels"`
}

// GridPos is where a panel sits on Grafana's grid of 24 columns (X, W) and rows (Y, H).
type GridPos struct{ H, W, X, Y int }

// Columns is the width of Grafana's grid.
const Columns = 24

// Target is one query of a panel.
type Target struct {
	RefID      string          `json:"refId"`
	Expr       string          `json:"expr"`
	Datasource json.RawMessage `json:"datasource"`
}

// Variable is one template variable; Query is a string or, in current Grafana, an object
// whose "query" is the string.
type Variable struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Query      any             `json:"query"`
	Datasource json.RawMessage `json:"datasource"`
}

// ReadDashboard reads the dashboard in file.
func ReadDashboard(file string) (Dashboard, error) {
	var d Dashboard
	b, err := os.ReadFile(file)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", file, err)
	}
	return d, nil
}

// AllPanels returns the panels of d, rows and the panels of collapsed rows included, in order.
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// Fits reports whether g lies on the grid: a positive size, within the columns.
func (g GridPos) Fits() bool {
	return g.W > 0 && g.H > 0 && g.X >= 0 && g.Y >= 0 && g.X+g.W <= Columns
}
