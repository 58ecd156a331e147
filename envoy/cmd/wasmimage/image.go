package main

import (
	"bytes"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/meshlimit/meshlimit/envoy/internal/ociimage"
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
	// titleAnnotation is the OCI pre-defined annotation for the image's human-readable title.
	titleAnnotation = "org.opencontainers.image.title"
)

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
	layer, err := ociimage.Layer(ociimage.File{Name: pluginFile, Mode: 0o644, Data: module})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	annotations := map[string]string{variantAnnotation: variantCompat}
	if title != "" {
		annotations[titleAnnotation] = title
	}
	return ociimage.New(layer, ociimage.Spec{
		CreatedBy: "meshlimit wasmimage",
		Comment:   pluginFile,
		// The platform of a Go wasip1 build, in the GOOS/GOARCH terms the OCI image spec uses.
		// Istio ignores it; it tells people and tools what the layer holds.
		Configure:   func(cf *v1.ConfigFile) { cf.OS, cf.Architecture = "wasip1", "wasm" },
		Annotations: annotations,
	})
}
