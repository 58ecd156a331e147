// Command serviceimage packs the decision service, a static Linux binary of cmd/meshlimit-service
// (CGO_ENABLED=0), into an OCI image without a container engine and without pulling a base image:
// one layer holding the binary as /meshlimit-service on an empty ("scratch") root, run as the
// unprivileged user 65532:65532 (numeric, so that Kubernetes' runAsNonRoot can verify it), port
// 8081 exposed. The service needs nothing else from the file system: it keeps no files, calls
// Redis in plain TCP (the mesh's sidecar adds mutual TLS) and logs to standard output.
//
// Usage (make service-image runs it):
//
//	serviceimage -binary build/linux-amd64/meshlimit-service -layout build/image/service-oci [-tar build/image/meshlimit-service.tar] [-arch amd64] [-tag 0.1.0]
//
// The same binary always gives the same image digest. make push pushes it (cmd/imagepush), or
// crane, oras or skopeo, as for the Wasm image.
package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/meshlimit/meshlimit/envoy/internal/ociimage"
)

const (
	// binaryPath is where the image holds the service, and its entrypoint.
	binaryPath = "/meshlimit-service"
	// User is the user and group the service runs as: not root, numeric.
	User = "65532:65532"
	// Port is the port the service listens on in every shipped manifest (MESHLIMIT_LISTEN).
	Port = "8081"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "serviceimage:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("serviceimage", flag.ContinueOnError)
	fs.SetOutput(out)
	binary := fs.String("binary", "", "the static Linux build of cmd/meshlimit-service (required)")
	layoutDir := fs.String("layout", "", "write an OCI image layout to this `directory`")
	tarPath := fs.String("tar", "", "write the OCI image layout as one tar `file` (an OCI archive)")
	arch := fs.String("arch", "amd64", "the binary's GOARCH: amd64 or arm64")
	tag := fs.String("tag", "latest", "the image's tag")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *binary == "":
		return errors.New("-binary is required")
	case *layoutDir == "" && *tarPath == "":
		return errors.New("nothing to write: give -layout, -tar, or both")
	}
	data, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	img, err := buildImage(data, *arch)
	if err != nil {
		return fmt.Errorf("%s: %w", *binary, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "image meshlimit-service:%s (linux/%s, %d-byte binary, user %s) %s\n", *tag, *arch, len(data), User, digest)
	if *layoutDir != "" {
		if err := ociimage.WriteLayout(*layoutDir, img, *tag); err != nil {
			return err
		}
		fmt.Fprintf(out, "  OCI layout: %s\n", *layoutDir)
	}
	if *tarPath != "" {
		if err := ociimage.WriteArchive(*tarPath, img, *tag); err != nil {
			return err
		}
		fmt.Fprintf(out, "  OCI archive: %s\n", *tarPath)
	}
	return nil
}

// machines maps a GOARCH to the ELF machine of its binaries.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// buildImage returns the service's image for a binary of arch. It fails unless binary is a
// statically linked Linux executable for arch: an image without a C library cannot run anything
// else.
func buildImage(binary []byte, arch string) (v1.Image, error) {
	if err := checkStatic(binary, arch); err != nil {
		return nil, err
	}
	layer, err := ociimage.Layer(ociimage.File{Name: binaryPath[1:], Mode: 0o755, Data: binary})
	if err != nil {
		return nil, err
	}
	return ociimage.New(layer, ociimage.Spec{
		CreatedBy: "meshlimit serviceimage",
		Comment:   binaryPath,
		Configure: func(cf *v1.ConfigFile) {
			cf.OS, cf.Architecture = "linux", arch
			cf.Config.Entrypoint = []string{binaryPath}
			cf.Config.User = User
			cf.Config.ExposedPorts = map[string]struct{}{Port + "/tcp": {}}
			cf.Config.Env = []string{"MESHLIMIT_LISTEN=:" + Port}
		},
		Annotations: map[string]string{"org.opencontainers.image.title": "meshlimit-service"},
	})
}

// checkStatic reports why binary is not a static Linux executable for arch, or nil.
func checkStatic(binary []byte, arch string) error {
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("unknown -arch %q: want amd64 or arm64", arch)
	}
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return fmt.Errorf("not a Linux executable (build it with GOOS=linux): %w", err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("built for %s, not %s: set GOARCH=%s", f.Machine, arch, arch)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("an ELF %s, not an executable", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked: build it with CGO_ENABLED=0, the image has no C library")
		}
	}
	return nil
}
