package depcheck

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tables of docs/architecture.md that say what each package may import are generated from
// Policy, Confined and Forbidden: each follows a marker line "<!-- depcheck:NAME -->" and runs to the first
// line that is not a table row. The tests below fail when a table is not what the policy gives;
// with -update they write it instead:
//
//	go test ./internal/depcheck -run Architecture -update
//
// The packages table keeps the "what it holds" text of its rows; a package that has no row yet gets
// the first sentence of its package documentation, to be shortened by hand.
var update = flag.Bool("update", false, "rewrite the generated tables of docs/architecture.md")

const archDoc = "../../docs/architecture.md"

func TestTheArchitecturePackageTableIsThePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	docs := packageDocs(t)
	var stale []string
	for _, r := range Policy {
		if !anyMatches(r.Package, docs) {
			stale = append(stale, r.Package)
		}
	}
	assert.Empty(t, stale, "rules of internal/depcheck's Policy that match no package of `go list ./...`")

	held := map[string]string{}
	for _, row := range tableRows(t, readDoc(t), "packages") {
		if len(row) == 3 {
			held[strings.Trim(row[0], "`")] = row[1]
		}
	}
	want := []string{
		"| package | what it holds | may import besides the standard library |",
		"|---|---|---|",
	}
	for _, r := range Policy {
		what, ok := held[r.Package]
		if !ok {
			what = docs[r.Package]
		}
		want = append(want, fmt.Sprintf("| `%s` | %s | %s |", r.Package, what, importsCell(r.Allow)))
	}
	checkTable(t, "packages", want)
}

func TestTheArchitectureLayersFollowThePolicy(t *testing.T) {
	want := []string{"| layer | packages (each imports only from the layers above it) |", "|---|---|"}
	for i, layer := range layers(t) {
		want = append(want, fmt.Sprintf("| %d | %s |", i, codeList(layer)))
	}
	checkTable(t, "layers", want)
}

func TestTheArchitectureBansAreThePolicys(t *testing.T) {
	want := []string{"| package | must never link, even through its imports |", "|---|---|"}
	pkgs := make([]string, 0, len(Forbidden))
	for p := range Forbidden {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		banned := make([]string, len(Forbidden[p]))
		for i, b := range Forbidden[p] {
			banned[i] = trim(b)
		}
		want = append(want, fmt.Sprintf("| `%s` | %s |", p, codeList(banned)))
	}
	checkTable(t, "bans", want)
}

func TestTheArchitectureConfinementsAreThePolicys(t *testing.T) {
	want := []string{"| package | may import | only in its files |", "|---|---|---|"}
	for _, c := range Confined {
		want = append(want, fmt.Sprintf("| `%s` | `%s` | %s |", c.Package, c.Import, codeList(c.Files)))
	}
	checkTable(t, "confined", want)
}

// TestEveryPackageHasADocComment keeps every package saying what it holds: a package comment that
// names it, "Package name ..." or, for a command, "Command name ...".
func TestEveryPackageHasADocComment(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out := goList(t, "{{.ImportPath}}\t{{.Name}}\t{{.Doc}}")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, "\t", 3)
		require.Len(t, f, 3, line)
		rel, name, doc := trim(f[0]), f[1], f[2]
		want := "Package " + name + " "
		if name == "main" {
			want = "Command " + rel[strings.LastIndex(rel, "/")+1:] + " "
		}
		assert.True(t, strings.HasPrefix(doc, want), "%s: its package comment should start %q, has %q", rel, want, doc)
	}
}

// importsCell renders what a rule allows: each allowed package in code, or "nothing".
func importsCell(allow []string) string {
	if len(allow) == 0 {
		return "nothing"
	}
	return codeList(allow)
}

func codeList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "`" + n + "`"
	}
	return strings.Join(quoted, ", ")
}

// layers ranks the packages of Policy: a package that may import no module package is in layer 0,
// any other one layer below the lowest of the packages it may import.
func layers(t *testing.T) [][]string {
	rank := map[string]int{}
	var visit func(p string, path []string) int
	visit = func(p string, path []string) int {
		if r, ok := rank[p]; ok {
			return r
		}
		for _, q := range path {
			require.NotEqual(t, q, p, "the policy has a cycle: %v", append(path, p))
		}
		rule, _ := ruleFor(p)
		r := 0
		for _, a := range rule.Allow {
			if strings.Contains(strings.SplitN(a, "/", 2)[0], ".") {
				continue // third-party
			}
			for _, q := range Policy {
				if q.Package != p && matches(a, q.Package) {
					r = max(r, visit(q.Package, append(path, p))+1)
				}
			}
		}
		rank[p] = r
		return r
	}
	var out [][]string
	for _, r := range Policy {
		n := visit(r.Package, nil)
		for len(out) <= n {
			out = append(out, nil)
		}
		out[n] = append(out[n], r.Package)
	}
	return out
}

func anyMatches(pattern string, pkgs map[string]string) bool {
	for p := range pkgs {
		if matches(pattern, p) {
			return true
		}
	}
	return false
}

// packageDocs returns the first sentence of each module package's documentation, by path
// relative to the module.
func packageDocs(t *testing.T) map[string]string {
	docs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "{{.ImportPath}}\t{{.Doc}}")), "\n") {
		path, doc, _ := strings.Cut(line, "\t")
		docs[trim(path)] = strings.ReplaceAll(doc, "|", `\|`)
	}
	return docs
}

func goList(t *testing.T, format string) string {
	cmd := exec.Command("go", "list", "-f", format, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	return string(out)
}

func readDoc(t *testing.T) []string {
	data, err := os.ReadFile(archDoc)
	require.NoError(t, err)
	return strings.Split(string(data), "\n")
}

// tableSpan returns the lines [start, end) of the table that follows the marker of name.
func tableSpan(t *testing.T, lines []string, name string) (start, end int) {
	marker := "<!-- depcheck:" + name + " -->"
	for i, l := range lines {
		if strings.TrimSpace(l) == marker {
			end = i + 1
			for end < len(lines) && strings.HasPrefix(lines[end], "|") {
				end++
			}
			return i + 1, end
		}
	}
	require.Failf(t, "no marker", "%s has no line %q", archDoc, marker)
	return 0, 0
}

// tableRows returns the cells of the body rows of a generated table (after its header and
// separator), split on the bars that are not escaped.
func tableRows(t *testing.T, lines []string, name string) [][]string {
	start, end := tableSpan(t, lines, name)
	var rows [][]string
	for _, l := range lines[min(start+2, end):end] {
		var cells []string
		cell := strings.Builder{}
		body := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "|"), "|")
		for i := 0; i < len(body); i++ {
			switch {
			case body[i] == '\\' && i+1 < len(body) && body[i+1] == '|':
				cell.WriteString(`\|`)
				i++
			case body[i] == '|':
				cells = append(cells, strings.TrimSpace(cell.String()))
				cell.Reset()
			default:
				cell.WriteByte(body[i])
			}
		}
		rows = append(rows, append(cells, strings.TrimSpace(cell.String())))
	}
	return rows
}

// checkTable compares the table of name with want, or writes want in its place with -update.
func checkTable(t *testing.T, name string, want []string) {
	lines := readDoc(t)
	start, end := tableSpan(t, lines, name)
	if *update {
		out := append(append(append([]string{}, lines[:start]...), want...), lines[end:]...)
		require.NoError(t, os.WriteFile(archDoc, []byte(strings.Join(out, "\n")), 0o644))
		return
	}
	assert.Equal(t, want, lines[start:end],
		"docs/architecture.md's %s table is not what internal/depcheck's policy gives: go test ./internal/depcheck -run Architecture -update rewrites it", name)
}
