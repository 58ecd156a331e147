package rlsconfig

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const goodA = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"

// write writes name in dir with an mtime that differs from any earlier write's.
func write(t *testing.T, dir, name, data string, mtime time.Time) {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	require.NoError(t, os.Chtimes(p, mtime, mtime))
}

type reloads struct {
	ok   int
	errs []error
}

func newTestWatcher(t *testing.T, dir string) (*Watcher, *reloads) {
	t.Helper()
	w, err := NewWatcher(dir, time.Hour) // polled by hand
	require.NoError(t, err)
	r := &reloads{}
	w.OnReload = func(c *Config, err error) {
		if err != nil {
			r.errs = append(r.errs, err)
			return
		}
		r.ok++
	}
	return w, r
}

func TestAChangedFileIsReloaded(t *testing.T) {
	dir, t0 := t.TempDir(), time.Unix(1_700_000_000, 0)
	write(t, dir, "a.yaml", goodA, t0)
	w, r := newTestWatcher(t, dir)
	assert.Equal(t, []string{"a"}, w.Config().Domains())

	write(t, dir, "b.yml", "domain: b\n", t0)
	assert.True(t, w.Poll())
	assert.Equal(t, []string{"a", "b"}, w.Config().Domains())
	require.NoError(t, os.Remove(filepath.Join(dir, "b.yml")))
	assert.True(t, w.Poll())
	assert.Equal(t, []string{"a"}, w.Config().Domains())
	assert.Equal(t, 2, r.ok)
	assert.Empty(t, r.errs)
}

func TestABadFileKeepsTheLastGoodConfigurationUntilFixed(t *testing.T) {
	dir, t0 := t.TempDir(), time.Unix(1_700_000_000, 0)
	write(t, dir, "a.yaml", goodA, t0)
	w, r := newTestWatcher(t, dir)
	good := w.Config()

	write(t, dir, "a.yaml", goodA+"    bogus: 1\n", t0.Add(time.Second))
	assert.True(t, w.Poll())
	assert.Same(t, good, w.Config(), "the last good configuration stays in force")
	require.Len(t, r.errs, 1)
	assert.Contains(t, r.errs[0].Error(), "a.yaml:5:5: descriptors[0].bogus: unknown field")
	assert.False(t, w.Poll(), "an unchanged bad file is not reloaded again")

	write(t, dir, "a.yaml", "domain: a2\n", t0.Add(2*time.Second))
	assert.True(t, w.Poll())
	assert.Equal(t, []string{"a2"}, w.Config().Domains())
	assert.Equal(t, 1, r.ok)
}

func TestTouchingAFileWithoutChangingItDoesNotReload(t *testing.T) {
	dir, t0 := t.TempDir(), time.Unix(1_700_000_000, 0)
	write(t, dir, "a.yaml", goodA, t0)
	w, r := newTestWatcher(t, dir)
	before := w.Config()
	write(t, dir, "a.yaml", goodA, t0.Add(time.Minute))
	assert.False(t, w.Poll())
	assert.Same(t, before, w.Config())
	assert.Zero(t, r.ok)
}

func TestDotFilesAndOtherExtensionsAreIgnored(t *testing.T) {
	dir, t0 := t.TempDir(), time.Unix(1_700_000_000, 0)
	write(t, dir, "a.yaml", goodA, t0)
	write(t, dir, ".hidden.yaml", "not: yaml: at all", t0)
	write(t, dir, "README.md", "# notes", t0)
	w, _ := newTestWatcher(t, dir)
	assert.Equal(t, []string{"a.yaml"}, w.Config().Files())
}

func TestAWatcherDoesNotStartOnABadDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", "domain: a\nwhat: 1\n", time.Unix(1_700_000_000, 0))
	_, err := NewWatcher(dir, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a.yaml:2:1: what: unknown field")
	_, err = NewWatcher(filepath.Join(dir, "missing"), 0)
	require.Error(t, err)
}
