package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// StartValkey runs the valkey-server of the PATH: here a redis-server under that name, as the
// machines of the suite have no Valkey.
func TestStartValkeyRunsTheValkeyServerOfThePath(t *testing.T) {
	Require(t)
	redis, err := exec.LookPath("redis-server")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Symlink(redis, filepath.Join(dir, "valkey-server")))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := StartValkey(t)
	out, err := r.Do("PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", out)
	assert.Equal(t, filepath.Join(dir, "valkey-server"), r.cmd.Path)
}
