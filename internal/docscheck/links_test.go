package docscheck

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository, from this package's directory.
const root = "../.."

// markdownFiles returns every .md file of the repository, relative to root with slashes, outside
// hidden folders and build/ (which is not in the repository).
func markdownFiles(t *testing.T) []string {
	var files []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "build") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, rel)
		}
		return nil
	}))
	return files
}

var (
	fence    = regexp.MustCompile("(?ms)^ {0,3}(```|~~~).*?^ {0,3}(```|~~~)[ \t]*$")
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	link     = regexp.MustCompile(`\[[^\]\n]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	scheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading  = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$`)
	htmlID   = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// withoutFences returns a Markdown file with its fenced code blocks blanked, line numbers kept.
func withoutFences(md string) string {
	return fence.ReplaceAllStringFunc(md, func(block string) string {
		return strings.Repeat("\n", strings.Count(block, "\n"))
	})
}

// prose returns a Markdown file without its fenced code blocks and code spans, where a link or a
// heading is not one.
func prose(md string) string {
	return codeSpan.ReplaceAllString(withoutFences(md), "code")
}

// anchors returns the anchors GitHub gives the headings of a Markdown file: the heading's text,
// lower-cased, without markup and punctuation (letters, digits, spaces, '-' and '_' stay), spaces
// turned into '-', a repeated one suffixed -1, -2, ...; and the names of explicit <a> anchors.
func anchors(md string) map[string]bool {
	md = fence.ReplaceAllString(md, "")
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		text := link.ReplaceAllStringFunc(m[1], func(l string) string { return l[1:strings.Index(l, "](")] })
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	for _, m := range htmlID.FindAllStringSubmatch(md, -1) {
		out[m[1]] = true
	}
	return out
}

// TestEveryRelativeLinkInTheDocsResolves reads every Markdown file of the repository and checks
// each link that is not a URL: the file or folder it names exists, and an anchor into a Markdown
// file (or into the same file) names one of its headings.
func TestEveryRelativeLinkInTheDocsResolves(t *testing.T) {
	files := markdownFiles(t)
	require.Contains(t, files, "README.md")
	require.Contains(t, files, "docs/architecture.md")
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		text := prose(string(data))
		for _, m := range link.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[2]:m[3]]
			if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
				continue
			}
			where := fmt.Sprintf("%s:%d: %s", file, 1+strings.Count(text[:m[0]], "\n"), target)
			checked++
			assert.NoError(t, resolve(file, target), where)
		}
	}
	t.Logf("%d relative links in %d files", checked, len(files))
	assert.Greater(t, checked, 100, "the docs link to one another")
}

// resolve checks one relative link target of file.
func resolve(file, target string) error {
	p, anchor, _ := strings.Cut(target, "#")
	p, err := url.PathUnescape(p)
	if err != nil {
		return err
	}
	switch {
	case p == "":
		p = file
	case strings.HasPrefix(p, "/"):
		p = strings.TrimPrefix(path.Clean(p), "/")
	default:
		p = path.Join(path.Dir(file), p)
	}
	if p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("%s is outside the repository", p)
	}
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
	if err != nil {
		return fmt.Errorf("%s does not exist", p)
	}
	if anchor == "" || info.IsDir() || !strings.HasSuffix(p, ".md") {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
	if err != nil {
		return err
	}
	if !anchors(string(data))[anchor] {
		return fmt.Errorf("%s has no heading whose anchor is #%s", p, anchor)
	}
	return nil
}

func TestAnchorsAreTheOnesGitHubGivesHeadings(t *testing.T) {
	md := "# Deploying meshlimit\n## 6. Apply\n### `POST /v1/check`\n## Paths, hosts and repeated headers\n" +
		"## Priority load shedding: shed\n## Keys\n## Keys\n```\n## not a heading\n```\n" +
		"## [Linked](x.md) text\n### Costs read from bodies: reserve, then settle\n## The filter's callbacks\n"
	assert.Equal(t, map[string]bool{
		"deploying-meshlimit": true, "6-apply": true, "post-v1check": true,
		"paths-hosts-and-repeated-headers": true, "priority-load-shedding-shed": true,
		"keys": true, "keys-1": true, "linked-text": true,
		"costs-read-from-bodies-reserve-then-settle": true, "the-filters-callbacks": true,
	}, anchors(md))
}

func TestABrokenLinkOrAnchorIsReported(t *testing.T) {
	assert.NoError(t, resolve("docs/architecture.md", "configuration.md#bounded-state-and-isolation"))
	assert.NoError(t, resolve("README.md", "docs/"))
	assert.NoError(t, resolve("docs/security.md", "#what-a-client-can-still-do"))
	assert.ErrorContains(t, resolve("docs/architecture.md", "nowhere.md"), "docs/nowhere.md does not exist")
	assert.ErrorContains(t, resolve("docs/architecture.md", "configuration.md#no-such-heading"), "no heading")
	assert.ErrorContains(t, resolve("README.md", "../outside.md"), "outside the repository")
}
