package docscheck

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// topFolders are the repository's top-level folders a path in the docs may start with.
const topFolders = `abi|algorithms|cmd|deploy|docs|e2e|envoy|filter|internal|messages|rules|scripts|service|sharedstate|shed|wire`

// repoPath finds, in prose and code spans, what reads as a file of this repository: a path that
// starts with one of its top-level folders and ends in a file extension (no glob).
var repoPath = regexp.MustCompile(`(?:^|[^\w./-])((?:` + topFolders + `)/[\w./-]*\w\.(?:go|md|yaml|yml|json|js|lua|sh|png))(?:$|[^\w*])`)

// otherRepository is a table row whose first cell names another repository (owner/name, the owner
// not one of our folders): the paths of a sources table are that repository's.
var (
	otherRepository = regexp.MustCompile(`^\|\s*([\w.-]+)/[\w.-]+\s*\|`)
	ourFolder       = regexp.MustCompile(`^(?:` + topFolders + `)$`)
)

func citesOtherRepository(line string) bool {
	m := otherRepository.FindStringSubmatch(line)
	return m != nil && !ourFolder.MatchString(m[1])
}

// TestEveryFileTheDocsNameExists keeps the file names of the docs true (filter/http.go, say, in
// "the path of one request"): each path of this repository that a Markdown file names outside a
// fenced block exists, from the file's folder or from the repository's root. Rows of a sources
// table, which cite another repository's files, are left out.
func TestEveryFileTheDocsNameExists(t *testing.T) {
	checked := 0
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		for n, line := range strings.Split(withoutFences(string(data)), "\n") {
			if citesOtherRepository(line) {
				continue
			}
			for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
				checked++
				assert.True(t, exists(path.Join(path.Dir(file), m[1])) || exists(m[1]),
					"%s:%d: %s does not exist", file, n+1, m[1])
			}
		}
	}
	t.Logf("%d file names checked", checked)
	assert.Greater(t, checked, 50, "the docs name the files they describe")
}

func exists(p string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
	return err == nil
}

func TestAPathIsReadInProseAndCodeSpansButNotInGlobsOrOtherRepositories(t *testing.T) {
	find := func(s string) []string {
		var out []string
		for _, m := range repoPath.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	assert.Equal(t, []string{"filter/http.go", "docs/deploy.md"}, find("(`filter/http.go`) and docs/deploy.md, then"))
	assert.Empty(t, find("lua/*.lua, e2e/scenarios/*.json, build/meshlimit.wasm, xfilter/a.go"))
	assert.Empty(t, find("a path/to/nothing.go of no top folder"))
	assert.True(t, citesOtherRepository("| grpc/grpc-go | `v1.78.0` | `internal/transport/http_util.go` |"))
	assert.False(t, citesOtherRepository("| `filter/` | the adapter |"))
	assert.False(t, citesOtherRepository("| cmd/demo | make demo |"))
}
