// Package ociimage builds, writes and pushes the project's OCI images without a container engine:
// the Wasm module's image (cmd/wasmimage) and the decision service's (cmd/serviceimage). Every
// layer and config is stamped with Epoch and written in a fixed order, so the same inputs always
// give the same image digest.
package ociimage

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

// RefNameAnnotation names an image inside an OCI layout's index.json (the tag that oras and
// skopeo select with layout:TAG, and Image reads).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// Epoch is the time stamped on every file, layer and config, so that an image depends on its
// contents alone.
var Epoch = time.Unix(0, 0).UTC()

// File is one regular file of a layer.
type File struct {
	Name string // path inside the image, without a leading "/"
	Mode int64  // permission bits
	Data []byte
}

// Layer returns an application/vnd.oci.image.layer.v1.tar+gzip layer holding files, in the order
// given, each owned by root and stamped with Epoch.
func Layer(files ...File) (v1.Layer, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: Epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	gz := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteLayout writes img as the only image of a new OCI image layout in dir, its index entry
// annotated with tag as RefNameAnnotation. An existing layout in dir is replaced; any other
// non-empty dir is an error, so a wrong path never deletes files.
func WriteLayout(dir string, img v1.Image, tag string) error {
	if err := clearLayout(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{RefNameAnnotation: tag})); err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	return nil
}

// Image returns the image of the OCI image layout in dir: the one tagged tag, or the only one
// when tag is "".
func Image(dir, tag string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: not an OCI image layout (build it first): %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var found []v1.Descriptor
	for _, d := range m.Manifests {
		if tag == "" || d.Annotations[RefNameAnnotation] == tag {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%s: %d images tagged %q: want one", dir, len(found), tag)
	}
	return idx.Image(found[0].Digest)
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

// WriteArchive writes img as an OCI archive: the OCI image layout of WriteLayout, tagged tag, in
// one tar file (what skopeo and podman call oci-archive). Unlike a docker-style tarball, which
// holds Docker media types and no annotations, it keeps the image and its digest exactly. Entries
// are sorted and stamped with Epoch, so the same image always gives the same file.
func WriteArchive(path string, img v1.Image, tag string) (err error) {
	tmp, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "oci")
	if err := WriteLayout(dir, img, tag); err != nil {
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
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: Epoch, Format: tar.FormatPAX}
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

// Spec is what an image of one layer is made of, besides the layer.
type Spec struct {
	// CreatedBy and Comment are the layer's history entry.
	CreatedBy, Comment string
	// Configure sets the image's config (its OS, architecture, entrypoint, user...); Created is
	// Epoch whatever it sets.
	Configure func(*v1.ConfigFile)
	// Annotations are the manifest's.
	Annotations map[string]string
}

// New returns an OCI image (OCI manifest and config media types) of the one layer, as s says.
func New(layer v1.Layer, s Spec) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: s.CreatedBy, Comment: s.Comment},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	if s.Configure != nil {
		s.Configure(cf)
	}
	cf.Created = v1.Time{Time: Epoch}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, s.Annotations).(v1.Image), nil
}
