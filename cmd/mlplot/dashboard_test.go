package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The map of the shipped dashboard draws every panel where its gridPos puts it: a border at
// each corner of its rectangle, inside the image.
func TestTheDashboardMapDrawsEveryPanelInItsPlace(t *testing.T) {
	title, panels, err := readDashboard("../../deploy/observability/grafana/meshlimit.json")
	require.NoError(t, err)
	require.NotEmpty(t, panels)
	img := dashboardMap(title, panels)
	for _, p := range panels {
		r := panelRect(p)
		require.True(t, r.In(img.Bounds()), "panel %q at %v", p.Title, r)
		want := border
		if p.Type == "row" {
			want = rowFill
		}
		for _, c := range [][2]int{{r.Min.X, r.Min.Y}, {r.Max.X - 1, r.Min.Y}, {r.Min.X, r.Max.Y - 1}, {r.Max.X - 1, r.Max.Y - 1}} {
			assert.Equal(t, want, img.RGBAAt(c[0], c[1]), "panel %q, corner %v", p.Title, c)
		}
	}
}

func TestADashboardWithAPanelOutsideTheGridIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"title":"x","panels":[{"title":"wide","gridPos":{"x":12,"y":0,"w":13,"h":4}}]}`), 0o644))
	_, _, err := readDashboard(path)
	assert.ErrorContains(t, err, `panel "wide": gridPos`)
}

func TestWrapBreaksAtSpacesAndCutsLongWords(t *testing.T) {
	assert.Equal(t, []string{"near the", "limit"}, wrap("near the limit", 9))
	assert.Equal(t, []string{"abcd", "ef g"}, wrap("abcdef g", 4))
	assert.Equal(t, []string{"ab", "cdef", "gh"}, wrap("ab cdefgh", 4))
	assert.Nil(t, wrap("  ", 4))
}

// docs/observability.png is the map of the shipped dashboard as it is now.
func TestTheDocumentedDashboardMapIsCurrent(t *testing.T) {
	title, panels, err := readDashboard("../../deploy/observability/grafana/meshlimit.json")
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, dashboardMap(title, panels)))
	committed, err := os.ReadFile("../../docs/observability.png")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(buf.Bytes(), committed), "docs/observability.png is out of date: run make plots")
}
