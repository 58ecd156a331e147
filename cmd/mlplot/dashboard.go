package main

// mlplot -dashboard draws the panel layout of a Grafana dashboard (its JSON, as Grafana stores
// it) into a PNG: each panel where its gridPos puts it, with its title and kind, each row as a
// band. docs/observability.png comes from deploy/observability/grafana/meshlimit.json.

import (
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"os"
	"strings"
)

const (
	dashColumns            = 24 // Grafana's grid
	dashColumn, dashUnit   = 56, 26
	dashMargin, dashHeader = 20, 50
)

var (
	panelFill = color.RGBA{0xf4, 0xf6, 0xfa, 0xff}
	rowFill   = color.RGBA{0xdd, 0xe3, 0xee, 0xff}
	border    = color.RGBA{0xaa, 0xb4, 0xc4, 0xff}
)

// gridPanel is the part of a dashboard panel the layout needs.
type gridPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct{ H, W, X, Y int }
	Targets []json.RawMessage `json:"targets"`
	Panels  []gridPanel       `json:"panels"` // a collapsed row's
}

// readDashboard returns the title and the panels (those of collapsed rows included) of the
// dashboard in file.
func readDashboard(file string) (string, []gridPanel, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
	}
	var d struct {
		Title  string      `json:"title"`
		Panels []gridPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return "", nil, fmt.Errorf("%s: %w", file, err)
	}
	var all []gridPanel
	var walk func([]gridPanel)
	walk = func(ps []gridPanel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, p := range all {
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > dashColumns {
			return "", nil, fmt.Errorf("%s: panel %q: gridPos %+v is outside the %d columns", file, p.Title, g, dashColumns)
		}
	}
	return d.Title, all, nil
}

// panelRect is where panel p is drawn.
func panelRect(p gridPanel) image.Rectangle {
	g := p.GridPos
	x, y := dashMargin+g.X*dashColumn, dashHeader+g.Y*dashUnit
	return image.Rect(x+2, y+2, x+g.W*dashColumn-2, y+g.H*dashUnit-2)
}

// dashboardMap draws the layout of the panels of a dashboard titled title.
func dashboardMap(title string, panels []gridPanel) *image.RGBA {
	rows := 0
	for _, p := range panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	width, height := 2*dashMargin+dashColumns*dashColumn, dashHeader+rows*dashUnit+dashMargin
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fill(img, 0, 0, width, height, white)
	drawText(img, dashMargin, 16, scale, strings.ToLower("grafana dashboard "+title+": the panels and where they are"), ink)
	for _, p := range panels {
		r := panelRect(p)
		if p.Type == "row" {
			fill(img, r.Min.X, r.Min.Y, r.Dx(), r.Dy(), rowFill)
			drawText(img, r.Min.X+8, r.Min.Y+(r.Dy()-14)/2, scale, strings.ToLower(p.Title), ink)
			continue
		}
		fill(img, r.Min.X, r.Min.Y, r.Dx(), r.Dy(), border)
		fill(img, r.Min.X+1, r.Min.Y+1, r.Dx()-2, r.Dy()-2, panelFill)
		y := r.Min.Y + 8
		for _, line := range wrap(strings.ToLower(p.Title), (r.Dx()-16)/textWidth("m", scale)) {
			drawText(img, r.Min.X+8, y, scale, line, ink)
			y += 22
		}
		kind := fmt.Sprintf("%s, %d %s", p.Type, len(p.Targets), map[bool]string{true: "query", false: "queries"}[len(p.Targets) == 1])
		drawText(img, r.Min.X+8, r.Max.Y-24, scale, kind, muted)
	}
	return img
}

// wrap breaks s into lines of at most n characters at spaces (a longer word is cut).
func wrap(s string, n int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if len(w) > n && line != "" {
			lines, line = append(lines, line), ""
		}
		for len(w) > n {
			lines, w = append(lines, w[:n]), w[n:]
		}
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) <= n:
			line += " " + w
		default:
			lines, line = append(lines, line), w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
