package main

import (
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/envoy/internal/ociimage"
)

// layoutWith writes an annotated image of one small layer to a new OCI layout, tagged tag, and
// returns the layout and the image's digest.
func layoutWith(t *testing.T, content, tag string) (string, v1.Hash) {
	t.Helper()
	layer, err := ociimage.Layer(ociimage.File{Name: "plugin.wasm", Mode: 0o644, Data: []byte(content)})
	require.NoError(t, err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	require.NoError(t, err)
	img = mutate.Annotations(img, map[string]string{"module.wasm.image/variant": "compat"}).(v1.Image)
	dir := filepath.Join(t.TempDir(), "oci")
	require.NoError(t, ociimage.WriteLayout(dir, img, tag))
	d, err := img.Digest()
	require.NoError(t, err)
	return dir, d
}

// newRegistry starts go-containerregistry's in-process registry on 127.0.0.1.
func newRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestAPushedImageIsTheLayoutsImageByteForByte(t *testing.T) {
	dir, digest := layoutWith(t, "\x00asm module", "0.1.0")
	host := newRegistry(t)
	var out bytes.Buffer
	to := host + "/meshlimit/meshlimit:0.1.0"
	require.NoError(t, run([]string{"-layout", dir, "-tag", "0.1.0", "-to", to}, &out))
	assert.Contains(t, out.String(), "digest "+digest.String())
	assert.Contains(t, out.String(), "pin:   "+host+"/meshlimit/meshlimit@"+digest.String())

	ref, err := name.ParseReference(to)
	require.NoError(t, err)
	got, err := remote.Image(ref)
	require.NoError(t, err)
	d, err := got.Digest()
	require.NoError(t, err)
	assert.Equal(t, digest, d, "the registry serves the image the layout holds")
	m, err := got.Manifest()
	require.NoError(t, err)
	assert.Equal(t, "compat", m.Annotations["module.wasm.image/variant"], "annotations survive the push")
}

func TestAPushNeedsALayoutWithThatTag(t *testing.T) {
	dir, _ := layoutWith(t, "module", "0.1.0")
	host := newRegistry(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no layout", []string{"-to", host + "/meshlimit/m:1"}, "-layout and -to are required"},
		{"a missing layout", []string{"-layout", filepath.Join(t.TempDir(), "none"), "-to", host + "/meshlimit/m:1"}, "not an OCI image layout"},
		{"another tag", []string{"-layout", dir, "-tag", "0.2.0", "-to", host + "/meshlimit/m:1"}, `0 images tagged "0.2.0"`},
		{"a bad reference", []string{"-layout", dir, "-to", "Not A Reference"}, "-to:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, &bytes.Buffer{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
