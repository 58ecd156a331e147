package main

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/envoy/internal/ociimage"
)

// built caches staticBinary's programs by architecture, for the tests of this package, in
// binDir, which TestMain removes.
var (
	built  sync.Map
	binDir string
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "serviceimage-test-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// staticBinary builds a tiny static Linux program for arch, as make service-image builds the
// service (once per architecture).
func staticBinary(t *testing.T, arch string) string {
	t.Helper()
	if p, ok := built.Load(arch); ok {
		return p.(string)
	}
	dir := filepath.Join(binDir, arch)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tiny\n\ngo 1.24\n"), 0o644))
	out := filepath.Join(dir, "tiny")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-buildvcs=false")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	built.Store(arch, out)
	return out
}

func TestTheImageRunsTheStaticBinaryAsANonRootUserOnAnEmptyRoot(t *testing.T) {
	bin := staticBinary(t, "amd64")
	dir := filepath.Join(t.TempDir(), "oci")
	require.NoError(t, run([]string{"-binary", bin, "-layout", dir, "-tag", "0.1.0"}, io.Discard))

	img, err := ociimage.Image(dir, "0.1.0")
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "linux", cf.OS)
	assert.Equal(t, "amd64", cf.Architecture)
	assert.Equal(t, []string{"/meshlimit-service"}, cf.Config.Entrypoint)
	assert.Equal(t, "65532:65532", cf.Config.User, "numeric, so that runAsNonRoot can verify it")
	assert.Contains(t, cf.Config.ExposedPorts, "8081/tcp")
	assert.Equal(t, []string{"MESHLIMIT_LISTEN=:8081"}, cf.Config.Env)

	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1, "no base image: one layer, the binary's")
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "meshlimit-service", hdr.Name)
	assert.Equal(t, int64(0o755), hdr.Mode)
	got, err := io.ReadAll(tr)
	require.NoError(t, err)
	want, err := os.ReadFile(bin)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	_, err = tr.Next()
	assert.Equal(t, io.EOF, err, "the layer holds the binary alone")
}

func TestTheSameBinaryGivesTheSameDigest(t *testing.T) {
	data, err := os.ReadFile(staticBinary(t, "arm64"))
	require.NoError(t, err)
	a, err := buildImage(data, "arm64")
	require.NoError(t, err)
	b, err := buildImage(data, "arm64")
	require.NoError(t, err)
	da, err := a.Digest()
	require.NoError(t, err)
	db, err := b.Digest()
	require.NoError(t, err)
	assert.Equal(t, da, db)
}

func TestABinaryTheImageCannotRunIsRefused(t *testing.T) {
	amd64 := staticBinary(t, "amd64")
	tests := []struct {
		name, binary, arch, want string
	}{
		{"a binary for another architecture", amd64, "arm64", "built for EM_X86_64, not arm64"},
		{"an unknown architecture", amd64, "riscv", `unknown -arch "riscv"`},
		{"a file that is not an executable", "main_test.go", "amd64", "not a Linux executable"},
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		if resolved, err := filepath.EvalSymlinks(sh); err == nil {
			tests = append(tests, struct{ name, binary, arch, want string }{"a dynamically linked binary", resolved, "amd64", "dynamically linked: build it with CGO_ENABLED=0"})
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run([]string{"-binary", tc.binary, "-arch", tc.arch, "-layout", filepath.Join(t.TempDir(), "oci")}, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
