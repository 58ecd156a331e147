package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The names the Wasm image specification's compat variant fixes (solo-io/wasm,
// spec/spec-compat.md), as Istio's image fetcher reads them (istio/istio,
// pkg/wasm/imagefetcher.go: extractOCIStandardImage and extractWasmPluginBinary).
const (
	// pluginFile is the name of the module inside the layer.
	pluginFile = "plugin.wasm"
	// variantAnnotation marks a manifest whose layer is a standard OCI tar+gzip layer.
	variantAnnotation = "module.wasm.image/variant"
	// variantCompat is variantAnnotation's value for the compat variant.
	variantCompat = "compat"
	// refNameAnnotation names an image inside an OCI layout's index.json (the tag that
	// oras and skopeo select with layout:TAG).
	refNameAnnotation = "org.opencontainers.image.ref.name"
	// titleAnnotation is the OCI pre-defined annotation for the image's human-readable title.
	titleAnnotation = "org.opencontainers.image.title"
)

// epoch is the time stamped on the layer's file and the image's config, so that the
// same module always gives the same image digest.
var epoch = time.Unix(0, 0).UTC()

// wasmMagic starts every WebAssembly binary module: "\0asm" and version 1.
var wasmMagic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// buildImage returns the compat-variant Wasm image of module: an OCI image manifest with one
// application/vnd.oci.image.layer.v1.tar+gzip layer holding module as plugin.wasm, and the
// annotation module.wasm.image/variant=compat. It is deterministic: the same module
// gives the same digest. It fails unless module starts like a WebAssembly binary.
func buildImage(module []byte, title string) (v1.Image, error) {
	if !bytes.HasPrefix(module, wasmMagic) {
		return nil, errors.New("not a WebAssembly module: want the binary magic \\0asm and version 1")
	}
	gz, err := layerBytes(module)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "meshlimit wasmimage", Comment: pluginFile},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	// The platform of a Go wasip1 build, in the GOOS/GOARCH terms the OCI image spec uses.
	// Istio ignores it; it tells people and tools what the layer holds.
	cf.OS, cf.Architecture = "wasip1", "wasm"
	cf.Created = v1.Time{Time: epoch}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	annotations := map[string]string{variantAnnotation: variantCompat}
	if title != "" {
		annotations[titleAnnotation] = title
	}
	return mutate.Annotations(img, annotations).(v1.Image), nil
}

// layerBytes returns a gzip-compressed tar holding module as pluginFile, with fixed
// metadata (owner root, mode 0644, time epoch) so that it depends on the module alone.
func layerBytes(module []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     pluginFile,
		Mode:     0o644,
		Size:     int64(len(module)),
		ModTime:  epoch,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(module); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeLayout writes img as the only image of a new OCI image layout in dir, its index
// entry annotated with tag as org.opencontainers.image.ref.name. An existing layout in dir
// is replaced; any other non-empty dir is an error, so a wrong path never deletes files.
func writeLayout(dir string, img v1.Image, tag string) error {
	if err := clearLayout(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: tag})); err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	return nil
}

// clearLayout removes dir if it holds an OCI layout, and accepts it if it is missing or empty.
func clearLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case len(entries) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("%s exists and is not an OCI image layout: refusing to replace it", dir)
	}
	return os.RemoveAll(dir)
}

// writeArchive writes img as an OCI archive: the OCI image layout of writeLayout, tagged
// tag, in one tar file (what skopeo and podman call oci-archive). Unlike a docker-style
// tarball, which holds Docker media types and no annotations, it keeps the image and its
// digest exactly. Entries are sorted and stamped with epoch, so the same image always gives
// the same file.
func writeArchive(path string, img v1.Image, tag string) (err error) {
	tmp, err := os.MkdirTemp("", "wasmimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "oci")
	if err := writeLayout(dir, img, tag); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	// WalkDir visits entries in lexical order.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", path, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("archive %s: %w", path, err)
	}
	return nil
}
