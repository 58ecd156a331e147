package main

// mlplot -dashboard draws the panel layout of a Grafana dashboard (its JSON, as Grafana stores
// it) into a PNG: each panel where its gridPos puts it, with its title and kind, each row as a
// band. docs/observability.png comes from deploy/observability/grafana/meshlimit.json.

import (
	"fmt"
	"image"
	"image/color"
	"strings"

	"github.com/meshlimit/meshlimit/deploy/observability"
)

const (
	dashColumn, dashUnit   = 56, 26
	dashMargin, dashHeader = 20, 50
)

var (
	panelFill = color.RGBA{0xf4, 0xf6, 0xfa, 0xff}
	rowFill   = color.RGBA{0xdd, 0xe3, 0xee, 0xff}
	border    = color.RGBA{0xaa, 0xb4, 0xc4, 0xff}
)

// readDashboard returns the title and the panels (rows and the panels of collapsed rows
// included) of the dashboard in file, each on Grafana's grid.
func readDashboard(file string) (string, []observability.Panel, error) {
	d, err := observability.ReadDashboard(file)
	if err != nil {
		return "", nil, err
	}
	panels := d.AllPanels()
	for _, p := range panels {
		if !p.GridPos.Fits() {
			return "", nil, fmt.Errorf("%s: panel %q: gridPos %+v is outside the %d columns", file, p.Title, p.GridPos, observability.Columns)
		}
	}
	return d.Title, panels, nil
}

// panelRect is where panel p is drawn.
func panelRect(p observability.Panel) image.Rectangle {
	g := p.GridPos
	x, y := dashMargin+g.X*dashColumn, dashHeader+g.Y*dashUnit
	return image.Rect(x+2, y+2, x+g.W*dashColumn-2, y+g.H*dashUnit-2)
}

// dashboardMap draws the layout of the panels of a dashboard titled title.
func dashboardMap(title string, panels []observability.Panel) *image.RGBA {
	rows := 0
	for _, p := range panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	width, height := 2*dashMargin+observability.Columns*dashColumn, dashHeader+rows*dashUnit+dashMargin
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
