package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/pluginconfig"
)

// root is the repository, from this package's directory.
const root = "../.."

// shippedConfigs are the files the project ships a plugin configuration in, and how many
// configurations each holds.
var shippedConfigs = map[string]int{
	"envoy/envoy.yaml":                  1,
	"envoy/istio/wasmplugin.yaml":       1,
	"envoy/istio/trafficextension.yaml": 1,
	"cmd/demo/demo.json":                1,
}

func TestEveryShippedConfigurationIsValid(t *testing.T) {
	for file, n := range shippedConfigs {
		t.Run(file, func(t *testing.T) {
			code, out, errOut := check(t, "", filepath.Join(root, filepath.FromSlash(file)))
			assert.Equal(t, 0, code, out+errOut)
			assert.Equal(t, n, strings.Count(out, ": valid\n"), out)
		})
	}
}

// fence finds the fenced blocks of a Markdown file whose info string says JSON or YAML.
var fence = regexp.MustCompile("(?ms)^```(json|jsonc|yaml|yml)[ \t]*\n(.*?)^```")

// docFiles are the Markdown files whose examples are checked: the README, docs/ and every README
// under envoy/.
func docFiles(t *testing.T) []string {
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "envoy"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "README.md" {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return err
	}))
	return files
}

// TestEveryConfigurationExampleInTheDocsIsValid checks, as meshlimit-check does, every fenced JSON
// or YAML block of the docs that is a plugin configuration (a configuration, a WasmPlugin, an Envoy
// wasm filter) or one rule of it (an object with "limits", checked as the only rule of a
// configuration). A block that is neither (a service configuration, a fragment) is skipped; one
// that mentions "rules" must parse.
func TestEveryConfigurationExampleInTheDocsIsValid(t *testing.T) {
	checked := map[string]int{}
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		for _, m := range fence.FindAllSubmatchIndex(data, -1) {
			block := data[m[4]:m[5]]
			line := 1 + bytes.Count(data[:m[4]], []byte("\n"))
			where := file + ":" + itoa(line)
			configs, err := pluginconfig.Find(block)
			if errors.Is(err, pluginconfig.ErrNone) && isRule(block) {
				configs, err = pluginconfig.Find(append(append([]byte(`{"rules": [`), block...), "]}"...))
			}
			if errors.Is(err, pluginconfig.ErrNone) || (err != nil && !bytes.Contains(block, []byte("rules"))) {
				continue
			}
			require.NoError(t, err, "%s: the example does not parse", where)
			for i := range configs {
				var out bytes.Buffer
				assert.True(t, checkConfig(where, &configs[i], true, &out), "%s: the example is not valid:\n%s", where, out.String())
				checked[file]++
			}
		}
	}
	t.Logf("configuration examples checked: %v", checked)
	assert.GreaterOrEqual(t, checked["README.md"], 1, "the README's example")
	assert.GreaterOrEqual(t, checked[filepath.FromSlash("docs/configuration.md")], 8, "the reference's examples")
	assert.GreaterOrEqual(t, checked[filepath.FromSlash("docs/deploy.md")], 1, "the deploy guide's Envoy filter")
}

// isRule reports whether a block is one rule: a JSON object with "limits".
func isRule(block []byte) bool {
	b := bytes.TrimSpace(block)
	return len(b) > 0 && b[0] == '{' && bytes.Contains(b, []byte(`"limits"`)) && !bytes.Contains(b, []byte(`"rules"`))
}
