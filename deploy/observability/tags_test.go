package observability

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// statsConfig decodes the stats_config of an Envoy bootstrap (JSON) the way Envoy does, into
// config.metrics.v3.StatsConfig (unknown fields refused), and runs its validation.
func statsConfig(t *testing.T, what string, bootstrapJSON []byte) []TagSpecifier {
	t.Helper()
	var doc struct {
		StatsConfig json.RawMessage `json:"stats_config"`
	}
	require.NoError(t, json.Unmarshal(bootstrapJSON, &doc), what)
	require.NotEmpty(t, doc.StatsConfig, "%s has no stats_config", what)
	var sc metricsv3.StatsConfig
	require.NoError(t, protojson.Unmarshal(doc.StatsConfig, &sc), what)
	require.NoError(t, sc.ValidateAll(), what)
	var out []TagSpecifier
	for _, tag := range sc.GetStatsTags() {
		out = append(out, TagSpecifier{Name: tag.GetTagName(), Regex: tag.GetRegex()})
	}
	return out
}

// yamlJSON reads a YAML file as JSON.
func yamlJSON(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var v any
	require.NoError(t, yaml.Unmarshal(b, &v), path)
	j, err := json.Marshal(v)
	require.NoError(t, err, path)
	return j
}

// The tag specifiers of the Envoy snippet, of envoy/envoy.yaml and of the Istio ConfigMap are
// the same, and each is a StatsConfig Envoy accepts.
func TestTheTagsAreTheSameEverywhere(t *testing.T) {
	want := statsConfig(t, "envoy/stats-tags.yaml", yamlJSON(t, "envoy/stats-tags.yaml"))
	assert.Equal(t, shippedTags(t), want)

	bootstrap := filepath.Join(moduleRoot(t), "envoy", "envoy.yaml")
	assert.Equal(t, want, statsConfig(t, bootstrap, yamlJSON(t, bootstrap)))

	var cm struct {
		Kind string
		Data map[string]string
	}
	require.NoError(t, json.Unmarshal(yamlJSON(t, "istio/stats-tags.yaml"), &cm))
	assert.Equal(t, "ConfigMap", cm.Kind)
	custom, ok := cm.Data["custom_bootstrap.json"]
	require.True(t, ok, "Istio reads the key custom_bootstrap.json of the bootstrapOverride ConfigMap")
	assert.Equal(t, want, statsConfig(t, "istio/stats-tags.yaml", []byte(custom)))
}
