package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/envoy/internal/ociimage"
)

// The media types of the OCI image specification that the compat variant uses.
const (
	ociIndex    = "application/vnd.oci.image.index.v1+json"
	ociManifest = "application/vnd.oci.image.manifest.v1+json"
	ociConfig   = "application/vnd.oci.image.config.v1+json"
	ociLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// testModule returns the built filter if make wasm has run, else the smallest valid
// WebAssembly module (the magic and version of an empty module).
func testModule(t *testing.T) []byte {
	t.Helper()
	if data, err := os.ReadFile(filepath.Join("..", "..", "..", "build", "meshlimit.wasm")); err == nil {
		return data
	}
	return append([]byte(nil), wasmMagic...)
}

// descriptor, index and manifest are the OCI image spec's JSON documents, decoded here
// independently of go-containerregistry so that the test checks the bytes on disk.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations"`
}

type configFile struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// readBlob reads a blob of an OCI layout and checks it against its descriptor.
func readBlob(t *testing.T, dir string, d descriptor) []byte {
	t.Helper()
	algo, hexDigest, ok := strings.Cut(d.Digest, ":")
	require.True(t, ok && algo == "sha256", "digest %q", d.Digest)
	data, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexDigest))
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	require.Equal(t, hexDigest, hex.EncodeToString(sum[:]), "blob content matches its digest")
	require.EqualValues(t, d.Size, len(data), "blob size matches its descriptor")
	return data
}

func TestTheLayoutIsACompatWasmImageOfTheModule(t *testing.T) {
	module := testModule(t)
	dir := filepath.Join(t.TempDir(), "oci")
	var out bytes.Buffer
	path := filepath.Join(t.TempDir(), "module.wasm")
	require.NoError(t, os.WriteFile(path, module, 0o644))
	require.NoError(t, run([]string{"-wasm", path, "-layout", dir, "-tag", "0.1.0"}, &out))

	layoutFile, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	require.NoError(t, err)
	assert.JSONEq(t, `{"imageLayoutVersion": "1.0.0"}`, string(layoutFile))

	var idx index
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &idx))
	assert.Equal(t, 2, idx.SchemaVersion)
	assert.Equal(t, ociIndex, idx.MediaType)
	require.Len(t, idx.Manifests, 1, "one image, so crane push and Istio see a manifest, not an index")
	assert.Equal(t, ociManifest, idx.Manifests[0].MediaType)
	assert.Equal(t, "0.1.0", idx.Manifests[0].Annotations[ociimage.RefNameAnnotation], "oras and skopeo select the image by this tag")

	var m manifest
	require.NoError(t, json.Unmarshal(readBlob(t, dir, idx.Manifests[0]), &m))
	assert.Equal(t, 2, m.SchemaVersion)
	assert.Equal(t, ociManifest, m.MediaType)
	assert.Equal(t, ociConfig, m.Config.MediaType)
	assert.Equal(t, variantCompat, m.Annotations[variantAnnotation], "Istio and the spec call this the compat variant")
	assert.Equal(t, "meshlimit", m.Annotations[titleAnnotation])
	require.Len(t, m.Layers, 1, "the compat variant has exactly one layer")
	assert.Equal(t, ociLayerGz, m.Layers[0].MediaType)

	// Read the layer as Istio does: gunzip, untar, take plugin.wasm.
	layer := readBlob(t, dir, m.Layers[0])
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	require.NoError(t, err)
	uncompressed, err := io.ReadAll(zr)
	require.NoError(t, err)
	tr := tar.NewReader(bytes.NewReader(uncompressed))
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, pluginFile, hdr.Name)
	assert.Equal(t, byte(tar.TypeReg), hdr.Typeflag)
	assert.EqualValues(t, 0o644, hdr.Mode)
	content, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(module, content), "the layer's plugin.wasm is byte-identical to the module")
	_, err = tr.Next()
	assert.Equal(t, io.EOF, err, "the layer holds plugin.wasm and nothing else")

	var cf configFile
	require.NoError(t, json.Unmarshal(readBlob(t, dir, m.Config), &cf))
	sum := sha256.Sum256(uncompressed)
	assert.Equal(t, []string{"sha256:" + hex.EncodeToString(sum[:])}, cf.RootFS.DiffIDs, "diff_ids name the uncompressed layer")
	assert.Equal(t, "layers", cf.RootFS.Type)
	assert.Equal(t, "wasip1", cf.OS)
	assert.Equal(t, "wasm", cf.Architecture)

	assert.Contains(t, out.String(), idx.Manifests[0].Digest, "the command prints the digest to pin in the WasmPlugin")
}

func TestTheSameModuleGivesTheSameDigest(t *testing.T) {
	module := testModule(t)
	a, err := buildImage(module, "meshlimit")
	require.NoError(t, err)
	b, err := buildImage(module, "meshlimit")
	require.NoError(t, err)
	da, err := a.Digest()
	require.NoError(t, err)
	db, err := b.Digest()
	require.NoError(t, err)
	assert.Equal(t, da, db)

	other, err := buildImage(append(append([]byte(nil), wasmMagic...), 0x00, 0x01, 0x00), "meshlimit")
	require.NoError(t, err)
	do, err := other.Digest()
	require.NoError(t, err)
	assert.NotEqual(t, da, do, "another module gives another digest")
}

func TestTheArchiveHoldsTheSameLayout(t *testing.T) {
	module := testModule(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "module.wasm")
	require.NoError(t, os.WriteFile(path, module, 0o644))
	layoutDir := filepath.Join(dir, "oci")
	archive := filepath.Join(dir, "image", "meshlimit.tar")
	require.NoError(t, run([]string{"-wasm", path, "-layout", layoutDir, "-tar", archive, "-tag", "0.1.0"}, io.Discard))

	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	files := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if hdr.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[hdr.Name] = data
		}
	}
	want := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(layoutDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(layoutDir, p)
		require.NoError(t, err)
		data, err := os.ReadFile(p)
		want[filepath.ToSlash(rel)] = data
		return err
	}))
	require.Contains(t, want, "index.json")
	assert.Equal(t, want, files, "the archive is the layout, at its root, byte for byte")
}

func TestBadInputIsRejected(t *testing.T) {
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "not.wasm")
	require.NoError(t, os.WriteFile(notWasm, []byte("#!/bin/sh\n"), 0o644))
	wasm := filepath.Join(dir, "ok.wasm")
	require.NoError(t, os.WriteFile(wasm, wasmMagic, 0o644))
	occupied := filepath.Join(dir, "occupied")
	require.NoError(t, os.MkdirAll(occupied, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(occupied, "notes.txt"), []byte("keep me"), 0o644))

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"a file that is not WebAssembly is rejected", []string{"-wasm", notWasm, "-layout", filepath.Join(dir, "a")}, "not a WebAssembly module"},
		{"a missing module is rejected", []string{"-wasm", filepath.Join(dir, "missing.wasm"), "-layout", filepath.Join(dir, "b")}, "no such file"},
		{"no module is rejected", []string{"-layout", filepath.Join(dir, "c")}, "-wasm is required"},
		{"no output is rejected", []string{"-wasm", wasm}, "nothing to write"},
		{"a directory that is not a layout is never replaced", []string{"-wasm", wasm, "-layout", occupied}, "not an OCI image layout"},
		{"an invalid image name is rejected", []string{"-wasm", wasm, "-tar", filepath.Join(dir, "x.tar"), "-name", "Not A Name"}, "-name and -tag"},
		{"an invalid tag is rejected", []string{"-wasm", wasm, "-layout", filepath.Join(dir, "d"), "-tag", "v1/2"}, "-name and -tag"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	kept, err := os.ReadFile(filepath.Join(occupied, "notes.txt"))
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(kept))
}

func TestALayoutIsReplacedOnRebuild(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "oci")
	first := filepath.Join(t.TempDir(), "first.wasm")
	second := filepath.Join(t.TempDir(), "second.wasm")
	require.NoError(t, os.WriteFile(first, wasmMagic, 0o644))
	require.NoError(t, os.WriteFile(second, append(append([]byte(nil), wasmMagic...), 0x00, 0x01, 0x00), 0o644))
	require.NoError(t, run([]string{"-wasm", first, "-layout", dir}, io.Discard))
	require.NoError(t, run([]string{"-wasm", second, "-layout", dir}, io.Discard))

	var idx index
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &idx))
	require.Len(t, idx.Manifests, 1, "a rebuild replaces the image instead of adding a second one")
	blobs, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	require.NoError(t, err)
	assert.Len(t, blobs, 3, "manifest, config and layer of the new image only")
}
