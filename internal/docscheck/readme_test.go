package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTheREADMEMapsEveryTopLevelFolder keeps the README's map of the tree whole: every folder at the
// top of the repository (but hidden ones and build/) is the first cell of a row of one of its
// tables, written `name/` (or as one of its sub-folders, `name/sub/`).
func TestTheREADMEMapsEveryTopLevelFolder(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	mapped := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, name := range codeSpan.FindAllString(first, -1) {
			top, _, _ := strings.Cut(strings.Trim(name, "`"), "/")
			mapped[top] = true
		}
	}
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	var missing []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "build" && !mapped[e.Name()] {
			missing = append(missing, e.Name()+"/")
		}
	}
	assert.Empty(t, missing, "top-level folders the README's map of the tree does not name")
}
