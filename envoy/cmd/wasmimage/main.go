// Command wasmimage packs a compiled proxy-wasm module into the OCI image that Istio's
// WasmPlugin (url: oci://...) pulls, without Docker.
//
// It writes the "compat" variant of the Wasm image specification: an ordinary OCI image
// with one application/vnd.oci.image.layer.v1.tar+gzip layer that holds the module as
// plugin.wasm, and the manifest annotation module.wasm.image/variant=compat. Istio's image
// fetcher tries this variant first, and because every layer and manifest has a standard
// media type, any registry and any standard tool (crane, oras, skopeo, docker) can store,
// copy and inspect it. (The other variant, with an application/vnd.module.wasm.content.layer.v1+wasm
// layer, needs a registry that accepts custom artifact media types.)
//
// Usage:
//
//	wasmimage -wasm build/meshlimit.wasm -layout build/image/oci [-tar build/image/meshlimit.tar] [-name meshlimit/meshlimit] [-tag 0.1.0]
//
// -layout writes an OCI image layout directory whose index.json names the image by -tag;
// -tar writes the same layout as one tar file (an OCI archive). The same module always
// gives the same image digest and the same files. Push with, for example:
//
//	crane push build/image/oci registry.example.com/meshlimit/meshlimit:0.1.0
//	oras cp --from-oci-layout build/image/oci:0.1.0 registry.example.com/meshlimit/meshlimit:0.1.0
//	skopeo copy oci-archive:build/image/meshlimit.tar:0.1.0 docker://registry.example.com/meshlimit/meshlimit:0.1.0
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/meshlimit/meshlimit/envoy/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "wasmimage:", err)
		os.Exit(1)
	}
}

// run parses args, writes the requested outputs and reports them on out.
func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("wasmimage", flag.ContinueOnError)
	fs.SetOutput(out)
	wasm := fs.String("wasm", "", "the compiled module (required)")
	layoutDir := fs.String("layout", "", "write an OCI image layout to this `directory`")
	tarPath := fs.String("tar", "", "write the OCI image layout as one tar `file` (an OCI archive)")
	repo := fs.String("name", "meshlimit/meshlimit", "the image's repository name, for the printed push commands; its last element is the title annotation")
	tag := fs.String("tag", "latest", "the image's tag")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *wasm == "" {
		return errors.New("-wasm is required")
	}
	if *layoutDir == "" && *tarPath == "" {
		return errors.New("nothing to write: give -layout, -tar, or both")
	}
	if _, err := name.NewTag(*repo + ":" + *tag); err != nil {
		return fmt.Errorf("-name and -tag: %w", err)
	}
	module, err := os.ReadFile(*wasm)
	if err != nil {
		return err
	}
	img, err := buildImage(module, path.Base(*repo))
	if err != nil {
		return fmt.Errorf("%s: %w", *wasm, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "image %s:%s (compat variant, %d-byte module) %s\n", *repo, *tag, len(module), digest)
	if *layoutDir != "" {
		if err := ociimage.WriteLayout(*layoutDir, img, *tag); err != nil {
			return err
		}
		fmt.Fprintf(out, "  OCI layout: %s\n", *layoutDir)
		fmt.Fprintf(out, "  push:       crane push %s REGISTRY/%s:%s\n", *layoutDir, *repo, *tag)
		fmt.Fprintf(out, "          or  oras cp --from-oci-layout %s:%s REGISTRY/%s:%s\n", *layoutDir, *tag, *repo, *tag)
	}
	if *tarPath != "" {
		if err := ociimage.WriteArchive(*tarPath, img, *tag); err != nil {
			return err
		}
		fmt.Fprintf(out, "  OCI archive: %s (skopeo copy oci-archive:%s:%s docker://REGISTRY/%s:%s)\n", *tarPath, *tarPath, *tag, *repo, *tag)
	}
	return nil
}
