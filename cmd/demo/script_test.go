package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A -config the script cannot run on used to start the proxy, run half the script and stop at the
// first rule it lacked ("the configuration has no rule \"signin\""). It is refused before anything
// starts, with every rule it lacks named.
func TestADemoConfigWithoutTheScriptsRulesIsRefusedNamingThem(t *testing.T) {
	dir := t.TempDir()
	wasm := filepath.Join(dir, "never-loaded.wasm")
	require.NoError(t, os.WriteFile(wasm, []byte("not a module: the configuration is refused first"), 0o600))
	tests := []struct {
		name, config, want string
	}{
		{
			name:   "a configuration with one of the script's rules",
			config: `{"rules": [{"name": "api-per-ip", "key": ["client_ip"], "limits": [{"rate": "5/s"}]}]}`,
			want:   "this configuration has no signin, search-per-user, login, gpu-per-tenant, tokens, a shed object: start from cmd/demo/demo.json",
		},
		{
			name:   "a configuration that does not parse",
			config: `{"rules": [{"name": "API"}]}`,
			want:   `rules[0].name: "API" is not a valid rule name`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "config.json")
			require.NoError(t, os.WriteFile(cfg, []byte(tt.config), 0o600))
			var out bytes.Buffer
			err := run(context.Background(), &out, wasm, cfg, 1)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "-config "+cfg+": ")
			assert.Contains(t, err.Error(), tt.want)
			assert.Empty(t, out.String(), "nothing ran")
		})
	}
}

func TestTheEmbeddedDemoConfigHasEveryRuleOfTheScript(t *testing.T) {
	assert.NoError(t, checkScript(defaultConfig))
}
